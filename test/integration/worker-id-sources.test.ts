import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import t, { type Test } from 'tap'
import { ConfigError, loadConfig } from '../../src/config/load-config.js'
import { WORKER_ID_SOURCES } from '../../src/config/keys.js'
import { createMysqlRunner } from '../../src/database/mysql-hosts.js'
import { CACHE_FILE } from '../../src/snowflake/worker-id/cache-file.js'
import { MYSQL_LEASE_DDL, PG_LEASE_DDL, createDbLeaseStore } from '../../src/snowflake/worker-id/db-lease/db-lease-store.js'
import type { LeaseStore } from '../../src/snowflake/worker-id/lease-store.js'
import { RecyclableLease } from '../../src/snowflake/worker-id/recyclable/recyclable-lease.js'
import type { ClaimResult } from '../../src/snowflake/worker-id/recyclable/recyclable-lease-options.js'
import { acquireWorkerId, workerIdSource } from '../../src/snowflake/worker-id/create-source.js'
import type { WorkerLease } from '../../src/snowflake/worker-id/worker-id-source.js'
import { ordinalOf } from '../../src/snowflake/worker-id/static/static-source.js'
import { createZookeeperLeaseStore } from '../../src/snowflake/worker-id/zookeeper-lease/zookeeper-lease-store.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { TEST_MYSQL, createTestDatabase } from '../helpers/mysql.js'
import { createTestPgDatabase, TEST_PG } from '../helpers/postgres.js'
import { TEST_ZK, inspector, uniqueName, zookeeperProxy } from '../helpers/zookeeper.js'
import { leafLayout } from '../../src/layout/layout.js'
import { resolveSnowflakeSettings, type ResolvedConfig } from '../../src/config/resolve-config.js'
import { withSqlite } from '../helpers/sqlite.js'
import { LeaseRefused } from '../../src/errors.js'
import { sleep, until } from '../helpers/time.js'
import { channels } from '../../src/channels.js'
import { listen } from '../helpers/channels.js'

const mysqlServer = new URL(TEST_MYSQL)
const pgServer = new URL(TEST_PG)

const LEAF = leafLayout(1288834974657)

// The worker-id sources against the real stores: db-lease on MariaDB, PostgreSQL and on a SQLite file,
// zookeeper-lease on ZooKeeper, and the configured sources (static, statefulset, zookeeper)
// with the [min, max] range. The protocol's own rules are unit-tested in recyclable-lease.test.ts.

/** The config of one instance, as the server would load it. */
function sourceConfig (values: Record<string, string | number | boolean>): ResolvedConfig {
  return testConfig({
    'leaf.snowflake.enable': true,
    'leaf.snowflake.cache.dir': tempDir('leaf-cache-'),
    'leaf.snowflake.ip': '10.1.2.3',
    'leaf.snowflake.port': 8080,
    ...values,
  })
}

/** A worker id from the configured source, closed when `t` ends; claim results go to `claims`. */
async function acquire (t: Test, config: ResolvedConfig, claims: ClaimResult[] = []): Promise<WorkerLease> {
  const address = `${config.snowflake.ip}:${config.snowflake.port}`
  listen(t, channels.leaseClaim, (m) => { if (m.address === address) claims.push(m.result) })
  const lease = await acquireWorkerId(config, silentLogger, { clock: Date.now })
  t.teardown(() => lease.close())
  return lease
}

function recyclable (lease: WorkerLease): RecyclableLease {
  if (!(lease instanceof RecyclableLease)) throw new Error(`a ${lease.status().source} lease, not a recyclable one`)
  return lease
}

interface LeaseRow {
  pool: string
  workerId: number
  owner: string | null
  address: string | null
  issuedUntil: number
  releasedUntil: number | null
  generation: number
  expiresAt: number
  expiresIn: number
}

/** The db-lease table of one test, read behind the pool's back. */
type LeaseKind = 'mysql' | 'postgres' | 'sqlite'
const LEASE_KINDS = ['mysql', 'postgres', 'sqlite'] as const

interface LeaseDb {
  kind: LeaseKind
  url: string
  /** A statement behind the pool's back. */
  exec (sql: string, values?: unknown[]): Promise<void>
  tableExists (): Promise<boolean>
  rows (): Promise<LeaseRow[]>
}

