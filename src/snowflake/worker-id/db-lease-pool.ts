import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import type { RowDataPacket } from 'mysql2/promise'
import type { StoreConfig } from '../../config/jdbc-url.js'
import { createMysqlRunner } from '../../segment/stores/mysql-pool.js'
import { describeStore } from '../../segment/stores/create-store.js'
import type { Layout } from '../layout.js'
import { checkLayoutRecord } from './layout-record.js'
import { LeaseRefused } from './worker-lease.js'
import type { Claimed, LeasePool, PoolSlot } from './recyclable-lease.js'

// The db-lease pool: one row per (pool, worker id) in `leaf_worker_lease`, beside leaf_alloc.
// Every time is the database's (NOW(3), or the SQLite host's clock), never the claimant's.
// `owner` is the claim's random token (NULL: released); `issued_until` the last millisecond,
// by the holders' clocks, that any holder of the id may have issued.

export const LEASE_TABLE = 'leaf_worker_lease'

/** The MySQL DDL, as shipped in sql/leaf_worker_lease.sql (test/worker-id-sources.test.ts compares them). */
export const MYSQL_LEASE_DDL = `CREATE TABLE IF NOT EXISTS \`leaf_worker_lease\` (
  \`pool\` varchar(128) NOT NULL,
  \`worker_id\` int(11) NOT NULL,
  \`owner\` varchar(64) DEFAULT NULL,
  \`address\` varchar(255) DEFAULT NULL,
  \`expires_at\` datetime(3) NOT NULL,
  \`issued_until\` bigint(20) NOT NULL DEFAULT '0',
  \`update_time\` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (\`pool\`, \`worker_id\`)
) ENGINE=InnoDB`

const SQLITE_LEASE_DDL = `CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool         VARCHAR(128) NOT NULL,
  worker_id    INTEGER      NOT NULL,
  owner        VARCHAR(64)  DEFAULT NULL,
  address      VARCHAR(255) DEFAULT NULL,
  expires_at   INTEGER      NOT NULL,
  issued_until INTEGER      NOT NULL DEFAULT 0,
  PRIMARY KEY (pool, worker_id)
)`

const ER_NO_SUCH_TABLE = 1146

// One transaction per claim: the row is made (free) if it never was, taken when it is free,
// expired or already ours, and read back; the owner read back says who won.
const MYSQL_CLAIM =
  'START TRANSACTION; ' +
  'INSERT INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool; ' +
  'UPDATE leaf_worker_lease SET owner = ?, address = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND ' +
  'WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR owner = ? OR expires_at < NOW(3)); ' +
  'SELECT owner, issued_until FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?; COMMIT'
const MYSQL_RENEW =
  'UPDATE leaf_worker_lease SET expires_at = NOW(3) + INTERVAL ? MICROSECOND, issued_until = GREATEST(issued_until, ?) ' +
  'WHERE pool = ? AND worker_id = ? AND owner = ?'
const MYSQL_RELEASE =
  'UPDATE leaf_worker_lease SET owner = NULL, expires_at = NOW(3), issued_until = ? WHERE pool = ? AND worker_id = ? AND owner = ?'
const MYSQL_LIST =
  'SELECT worker_id, owner IS NULL AS free, TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 AS expires_in ' +
  'FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?'

export interface DbLeasePoolOptions {
  store: StoreConfig
  /** leaf.name: one table holds the pools of several services. */
  pool: string
  ttlMs: number
  connectTimeoutMs: number
  queryTimeoutMs: number
  /** Recorded by the pool's first instance; another layout refuses to start (layout-record.ts). */
  layout: Layout
}

// The row with worker id -1 records the pool's ID layout in `address` (no claim ever lists it).
const LAYOUT_ROW = -1

export async function createDbLeasePool (o: DbLeasePoolOptions): Promise<LeasePool> {
  return o.store.kind === 'sqlite' ? createSqliteLeasePool(o, o.store.path) : await createMysqlLeasePool(o)
}

function slotOf (workerId: number, free: boolean, expiresInMs: number): PoolSlot {
  return { workerId, state: free ? 'free' : expiresInMs >= 0 ? 'held' : 'expired', expiresInMs }
}

