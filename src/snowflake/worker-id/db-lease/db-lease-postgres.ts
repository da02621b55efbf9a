import type { StoreConfig } from '../../../config/jdbc-url.js'
import { createPostgresRunner, type PostgresRunner } from '../../../database/postgres-pool.js'
import { describeStore } from '../../../database/describe-store.js'
import { codeOf, SqlState } from '../../../database/driver-errors.js'
import { checkLayoutRecord } from '../layout-record.js'
import type { Claimed, LeaseStore } from '../lease-store.js'
import { LeaseRefused } from '../../../errors.js'
import { LAYOUT_ROW, LEASE_TABLE, parseSeen, previousIssuedUntil, slotOf, type Before, type DbLeaseStoreOptions } from './db-lease-rows.js'

// The db-lease statements on PostgreSQL, each the MySQL one's twin. statement_timestamp() stands
// for NOW(3) (one value per statement), stored as timestamptz(3) so that a release's released_at
// equals its expires_at as on MySQL.

/** The DDL of sql/leaf_worker_lease.postgres.sql (test/integration/worker-id-sources.test.ts compares them). */
export const PG_LEASE_DDL = `CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool           varchar(128)   NOT NULL,
  worker_id      int            NOT NULL,
  owner          varchar(64)    DEFAULT NULL,
  address        varchar(255)   DEFAULT NULL,
  expires_at     timestamptz(3) NOT NULL,
  issued_until   bigint         NOT NULL DEFAULT 0,
  generation     bigint         NOT NULL DEFAULT 0,
  lease_ms       int            DEFAULT NULL,
  released_until bigint         DEFAULT NULL,
  released_at    timestamptz(3) DEFAULT NULL,
  update_time    timestamptz(3) NOT NULL DEFAULT now(),
  PRIMARY KEY (pool, worker_id)
)`

const NOW = 'statement_timestamp()'
const MS = "* interval '1 millisecond'"

const INSERT_FREE = `INSERT INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES ($1, $2, ${NOW}) ON CONFLICT (pool, worker_id) DO NOTHING`
const SELECT_BEFORE = 'SELECT owner, issued_until, released_until, released_at = expires_at AS clean FROM leaf_worker_lease WHERE pool = $1 AND worker_id = $2 FOR UPDATE'
// Taken when free, or when it is the very holder the claimant watched stand still and the
// database says it expired too (the NULLs of a claim of a free id match nothing).
const TAKE = `UPDATE leaf_worker_lease SET owner = $1, address = $2, generation = generation + 1, lease_ms = $3::int, expires_at = ${NOW} + $3::int ${MS}, update_time = ${NOW} ` +
  `WHERE pool = $4 AND worker_id = $5 AND (owner IS NULL OR (owner = $6::varchar AND generation = $7::bigint AND expires_at = $8::timestamptz AND expires_at < ${NOW}))`
const SELECT_OWNER = 'SELECT owner FROM leaf_worker_lease WHERE pool = $1 AND worker_id = $2'
const RENEW = `UPDATE leaf_worker_lease SET expires_at = ${NOW} + $1::int ${MS}, issued_until = GREATEST(issued_until, $2::bigint), generation = generation + 1, lease_ms = $1::int, update_time = ${NOW} ` +
  'WHERE pool = $3 AND worker_id = $4 AND owner = $5'
// A released_until of NULL (a claim that never answered) sends the next holder to issued_until.
const RELEASE = `UPDATE leaf_worker_lease SET owner = NULL, expires_at = ${NOW}, released_at = ${NOW}, released_until = $1::bigint, ` +
  `issued_until = GREATEST(issued_until, COALESCE($1::bigint, 0)), generation = generation + 1, update_time = ${NOW} WHERE pool = $2 AND worker_id = $3 AND owner = $4`
const LIST = `SELECT worker_id, owner, generation::text AS generation, lease_ms, expires_at::text AS expires, trunc(EXTRACT(EPOCH FROM (expires_at - ${NOW})) * 1000)::bigint AS expires_in ` +
  'FROM leaf_worker_lease WHERE pool = $1 AND worker_id BETWEEN $2 AND $3'

