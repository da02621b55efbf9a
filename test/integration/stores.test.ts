import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import t, { type Test } from 'tap'
import { parseJdbcUrl } from '../../src/config/jdbc-url.js'
import { createSegmentGenerator } from '../../src/segment/segment-generator.js'
import { IdSpaceEnded, type Allocation, type SegmentStore } from '../../src/segment/store.js'
import { createStore } from '../../src/segment/stores/create-store.js'
import { MYSQL_PARKED_DDL, describeTopology } from '../../src/segment/stores/mysql-store.js'
import { PG_PARKED_DDL, describePgTopology } from '../../src/segment/stores/postgres-store.js'
import { createSqliteStore } from '../../src/segment/stores/sqlite-store.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { createTestPgDatabase } from '../helpers/postgres.js'
import { seedSqlite, withSqlite } from '../helpers/sqlite.js'

const MYSQL_OPTIONS = { connectTimeoutMs: 2000, poolSize: 4, queryTimeoutMs: 2000 }
const BEYOND_2_53 = 2n ** 53n - 10n

/** An allocation without the store's identity (stores that can tell add it). */
function rangeOf (a: Allocation | undefined): Omit<Allocation, 'store'> | undefined {
  return a === undefined ? undefined : { key: a.key, maxId: a.maxId, step: a.step }
}

interface StoreCase {
  name: string
  open (): Promise<{ store: SegmentStore, setMaxId (key: string, maxId: bigint): Promise<void>, insert (key: string, step: number): Promise<void> }>
}

/** A file path that does not exist yet, in a fresh folder. */
function sqlitePath (): string {
  return join(mkdtempSync(join(tmpdir(), 'leaf-sqlite-')), 'leaf.db')
}

const cases: StoreCase[] = [
  {
    name: 'MariaDB',
    async open () {
      const db = await createTestDatabase()
      const store = createStore(parseJdbcUrl(db.jdbc.url, db.jdbc.username, db.jdbc.password), MYSQL_OPTIONS)
      t.teardown(async () => { await store.close(); await db.drop() })
      return {
        store,
        setMaxId: async (key, maxId) => { await db.query('UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?', [String(maxId), key]) },
        insert: async (key, step) => { await db.query('INSERT INTO leaf_alloc (biz_tag, step) VALUES (?, ?)', [key, step]) },
      }
    },
  },
  {
    name: 'PostgreSQL',
    async open () {
      const db = await createTestPgDatabase()
      const store = createStore(parseJdbcUrl(db.jdbc.url, db.jdbc.username, db.jdbc.password), MYSQL_OPTIONS)
      t.teardown(async () => { await store.close(); await db.drop() })
      return {
        store,
        setMaxId: async (key, maxId) => { await db.query('UPDATE leaf_alloc SET max_id = $1 WHERE biz_tag = $2', [String(maxId), key]) },
        insert: async (key, step) => { await db.query('INSERT INTO leaf_alloc (biz_tag, step) VALUES ($1, $2)', [key, step]) },
      }
    },
  },
  {
    name: 'SQLite',
    async open () {
      // The embedded default (an empty leaf.jdbc.url): its folder is made, and it gets the demo tags.
      const path = join(sqlitePath(), '..', 'nested', 'leaf.db')
      const store = createStore({ kind: 'sqlite', path, embeddedDefault: true }, MYSQL_OPTIONS)
      const raw = new Database(path)
      raw.defaultSafeIntegers(true)
      t.teardown(async () => { await store.close(); raw.close() })
      return {
        store,
        setMaxId: async (key, maxId) => { raw.prepare('UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?').run(maxId, key) },
        insert: async (key, step) => { raw.prepare('INSERT INTO leaf_alloc (biz_tag, step) VALUES (?, ?)').run(key, step) },
      }
    },
  },
]