async function leaseDb (t: Test, kind: LeaseKind): Promise<LeaseDb> {
  if (kind === 'postgres') {
    const db = await createTestPgDatabase()
    t.teardown(() => db.drop())
    return {
      kind,
      url: db.jdbc.url.replace('jdbc:postgresql://', `postgres://${db.jdbc.username}:${db.jdbc.password}@`),
      async tableExists () {
        return (await db.query("SELECT 1 FROM pg_tables WHERE tablename = 'leaf_worker_lease'")).length === 1
      },
      async exec (sql, values) {
        await db.query(sql, values)
      },
      async rows () {
        const rows = await db.query<Record<string, unknown>>(
          'SELECT pool, worker_id, owner, address, issued_until, released_until, generation, round(EXTRACT(EPOCH FROM expires_at) * 1000) AS expires_at, ' +
          'trunc(EXTRACT(EPOCH FROM (expires_at - statement_timestamp())) * 1000) AS expires_in FROM leaf_worker_lease WHERE worker_id >= 0 ORDER BY pool, worker_id')
        return rows.map(toRow)
      },
    }
  }
  if (kind === 'mysql') {
    const db = await createTestDatabase()
    t.teardown(() => db.drop())
    // The pool's sessions are in UTC: read the DATETIMEs in the same zone.
    await db.query("SET time_zone = '+00:00'")
    return {
      kind,
      url: db.url,
      async tableExists () {
        return (await db.query<unknown[]>("SHOW TABLES LIKE 'leaf_worker_lease'")).length === 1
      },
      async exec (sql, values) {
        await db.query(sql, values)
      },
      async rows () {
        const rows = await db.query<Record<string, unknown>[]>(
          'SELECT pool, worker_id, owner, address, issued_until, released_until, generation, ROUND(UNIX_TIMESTAMP(expires_at) * 1000) AS expires_at, ' +
          'TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 AS expires_in FROM leaf_worker_lease WHERE worker_id >= 0 ORDER BY pool, worker_id')
        return rows.map(toRow)
      },
    }
  }
  const path = join(tempDir('leaf-lease-db-'), 'leaf.db')
  const read = <T>(fn: (db: Database.Database) => T): T => withSqlite(path, fn, { readonly: true, fileMustExist: true })
  return {
    kind,
    url: `sqlite:${path}`,
    async exec (sql, values = []) {
      withSqlite(path, (db) => { db.prepare(sql).run(...values) })
    },
    async tableExists () {
      return existsSync(path) && read((db) => db.prepare("SELECT name FROM sqlite_master WHERE name = 'leaf_worker_lease'").all().length === 1)
    },
    async rows () {
      return read((db) => db.prepare(
        "SELECT pool, worker_id, owner, address, issued_until, released_until, generation, expires_at, expires_at - CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS expires_in " +
        'FROM leaf_worker_lease WHERE worker_id >= 0 ORDER BY pool, worker_id').all() as Record<string, unknown>[]).map(toRow)
    },
  }
}

// leaf_worker_lease as versions before the lease generations made it.
const OLD_MYSQL_DDL = `CREATE TABLE leaf_worker_lease (
  pool varchar(128) NOT NULL, worker_id int(11) NOT NULL, owner varchar(64) DEFAULT NULL, address varchar(255) DEFAULT NULL,
  expires_at datetime(3) NOT NULL, issued_until bigint(20) NOT NULL DEFAULT '0',
  update_time timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3), PRIMARY KEY (pool, worker_id)) ENGINE=InnoDB`
const OLD_SQLITE_DDL = `CREATE TABLE leaf_worker_lease (pool VARCHAR(128) NOT NULL, worker_id INTEGER NOT NULL, owner VARCHAR(64) DEFAULT NULL,
  address VARCHAR(255) DEFAULT NULL, expires_at INTEGER NOT NULL, issued_until INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pool, worker_id))`

function toRow (r: Record<string, unknown>): LeaseRow {
  return {
    pool: String(r.pool),
    workerId: Number(r.worker_id),
    owner: r.owner === null ? null : String(r.owner),
    address: r.address === null ? null : String(r.address),
    issuedUntil: Number(r.issued_until),
    releasedUntil: r.released_until === null ? null : Number(r.released_until),
    generation: Number(r.generation),
    expiresAt: Number(r.expires_at),
    expiresIn: Number(r.expires_in),
  }
}

function dbLeaseConfig (db: LeaseDb, name: string, values: Record<string, string | number | boolean> = {}): ResolvedConfig {
  return sourceConfig({
    'leaf.name': name,
    'leaf.snowflake.worker-id.source': 'db-lease',
    'leaf.jdbc.url': db.url,
    'leaf.snowflake.lease.ttl-ms': 3000,
    'leaf.snowflake.heartbeat-interval-ms': 1000,
    ...values,
  })
}

t.test('sql/leaf_worker_lease.sql is the DDL the MySQL pool runs, sql/leaf_worker_lease.postgres.sql the PostgreSQL one', async (t) => {
  const shipped = readFileSync(new URL('../../sql/leaf_worker_lease.sql', import.meta.url), 'utf8')
  t.ok(shipped.includes(`${MYSQL_LEASE_DDL};\n`), 'the same CREATE TABLE statement')
  const pg = readFileSync(new URL('../../sql/leaf_worker_lease.postgres.sql', import.meta.url), 'utf8')
  t.ok(pg.includes(`${PG_LEASE_DDL};\n`), 'the same CREATE TABLE statement on PostgreSQL')
})

