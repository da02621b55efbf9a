import { existsSync, readFileSync } from 'node:fs'
import { networkInterfaces } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { get, startServer } from '../helpers/server-process.js'
import { withSqlite } from '../helpers/sqlite.js'
import { batchLines } from '../helpers/ids.js'

// The disposable worker-id source through the whole start (config, buildApp, the ID routes), on
// the SQLite file and on MariaDB: every start takes a new WORKER_NODE row and issues IDs with
// its ID as worker id; a layout with too few worker bits is refused before anything is written;
// and the built server does the same across a restart.

/** UidGenerator as deployed: 31 bits of seconds, 22 worker bits, 10 sequence bits. */
const LAYOUT = 'uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00'
const SEQUENCE_BITS = 10n
const WORKER_MASK = (1n << 22n) - 1n

/** The worker bits of an ID of LAYOUT, by plain shifts. */
function workerOf (id: string | bigint): number {
  return Number((BigInt(id) >> SEQUENCE_BITS) & WORKER_MASK)
}

interface NodeRow { id: number, hostName: string, port: string, type: number }

/** A WORKER_NODE table of one test: the leaf.jdbc.url the instances use, and its rows read behind their back. */
interface Store {
  kind: 'mysql' | 'sqlite'
  url: string
  rows (): Promise<NodeRow[]>
  /** Creates the table as an earlier UidGenerator deployment would have, with rows up to ID `last`. */
  seed (last: number): Promise<void>
}

const SQLITE_DDL = `CREATE TABLE WORKER_NODE (
  ID INTEGER PRIMARY KEY AUTOINCREMENT, HOST_NAME VARCHAR(64) NOT NULL, PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL,
  LAUNCH_DATE DATE NOT NULL, MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL)`
const SEED_ROW = "INSERT INTO WORKER_NODE (ID, HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES (?, 'old-host', '1546300800000-1', 2, '2019-01-01', '2019-01-01 00:00:00', '2019-01-01 00:00:00')"

function toRow (r: Record<string, unknown>): NodeRow {
  return { id: Number(r.ID), hostName: String(r.HOST_NAME), port: String(r.PORT), type: Number(r.TYPE) }
}

async function store (t: Test, kind: 'mysql' | 'sqlite'): Promise<Store> {
  if (kind === 'mysql') {
    const db = await createTestDatabase()
    t.teardown(() => db.drop())
    return {
      kind,
      url: db.url,
      rows: async () => (await db.query<Record<string, unknown>[]>('SELECT ID, HOST_NAME, PORT, TYPE FROM WORKER_NODE ORDER BY ID')).map(toRow),
      async seed (last) {
        await db.query(readFileSync(new URL('../../sql/worker_node.sql', import.meta.url), 'utf8'))
        await db.query(SEED_ROW, [last])
      },
    }
  }
  const path = join(tempDir('leaf-disposable-start-'), 'leaf.db')
  const open = <T>(fn: (db: Database.Database) => T): T => withSqlite(path, fn)
  return {
    kind,
    url: `sqlite:${path}`,
    rows: async () => existsSync(path) ? open((db) => db.prepare('SELECT ID, HOST_NAME, PORT, TYPE FROM WORKER_NODE ORDER BY ID').all() as Record<string, unknown>[]).map(toRow) : [],
    async seed (last) {
      open((db) => {
        db.exec(SQLITE_DDL)
        db.prepare(SEED_ROW).run(last)
      })
    },
  }
}

/** Baidu's WorkerNodeType as the source picks it: 1 CONTAINER under Kubernetes, else 2 ACTUAL. */
const IN_PROCESS_TYPE = process.env.KUBERNETES_SERVICE_HOST !== undefined ? 1 : 2

/** The address the source records when leaf.snowflake.ip is empty. */
function hostAddress (): string {
  for (const addresses of Object.values(networkInterfaces())) {
    for (const a of addresses ?? []) if (a.family === 'IPv4' && !a.internal) return a.address
  }
  return '127.0.0.1'
}

