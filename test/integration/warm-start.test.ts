import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { readWarmState, writeWarmState } from '../../src/segment/warm-state.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { seedSqlite } from '../helpers/sqlite.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

// The segment mode's life cycle in process (buildApp, SQLite): a close gives the unused IDs
// back and writes the warm-start file; the next build takes what was parked, loads the hot
// tags before /readyz turns 200, and the first request does not touch the database.

function setup () {
  const dir = tempDir()
  const values = {
    'leaf.segment.enable': true,
    'leaf.jdbc.url': `sqlite:${seedSqlite(join(dir, 'leaf.db'))}`,
    'leaf.segment.state-file': join(dir, 'state.json'),
  }
  const sql = <T>(fn: (db: Database.Database) => T): T => {
    const db = new Database(join(dir, 'leaf.db'))
    db.defaultSafeIntegers(true)
    try { return fn(db) } finally { db.close() }
  }
  return { dir, values, sql, file: join(dir, 'state.json') }
}

const loads = async (app: Awaited<ReturnType<typeof buildApp>>, key: string) =>
  valueOf(parseSamples((await app.inject('/metrics')).body), 'leaf_segment_db_load_seconds_count', { key }) ?? 0

t.test('close gives back and parks, writes the file; the next start takes the parked IDs and warms before it is ready', async (t) => {
  const { values, sql, file } = setup()
  const { logger, lines } = captureLogger()
  const first = await buildApp(testConfig(values), { logger })
  t.equal((await first.inject('/api/segment/get/order?count=3')).body.trim(), '1\n2\n3')
  t.equal((await first.inject('/api/segment/get/leaf-segment-test')).body, '1')
  sql((db) => db.prepare("UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'order'").run()) // another instance reserves
  const metrics = (await first.inject('/metrics')).body
  await first.close()

  const state = readWarmState(file)
  t.same(state?.tags.sort(), ['leaf-segment-test', 'order'], 'both tags served in the last minute')
  t.match(state?.owner, /^[0-9a-f-]{36}$/, 'the id this life parked under')
  t.match(lines.find((l) => l.msg === 'unused IDs given back' && l.key === 'order'), { returned: '0', parked: '1997', lost: '0', reason: /another instance/ })
  t.match(lines.find((l) => l.msg === 'unused IDs given back' && l.key === 'leaf-segment-test'), { returned: '999', parked: '0' })
  t.notMatch(metrics, /leaf_segment_ids_returned_total\{/, 'nothing returned while running')
  t.equal(sql((db) => db.prepare("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'leaf-segment-test'").get() as { max_id: bigint }).max_id, 2n)

  const second = await buildApp(testConfig(values), { logger: silentLogger })
  t.teardown(() => second.close())
  let ready = await second.inject('/readyz')
  for (let i = 0; i < 100 && ready.statusCode !== 200; i++) {
    t.match(ready.json(), { modes: { segment: { ready: false, reason: /warm start/ } } })
    await new Promise((resolve) => setTimeout(resolve, 20))
    ready = await second.inject('/readyz')
  }
  t.equal(ready.statusCode, 200)
  t.equal(await loads(second, 'order'), 1, 'warmed: one load before any request')
  t.equal((await second.inject('/api/segment/get/order')).body, '4', 'the parked IDs, after the last one issued')
  t.equal((await second.inject('/api/segment/get/leaf-segment-test')).body, '2', 'the returned ones, from max_id')
  t.equal(await loads(second, 'order'), 1, 'the first request did not touch the database')
  t.equal(sql((db) => Number((db.prepare('SELECT COUNT(*) AS n FROM leaf_alloc_parked').get() as { n: bigint }).n)), 0, 'taken')
})

t.test('the returned IDs are counted by where they went', async (t) => {
  const { values, sql } = setup()
  const app = await buildApp(testConfig(values), { logger: silentLogger })
  await app.inject('/api/segment/get/order')
  sql((db) => db.prepare("UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'order'").run())
  const generator = app.leaf.segment?.generator
  const result = await generator?.shutdown(1000)
  t.match(result?.giveBacks, [{ key: 'order', parked: 1999n }])
  await app.close()
})

t.test('an unreadable warm-start file: a cold start with a new identity, and a warning; the stop writes a good one', async (t) => {
  const { values, file } = setup()
  writeFileSync(file, '{"version":7}')
  const { logger, lines } = captureLogger()
  const app = await buildApp(testConfig(values), { logger })
  t.ok(lines.some((l) => l.level === 40 && /warm-start file unreadable/.test(String(l.msg))))
  t.equal((await app.inject('/readyz')).statusCode, 200, 'nothing to warm')
  await app.inject('/api/segment/get/order')
  await app.close()
  t.same(readWarmState(file)?.tags, ['order'])
  t.throws(() => readWarmState(join(tempDir(), 'nope', '..')), 'a folder is not a file')
})

t.test('the file is written whole, and read back', async (t) => {
  const dir = tempDir()
  const file = join(dir, 'deep', 'state.json')
  t.equal(readWarmState(file), undefined, 'a missing file: nothing')
  writeWarmState(file, { owner: 'life-1', tags: ['a', 'b'] }, new Date('2026-12-02T00:00:00Z'))
  t.same(JSON.parse(readFileSync(file, 'utf8')), { version: 1, savedAt: '2026-12-02T00:00:00.000Z', owner: 'life-1', tags: ['a', 'b'] })
  t.same(readWarmState(file), { owner: 'life-1', tags: ['a', 'b'] })
  writeFileSync(file, JSON.stringify({ version: 1, owner: '', tags: [] }))
  t.throws(() => readWarmState(file), /not a warm-start file/, 'an empty identity is refused')
})

t.test('a host list\'s state (the host in use, the stores left) is written and read back; a malformed one is left out', async (t) => {
  const file = join(tempDir(), 'state.json')
  const hostList = { where: 'mysql database leaf', inUse: 'db2:3306', left: ['server_id 1'] }
  writeWarmState(file, { owner: 'life-2', tags: [], hostList })
  t.same(readWarmState(file), { owner: 'life-2', tags: [], hostList })
  writeFileSync(file, JSON.stringify({ version: 1, owner: 'life-2', tags: [], hostList: { where: 'mysql database leaf', left: 'server_id 1' } }))
  t.same(readWarmState(file), { owner: 'life-2', tags: [] }, 'a list that is not one: dropped, not taken for "no store left"')
})

t.test('warm start skipped when the tag list cannot load at start; a tag at the end of its ID space is named by /readyz', async (t) => {
  const { values, sql, file } = setup()
  writeWarmState(file, { owner: 'me', tags: ['order'] })
  const { logger, lines } = captureLogger()
  const dead = await buildApp(testConfig({ ...values, 'leaf.jdbc.url': 'mysql://leaf:leaf@127.0.0.1:1/leaf', 'leaf.jdbc.connect-timeout-ms': 200 }), { logger })
  t.ok(lines.some((l) => /warm start skipped/.test(String(l.msg))), 'skipped, with a warning')
  await dead.close()

  const app = await buildApp(testConfig(values), { logger: silentLogger })
  t.teardown(() => app.close())
  sql((db) => db.prepare("UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = 'leaf-segment-test'").run(2n ** 63n - 1500n))
  t.equal((await app.inject('/api/segment/get/leaf-segment-test?count=1000')).statusCode, 200, 'the one segment that fits')
  const end = await app.inject('/api/segment/get/leaf-segment-test')
  t.equal(end.statusCode, 503)
  t.match(end.json(), { error: 'ID_SPACE_EXHAUSTED', message: /"leaf-segment-test"/ })
  const ready = await app.inject('/readyz')
  t.equal(ready.statusCode, 200, 'still ready: every instance shares the table')
  t.match(ready.json(), { modes: { segment: { ready: true, reason: /ID space ended .* leaf-segment-test/ } } })
})

t.test('the max_id guard across lives: a table restored below what was served is caught at the next start; a file written for another store is not taken for one', async (t) => {
  const { dir, values, sql, file } = setup()
  const first = await buildApp(testConfig({ ...values, 'leaf.segment.refresh-interval-ms': 60_000 }), { logger: silentLogger })
  t.equal((await first.inject('/api/segment/get/order?count=3')).body.trim(), '1\n2\n3')
  // Another instance reserves, so the stop parks its tail instead of giving it back: max_id stays.
  sql((db) => db.prepare("UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'order'").run())
  await first.close()
  t.match(readWarmState(file)?.guard, { where: `sqlite:${join(dir, 'leaf.db')}`, marks: { order: '4' } }, 'the mark (what was served: 1 to 3) and the store it is for')

  // The same file, another database file: its marks are dropped, nothing is held.
  const other = await buildApp(testConfig({ ...values, 'leaf.jdbc.url': `sqlite:${seedSqlite(join(dir, 'other.db'))}` }), { logger: silentLogger })
  t.equal((await other.inject('/api/segment/get/order')).body, '1', 'the other table serves from its own max_id')
  t.equal(valueOf(parseSamples((await other.inject('/metrics')).body), 'leaf_segment_store_regressions_total', { cause: 'max_id_went_back' }), 0)
  await other.close()

  // The table put back below what the first life served (a restored backup): caught.
  writeWarmState(file, { owner: 'x', tags: [], guard: { where: `sqlite:${join(dir, 'leaf.db')}`, marks: { order: '4' } } })
  sql((db) => db.prepare("UPDATE leaf_alloc SET max_id = 1 WHERE biz_tag = 'order'").run())
  const restored = await buildApp(testConfig({ ...values, 'leaf.segment.failover-hold-ms': 0 }), { logger: silentLogger })
  const id = BigInt((await restored.inject('/api/segment/get/order')).body)
  t.ok(id >= 4n, `no ID at or below what the first life served (${id})`)
  t.equal(valueOf(parseSamples((await restored.inject('/metrics')).body), 'leaf_segment_store_regressions_total', { cause: 'max_id_went_back' }), 1, 'counted')
  await restored.close()
})