t.test('mysql2 counts matched rows in affectedRows: an UPDATE that changes nothing still reports 1', async (t) => {
  // The renewal decides "still ours" from affectedRows === 1. Without CLIENT_FOUND_ROWS (mysql2
  // sets it by default) a renewal that wrote the same values would read as a lost lease.
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  const url = new URL(TEST_MYSQL)
  const { run, close } = createMysqlRunner({ hosts: [{ host: url.hostname, port: Number(url.port) }], user: url.username, password: url.password, database: db.name, connectTimeoutMs: 2000, queryTimeoutMs: 2000, poolSize: 1 })
  t.teardown(close)
  await run('CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)')
  await run('INSERT INTO t VALUES (1, 5)')
  const same = await run<{ affectedRows: number, changedRows: number }>('UPDATE t SET v = ? WHERE id = ?', [5, 1])
  t.equal(same.changedRows, 0, 'nothing changed')
  t.equal(same.affectedRows, 1, 'but the row matched')
  const none = await run<{ affectedRows: number }>('UPDATE t SET v = ? WHERE id = ?', [5, 2])
  t.equal(none.affectedRows, 0, 'no row: 0')
})

for (const kind of LEASE_KINDS) {
  t.test(`db-lease on ${kind}: the table is created, and the claim, a renewal and the release are its rows`, async (t) => {
    const db = await leaseDb(t, kind)
    t.notOk(await db.tableExists(), 'no lease table before the first start')
    const name = uniqueName()
    const claims: ClaimResult[] = []
    const before = Date.now()
    const lease = recyclable(await acquire(t, dbLeaseConfig(db, name, { 'leaf.snowflake.worker-id.min': 3, 'leaf.snowflake.worker-id.max': 4 }), claims))
    t.ok(await db.tableExists(), 'created by the first start')
    t.equal(lease.workerId, 3, 'the lowest id of the range')
    t.same(claims, ['claimed'])
    const [row] = await db.rows()
    t.match(row, { pool: name, workerId: 3, owner: /^[0-9a-f-]{36}\.1$/, address: '10.1.2.3:8080', generation: 2 }, 'the claim\'s own token; claimed and renewed once')
    t.ok(row !== undefined && row.expiresIn > 2000 && row.expiresIn <= 3000, `leased for one TTL by the store's clock (${row?.expiresIn} ms left)`)
    // issuedUntil: the clock at the renewal plus the window (TTL 3000 - margin 300).
    t.ok(row !== undefined && row.issuedUntil >= before + 2700 && row.issuedUntil <= Date.now() + 2700, 'issued_until one window ahead')
    t.equal(lease.issuableUntil, row?.issuedUntil, 'issuable up to what the store confirmed')
    t.match(lease.status(), {
      source: 'db-lease', workerId: 3, range: [3, 4], unavailable: undefined, issuedUntil: row?.issuedUntil, pool: `${kind === 'mysql' ? `mysql://${decodeURIComponent(mysqlServer.username)}@${mysqlServer.hostname}:${mysqlServer.port || 3306}/` : kind === 'postgres' ? `postgres://${decodeURIComponent(pgServer.username)}@${pgServer.hostname}:${pgServer.port || 5432}/` : 'sqlite:'}`,
    })
    t.match(lease.status().pool, new RegExp(`leaf_worker_lease \\(pool ${name}\\)$`))
    t.equal(JSON.parse(JSON.stringify(lease.status())).pool.includes(`:${decodeURIComponent(kind === 'postgres' ? pgServer.password : mysqlServer.password)}@`), false, 'no password in the status')

    await sleep(300)
    await lease.heartbeat()
    const [renewed] = await db.rows()
    t.equal(renewed?.owner, row?.owner, 'still ours')
    t.ok((renewed?.expiresAt ?? 0) >= (row?.expiresAt ?? 0) + 250, 'the expiry moved on')
    t.ok((renewed?.issuedUntil ?? 0) >= (row?.issuedUntil ?? 0) + 250, 'issued_until raised')
    t.equal(renewed?.generation, 3, 'each renewal counts')
    t.equal(lease.issuableUntil, renewed?.issuedUntil)

    const reached = Date.now() + 200
    lease.check(reached)
    await lease.close()
    const [released] = await db.rows()
    t.match(released, { workerId: 3, owner: null, releasedUntil: reached, issuedUntil: renewed?.issuedUntil }, 'released with the millisecond reached; issued_until never lowered')
    t.ok((released?.expiresIn ?? 1) <= 0)
  })

  t.test(`db-lease on ${kind}: a 1-id pool: the second instance waits for the first's release, then for a dead claim's expiry`, async (t) => {
    const db = await leaseDb(t, kind)
    const name = uniqueName()
    const only = { 'leaf.snowflake.worker-id.min': 0, 'leaf.snowflake.worker-id.max': 0 }
    const first = recyclable(await acquire(t, dbLeaseConfig(db, name, { ...only, 'leaf.snowflake.lease.ttl-ms': 1500, 'leaf.snowflake.heartbeat-interval-ms': 500 })))
    const reached = Date.now() + 300
    first.check(reached)
    // A longer TTL: the second waits up to 6 s for the first's lease of 1.5 s.
    const patient = dbLeaseConfig(db, name, { ...only, 'leaf.snowflake.lease.ttl-ms': 6000, 'leaf.snowflake.heartbeat-interval-ms': 2000 })
    let settled = false
    const started = Date.now()
    const pending = acquire(t, patient).finally(() => { settled = true })
    await sleep(400)
    t.notOk(settled, 'the second waits while the first holds the only id')
    await first.close()
    const firstReleased = (await db.rows())[0]?.releasedUntil ?? 0
    t.ok(firstReleased >= reached, 'the first released with the millisecond it reached (its clock had passed the admitted one)')
    const second = recyclable(await pending)
    t.ok(Date.now() - started < 6000, `leased ${Date.now() - started} ms after asking`)
    t.equal(second.workerId, 0)
    t.equal(second.notBefore, firstReleased + 1, 'nothing at or before the first\'s last millisecond')
    t.ok(Date.now() > firstReleased)
    await second.close()
    const released = (await db.rows())[0]?.releasedUntil ?? 0
    const bound = (await db.rows())[0]?.issuedUntil ?? 0

    // A claim that never renews nor releases (its process died right after): it is taken over once
    // the database says it expired and the claimant has seen its row unchanged for its own TTL.
    const pool = await createDbLeaseStore({ store: patient.segment.store, pool: name, ttlMs: 1500, connectTimeoutMs: 2000, queryTimeoutMs: 2000, layout: LEAF })
    t.teardown(() => pool.close())
    t.ok(await pool.claim(0, 'dead-claim', '10.9.9.9:1'), 'the dead claim took the id')
    const at = Date.now()
    const third = await acquire(t, patient)
    t.ok(Date.now() - at >= 6000, `watched the dead claim for the claimant's TTL of 6 s (${Date.now() - at} ms)`)
    t.equal(third.workerId, 0)
    // Taken from a holder that never released: the recorded bound counts (it covers the last release too).
    t.equal(third.notBefore, bound + 1, 'nothing at or before the bound the renewals recorded')
    t.ok(bound >= released)
  })
}

