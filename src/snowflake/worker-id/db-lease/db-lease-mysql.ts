import type { RowDataPacket } from 'mysql2/promise'
import type { StoreConfig } from '../../../config/jdbc-url.js'
import type { MysqlRunner, Statement } from '../../../database/mysql-pool.js'
import { createMysqlRunner } from '../../../database/mysql-hosts.js'
import { describeStore } from '../../../database/describe-store.js'
import { codeOf, MysqlError } from '../../../database/driver-errors.js'
import { checkLayoutRecord } from '../layout-record.js'
import type { Claimed, LeaseStore } from '../lease-store.js'
import { LeaseRefused } from '../../../errors.js'
import { ADDED_COLUMNS, LAYOUT_ROW, LEASE_TABLE, parseSeen, previousIssuedUntil, slotOf, type Before, type DbLeaseStoreOptions } from './db-lease-rows.js'

// The db-lease pool's statements on MySQL/MariaDB (db-lease-rows.ts describes the rows).

/** The MySQL DDL, as shipped in sql/leaf_worker_lease.sql (test/integration/worker-id-sources.test.ts compares them). */
export const MYSQL_LEASE_DDL = `CREATE TABLE IF NOT EXISTS \`leaf_worker_lease\` (
  \`pool\` varchar(128) NOT NULL,
  \`worker_id\` int(11) NOT NULL,
  \`owner\` varchar(64) DEFAULT NULL,
  \`address\` varchar(255) DEFAULT NULL,
  \`expires_at\` datetime(3) NOT NULL,
  \`issued_until\` bigint(20) NOT NULL DEFAULT '0',
  \`generation\` bigint(20) NOT NULL DEFAULT '0',
  \`lease_ms\` int(11) DEFAULT NULL,
  \`released_until\` bigint(20) DEFAULT NULL,
  \`released_at\` datetime(3) DEFAULT NULL,
  \`update_time\` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (\`pool\`, \`worker_id\`)
) ENGINE=InnoDB`

// One transaction per claim: the row is made (free) if it never was and locked; what it was
// is read (the wait comes from it); then it is taken when it is free, or when it is the very
// holder the claimant watched stand still (`owner`, `generation`, `expires_at` as seen) and the
// database says it expired too; the owner read back says who won.
// (A transaction's statements: one round trip, or one per statement on Galera, whose
// multi-statement commits can hide a conflict: database/mysql-pool.ts.)
function claimStatements (pool: string, workerId: number, owner: string, address: string, ttlMs: number, micros: number, seen: ReturnType<typeof parseSeen>): Statement[] {
  const [seenOwner, seenGeneration, seenExpires] = seen
  return [
    { sql: 'START TRANSACTION' },
    { sql: 'INSERT INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool', values: [pool, workerId] },
    { sql: 'SELECT owner, issued_until, released_until, released_at = expires_at AS clean FROM leaf_worker_lease WHERE pool = ? AND worker_id = ? FOR UPDATE', values: [pool, workerId] },
    {
      sql: 'UPDATE leaf_worker_lease SET owner = ?, address = ?, generation = generation + 1, lease_ms = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND ' +
        'WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR (owner = ? AND generation = ? AND expires_at = ? AND expires_at < NOW(3)))',
      values: [owner, address, ttlMs, micros, pool, workerId, seenOwner, seenGeneration, seenExpires],
    },
    { sql: 'SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', values: [pool, workerId] },
    { sql: 'COMMIT' },
  ]
}
const MYSQL_RENEW =
  'UPDATE leaf_worker_lease SET expires_at = NOW(3) + INTERVAL ? MICROSECOND, issued_until = GREATEST(issued_until, ?), generation = generation + 1, lease_ms = ? ' +
  'WHERE pool = ? AND worker_id = ? AND owner = ?'
// NOW(3) is one value within a statement: released_at equals expires_at until the row's next write.
// A released_until of NULL (a claim that never answered) sends the next holder to issued_until.
const MYSQL_RELEASE =
  'UPDATE leaf_worker_lease SET owner = NULL, expires_at = NOW(3), released_at = NOW(3), released_until = ?, ' +
  'issued_until = GREATEST(issued_until, COALESCE(?, 0)), generation = generation + 1 WHERE pool = ? AND worker_id = ? AND owner = ?'