for (const c of cases) {
  t.test(`${c.name} store`, async (t) => {
    const { store, setMaxId, insert } = await c.open()

    t.test('has the seed rows of sql/leaf_alloc.sql', async (t) => {
      t.same((await store.getAllTags()).sort((a, b) => a.key < b.key ? -1 : 1), [{ key: 'leaf-segment-test', maxId: 1n }, { key: 'order', maxId: 1n }])
      const rows = await store.getAllRows()
      t.match(rows.find((r) => r.key === 'order'), { maxId: 1n, step: 2000, description: String })
      t.match(rows.find((r) => r.key === 'leaf-segment-test'), { maxId: 1n, step: 1000, description: 'Test leaf Segment Mode Get Id' })
      const updated = rows[0]?.updateTime as Date
      t.ok(updated instanceof Date && Math.abs(updated.getTime() - Date.now()) < 60_000, 'update_time read as the right instant')
      await t.resolves(store.ping())
    })

    t.test('raiseMaxId puts max_id at least at a value, never lower; identity names who answers, as each allocation does', async (t) => {
      await insert('raise', 10)
      await setMaxId('raise', 500n)
      t.equal(await store.raiseMaxId('raise', 400n), true, 'the tag exists')
      t.equal((await store.getTag('raise'))?.maxId, 500n, 'never lowered')
      t.equal(await store.raiseMaxId('raise', 900n), true)
      t.equal((await store.getTag('raise'))?.maxId, 900n, 'raised')
      t.equal(await store.raiseMaxId('no-such-tag', 900n), false)
      // Exact past 2^53: a DOUBLE in between would round it (and could lower it).
      await setMaxId('raise', 2n ** 62n + 1001n)
      t.equal(await store.raiseMaxId('raise', 5n), true)
      t.equal((await store.getTag('raise'))?.maxId, 2n ** 62n + 1001n, 'a big max_id kept to the unit')
      t.equal(await store.raiseMaxId('raise', 2n ** 62n + 1003n), true)
      t.equal((await store.getTag('raise'))?.maxId, 2n ** 62n + 1003n, 'and raised to the unit')
      const identity = await store.identity()
      const alloc = await store.allocate('raise')
      if (c.name === 'SQLite') {
        t.equal(identity, undefined, 'a file cannot tell')
        t.equal(alloc?.store, undefined)
      } else {
        t.match(identity, c.name === 'PostgreSQL' ? /^postgres system \d+ timeline \d+$/ : /^server_id \d+$/, 'the server_id, or the PostgreSQL cluster\'s system identifier')
        t.equal(alloc?.store, identity, 'the allocation names the same server')
      }
    })

    t.test('allocate moves max_id by the table step, or by an adapted one while the table step is the one it came from', async (t) => {
      t.same(rangeOf(await store.allocate('order')), { key: 'order', maxId: 2001n, step: 2000 })
      t.same(rangeOf(await store.allocate('order', { step: 500, tableStep: 2000 })), { key: 'order', maxId: 2501n, step: 2000 })
      t.same(rangeOf(await store.allocate('order', { step: 500, tableStep: 10 })), { key: 'order', maxId: 4501n, step: 2000 }, 'the table step changed since: the table step')
      t.equal(await store.allocate('missing'), undefined)
    })

    t.test('createTag inserts once; a second create of the key is undefined', async (t) => {
      const row = await store.createTag({ key: 'made', step: 3, maxId: 10n, description: 'd' })
      t.match(row, { key: 'made', maxId: 10n, step: 3, description: 'd' })
      t.equal(await store.createTag({ key: 'made', step: 4, maxId: 1n, description: null }), undefined)
      t.match(await store.updateTag('made', { step: 9 }), { key: 'made', maxId: 10n, step: 9, description: 'd' })
      t.equal(await store.updateTag('nope', { step: 9 }), undefined)
      t.match(await store.getTag('made'), { key: 'made', maxId: 10n, step: 9, description: 'd', updateTime: Date })
      t.equal(await store.getTag('nope'), undefined)
    })

    t.test('a table step of 0 or less fails the allocation and leaves max_id alone', async (t) => {
      await insert('zero', 0)
      for (const adapted of [undefined, { step: 5, tableStep: 5 }]) {
        await t.rejects(store.allocate('zero', adapted).then((a) => {
          if (a !== undefined && a.step < 1) throw new Error('step < 1 reached the generator, which refuses it')
          return a
        }))
      }
      t.equal((await store.getAllRows()).find((r) => r.key === 'zero')?.maxId, 1n)
    })

    // Through the pool's 4 connections at once. (A SQLite handle runs its calls one at a time:
    // SQLite's races are between handles and processes, below.)
    if (c.name !== 'SQLite') {
      t.test('concurrent allocations never overlap', async (t) => {
        await insert('race', 10)
        const got = await Promise.all(Array.from({ length: 40 }, () => store.allocate('race')))
        const maxes = got.map((a) => a?.maxId)
        t.equal(new Set(maxes).size, 40)
        t.equal(maxes.reduce((a, b) => (a as bigint) > (b as bigint) ? a : b), 401n)
      })
    }

    t.test('max_id past 2^53 stays exact through the generator', async (t) => {
      await insert('big', 5)
      await setMaxId('big', BEYOND_2_53)
      const generator = createSegmentGenerator({ store, logger: silentLogger, waitTimeoutMs: 2000, refreshIntervalMs: 60_000 })
      await generator.init()
      t.teardown(() => generator.close())
      const ids: bigint[] = []
      for (let i = 0; i < 20; i++) ids.push(BigInt(await generator.next('big')))
      t.same(ids.slice(0, 10), Array.from({ length: 10 }, (_, i) => BEYOND_2_53 + BigInt(i)))
      t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)), 'increasing across segments')
      t.equal(new Set(ids).size, 20)
    })

    t.test('giveBack: a compare-and-set on max_id, which holds only while nobody reserved since', async (t) => {
      await insert('give', 10)
      const mine = await store.allocate('give') // [1, 11)
      t.equal(mine?.maxId, 11n)
      t.equal(await store.giveBack('give', 11n, 4n), true, 'max_id is still our end: IDs 4..10 return')
      t.equal(await maxIdOf(store, 'give'), 4n)
      t.same(rangeOf(await store.allocate('give')), { key: 'give', maxId: 14n, step: 10 }, 'the next reservation starts at the first returned ID')
      await store.allocate('give') // another instance: [14, 24)
      t.equal(await store.giveBack('give', 14n, 5n), false, 'someone reserved since: nothing moves')
      t.equal(await maxIdOf(store, 'give'), 24n)
      t.equal(await store.giveBack('nope', 24n, 5n), false, 'an unknown tag')
      await setMaxId('give', 2n ** 62n + 3n)
      t.equal(await store.giveBack('give', 2n ** 62n + 2n, 2n ** 62n), false, 'exact past 2^53: one off does not compare equal')
      t.equal(await store.giveBack('give', 2n ** 62n + 3n, 2n ** 62n + 1n), true)
      t.equal(await maxIdOf(store, 'give'), 2n ** 62n + 1n)
    })

    t.test('parked ranges: kept per identity, taken once (the table made when missing), too old ones dropped', async (t) => {
      t.same(await store.claimParked('order', 'A', 60_000), [], 'nothing parked yet (MariaDB, PostgreSQL: the table is made here)')
      t.equal(await store.park('order', 'A', [{ first: 30n, end: 40n }, { first: 10n, end: 20n }]), true)
      t.equal(await store.park('order', 'B', [{ first: 50n, end: 60n }]), true)
      t.equal(await store.park('order', 'A', []), true, 'nothing to park: no statement needed')
      t.same(await store.claimParked('order', 'A', 60_000), [{ first: 10n, end: 20n }, { first: 30n, end: 40n }], 'A\'s, lowest first')
      t.same(await store.claimParked('order', 'A', 60_000), [], 'taken once')
      t.same(await store.claimParked('leaf-segment-test', 'B', 60_000), [], 'per tag')
      await new Promise((resolve) => setTimeout(resolve, 30))
      t.same(await store.claimParked('order', 'C', 10), [], 'C parked nothing; its claim drops the tag\'s rows older than 10 ms')
      t.same(await store.claimParked('order', 'B', 60_000), [], 'B\'s row was dropped as too old')
      t.equal(await store.park('order', 'D', [{ first: 2n ** 62n, end: 2n ** 62n + 5n }]), true)
      t.same(await store.claimParked('order', 'D', 60_000), [{ first: 2n ** 62n, end: 2n ** 62n + 5n }], 'exact past 2^53')
    })

    t.test('parked ranges: claims racing for one identity take each range once', async (t) => {
      const ranges = Array.from({ length: 20 }, (_, i) => ({ first: BigInt(i * 10), end: BigInt(i * 10 + 5) }))
      t.equal(await store.park('leaf-segment-test', 'X', ranges), true)
      const claims = await Promise.all(Array.from({ length: 8 }, () => store.claimParked('leaf-segment-test', 'X', 60_000)))
      const taken = claims.flatMap((c) => c ?? [])
      t.equal(taken.length, 20, 'every range taken')
      t.equal(claims.filter((c) => (c?.length ?? 0) > 0).length, 1, 'all by one claim')
    })

    t.test('max_id at the top of the 64-bit range fails the load instead of wrapping', async (t) => {
      await insert('top', 10)
      await setMaxId('top', 2n ** 63n - 5n)
      await t.rejects(store.allocate('top'), { name: 'IdSpaceEnded', code: 'ID_SPACE_ENDED' }, 'as IdSpaceEnded: the generator answers ID_SPACE_EXHAUSTED at once')
      await t.rejects(store.allocate('top', { step: 20, tableStep: 10 }), IdSpaceEnded)
      const row = (await store.getAllRows()).find((r) => r.key === 'top')
      t.equal(row?.maxId, 2n ** 63n - 5n, 'max_id untouched')
      t.same(rangeOf(await store.allocate('order')), { key: 'order', maxId: 6501n, step: 2000 }, 'the store still works afterwards')
    })
  })
}

