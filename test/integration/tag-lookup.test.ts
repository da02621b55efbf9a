import { join } from 'node:path'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { channels, type SegmentTagLookupMessage } from '../../src/channels.js'
import { TAG_LOOKUPS_PER_SECOND } from '../../src/segment/tag-lookup.js'
import { listen } from '../helpers/channels.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { createTestPgDatabase } from '../helpers/postgres.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'
import { seedSqlite, withSqlite } from '../helpers/sqlite.js'

// A tag inserted after the start serves on its first request, on every store; unknown keys
// cost at most the bounded number of store queries (segment/tag-lookup.ts).

interface Store {
  url: string
  insert (key: string, maxId: number, step: number): Promise<void>
}

async function check (t: Test, store: Store): Promise<void> {
  const lookups: SegmentTagLookupMessage[] = []
  listen(t, channels.segmentTagLookup, (m) => lookups.push(m))
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': store.url, 'leaf.segment.refresh-interval-ms': 600_000 }), { logger: silentLogger })
  t.teardown(() => app.close())
  t.equal((await app.inject('/api/segment/get/order')).statusCode, 200, 'a tag of the start serves')

  await store.insert('inserted-later', 5000, 10)
  const first = await app.inject('/api/segment/get/inserted-later')
  t.equal(first.statusCode, 200, 'a tag inserted after the start serves on its first request')
  t.equal(first.body, '5000')
  t.same(lookups.map((m) => m.result), ['found'], 'after one lookup')

  const missing = await app.inject('/api/segment/get/never-inserted')
  t.equal(missing.statusCode, 404)
  t.match(missing.json(), { error: 'KEY_NOT_FOUND', message: /insert a row into leaf_alloc .* or POST \/api\/segment\/tags/ })
  lookups.length = 0

  const started = performance.now()
  const answers = await Promise.all(Array.from({ length: 1000 }, (_, i) => app.inject(`/api/segment/get/unknown-${i}`)))
  const seconds = (performance.now() - started) / 1000
  t.ok(answers.every((a) => a.statusCode === 404 && a.json().error === 'KEY_NOT_FOUND'), 'every unknown key: 404 KEY_NOT_FOUND')
  // The bucket holds a second's worth, and refills at the rate for as long as the requests ran.
  const bound = TAG_LOOKUPS_PER_SECOND + Math.ceil(TAG_LOOKUPS_PER_SECOND * seconds)
  t.ok(lookups.length <= bound, `1000 unknown keys in ${seconds.toFixed(2)} s: ${lookups.length} store queries, at most ${bound}`)
  t.ok(lookups.length >= 1, 'and some were looked up')
  t.ok(lookups.every((m) => m.result === 'missing'))

  const samples = parseSamples((await app.inject('/metrics')).body)
  t.equal(valueOf(samples, 'leaf_segment_tag_lookups_total', { result: 'found' }), 1)
  t.equal(valueOf(samples, 'leaf_segment_tag_lookups_total', { result: 'missing' }), 1 + lookups.length)
}

t.test('SQLite', async (t) => {
  const path = seedSqlite(join(tempDir(), 'leaf.db'))
  await check(t, {
    url: `sqlite:${path}`,
    async insert (key, maxId, step) {
      withSqlite(path, (db) => db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, ?, ?)').run(key, maxId, step))
    },
  })
})

t.test('MariaDB', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await check(t, {
    url: db.url,
    async insert (key, maxId, step) {
      await db.query('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, ?, ?)', [key, maxId, step])
    },
  })
})

t.test('PostgreSQL', async (t) => {
  const db = await createTestPgDatabase()
  t.teardown(() => db.drop())
  await check(t, {
    url: db.url,
    async insert (key, maxId, step) {
      await db.query('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ($1, $2, $3)', [key, maxId, step])
    },
  })
})

t.test('MariaDB, Java Leaf\'s utf8mb3 table: a key its charset cannot hold is missing (404), not a store failure', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await db.query('ALTER TABLE leaf_alloc CONVERT TO CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci')
  const lookups: SegmentTagLookupMessage[] = []
  listen(t, channels.segmentTagLookup, (m) => lookups.push(m))
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': db.url, 'leaf.segment.refresh-interval-ms': 600_000 }), { logger: silentLogger })
  t.teardown(() => app.close())
  const emoji = await app.inject(`/api/segment/get/${encodeURIComponent('order-\u{1F600}')}`)
  t.equal(emoji.statusCode, 404, emoji.body)
  t.equal(emoji.json().error, 'KEY_NOT_FOUND')
  t.equal(emoji.headers['retry-after'], undefined, 'nothing to retry')
  t.same(lookups.map((m) => m.result), ['missing'], 'looked up once, and missing')
  t.equal((await app.inject('/api/segment/get/order')).statusCode, 200, 'the store still serves')
})