for (const kind of LEASE_KINDS) {
  t.test(`db-lease on ${kind}: statements of an earlier claim, landing late, never touch a later one; issued_until only rises`, async (t) => {
    const db = await leaseDb(t, kind)
    const store = dbLeaseConfig(db, 'x').segment.store
    const name = uniqueName()
    const pool = await createDbLeaseStore({ store, pool: name, ttlMs: 300, connectTimeoutMs: 2000, queryTimeoutMs: 2000, layout: LEAF })
    t.teardown(() => pool.close())
    t.same(await pool.claim(0, 'c1', 'a:1'), { issuedUntil: 0 }, 'a never-leased id: nothing to wait for')
    t.ok(await pool.renew(0, 'c1', 5000))
    // c1 stops renewing. Its lease runs out by NOW(3); a claim that does not name the holder it watched loses.
    await sleep(400)
    const [slot] = await pool.list(0, 0)
    t.match(slot, { state: 'expired', ttlMs: 300 })
    t.equal(await pool.claim(0, 'c2', 'a:2'), undefined, 'an expired holder is not taken over blind')
    t.ok(await pool.renew(0, 'c1', 5000), 'c1 renews after all (it was alive): the version changed')
    await sleep(400)
    t.equal(await pool.claim(0, 'c2', 'a:2', slot?.version), undefined, 'a version seen before that renewal loses')
    const [now] = await pool.list(0, 0)
    t.same(await pool.claim(0, 'c2', 'a:2', now?.version), { issuedUntil: 5000 }, 'the current version wins, and waits for the recorded bound')
    // c1's statements arrive late: none may touch c2's claim.
    t.equal(await pool.renew(0, 'c1', 9000), false, 'a late renewal of c1')
    await pool.release(0, 'c1', 100, 'c1')
    const [row] = await db.rows()
    t.match(row, { owner: 'c2', issuedUntil: 5000 }, 'a late release of c1 neither freed nor lowered anything')
    // c2 renews, then releases at the millisecond it reached: the bound stays, the release is read.
    t.ok(await pool.renew(0, 'c2', 8000))
    await pool.release(0, 'c2', 6000, 'c2')
    t.match((await db.rows())[0], { owner: null, issuedUntil: 8000, releasedUntil: 6000 })
    t.same(await pool.claim(0, 'c3', 'a:3'), { issuedUntil: 6000 }, 'a clean release: the next holder waits for what c2 reached')
    // The same release of c2, delivered once more, after c3's claim: nothing changes.
    await pool.release(0, 'c2', 1, 'c2')
    t.match((await db.rows())[0], { owner: 'c3', issuedUntil: 8000 })
    await pool.release(0, 'c3', 7000, 'c3')
    // A write by an earlier version of Leaf-TS after that release (it sets expires_at on every
    // statement): the release is no longer the row's last word, and the recorded bound counts.
    if (kind === 'mysql') {
      await db.exec("UPDATE leaf_worker_lease SET owner = 'old', expires_at = NOW(3) WHERE pool = ? AND worker_id = 0", [name])
      await db.exec('UPDATE leaf_worker_lease SET owner = NULL, issued_until = 7500, expires_at = NOW(3) + INTERVAL 1 MICROSECOND WHERE pool = ? AND worker_id = 0', [name])
    } else if (kind === 'postgres') {
      await db.exec("UPDATE leaf_worker_lease SET owner = 'old', expires_at = statement_timestamp() WHERE pool = $1 AND worker_id = 0", [name])
      await db.exec("UPDATE leaf_worker_lease SET owner = NULL, issued_until = 7500, expires_at = statement_timestamp() + interval '1 millisecond' WHERE pool = $1 AND worker_id = 0", [name])
    } else {
      await db.exec('UPDATE leaf_worker_lease SET owner = NULL, issued_until = 8500, expires_at = expires_at + 1 WHERE pool = ? AND worker_id = 0', [name])
    }
    const expected = kind === 'sqlite' ? 8500 : 7500
    t.same(await pool.claim(0, 'c4', 'a:4'), { issuedUntil: expected }, 'touched since the release: the recorded issued_until')
  })

  // (PostgreSQL's table has had every column from its first version.)
  if (kind === 'postgres') continue
  t.test(`db-lease on ${kind}: a table of an earlier version gets the new columns, and its rows are kept`, async (t) => {
    const db = await leaseDb(t, kind)
    const store = dbLeaseConfig(db, 'x').segment.store
    const name = uniqueName()
    await db.exec(kind === 'mysql' ? OLD_MYSQL_DDL : OLD_SQLITE_DDL)
    await db.exec(kind === 'mysql'
      ? "INSERT INTO leaf_worker_lease (pool, worker_id, owner, address, expires_at, issued_until) VALUES (?, 0, 'old-holder', 'a:1', NOW(3) + INTERVAL 60 SECOND, 4242)"
      : "INSERT INTO leaf_worker_lease (pool, worker_id, owner, address, expires_at, issued_until) VALUES (?, 0, 'old-holder', 'a:1', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 60000, 4242)", [name])
    const pool = await createDbLeaseStore({ store, pool: name, ttlMs: 3000, connectTimeoutMs: 2000, queryTimeoutMs: 2000, layout: LEAF })
    t.teardown(() => pool.close())
    t.match((await db.rows())[0], { owner: 'old-holder', issuedUntil: 4242, generation: 0, releasedUntil: null })
    t.match(await pool.list(0, 1), [{ workerId: 0, state: 'held' }])
    t.same(await pool.claim(1, 'new', 'a:2'), { issuedUntil: 0 })
  })
}