/** A reservation as one side saw it: the range [maxId - step, maxId) it got. */
interface Reserved { maxId: bigint, step: number }

/** The tags of these tests have a table step of 10. */
const TABLE_STEP = 10

/** Varied steps, some of them the table's own (undefined), as the generator asks. */
function stepFor (i: number, side: number): number | undefined {
  return i % 5 === 0 ? undefined : 1 + ((i * 7 + side * 3) % 13)
}

/**
 * Each side's reservations increase; all ranges together are disjoint; and `max_id` moved by
 * exactly the sum of the steps reserved, from `initial`.
 */
function checkReservations (t: Test, sides: Reserved[][], initial: bigint, finalMaxId: bigint | undefined): void {
  for (const [i, side] of sides.entries()) {
    t.ok(side.every((r, j) => j === 0 || r.maxId > (side[j - 1] as Reserved).maxId), `side ${i}: ${side.length} reservations, increasing`)
  }
  const ranges = sides.flat().map((r) => ({ from: r.maxId - BigInt(r.step), to: r.maxId })).sort((a, b) => (a.from < b.from ? -1 : 1))
  const overlaps = ranges.filter((r, j) => j > 0 && r.from < (ranges[j - 1] as { to: bigint }).to)
  t.equal(overlaps.length, 0, 'no two ranges overlap: no ID is handed out twice')
  const sum = sides.flat().reduce((total, r) => total + BigInt(r.step), 0n)
  t.equal(finalMaxId, initial + sum, 'max_id = initial + the sum of the steps reserved')
}

