import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t, { type Test } from 'tap'
import { parseJdbcUrl, type StoreConfig } from '../../src/config/jdbc-url.js'
import { describeStore } from '../../src/database/describe-store.js'
import { MYSQL_WORKER_NODE_DDL, PG_WORKER_NODE_DDL, acquireDisposableWorkerId, type DisposableWorkerIdOptions } from '../../src/snowflake/worker-id/disposable/disposable-source.js'
import { tempDir } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { createTestPgDatabase } from '../helpers/postgres.js'
import { withSqlite } from '../helpers/sqlite.js'
import { LeaseRefused } from '../../src/errors.js'

// The disposable worker-id source (Baidu UidGenerator's WORKER_NODE) against the real stores:
// MariaDB, PostgreSQL and a SQLite file.

interface NodeRow { id: number, hostName: string, port: string, type: number, launchDate: string, stamped: boolean }

/** The WORKER_NODE table of one test, read and written behind the source's back. */
interface NodeDb {
  store: StoreConfig
  tableExists (): Promise<boolean>
  /** The table's DDL as the store reports it. */
  ddl (): Promise<string>
  rows (): Promise<NodeRow[]>
  exec (sql: string): Promise<void>
}

// stamped: MODIFIED and CREATED are the insert's NOW().
const SELECT_MYSQL = "SELECT ID, HOST_NAME, PORT, TYPE, DATE_FORMAT(LAUNCH_DATE, '%Y-%m-%d') AS LAUNCH_DATE, " +
  'MODIFIED = CREATED AND ABS(TIMESTAMPDIFF(SECOND, CREATED, NOW())) < 60 AS stamped FROM WORKER_NODE ORDER BY ID'
const SELECT_PG = 'SELECT ID AS "ID", HOST_NAME AS "HOST_NAME", PORT AS "PORT", TYPE AS "TYPE", to_char(LAUNCH_DATE, \'YYYY-MM-DD\') AS "LAUNCH_DATE", ' +
  "MODIFIED = CREATED AND abs(EXTRACT(EPOCH FROM (CREATED - (now() AT TIME ZONE 'UTC')))) < 60 AS stamped FROM WORKER_NODE ORDER BY ID"
const SELECT_SQLITE = 'SELECT ID, HOST_NAME, PORT, TYPE, LAUNCH_DATE, ' +
  "MODIFIED = CREATED AND ABS(strftime('%s', CREATED) - strftime('%s', 'now')) < 60 AS stamped FROM WORKER_NODE ORDER BY ID"

function toRow (r: Record<string, unknown>): NodeRow {
  return { id: Number(r.ID), hostName: String(r.HOST_NAME), port: String(r.PORT), type: Number(r.TYPE), launchDate: String(r.LAUNCH_DATE), stamped: Number(r.stamped) === 1 }
}

async function nodeDb (t: Test, kind: 'mysql' | 'postgres' | 'sqlite'): Promise<NodeDb> {
  if (kind === 'postgres') {
    const db = await createTestPgDatabase()
    t.teardown(() => db.drop())
    return {
      store: parseJdbcUrl(db.url, '', ''),
      async tableExists () {
        return (await db.query("SELECT 1 FROM pg_tables WHERE tablename = 'worker_node'")).length === 1
      },
      async ddl () {
        const [id] = await db.query("SELECT is_identity, identity_generation FROM information_schema.columns WHERE table_name = 'worker_node' AND column_name = 'id'")
        return `ID identity ${String(id?.is_identity)} ${String(id?.identity_generation)}`
      },
      async rows () {
        return (await db.query(SELECT_PG)).map(toRow)
      },
      async exec (sql) {
        await db.query(sql)
      },
    }
  }
  if (kind === 'mysql') {
    const db = await createTestDatabase()
    t.teardown(() => db.drop())
    return {
      store: parseJdbcUrl(db.url, '', ''),
      async tableExists () {
        return (await db.query<unknown[]>("SHOW TABLES LIKE 'WORKER_NODE'")).length === 1
      },
      async ddl () {
        return String((await db.query<Record<string, unknown>[]>('SHOW CREATE TABLE WORKER_NODE'))[0]?.['Create Table'])
      },
      async rows () {
        return (await db.query<Record<string, unknown>[]>(SELECT_MYSQL)).map(toRow)
      },
      async exec (sql) {
        await db.query(sql)
      },
    }
  }
  const path = join(tempDir('leaf-worker-node-'), 'leaf.db')
  const open = <T>(fn: (db: Database.Database) => T): T => withSqlite(path, fn)
  return {
    store: { kind, path },
    async tableExists () {
      return existsSync(path) && open((db) => db.prepare("SELECT name FROM sqlite_master WHERE name = 'WORKER_NODE'").all().length === 1)
    },
    async ddl () {
      return String(open((db) => db.prepare("SELECT sql FROM sqlite_master WHERE name = 'WORKER_NODE'").pluck().get()))
    },
    async rows () {
      return open((db) => db.prepare(SELECT_SQLITE).all() as Record<string, unknown>[]).map(toRow)
    },
    async exec (sql) {
      open((db) => db.exec(sql))
    },
  }
}

