import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { parseJdbcUrl } from '../src/config/jdbc-url.js'
import { createSegmentGenerator } from '../src/segment/segment-generator.js'
import type { SegmentStore } from '../src/segment/store.js'
import { createStore } from '../src/segment/stores/create-store.js'
import { createSqliteStore } from '../src/segment/stores/sqlite-store.js'
import { silentLogger } from './helpers/logger.js'
import { createTestDatabase } from './helpers/mysql.js'

const MYSQL_OPTIONS = { connectTimeoutMs: 2000, poolSize: 4, queryTimeoutMs: 2000 }
const BEYOND_2_53 = 2n ** 53n - 10n

interface StoreCase {
  name: string
  open (): Promise<{ store: SegmentStore, setMaxId (key: string, maxId: bigint): Promise<void>, insert (key: string, step: number): Promise<void> }>
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
    name: 'SQLite',
    async open () {
      const path = join(mkdtempSync(join(tmpdir(), 'leaf-sqlite-')), 'nested', 'leaf.db')
      const store = createStore({ kind: 'sqlite', path }, MYSQL_OPTIONS)
      // A second handle on the same file, as another process would have.
      const other = createSqliteStore(path) as SegmentStore & { db?: unknown }
      const Database = (await import('better-sqlite3')).default
      const raw = new Database(path)
      raw.defaultSafeIntegers(true)
      t.teardown(async () => { await store.close(); await other.close(); raw.close() })
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
      t.same((await store.getAllTags()).sort(), ['leaf-segment-test', 'order'])
      const rows = await store.getAllRows()
      t.match(rows.find((r) => r.key === 'order'), { maxId: 1n, step: 2000, description: String })
      t.match(rows.find((r) => r.key === 'leaf-segment-test'), { maxId: 1n, step: 1000, description: 'Test leaf Segment Mode Get Id' })
      const updated = rows[0]?.updateTime as Date
      t.ok(updated instanceof Date && Math.abs(updated.getTime() - Date.now()) < 60_000, 'update_time read as the right instant')
      await t.resolves(store.ping())
    })

    t.test('allocate moves max_id by the table step or the given one', async (t) => {
      t.same(await store.allocate('order'), { key: 'order', maxId: 2001n, step: 2000 })
      t.same(await store.allocate('order', 500), { key: 'order', maxId: 2501n, step: 2000 })
      t.equal(await store.allocate('missing'), undefined)
    })

    t.test('createTag inserts once; a second create of the key is undefined', async (t) => {
      const row = await store.createTag({ key: 'made', step: 3, maxId: 10n, description: 'd' })
      t.match(row, { key: 'made', maxId: 10n, step: 3, description: 'd' })
      t.equal(await store.createTag({ key: 'made', step: 4, maxId: 1n, description: null }), undefined)
      t.match(await store.updateTag('made', { step: 9 }), { key: 'made', maxId: 10n, step: 9, description: 'd' })
      t.equal(await store.updateTag('nope', { step: 9 }), undefined)
    })

    t.test('a table step of 0 or less fails the allocation and leaves max_id alone', async (t) => {
      await insert('zero', 0)
      await t.rejects(store.allocate('zero').then((a) => {
        if (a !== undefined && a.step < 1) throw new Error('step < 1 reached the generator, which refuses it')
        return a
      }))
      t.equal((await store.getAllRows()).find((r) => r.key === 'zero')?.maxId, 1n)
    })

    t.test('concurrent allocations never overlap', async (t) => {
      await insert('race', 10)
      const got = await Promise.all(Array.from({ length: 40 }, () => store.allocate('race')))
      const maxes = got.map((a) => a?.maxId)
      t.equal(new Set(maxes).size, 40)
      t.equal(maxes.reduce((a, b) => (a as bigint) > (b as bigint) ? a : b), 401n)
    })

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

    t.test('max_id at the top of the 64-bit range fails the load instead of wrapping', async (t) => {
      await insert('top', 10)
      await setMaxId('top', 2n ** 63n - 5n)
      await t.rejects(store.allocate('top'))
      const row = (await store.getAllRows()).find((r) => r.key === 'top')
      t.equal(row?.maxId, 2n ** 63n - 5n, 'max_id untouched')
      t.same(await store.allocate('order'), { key: 'order', maxId: 4501n, step: 2000 }, 'the store still works afterwards')
    })
  })
}