async function maxIdOf (store: SegmentStore, key: string): Promise<bigint | undefined> {
  return (await store.getAllRows()).find((r) => r.key === key)?.maxId
}

t.test('SQLite: two handles on one file, allocating in turn, never overlap', async (t) => {
  const path = sqlitePath()
  const stores = [createSqliteStore(path), createSqliteStore(path)]
  t.teardown(() => Promise.all(stores.map((s) => s.close())))
  await stores[0]?.createTag({ key: 'turns', step: TABLE_STEP, maxId: 100n, description: null })
  const sides: Reserved[][] = [[], []]
  for (let i = 0; i < 100; i++) {
    for (const [side, store] of stores.entries()) {
      const step = stepFor(i, side)
      const alloc = await store.allocate('turns', step === undefined ? undefined : { step, tableStep: TABLE_STEP }) as Allocation
      sides[side]?.push({ maxId: alloc.maxId, step: step ?? alloc.step })
    }
  }
  checkReservations(t, sides, 100n, await maxIdOf(stores[1] as SegmentStore, 'turns'))
})

// Safe defaults (issue 39): a mistyped path must serve nothing and make nothing.
const tablesOf = (path: string) => withSqlite(path, (db) => db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all())

t.test('SQLite: a configured path in a folder that does not exist is refused, and nothing is made', async (t) => {
  const folder = join(sqlitePath(), '..', 'no-such-folder')
  t.throws(() => createSqliteStore(join(folder, 'leaf.db')), { name: 'StartRefused', code: 'STORE_FOLDER_MISSING', message: `segment store sqlite:${join(folder, 'leaf.db')}: the folder ${folder} does not exist: correct leaf.jdbc.url, or create the folder (only the embedded default's folder is made)` })
  t.notOk(existsSync(folder), 'no folder made')
})