/** Eight claimants of one id at once, each with its own connection: exactly one wins. */
async function raceOneId (t: Test, pools: LeaseStore[]): Promise<void> {
  t.teardown(() => Promise.all(pools.map((p) => p.close())))
  for (let round = 0; round < 3; round++) {
    const results = await Promise.all(pools.map((p, i) => p.claim(round, `owner-${i}`, `10.0.0.${i}:1`)))
    const winners = results.flatMap((r, i) => r === undefined ? [] : [i])
    t.equal(winners.length, 1, `id ${round}: one winner of ${pools.length}`)
    const slots = await (pools[0] as LeaseStore).list(round, round)
    t.match(slots, [{ workerId: round, state: 'held' }], `id ${round}: held`)
    const loser = pools.findIndex((_, i) => i !== winners[0])
    t.equal(await (pools[loser] as LeaseStore).renew(round, `owner-${loser}`, 1), false, 'a loser cannot renew it')
    t.equal(await (pools[winners[0] as number] as LeaseStore).renew(round, `owner-${winners[0]}`, 1), true, 'the winner can')
  }
}

for (const kind of LEASE_KINDS) {
  t.test(`racing claims on ${kind}: one conditional write decides`, async (t) => {
    const db = await leaseDb(t, kind)
    const store = dbLeaseConfig(db, 'x').segment.store
    const name = uniqueName()
    // The first pool creates the table; the others open it.
    const pools = [await createDbLeaseStore({ store, pool: name, ttlMs: 10_000, connectTimeoutMs: 2000, queryTimeoutMs: 5000, layout: LEAF })]
    pools.push(...await Promise.all(Array.from({ length: 7 }, () => createDbLeaseStore({ store, pool: name, ttlMs: 10_000, connectTimeoutMs: 2000, queryTimeoutMs: 5000, layout: LEAF }))))
    await raceOneId(t, pools)
  })
}

t.test('racing claims on ZooKeeper: one create decides', async (t) => {
  const name = uniqueName()
  const pools = await Promise.all(Array.from({ length: 8 }, () => createZookeeperLeaseStore({ address: TEST_ZK, name, ttlMs: 4000, connectTimeoutMs: 5000, logger: silentLogger, layout: LEAF })))
  await raceOneId(t, pools)
})