async function createMysqlLeasePool (o: DbLeasePoolOptions): Promise<LeasePool> {
  if (o.store.kind !== 'mysql') throw new Error('not a MySQL store')
  const { run, close } = createMysqlRunner({ ...o.store, connectTimeoutMs: o.connectTimeoutMs, queryTimeoutMs: o.queryTimeoutMs, poolSize: 2 })
  const where = `${describeStore(o.store)} ${LEASE_TABLE} (pool ${o.pool})`
  try {
    await run(`SELECT 1 FROM ${LEASE_TABLE} LIMIT 1`)
  } catch (err) {
    if ((err as { errno?: number }).errno !== ER_NO_SUCH_TABLE) {
      await close()
      throw err
    }
    try {
      await run(MYSQL_LEASE_DDL)
    } catch (ddlErr) {
      await close()
      throw new LeaseRefused(`${where}: the table does not exist and cannot be created (${(ddlErr as Error).message}): run sql/leaf_worker_lease.sql`)
    }
  }
  try {
    const read = async () => (await run<RowDataPacket[]>('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', [o.pool, LAYOUT_ROW]))[0]?.address as string | null | undefined
    let recorded = await read()
    if (recorded === undefined) {
      const used = (await run<RowDataPacket[]>('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1', [o.pool])).length > 0
      checkLayoutRecord(where, undefined, used, o.layout)
      await run('INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool', [o.pool, LAYOUT_ROW, o.layout.signature])
      recorded = await read()
    }
    checkLayoutRecord(where, recorded ?? '', true, o.layout)
  } catch (err) {
    await close()
    throw err
  }
  const micros = o.ttlMs * 1000
  return {
    where,
    ttlMs: () => o.ttlMs,
    async list (min, max) {
      const rows = await run<RowDataPacket[]>(MYSQL_LIST, [o.pool, min, max])
      return rows.map((r) => slotOf(Number(r.worker_id), Number(r.free) === 1, Number(r.expires_in)))
    },
    async claim (workerId, owner, address): Promise<Claimed | undefined> {
      const results = await run<unknown[]>(MYSQL_CLAIM, [o.pool, workerId, owner, address, micros, o.pool, workerId, owner, o.pool, workerId])
      const row = (results[3] as RowDataPacket[])[0]
      return row?.owner === owner ? { issuedUntil: Number(row.issued_until) } : undefined
    },
    async renew (workerId, owner, issuedUntil) {
      const result = await run<{ affectedRows: number }>(MYSQL_RENEW, [micros, issuedUntil, o.pool, workerId, owner])
      return result.affectedRows === 1
    },
    async release (workerId, owner, issuedUntil) {
      await run(MYSQL_RELEASE, [issuedUntil, o.pool, workerId, owner])
    },
    close,
  }
}

/** The embedded store's pool: the same rows in the SQLite file, for the instances of one host. */
function createSqliteLeasePool (o: DbLeasePoolOptions, path: string): LeasePool {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const db = new Database(path, { timeout: 5000 })
  db.pragma('journal_mode = WAL')
  db.exec(SQLITE_LEASE_DDL)
  // The host's clock in ms, read by SQLite itself.
  const NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
  const insert = db.prepare(`INSERT OR IGNORE INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, ${NOW})`)
  const take = db.prepare(`UPDATE leaf_worker_lease SET owner = ?, address = ?, expires_at = ${NOW} + ?
    WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR owner = ? OR expires_at < ${NOW})`)
  const read = db.prepare<[string, number], { owner: string | null, issued_until: number }>(
    'SELECT owner, issued_until FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?')
  const renew = db.prepare(`UPDATE leaf_worker_lease SET expires_at = ${NOW} + ?, issued_until = MAX(issued_until, ?)
    WHERE pool = ? AND worker_id = ? AND owner = ?`)
  const release = db.prepare(`UPDATE leaf_worker_lease SET owner = NULL, expires_at = ${NOW}, issued_until = ?
    WHERE pool = ? AND worker_id = ? AND owner = ?`)
  const list = db.prepare<[number, string, number, number], { worker_id: number, free: number, expires_in: number }>(
    'SELECT worker_id, owner IS NULL AS free, expires_at - ? AS expires_in FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?')
  const now = db.prepare(`SELECT ${NOW} AS now`).pluck()
  const where = `sqlite:${path} ${LEASE_TABLE} (pool ${o.pool})`
  try {
    db.transaction(() => {
      const recorded = db.prepare('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?').pluck().get(o.pool, LAYOUT_ROW) as string | null | undefined
      if (recorded === undefined) {
        checkLayoutRecord(where, undefined, db.prepare('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1').get(o.pool) !== undefined, o.layout)
        db.prepare(`INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, ${NOW})`).run(o.pool, LAYOUT_ROW, o.layout.signature)
      } else {
        checkLayoutRecord(where, recorded ?? '', true, o.layout)
      }
    }).immediate()
  } catch (err) {
    db.close()
    throw err
  }
  db.pragma('busy_timeout = 100')
  const claim = db.transaction((workerId: number, owner: string, address: string) => {
    insert.run(o.pool, workerId)
    take.run(owner, address, o.ttlMs, o.pool, workerId, owner)
    return read.get(o.pool, workerId)
  })
  return {
    where,
    ttlMs: () => o.ttlMs,
    async list (min, max) {
      return list.all(now.get() as number, o.pool, min, max).map((r) => slotOf(r.worker_id, r.free === 1, r.expires_in))
    },
    async claim (workerId, owner, address) {
      const row = claim.immediate(workerId, owner, address)
      return row?.owner === owner ? { issuedUntil: row.issued_until } : undefined
    },
    async renew (workerId, owner, issuedUntil) {
      return renew.run(o.ttlMs, issuedUntil, o.pool, workerId, owner).changes === 1
    },
    async release (workerId, owner, issuedUntil) {
      release.run(issuedUntil, o.pool, workerId, owner)
    },
    async close () {
      db.close()
    },
  }
}