t.test('SQLite: a new file at a configured path gets leaf_alloc with no tags, and a warning naming it', async (t) => {
  const path = sqlitePath()
  const { logger, lines } = captureLogger()
  const store = createSqliteStore(path, { logger })
  t.teardown(() => store.close())
  t.same(await store.getAllTags(), [], 'no demo tags: a mistyped file name serves nothing')
  t.match(lines.find((l) => l.level === 40), { file: path, msg: new RegExp(`^new SQLite store ${path}: leaf_alloc created with no tags`) })
  t.same(tablesOf(path), ['leaf_alloc', 'leaf_alloc_parked'])
})

t.test('SQLite: an empty file gets the tables and no tags; a file with only Leaf\'s own tables too', async (t) => {
  const empty = sqlitePath()
  writeFileSync(empty, '')
  const first = createSqliteStore(empty)
  t.same(await first.getAllTags(), [])
  await first.close()
  const leases = sqlitePath()
  withSqlite(leases, (db) => db.exec('CREATE TABLE leaf_worker_lease (worker_id INTEGER PRIMARY KEY)'))
  const second = createSqliteStore(leases)
  t.same(await second.getAllTags(), [])
  await second.close()
})

t.test('SQLite: another program\'s database (tables, no leaf_alloc) is refused naming sql/leaf_alloc.sql, and left as it was', async (t) => {
  const path = sqlitePath()
  withSqlite(path, (db) => db.exec('CREATE TABLE customers (id INTEGER PRIMARY KEY); CREATE TABLE orders (id INTEGER PRIMARY KEY)'))
  const before = readFileSync(path)
  t.throws(() => createSqliteStore(path, { embeddedDefault: true }), {
    name: 'StartRefused',
    code: 'STORE_FOREIGN_DATABASE',
    message: `segment store sqlite:${path}: the file has tables (customers, orders) and no leaf_alloc: it is another program's database; correct leaf.jdbc.url, or add Leaf's table to it (sql/leaf_alloc.sql, without its ENGINE clause)`,
  })
  t.same(tablesOf(path), ['customers', 'orders'], 'no table added')
  t.ok(readFileSync(path).equals(before), 'the file\'s bytes unchanged')
})

t.test('SQLite: the embedded default\'s folder that cannot be made is refused in one line', async (t) => {
  const file = sqlitePath()
  writeFileSync(file, '')
  t.throws(() => createSqliteStore(join(file, 'data', 'leaf.db'), { embeddedDefault: true }), {
    name: 'StartRefused',
    code: 'STORE_FOLDER_UNWRITABLE',
    message: `segment store sqlite:${join(file, 'data', 'leaf.db')}: the embedded store's folder ${join(file, 'data')} cannot be made (ENOTDIR): make the install folder writable, or set leaf.jdbc.url to sqlite:PATH in a writable folder`,
  })
})

t.test('SQLite: the embedded default makes its folder and the demo tags once; a later open adds none', async (t) => {
  const path = join(sqlitePath(), '..', 'data', 'leaf.db')
  const { logger, lines } = captureLogger()
  const first = createSqliteStore(path, { embeddedDefault: true, logger })
  t.same((await first.getAllTags()).map((r) => r.key).sort(), ['leaf-segment-test', 'order'])
  t.match(lines.find((l) => l.level === 30), { file: path, tags: ['order', 'leaf-segment-test'] })
  await first.close()
  withSqlite(path, (db) => db.exec("DELETE FROM leaf_alloc WHERE biz_tag = 'leaf-segment-test'"))
  const again = createSqliteStore(path, { embeddedDefault: true })
  t.same((await again.getAllTags()).map((r) => r.key), ['order'], 'a tag an operator deleted stays deleted')
  await again.close()
})