for (const kind of ['sqlite', 'mysql'] as const) {
  t.test(`${kind}: 100 starts of the app take 100 new worker ids, each a WORKER_NODE row, each issuing with it`, async (t) => {
    const s = await store(t, kind)
    const STARTS = 100
    const starts: { workerId: number, before: number, after: number }[] = []
    const problems: string[] = []
    for (let i = 0; i < STARTS; i++) {
      const before = Date.now()
      const app = await buildApp(testConfig({
        'leaf.jdbc.url': s.url,
        'leaf.snowflake.enable': true,
        'leaf.snowflake.worker-id.source': 'disposable',
        'leaf.snowflake.layout': LAYOUT,
        'leaf.snowflake.ip': `10.77.${i}.1`,
        'leaf.snowflake.port': 20_000 + i,
      }), { logger: silentLogger })
      try {
        const after = Date.now()
        const workerId = app.leaf.snowflake?.lease.workerId ?? -1
        starts.push({ workerId, before, after })
        const one = await app.inject('/api/snowflake/get/k')
        const batch = await app.inject('/api/snowflake/get/k?count=20')
        const ids = batch.statusCode === 200 ? [one.body, ...batchLines(batch.body)] : []
        if (one.statusCode !== 200 || batch.statusCode !== 200 || ids.length !== 21) problems.push(`start ${i}: ${one.statusCode} ${batch.statusCode} ${ids.length} IDs`)
        else if (!ids.every((id) => workerOf(id) === workerId)) problems.push(`start ${i}: IDs ${ids.slice(0, 3).join(', ')} do not carry worker id ${workerId}`)
        const status = (await app.inject('/api/snowflake/status')).json()
        if (status.workerId !== workerId || status.source !== 'disposable' || status.layout !== app.leaf.config.snowflake.layout.spec) problems.push(`start ${i}: status ${JSON.stringify(status)}`)
      } finally {
        await app.close()
      }
    }
    t.same(problems, [], 'every start issued IDs with its worker id, and its status says so')
    const ids = starts.map((x) => x.workerId)
    t.equal(new Set(ids).size, STARTS, '100 distinct worker ids')
    t.ok(ids.every((id, i) => i === 0 ? id >= 1 : id > (ids[i - 1] as number)), `increasing (${ids[0]}..${ids[STARTS - 1]})`)

    const rows = await s.rows()
    t.equal(rows.length, STARTS, 'one row per start')
    t.same(rows.map((r) => r.id), ids, 'each worker id is its row\'s ID')
    const mismatched = rows.flatMap((r, i) => {
      const start = starts[i] as typeof starts[number]
      const m = /^(\d+)-(\d{13})-(\d{1,6})$/.exec(r.port)
      const stamp = Number(m?.[2])
      const ok = r.hostName === `10.77.${i}.1` && m?.[1] === String(20_000 + i) && stamp >= start.before && stamp <= start.after && r.type === IN_PROCESS_TYPE
      return ok ? [] : [`row ${r.id}: ${JSON.stringify(r)}`]
    })
    t.same(mismatched, [], `HOST_NAME the configured ip, PORT <port>-<start ms>-<random>, TYPE ${IN_PROCESS_TYPE}`)
  })
}

t.test('disposable with fewer than 16 worker bits is refused by the configuration, before any row is written', async (t) => {
  const dir = tempDir()
  const path = join(dir, 'leaf.db')
  const layouts: [string, number][] = [
    ['leaf', 10],
    ['js-safe', 8],
    ['vesta-max-peak', 10],
    ['uid-generator,time=33s,worker=15,sequence=15,epoch=2022-01-01T00:00:00Z', 15],
    ['time=42ms,worker=15,sequence=6,epoch=2024-01-01T00:00:00Z', 15],
  ]
  for (const [layout, bits] of layouts) {
    t.throws(() => testConfig({ 'leaf.jdbc.url': `sqlite:${path}`, 'leaf.snowflake.enable': true, 'leaf.snowflake.worker-id.source': 'disposable', 'leaf.snowflake.layout': layout }), {
      name: 'ConfigError',
      key: 'leaf.snowflake.worker-id.source',
      message: new RegExp(`^leaf\\.snowflake\\.worker-id\\.source: disposable .*at least 16 worker bits.* ${bits} worker bits are too few$`),
    }, `${layout}: ${bits} worker bits`)
  }
  t.notOk(existsSync(path), 'no store touched')

  // 16 bits is enough: the boundary starts.
  const app = await buildApp(testConfig({
    'leaf.jdbc.url': `sqlite:${path}`,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker-id.source': 'disposable',
    'leaf.snowflake.layout': 'time=35s,worker=16,sequence=12,epoch=2024-01-01T00:00:00Z',
  }), { logger: silentLogger })
  t.teardown(() => app.close())
  const id = BigInt((await app.inject('/api/snowflake/get/k')).body)
  t.equal(Number((id >> 12n) & 0xffffn), 1, '16 worker bits: the first row\'s ID, 1')

  const refused = await startServer({
    cwd: dir,
    args: ['--server.port=0', '--leaf.snowflake.enable=true', '--leaf.snowflake.worker-id.source=disposable', '--leaf.snowflake.layout=js-safe', `--leaf.jdbc.url=sqlite:${join(dir, 'other.db')}`],
  }).then(() => undefined, (e: Error) => e)
  t.match(refused?.message, /exited with 1 before listening[\s\S]*configuration error: leaf\.snowflake\.worker-id\.source: disposable .*at least 16 worker bits.*js-safe layout's 8 worker bits are too few/,
    'the server exits 1 with the configuration error')
  t.notOk(existsSync(join(dir, 'other.db')), 'and writes nothing')
})