const MYSQL_LIST =
  'SELECT worker_id, owner, generation, lease_ms, CAST(expires_at AS CHAR) AS expires, TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 AS expires_in ' +
  'FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?'

/** Adds the columns a table of an earlier version lacks (ALTER TABLE), or refuses with what to run. */
async function upgradeMysqlTable (run: MysqlRunner['run'], where: string): Promise<void> {
  try {
    await run(`SELECT ${ADDED_COLUMNS.map(([name]) => name).join(', ')} FROM ${LEASE_TABLE} LIMIT 0`)
    return
  } catch (err) {
    if (codeOf(err) !== MysqlError.BAD_FIELD) throw err
  }
  for (const [name, type] of ADDED_COLUMNS) {
    try {
      await run(`ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${name} ${type}`)
    } catch (err) {
      if (codeOf(err) === MysqlError.DUP_FIELDNAME) continue
      throw new LeaseRefused('LEASE_TABLE_MISSING', `${where}: the table predates the lease generations and cannot be altered (${(err as Error).message}): ` +
        `run ${ADDED_COLUMNS.map(([name, type]) => `ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${name} ${type};`).join(' ')}`, { cause: err })
    }
  }
}

export async function createMysqlLeaseStore (options: DbLeaseStoreOptions, store: Extract<StoreConfig, { kind: 'mysql' }>): Promise<LeaseStore> {
  const { run, close } = createMysqlRunner({ ...store, connectTimeoutMs: options.connectTimeoutMs, queryTimeoutMs: options.queryTimeoutMs, poolSize: 2, ...(options.logger === undefined ? {} : { logger: options.logger }) })
  const where = `${describeStore(store)} ${LEASE_TABLE} (pool ${options.pool})`
  try {
    await run(`SELECT 1 FROM ${LEASE_TABLE} LIMIT 1`)
  } catch (err) {
    if (codeOf(err) !== MysqlError.NO_SUCH_TABLE) {
      await close()
      throw err
    }
    try {
      await run(MYSQL_LEASE_DDL)
    } catch (ddlErr) {
      await close()
      throw new LeaseRefused('LEASE_TABLE_MISSING', `${where}: the table does not exist and cannot be created (${(ddlErr as Error).message}): run sql/leaf_worker_lease.sql`, { cause: ddlErr })
    }
  }
  try {
    await upgradeMysqlTable(run, where)
    const read = async () => (await run<RowDataPacket[]>('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', [options.pool, LAYOUT_ROW]))[0]?.address as string | null | undefined
    let recorded = await read()
    if (recorded === undefined) {
      const used = (await run<RowDataPacket[]>('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1', [options.pool])).length > 0
      checkLayoutRecord(where, undefined, used, options.layout)
      await run('INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool', [options.pool, LAYOUT_ROW, options.layout.signature])
      recorded = await read()
    }
    checkLayoutRecord(where, recorded ?? '', true, options.layout)
  } catch (err) {
    await close()
    throw err
  }
  const micros = options.ttlMs * 1000
  return {
    where,
    ttlMs: () => options.ttlMs,
    async list (min, max) {
      const rows = await run<RowDataPacket[]>(MYSQL_LIST, [options.pool, min, max])
      return rows.map((row) => slotOf(Number(row.worker_id), row.owner as string | null, row.generation as string, row.lease_ms === null ? null : Number(row.lease_ms), row.expires as string, Number(row.expires_in)))
    },
    async claim (workerId, owner, address, from): Promise<Claimed | undefined> {
      const results = await run<unknown[]>(claimStatements(options.pool, workerId, owner, address, options.ttlMs, micros, parseSeen(from)))
      const before = (results[2] as RowDataPacket[])[0] as Before | undefined
      const row = (results[4] as RowDataPacket[])[0]
      return row?.owner === owner ? { issuedUntil: previousIssuedUntil(before) } : undefined
    },
    async renew (workerId, owner, issuedUntil) {
      const result = await run<{ affectedRows: number }>(MYSQL_RENEW, [micros, issuedUntil, options.ttlMs, options.pool, workerId, owner])
      return result.affectedRows === 1
    },
    async release (workerId, owner, issuedUntil) {
      await run(MYSQL_RELEASE, [issuedUntil ?? null, issuedUntil ?? null, options.pool, workerId, owner])
    },
    close,
  }
}