const STORE_MODULE = fileURLToPath(new URL('../../src/segment/stores/sqlite-store.ts', import.meta.url))
// A child process: opens the file, says "ready", waits for a line on stdin, then reserves,
// a millisecond apart. A call that fails with SQLITE_BUSY (the other process held the write lock
// longer than the busy timeout) is retried, as the generator retries a failed load.
const CHILD = `
const [, module, path, side, count, tableStep] = process.argv
const { createSqliteStore } = await import(module)
const store = createSqliteStore(path)
const stepFor = ${stepFor.toString()}
process.stdout.write('ready\\n')
await new Promise((resolve) => process.stdin.once('data', resolve))
const reserved = []
let busy = 0
for (let i = 0; i < Number(count);) {
  const step = stepFor(i, Number(side))
  try {
    const alloc = await store.allocate('procs', step === undefined ? undefined : { step, tableStep: Number(tableStep) })
    reserved.push([String(alloc.maxId), step ?? alloc.step])
    i++
    // A millisecond between reservations: 400 back to back take less time than the other
    // process needs to wake up, and the two ran one after the other (1 turn in max_id order).
    await new Promise((resolve) => setTimeout(resolve, 1))
  } catch (err) {
    if (err.code !== 'SQLITE_BUSY') throw err
    busy++
  }
}
process.stdout.write(JSON.stringify({ reserved, busy }) + '\\n')
process.exit(0)
`

function child (path: string, side: number, count: number) {
  const proc = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD, STORE_MODULE, path, String(side), String(count), String(TABLE_STEP)], { stdio: ['pipe', 'pipe', 'inherit'] })
  let out = ''
  proc.stdout.setEncoding('utf8')
  const ready = new Promise<void>((resolve) => proc.stdout.on('data', (chunk: string) => { out += chunk; if (out.startsWith('ready\n')) resolve() }))
  const done = new Promise<{ reserved: Reserved[], busy: number }>((resolve, reject) => proc.once('exit', (code) => {
    if (code !== 0) return reject(new Error(`child ${side} exited with ${code}`))
    const result = JSON.parse(out.slice('ready\n'.length)) as { reserved: [string, number][], busy: number }
    resolve({ reserved: result.reserved.map(([maxId, step]) => ({ maxId: BigInt(maxId), step })), busy: result.busy })
  }))
  return { proc, ready, done }
}

t.test('SQLite: two processes reserving at once on one file never overlap', async (t) => {
  const path = sqlitePath()
  const store = createSqliteStore(path)
  t.teardown(() => store.close())
  await store.createTag({ key: 'procs', step: TABLE_STEP, maxId: 1000n, description: null })
  const children = [child(path, 0, 400), child(path, 1, 400)]
  t.teardown(() => { for (const c of children) c.proc.kill() })
  await Promise.all(children.map((c) => c.ready))
  for (const c of children) c.proc.stdin.end('go\n')
  const results = await Promise.all(children.map((c) => c.done))
  t.comment(`SQLITE_BUSY retries: ${results.map((r) => r.busy).join(', ')}`)
  // The race was run: in max_id order the two processes' reservations alternate, many times.
  const merged = results.flatMap((r, side) => r.reserved.map((x) => ({ side, maxId: x.maxId }))).sort((a, b) => (a.maxId < b.maxId ? -1 : 1))
  const turns = merged.filter((x, j) => j > 0 && x.side !== merged[j - 1]?.side).length
  t.ok(turns >= 50, `the processes reserved in between each other's reservations (${turns} turns in max_id order), not one after the other`)
  checkReservations(t, results.map((r) => r.reserved), 1000n, await maxIdOf(store, 'procs'))
})

// better-sqlite3 is synchronous: while SQLite waits for another process's write lock, the
// whole event loop waits with it.
t.test('SQLite: a write lock held elsewhere fails an allocation fast; the next one after its release succeeds', async (t) => {
  const path = seedSqlite(sqlitePath())
  const store = createSqliteStore(path)
  const other = new Database(path)
  t.teardown(async () => { other.close(); await store.close() })
  other.exec('BEGIN IMMEDIATE')
  const started = performance.now()
  await t.rejects(store.allocate('order'), { code: 'SQLITE_BUSY' })
  const blocked = performance.now() - started
  t.ok(blocked < 500, `failed after ${Math.round(blocked)} ms`)
  other.exec('COMMIT')
  t.same(await store.allocate('order'), { key: 'order', maxId: 2001n, step: 2000 })
})