function acquire (db: NodeDb, o: Partial<DisposableWorkerIdOptions> = {}) {
  return acquireDisposableWorkerId({
    store: db.store, hostName: '10.1.2.3', port: '8080', type: 1, min: 0, max: 1023, connectTimeoutMs: 2000, queryTimeoutMs: 2000, logger: silentLogger, ...o,
  })
}

/** Today in UTC, the stores' date for LAUNCH_DATE. */
function today (): string {
  return new Date().toISOString().slice(0, 10)
}

t.test('sql/worker_node.sql is the DDL the MySQL source runs, sql/worker_node.postgres.sql the PostgreSQL one', async (t) => {
  const shipped = readFileSync(new URL('../../sql/worker_node.sql', import.meta.url), 'utf8')
  t.ok(shipped.includes(`${MYSQL_WORKER_NODE_DDL};\n`), 'the same CREATE TABLE statement')
  const pg = readFileSync(new URL('../../sql/worker_node.postgres.sql', import.meta.url), 'utf8')
  t.ok(pg.includes(`${PG_WORKER_NODE_DDL};\n`), 'the same CREATE TABLE statement on PostgreSQL')
})

for (const kind of ['mysql', 'postgres', 'sqlite'] as const) {
  t.test(`disposable on ${kind}: the table is created when missing, and the lease holds its id until closed`, async (t) => {
    const db = await nodeDb(t, kind)
    t.notOk(await db.tableExists(), 'no WORKER_NODE before the first start')
    const lease = await acquire(db, { min: 0, max: 31 })
    t.ok(await db.tableExists(), 'created by the first start')
    t.match(await db.ddl(), kind === 'mysql' ? /COMMENT='DB WorkerID Assigner for UID Generator'/ : kind === 'postgres' ? /^ID identity YES BY DEFAULT$/ : /ID\s+INTEGER\s+PRIMARY KEY AUTOINCREMENT/)
    t.equal(lease.workerId, 1, 'the first row\'s ID')
    t.equal(lease.notBefore, 0)
    t.equal(lease.issuableUntil, Infinity, 'issuable for good: the id is never handed out again')
    t.doesNotThrow(() => lease.extend(Date.now()))
    t.same(lease.status(), {
      source: 'disposable',
      workerId: 1,
      zookeeperConnected: false,
      unavailable: undefined,
      lastHeartbeat: undefined,
      foreverPath: undefined,
      temporaryPath: undefined,
      cacheFile: '',
      pool: `${describeStore(db.store)} WORKER_NODE`,
      range: [0, 31],
    })
    await lease.close()
    t.equal(lease.issuableUntil, -Infinity, 'nothing issued after close')
    t.equal(lease.status().unavailable, 'the lease is closed')
  })

  t.test(`disposable on ${kind}: 100 starts in a row take 100 new ids, each one row`, async (t) => {
    const db = await nodeDb(t, kind)
    const first = today()
    const ids: number[] = []
    for (let i = 0; i < 100; i++) {
      const lease = await acquire(db, { hostName: `host-${i}`, port: `1700000000000-${i}`, type: i % 2 === 0 ? 2 : 1 })
      ids.push(lease.workerId)
      await lease.close()
    }
    const last = today()
    t.equal(new Set(ids).size, 100, '100 distinct worker ids')
    t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as number)), `strictly increasing (${ids[0]}..${ids[99]})`)
    const rows = await db.rows()
    t.equal(rows.length, 100, 'one row per start')
    t.same(rows.map((r) => r.id), ids, 'each worker id is its row\'s ID')
    t.same(rows.map((r) => [r.hostName, r.port, r.type]), ids.map((_, i) => [`host-${i}`, `1700000000000-${i}`, i % 2 === 0 ? 2 : 1]), 'HOST_NAME, PORT and TYPE as given')
    t.ok(rows.every((r) => r.launchDate === first || r.launchDate === last), `LAUNCH_DATE today (${rows[0]?.launchDate})`)
    t.ok(rows.every((r) => r.stamped), 'MODIFIED and CREATED: the time of the insert')
  })

  t.test(`disposable on ${kind}: an id is not handed out again when its row is deleted`, async (t) => {
    const db = await nodeDb(t, kind)
    for (let i = 0; i < 3; i++) await (await acquire(db)).close()
    await db.exec('DELETE FROM WORKER_NODE WHERE ID = 3')
    const lease = await acquire(db)
    t.equal(lease.workerId, 4, 'not 3 again')
    await lease.close()
  })

  t.test(`disposable on ${kind}: past max the start is refused, and the spent row stays`, async (t) => {
    const db = await nodeDb(t, kind)
    t.equal((await acquire(db, { max: 2 })).workerId, 1)
    t.equal((await acquire(db, { max: 2 })).workerId, 2)
    const err = await acquire(db, { max: 2 }).then(() => undefined, (e: unknown) => e)
    t.type(err, LeaseRefused)
    t.equal((err as LeaseRefused).code, 'LEASE_ID_OUT_OF_RANGE')
    t.match((err as Error).message, /worker id 3 exceeds the max 2 of the range \[0, 2\].*a new WORKER_NODE table or give the worker id more bits/)
    t.equal((await db.rows()).length, 3, 'the third row was inserted, as UidGenerator does')
  })

  t.test(`disposable on ${kind}: below min the start is refused`, async (t) => {
    const db = await nodeDb(t, kind)
    const err = await acquire(db, { min: 5, max: 9 }).then(() => undefined, (e: unknown) => e)
    t.type(err, LeaseRefused)
    t.equal((err as LeaseRefused).code, 'LEASE_ID_OUT_OF_RANGE')
    t.match((err as Error).message, /worker id 1 is below the range \[5, 9\]/)
  })
}