for (const kind of ['mysql', 'sqlite'] as const) {
  t.test(`${kind}: the built server takes a new WORKER_NODE row on each start and issues with its ID`, async (t) => {
    const s = await store(t, kind)
    await s.seed(4000)
    const args = (extra: string[]) => ['--server.port=0', '--leaf.segment.enable=false', '--leaf.snowflake.enable=true',
      '--leaf.snowflake.worker-id.source=disposable', `--leaf.snowflake.layout=${LAYOUT}`, `--leaf.jdbc.url=${s.url}`, ...extra]
    const issued: string[][] = []
    const lives: { ip: string, type: number, port: string, env: Record<string, string> }[] = [
      { ip: '10.88.0.1', type: 1, port: '18080', env: { KUBERNETES_SERVICE_HOST: '10.0.0.1' } },
      { ip: '', type: 2, port: '18081', env: {} },
    ]
    for (const [n, life] of lives.entries()) {
      const before = (await s.rows()).map((r) => r.id)
      const server = await startServer({
        cwd: tempDir(),
        env: life.env,
        args: args([`--leaf.snowflake.port=${life.port}`, ...(life.ip === '' ? [] : [`--leaf.snowflake.ip=${life.ip}`])]),
      })
      try {
        const rows = await s.rows()
        const added = rows.filter((r) => !before.includes(r.id))
        t.equal(added.length, 1, `start ${n + 1}: one new row`)
        const row = added[0] as NodeRow
        t.equal(row.id, Math.max(...before) + 1, `start ${n + 1}: the next ID, ${row.id}`)
        t.match(row, { hostName: life.ip === '' ? hostAddress() : life.ip, type: life.type, port: new RegExp(`^${life.port}-\\d{13}-\\d{1,6}$`) },
          `start ${n + 1}: HOST_NAME, PORT and TYPE`)

        const one = await get(`${server.url}/api/snowflake/get/k`)
        const batch = await get(`${server.url}/api/snowflake/get/k?count=500`)
        t.equal(one.status, 200)
        t.equal(batch.status, 200)
        const ids = [one.body, ...batchLines(batch.body)]
        t.equal(ids.length, 501)
        t.ok(ids.every((id) => workerOf(id) === row.id), `start ${n + 1}: every ID carries worker id ${row.id}`)
        const decoded = JSON.parse((await get(`${server.url}/api/snowflake/decode/${ids[ids.length - 1]}`)).body) as Record<string, unknown>
        t.match(decoded, { workerId: row.id, layout: 'uid-generator' }, `start ${n + 1}: /api/snowflake/decode gives the row's ID`)
        const status = JSON.parse((await get(`${server.url}/api/snowflake/status`)).body) as Record<string, unknown>
        t.match(status, { workerId: row.id, source: 'disposable', issuing: true }, `start ${n + 1}: the status view`)
        issued.push(ids)
      } finally {
        t.equal(await server.stop(), 0, `start ${n + 1}: exits 0`)
      }
    }
    const [first, second] = issued as [string[], string[]]
    t.not(workerOf(first[0] as string), workerOf(second[0] as string), 'the restart did not reuse the worker id')
    t.equal(new Set([...first, ...second]).size, first.length + second.length, 'no ID of the second life repeats one of the first')
    t.same((await s.rows()).map((r) => r.id), [4000, 4001, 4002], 'the seeded row and one per start')
  })
}