t.test('SQLite: a caller waits out another handle\'s write lock without the event loop stalling', async (t) => {
  const path = seedSqlite(sqlitePath())
  const store = createSqliteStore(path)
  const other = new Database(path)
  const generator = createSegmentGenerator({ store, logger: silentLogger, waitTimeoutMs: 3000, refreshIntervalMs: 60_000 })
  t.teardown(async () => { generator.close(); other.close(); await store.close() })
  await generator.init()
  let last = performance.now()
  let longestStall = 0
  const ticker = setInterval(() => {
    const now = performance.now()
    longestStall = Math.max(longestStall, now - last)
    last = now
  }, 5)
  t.teardown(() => clearInterval(ticker))
  other.exec('BEGIN IMMEDIATE')
  setTimeout(() => other.exec('COMMIT'), 300)
  const started = performance.now()
  const id = await Promise.resolve().then(() => generator.next('order')).catch((err: Error) => err.message)
  const waited = performance.now() - started
  t.equal(id, 1, 'the first ID, once the lock was released')
  t.ok(waited < 1500, `answered ${Math.round(waited)} ms after asking`)
  t.ok(longestStall < 300, `the event loop never stalled for long (longest ${Math.round(longestStall)} ms)`)
})

t.test('leaf_alloc_parked as the MySQL store makes it is sql/leaf_alloc_parked.sql', async (t) => {
  const shipped = readFileSync(new URL('../../sql/leaf_alloc_parked.sql', import.meta.url), 'utf8')
  t.ok(shipped.includes(`${MYSQL_PARKED_DDL};\n`), 'the same CREATE TABLE statement')
})

t.test('the start\'s line on the store\'s replication: what a failover of each topology costs', async (t) => {
  const m = (o: Record<string, string>) => new Map(Object.entries(o))
  t.match(describeTopology(m({ wsrep_on: 'ON' }), m({ wsrep_cluster_size: '3' })), /^Galera cluster of 3 node\(s\): .*conflicts between nodes are repeated at once$/)
  t.match(describeTopology(m({ rpl_semi_sync_master_enabled: 'ON', rpl_semi_sync_master_wait_point: 'AFTER_SYNC', log_bin: 'ON' }), m({ rpl_semi_sync_master_clients: '1' })),
    /^semi-synchronous replication \(AFTER_SYNC, 1 replica\(s\) acknowledging\): a promoted replica holds every allocation/)
  t.match(describeTopology(m({ rpl_semi_sync_master_enabled: 'ON', log_bin: 'ON' }), m({})), /^semi-synchronous replication \(AFTER_COMMIT, \? replica\(s\) acknowledging\): a promotion may lose allocations already served; the max_id guard catches them/)
  t.match(describeTopology(m({ log_bin: 'ON' }), m({ slaves_connected: '2' })), /^asynchronous replication possible \(binary log on, 2 replica\(s\) connected\): a promotion may lose the last allocations/)
  t.equal(describeTopology(m({ wsrep_on: 'OFF', log_bin: 'OFF' }), m({})), 'a single server, no binary log: no replica to fail over to')
  const db = await createTestDatabase()
  const store = createStore(parseJdbcUrl(db.jdbc.url, db.jdbc.username, db.jdbc.password), MYSQL_OPTIONS)
  t.teardown(async () => { await store.close(); await db.drop() })
  const [variables] = await db.query<{ Value: string }[]>("SHOW GLOBAL VARIABLES LIKE 'log_bin'")
  t.match(await store.topology?.(), variables?.Value === 'ON' ? /^asynchronous replication possible/ : /^a single server, no binary log/, 'read off the suite\'s MariaDB')
})

t.test('leaf_alloc_parked as the PostgreSQL store makes it is sql/leaf_alloc_parked.postgres.sql', async (t) => {
  const shipped = readFileSync(new URL('../../sql/leaf_alloc_parked.postgres.sql', import.meta.url), 'utf8')
  t.ok(shipped.includes(`${PG_PARKED_DDL};\n`), 'the same statements')
})

t.test('PostgreSQL: the start\'s line on replication, and the private server\'s', async (t) => {
  t.match(describePgTopology(0, ''), /^a single server, no standby/)
  t.match(describePgTopology(2, ''), /^asynchronous streaming replication \(2 standby\(s\)\): a promotion may lose the last allocations/)
  t.match(describePgTopology(1, 'ANY 1 (s1)'), /^synchronous streaming replication \(1 standby\(s\), synchronous_standby_names = 'ANY 1 \(s1\)'\)/)
  const db = await createTestPgDatabase()
  const store = createStore(parseJdbcUrl(db.url, '', ''), MYSQL_OPTIONS)
  t.teardown(async () => { await store.close(); await db.drop() })
  t.match(await store.topology?.(), /^a single server, no standby/, 'read off the suite\'s PostgreSQL')
})