function zkLeaseConfig (name: string, values: Record<string, string | number | boolean> = {}): ResolvedConfig {
  return sourceConfig({
    'leaf.name': name,
    'leaf.snowflake.worker-id.source': 'zookeeper-lease',
    'leaf.snowflake.zk.address': TEST_ZK,
    'leaf.snowflake.zk.connect-timeout-ms': 5000,
    'leaf.snowflake.lease.ttl-ms': 3000,
    'leaf.snowflake.heartbeat-interval-ms': 1000,
    ...values,
  })
}

t.test('zookeeper-lease: the claim is an ephemeral holder node, each renewal writes issued/<id>, the release removes the holder', async (t) => {
  const name = uniqueName()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const base = `/snowflake/${name}/lease`
  const claims: ClaimResult[] = []
  const before = Date.now()
  const lease = recyclable(await acquire(t, zkLeaseConfig(name, { 'leaf.snowflake.worker-id.min': 7, 'leaf.snowflake.worker-id.max': 9 }), claims))
  t.equal(lease.workerId, 7)
  t.same(claims, ['claimed'])
  t.same(await zkc.children(`${base}/holders`), ['7'])
  const holder = await zkc.data(`${base}/holders/7`)
  t.match(holder, { owner: /^[0-9a-f-]{36}\.1$/ }, 'the first claim\'s token')
  const issued = await zkc.data(`${base}/issued/7`)
  t.match(issued, { by: holder.owner, released: false })
  t.ok((issued.issuedUntil as number) >= before + 2700 && (issued.issuedUntil as number) <= Date.now() + 2700, 'issuedUntil one window ahead')
  t.equal(lease.issuableUntil, issued.issuedUntil)
  t.match(lease.status(), { source: 'zookeeper-lease', zookeeperConnected: true, workerId: 7, range: [7, 9], pool: `zookeeper://${TEST_ZK}${base}`, unavailable: undefined })

  await sleep(200)
  await lease.heartbeat()
  const renewed = await zkc.data(`${base}/issued/7`)
  t.ok((renewed.issuedUntil as number) >= (issued.issuedUntil as number) + 150, 'issuedUntil raised')

  const reached = Date.now() + 300
  lease.check(reached)
  await lease.close()
  t.same(await zkc.children(`${base}/holders`), [], 'holder node removed')
  t.same(await zkc.data(`${base}/issued/7`), { issuedUntil: reached, by: holder.owner, released: true })

  // The next holder of 7 waits for that millisecond.
  const next = await acquire(t, zkLeaseConfig(name, { 'leaf.snowflake.worker-id.min': 7, 'leaf.snowflake.worker-id.max': 7 }))
  t.equal(next.workerId, 7)
  t.equal(next.notBefore, reached + 1, 'issuedUntil carried to the next holder')
  t.ok(Date.now() > reached)
})

t.test('zookeeper-lease: a holder whose session expires loses its id to the next claimant, which starts after its issuedUntil', async (t) => {
  const name = uniqueName()
  const proxy = await zookeeperProxy(t)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const base = `/snowflake/${name}/lease`
  const only = { 'leaf.snowflake.worker-id.min': 0, 'leaf.snowflake.worker-id.max': 0, 'leaf.snowflake.lease.ttl-ms': 2000, 'leaf.snowflake.heartbeat-interval-ms': 500 }
  const first = recyclable(await acquire(t, zkLeaseConfig(name, { ...only, 'leaf.snowflake.zk.address': `127.0.0.1:${proxy.port}` })))
  t.equal(first.workerId, 0)
  proxy.block()
  const cutAt = Date.now()
  t.ok(await until(async () => (await zkc.children(`${base}/holders`)).length === 0, 10_000), 'ZooKeeper expired the session: the holder node is gone')
  t.ok(Date.now() - cutAt >= 1500, `not before the session timeout (${Date.now() - cutAt} ms)`)
  t.throws(() => first.check(Date.now()), { code: 'WORKER_LEASE_LOST' }, 'the cut-off holder fenced itself before that')
  const recorded = (await zkc.data(`${base}/issued/0`)).issuedUntil as number

  const second = recyclable(await acquire(t, zkLeaseConfig(name, only)))
  t.equal(second.workerId, 0, 'the freed id')
  t.equal(second.notBefore, recorded + 1, 'after the last millisecond the first holder recorded')

  proxy.unblock()
  await sleep(2500) // the first reconnects with a new session and renews: the store says the id is not its own
  t.throws(() => first.check(Date.now()), { code: 'WORKER_LEASE_LOST' }, 'the first stays stopped: its id is taken and the range has no other')
  t.match(first.status().unavailable, /no longer leased|no renewal confirmed/)
  const holder = await zkc.data(`${base}/holders/0`)
  t.ok(second.status().unavailable === undefined && holder.owner !== undefined, 'the second keeps it')
})