t.test('disposable with borrowed time: a start waits out how far an earlier one may have borrowed (UidGenerator #85)', async (t) => {
  const db = await nodeDb(t, 'sqlite')
  const clock = () => 1_800_000_000_000
  const first = await acquire(db, { borrowAheadMs: 0, clock })
  t.equal(first.notBefore, 0, 'without borrowing, nothing to wait for: the new id is higher')
  const second = await acquire(db, { borrowAheadMs: 250, clock })
  t.equal(second.workerId, first.workerId + 1)
  t.equal(second.notBefore, 1_800_000_000_000 + 250 + 1, 'past the clock by the borrow bound')
})

t.test('disposable: a store that cannot take the row refuses the start in one line', async (t) => {
  const file = join(tempDir('leaf-disposable-bad-'), 'not-a-folder')
  writeFileSync(file, '')
  const err = await acquireDisposableWorkerId({
    store: { kind: 'sqlite', path: join(file, 'leaf.db') }, hostName: '10.1.2.3', port: '8080', type: 2, min: 0, max: 1023, connectTimeoutMs: 2000, queryTimeoutMs: 2000, logger: silentLogger,
  }).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused, `a LeaseRefused (${String(err)})`)
  t.equal((err as LeaseRefused).code, 'LEASE_STORE_UNAVAILABLE')
  t.match((err as Error).message, /WORKER_NODE: no WORKER_NODE row could be inserted, so no worker id is taken \(unable to open database file\)$/, 'the driver\'s cause (a path through a file: no folder is made for a path that is not the embedded default)')
})

t.test('disposable on mysql: an existing UidGenerator table keeps working', async (t) => {
  const db = await nodeDb(t, 'mysql')
  await db.exec(readFileSync(new URL('../../sql/worker_node.sql', import.meta.url), 'utf8'))
  await db.exec('INSERT INTO WORKER_NODE (ID, HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES ' +
    "(1, '10.0.0.7', '1546300800000-12345', 2, '2019-01-01', NOW(), NOW()), " +
    "(2, 'uid-0', '8080', 1, '2019-01-02', NOW(), NOW()), " +
    "(41, '10.0.0.8', '1546300900000-678', 2, '2019-02-01', NOW(), NOW())")
  const lease = await acquire(db, { hostName: '10.0.0.9', port: '1700000000000-1', type: 2 })
  t.equal(lease.workerId, 42, 'the next ID after UidGenerator\'s own rows')
  const rows = await db.rows()
  t.same(rows.map((r) => r.id), [1, 2, 41, 42], 'its rows untouched, ours added')
  t.match(rows[3], { hostName: '10.0.0.9', port: '1700000000000-1', type: 2 })
  await lease.close()
})
