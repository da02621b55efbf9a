import { join } from 'node:path'
import Database from 'better-sqlite3'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { seedSqlite } from '../helpers/sqlite.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { get, startServer } from '../helpers/server-process.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

// A graceful stop of the built server gives its unused IDs back (max_id, or parked for its
// next start), and the next start loads the tags that served before it turns ready, on the
// embedded SQLite store and on MariaDB.

interface Backend {
  name: string
  /** The server's store settings, and a reader of the tag's max_id and parked rows. */
  open (): Promise<{ env: Record<string, string>, maxId (): Promise<bigint>, parked (): Promise<number>, reserve (): Promise<void> }>
}

const TAG = 'order' // the seed row: step 2000

const backends: Backend[] = [
  {
    name: 'SQLite',
    async open () {
      const path = join(tempDir(), 'leaf.db')
      const env = { LEAF_JDBC_URL: `sqlite:${seedSqlite(path)}` }
      const read = <T>(fn: (db: Database.Database) => T): T => {
        const db = new Database(path)
        db.defaultSafeIntegers(true)
        try { return fn(db) } finally { db.close() }
      }
      return {
        env,
        maxId: async () => read((db) => (db.prepare('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?').get(TAG) as { max_id: bigint }).max_id),
        parked: async () => read((db) => Number((db.prepare('SELECT COUNT(*) AS n FROM leaf_alloc_parked').get() as { n: bigint }).n)),
        reserve: async () => { read((db) => db.prepare('UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?').run(TAG)) },
      }
    },
  },
  {
    name: 'MariaDB',
    async open () {
      const db = await createTestDatabase()
      t.teardown(() => db.drop())
      return {
        env: { LEAF_JDBC_URL: db.jdbc.url, LEAF_JDBC_USERNAME: db.jdbc.username, LEAF_JDBC_PASSWORD: db.jdbc.password },
        maxId: async () => BigInt((await db.query<{ max_id: string }[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', [TAG]))[0]?.max_id ?? -1),
        // Read once a stop parked: the table exists then, and an error fails the test.
        parked: async () => Number((await db.query<{ n: number }[]>('SELECT COUNT(*) AS n FROM leaf_alloc_parked'))[0]?.n),
        reserve: async () => { await db.query('UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?', [TAG]) },
      }
    },
  },
]

async function ids (url: string, count: number): Promise<bigint[]> {
  const a = await get(`${url}/api/segment/get/${TAG}?count=${count}`)
  if (a.status !== 200) throw new Error(`${a.status} ${a.body}`)
  return a.body.trim().split('\n').map(BigInt)
}

async function loads (url: string): Promise<number> {
  return valueOf(parseSamples((await get(`${url}/metrics`)).body), 'leaf_segment_db_load_seconds_count', { key: TAG }) ?? 0
}

for (const backend of backends) {
  t.test(`${backend.name}: SIGTERM gives the unused end back to max_id; the next start serves from there`, async (t) => {
    const store = await backend.open()
    const dir = tempDir()
    const args = ['--server.port=0', '--leaf.segment.enable=true', `--leaf.segment.state-file=${join(dir, 'state.json')}`]
    const first = await startServer({ args, env: store.env, cwd: dir })
    const issued = await ids(first.url, 10)
    t.same(issued, Array.from({ length: 10 }, (_, i) => BigInt(i + 1)))
    const held = await store.maxId()
    t.equal(await first.stop('SIGTERM'), 0, 'exit 0')
    t.equal(await store.maxId(), 11n, `max_id back from ${held} to the first unused ID`)
    t.match(first.output.join('\n'), /"returned":"\d+".*unused IDs given back/)

    const second = await startServer({ args, env: store.env, cwd: dir })
    t.teardown(() => second.stop())
    t.same(await ids(second.url, 2), [11n, 12n], 'no gap across the restart')
  })

  t.test(`${backend.name}: when another instance reserved since, the rest is parked and the next start takes it first, before it is ready`, async (t) => {
    const store = await backend.open()
    const dir = tempDir()
    const args = ['--server.port=0', '--leaf.segment.enable=true', `--leaf.segment.state-file=${join(dir, 'state.json')}`]
    const first = await startServer({ args, env: store.env, cwd: dir })
    t.same(await ids(first.url, 5), [1n, 2n, 3n, 4n, 5n])
    await store.reserve() // another instance reserves [2001, 4001): the compare-and-set fails
    t.equal(await first.stop('SIGTERM'), 0)
    t.equal(await store.maxId(), 4001n, 'max_id untouched')
    t.equal(await store.parked(), 1, 'one parked range')

    const second = await startServer({ args, env: store.env, cwd: dir })
    t.teardown(() => second.stop())
    let ready = await get(`${second.url}/readyz`)
    for (let i = 0; i < 100 && ready.status !== 200; i++) {
      t.match(JSON.parse(ready.body), { modes: { segment: { ready: false, reason: /warm start/ } } }, 'not ready while warming')
      await new Promise((resolve) => setTimeout(resolve, 50))
      ready = await get(`${second.url}/readyz`)
    }
    t.equal(ready.status, 200, 'ready')
    const before = await loads(second.url)
    t.equal(before, 1, 'the warm start loaded the hot tag before readiness, before the first request')
    t.same(await ids(second.url, 3), [6n, 7n, 8n], 'the parked IDs, right after the last one issued')
    t.equal(await loads(second.url), before, 'the first requests did not touch the database')
    t.equal(await store.parked(), 0, 'taken')
  })
}