/** Creates the table when it is missing, or refuses with the script to run. */
async function ensureTable (query: PostgresRunner['query'], where: string): Promise<void> {
  try {
    await query(`SELECT 1 FROM ${LEASE_TABLE} LIMIT 1`)
    return
  } catch (err) {
    if (codeOf(err) !== SqlState.UNDEFINED_TABLE) throw err
  }
  try {
    await query(PG_LEASE_DDL)
  } catch (err) {
    // Another instance created it at the same moment.
    if (codeOf(err) === SqlState.UNIQUE_VIOLATION) return
    throw new LeaseRefused('LEASE_TABLE_MISSING', `${where}: the table does not exist and cannot be created (${(err as Error).message}): run sql/leaf_worker_lease.postgres.sql`, { cause: err })
  }
}

export async function createPostgresLeaseStore (options: DbLeaseStoreOptions, store: Extract<StoreConfig, { kind: 'postgres' }>): Promise<LeaseStore> {
  const { query, transaction, close } = createPostgresRunner({ ...store, connectTimeoutMs: options.connectTimeoutMs, queryTimeoutMs: options.queryTimeoutMs, poolSize: 2, ...(options.logger === undefined ? {} : { logger: options.logger }) })
  const where = `${describeStore(store)} ${LEASE_TABLE} (pool ${options.pool})`
  try {
    await ensureTable(query, where)
    const read = async () => (await query<{ address: string | null }>('SELECT address FROM leaf_worker_lease WHERE pool = $1 AND worker_id = $2', [options.pool, LAYOUT_ROW])).rows[0]?.address
    let recorded = await read()
    if (recorded === undefined) {
      const used = (await query('SELECT 1 FROM leaf_worker_lease WHERE pool = $1 AND worker_id >= 0 LIMIT 1', [options.pool])).rows.length > 0
      checkLayoutRecord(where, undefined, used, options.layout)
      await query(`INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES ($1, $2, $3, ${NOW}) ON CONFLICT (pool, worker_id) DO NOTHING`, [options.pool, LAYOUT_ROW, options.layout.signature])
      recorded = await read()
    }
    checkLayoutRecord(where, recorded ?? '', true, options.layout)
  } catch (err) {
    await close()
    throw err
  }
  return {
    where,
    ttlMs: () => options.ttlMs,
    async list (min, max) {
      const { rows } = await query<{ worker_id: number, owner: string | null, generation: string, lease_ms: number | null, expires: string, expires_in: string }>(LIST, [options.pool, min, max])
      return rows.map((row) => slotOf(Number(row.worker_id), row.owner, row.generation, row.lease_ms === null ? null : Number(row.lease_ms), row.expires, Number(row.expires_in)))
    },
    async claim (workerId, owner, address, from): Promise<Claimed | undefined> {
      const [seenOwner, seenGeneration, seenExpires] = parseSeen(from)
      // One transaction: the row made (free) if it never was, locked and read (the wait comes
      // from it), taken when the rules allow, and its owner read back: who won.
      return await transaction(async (inTransaction) => {
        await inTransaction(INSERT_FREE, [options.pool, workerId])
        const before = (await inTransaction(SELECT_BEFORE, [options.pool, workerId])).rows[0] as Before | undefined
        await inTransaction(TAKE, [owner, address, options.ttlMs, options.pool, workerId, seenOwner, seenGeneration, seenExpires === null ? null : String(seenExpires)])
        const row = (await inTransaction(SELECT_OWNER, [options.pool, workerId])).rows[0] as { owner: string | null } | undefined
        return row?.owner === owner ? { issuedUntil: previousIssuedUntil(before) } : undefined
      })
    },
    async renew (workerId, owner, issuedUntil) {
      return (await query(RENEW, [options.ttlMs, issuedUntil, options.pool, workerId, owner])).rowCount === 1
    },
    async release (workerId, owner, issuedUntil) {
      await query(RELEASE, [issuedUntil ?? null, options.pool, workerId, owner])
    },
    close,
  }
}