t.test('zookeeper-lease: after its session expires with nobody else waiting, an instance claims its id again, waiting only for what it admitted', async (t) => {
  const name = uniqueName()
  const proxy = await zookeeperProxy(t)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const base = `/snowflake/${name}/lease`
  const claims: ClaimResult[] = []
  const lease = recyclable(await acquire(t, zkLeaseConfig(name, {
    'leaf.snowflake.zk.address': `127.0.0.1:${proxy.port}`, 'leaf.snowflake.lease.ttl-ms': 2000, 'leaf.snowflake.heartbeat-interval-ms': 500,
  }), claims))
  const changes: [number, number][] = []
  lease.whenWorkerChanges?.((id, notBefore) => changes.push([id, notBefore]))
  const admitted = Date.now()
  lease.check(admitted)
  proxy.block()
  t.ok(await until(async () => (await zkc.children(`${base}/holders`)).length === 0, 10_000), 'session expired')
  const recorded = (await zkc.data(`${base}/issued/0`)).issuedUntil as number
  t.ok(recorded > admitted, 'the record allows more than was admitted')
  proxy.unblock()
  t.ok(await until(() => lease.status().unavailable === undefined && changes.length > 0, 10_000), 'leased again')
  t.same(changes, [[0, admitted + 1]], 'the same id, from the millisecond after the last one it began')
  t.same(claims, ['claimed', 'reclaimed'])
  t.same(await zkc.children(`${base}/holders`), ['0'])
})

t.test('each of the six sources is one WorkerIdSource, picked by its key and built without touching its store', async (t) => {
  for (const kind of WORKER_ID_SOURCES) {
    // (disposable needs 16 worker bits at least: uid-generator has 22.)
    const config = sourceConfig({ 'leaf.snowflake.worker-id.source': kind, 'leaf.snowflake.zk.address': '127.0.0.1:1', ...(kind === 'disposable' ? { 'leaf.snowflake.layout': 'uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00' } : {}) })
    const source = workerIdSource(config, silentLogger, { clock: Date.now })
    t.equal(source.kind, kind, kind)
    t.equal(typeof source.acquire, 'function', `${kind}: acquire() claims`)
  }
})

t.test('statefulset: the ordinal at the end of the host name', async (t) => {
  t.equal(ordinalOf('leaf-3'), 3)
  t.equal(ordinalOf('leaf-ids-12'), 12)
  t.equal(ordinalOf('leaf'), undefined)
  t.equal(ordinalOf('leaf-3a'), undefined)
  t.equal(ordinalOf('leaf-12345'), undefined, 'at most 4 digits')

  const lease = await acquire(t, sourceConfig({ 'leaf.snowflake.worker-id.source': 'statefulset', 'leaf.snowflake.worker-id.hostname': 'leaf-3' }))
  t.equal(lease.workerId, 3)
  t.match(lease.status(), { source: 'statefulset', unavailable: undefined })

  const saved = process.env.HOSTNAME
  t.teardown(() => { process.env.HOSTNAME = saved })
  process.env.HOSTNAME = 'leaf-12'
  const fromEnv = await acquire(t, sourceConfig({ 'leaf.snowflake.worker-id.source': 'statefulset' }))
  t.equal(fromEnv.workerId, 12, 'HOSTNAME when the key is empty')

  await t.rejects(acquireWorkerId(sourceConfig({ 'leaf.snowflake.worker-id.source': 'statefulset', 'leaf.snowflake.worker-id.hostname': 'leaf' }), silentLogger, { clock: Date.now }),
    { name: 'LeaseRefused', code: 'LEASE_NO_IDENTITY', message: /"leaf" has none: set leaf\.snowflake\.worker-id\.hostname/ })
  const range = sourceConfig({ 'leaf.snowflake.worker-id.source': 'statefulset', 'leaf.snowflake.worker-id.hostname': 'leaf-7', 'leaf.snowflake.worker-id.max': 5 })
  await t.rejects(acquireWorkerId(range, silentLogger, { clock: Date.now }),
    { name: 'LeaseRefused', code: 'LEASE_ID_OUT_OF_RANGE', message: 'worker id 7 from the statefulset source is outside [0, 5] (leaf.snowflake.worker-id.min and leaf.snowflake.worker-id.max): another range, or another ID space, may use it' })
  t.notOk(existsSync(join(range.snowflake.cacheDir, CACHE_FILE)), 'refused before the cache is written')
})

t.test('static: an id outside [min, max] refuses the start, before the cache is written', async (t) => {
  const config = sourceConfig({ 'leaf.snowflake.worker-id.source': 'static', 'leaf.snowflake.worker.id': 9, 'leaf.snowflake.worker-id.min': 0, 'leaf.snowflake.worker-id.max': 5 })
  const err = await acquireWorkerId(config, silentLogger, { clock: Date.now }).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused)
  t.equal((err as LeaseRefused).code, 'LEASE_ID_OUT_OF_RANGE')
  t.match((err as Error).message, /worker id 9 from the static source is outside \[0, 5\]/)
  t.notOk(existsSync(join(config.snowflake.cacheDir, CACHE_FILE)))
  const below = sourceConfig({ 'leaf.snowflake.worker.id': 2, 'leaf.snowflake.worker-id.min': 3 })
  t.equal(below.snowflake.workerIdSource, 'static', 'static by default without ZooKeeper')
  await t.rejects(acquireWorkerId(below, silentLogger, { clock: Date.now }), { name: 'LeaseRefused', code: 'LEASE_ID_OUT_OF_RANGE', message: /worker id 2 from the static source is outside \[3, 1023\]/ })
  const inside = await acquire(t, sourceConfig({ 'leaf.snowflake.worker.id': 5, 'leaf.snowflake.worker-id.min': 5, 'leaf.snowflake.worker-id.max': 5 }))
  t.equal(inside.workerId, 5, 'the bounds are inclusive')
})

t.test('zookeeper: a sequence number outside [min, max] refuses the start and leaves no ephemeral node', async (t) => {
  const name = uniqueName()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const config = sourceConfig({ 'leaf.name': name, 'leaf.snowflake.zk.address': TEST_ZK, 'leaf.snowflake.worker-id.min': 1, 'leaf.snowflake.worker-id.max': 5 })
  t.equal(config.snowflake.workerIdSource, 'zookeeper', 'zookeeper by default with an address')
  await t.rejects(acquireWorkerId(config, silentLogger, { clock: Date.now }), { name: 'LeaseRefused', code: 'LEASE_ID_OUT_OF_RANGE', message: /worker id 0 from the zookeeper source is outside \[1, 5\]/ })
  t.same(await zkc.children(`/snowflake/${name}/temporary`), [], 'the lease was closed')
  t.same(await zkc.children(`/snowflake/${name}/forever`), ['10.1.2.3:8080-0000000000'])
})

t.test('rules between the worker-id keys stop the start, naming the key', async (t) => {
  const cwd = tempDir()
  // As server.ts: loaded (the source's own rules), then resolved against the layout (the range's).
  const load = (argv: string[]) => resolveSnowflakeSettings(loadConfig({ cwd, argv: ['--leaf.snowflake.worker.id=0', ...argv] }).config.snowflake)
  const cases: [string[], string, RegExp][] = [
    [['--leaf.snowflake.worker-id.min=10', '--leaf.snowflake.worker-id.max=5'], 'leaf.snowflake.worker-id.min', /^leaf\.snowflake\.worker-id\.min: 10 is above leaf\.snowflake\.worker-id\.max \(5\)/],
    [['--leaf.snowflake.worker-id.source=zookeeper-lease'], 'leaf.snowflake.worker-id.source', /zookeeper-lease needs leaf\.snowflake\.zk\.address/],
    [['--leaf.snowflake.worker-id.source=zookeeper'], 'leaf.snowflake.worker-id.source', /zookeeper needs leaf\.snowflake\.zk\.address/],
    [['--leaf.snowflake.worker-id.source=db-lease', '--leaf.snowflake.lease.ttl-ms=2999', '--leaf.snowflake.heartbeat-interval-ms=1000'],
      'leaf.snowflake.lease.ttl-ms', /2999 is less than 3 heartbeat intervals \(leaf\.snowflake\.heartbeat-interval-ms is 1000\)/],
    [['--leaf.snowflake.worker-id.source=zookeeper-lease', '--leaf.snowflake.zk.address=zk:2181', '--leaf.snowflake.lease.ttl-ms=5000'],
      'leaf.snowflake.lease.ttl-ms', /5000 is less than 3 heartbeat intervals \(leaf\.snowflake\.heartbeat-interval-ms is 3000\)/],
    [['--leaf.snowflake.worker-id.source=etcd'], 'leaf.snowflake.worker-id.source', /"etcd" is not one of zookeeper, static, zookeeper-lease, db-lease, statefulset/],
  ]
  for (const [argv, key, problem] of cases) {
    const err = t.throws(() => load(argv)) as ConfigError
    t.ok(err instanceof ConfigError, `${argv.join(' ')}: a ConfigError`)
    t.equal(err.key, key)
    t.match(err.message, problem)
  }
  const ok = load
  t.match(ok(['--leaf.snowflake.worker-id.source=db-lease', '--leaf.snowflake.lease.ttl-ms=3000', '--leaf.snowflake.heartbeat-interval-ms=1000']), { workerIdSource: 'db-lease', leaseTtlMs: 3000 }, 'exactly 3 heartbeats')
  t.match(ok(['--leaf.snowflake.worker-id.source=static', '--leaf.snowflake.lease.ttl-ms=300']), { workerIdSource: 'static' }, 'the TTL rule binds the lease sources only')
  t.match(ok(['--leaf.snowflake.worker-id.min=7', '--leaf.snowflake.worker-id.max=7']), { workerIdMin: 7, workerIdMax: 7 }, 'a range of one id')
})
