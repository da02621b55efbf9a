import { existsSync, mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import { LeaseRefused } from '../../../errors.js'
import { checkLayoutRecord } from '../layout-record.js'
import type { LeaseStore } from '../lease-store.js'
import { ADDED_COLUMNS, LAYOUT_ROW, LEASE_TABLE, parseSeen, previousIssuedUntil, slotOf, type Before, type DbLeaseStoreOptions } from './db-lease-rows.js'

// The db-lease pool's statements on the embedded SQLite file (db-lease-rows.ts describes the rows).

const SQLITE_LEASE_DDL = `CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool           VARCHAR(128) NOT NULL,
  worker_id      INTEGER      NOT NULL,
  owner          VARCHAR(64)  DEFAULT NULL,
  address        VARCHAR(255) DEFAULT NULL,
  expires_at     INTEGER      NOT NULL,
  issued_until   INTEGER      NOT NULL DEFAULT 0,
  generation     INTEGER      NOT NULL DEFAULT 0,
  lease_ms       INTEGER      DEFAULT NULL,
  released_until INTEGER      DEFAULT NULL,
  released_at    INTEGER      DEFAULT NULL,
  PRIMARY KEY (pool, worker_id)
)`

/** The embedded store's pool: the same rows in the SQLite file, for the instances of one host. */
export function createSqliteLeaseStore (options: DbLeaseStoreOptions, path: string, embeddedDefault = false): LeaseStore {
  // Only the embedded default makes its folder: a mistyped path fails to open (SQLITE_CANTOPEN),
  // rather than giving this instance a pool of its own, whose worker ids another instance of the host may hold.
  if (path !== ':memory:' && embeddedDefault) mkdirSync(dirname(path), { recursive: true })
  else if (path !== ':memory:' && !existsSync(dirname(path))) {
    throw new LeaseRefused('LEASE_STORE_UNAVAILABLE', `worker-id lease pool sqlite:${path}: the folder ${dirname(path)} does not exist: correct leaf.jdbc.url, or create the folder (only the embedded default's folder is made)`)
  }
  const db = new Database(path, { timeout: 5000 })
  db.pragma('journal_mode = WAL')
  db.exec(SQLITE_LEASE_DDL)
  const columns = new Set((db.pragma(`table_info(${LEASE_TABLE})`) as { name: string }[]).map((column) => column.name))
  for (const [name, , type] of ADDED_COLUMNS) {
    if (columns.has(name)) continue
    try {
      db.exec(`ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${name} ${type}`)
    } catch (err) {
      // Another instance starting on the same file added it first.
      if (!/duplicate column name/.test((err as Error).message)) throw err
    }
  }
  // The host's clock in ms, read by SQLite itself.
  const NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
  const insert = db.prepare(`INSERT OR IGNORE INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, ${NOW})`)
  const before = db.prepare<[string, number], Before>(
    'SELECT owner, issued_until, released_until, released_at = expires_at AS clean FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?')
  const take = db.prepare(`UPDATE leaf_worker_lease SET owner = ?, address = ?, generation = generation + 1, lease_ms = ?, expires_at = ${NOW} + ?
    WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR (owner = ? AND generation = ? AND expires_at = ? AND expires_at < ${NOW}))`)
  const read = db.prepare<[string, number], { owner: string | null }>('SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?')
  const renew = db.prepare(`UPDATE leaf_worker_lease SET expires_at = ${NOW} + ?, issued_until = MAX(issued_until, ?), generation = generation + 1, lease_ms = ?
    WHERE pool = ? AND worker_id = ? AND owner = ?`)
  // One NOW per statement here too: SQLite reads the clock once per statement ('now' is stable within it).
  const release = db.prepare(`UPDATE leaf_worker_lease SET owner = NULL, expires_at = ${NOW}, released_at = ${NOW}, released_until = ?,
    issued_until = MAX(issued_until, COALESCE(?, 0)), generation = generation + 1 WHERE pool = ? AND worker_id = ? AND owner = ?`)
  const list = db.prepare<[number, string, number, number], { worker_id: number, owner: string | null, generation: number, lease_ms: number | null, expires_at: number, expires_in: number }>(
    'SELECT worker_id, owner, generation, lease_ms, expires_at, expires_at - ? AS expires_in FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?')
  const now = db.prepare(`SELECT ${NOW} AS now`).pluck()
  const where = `sqlite:${path} ${LEASE_TABLE} (pool ${options.pool})`
  try {
    db.transaction(() => {
      const recorded = db.prepare('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?').pluck().get(options.pool, LAYOUT_ROW) as string | null | undefined
      if (recorded === undefined) {
        checkLayoutRecord(where, undefined, db.prepare('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1').get(options.pool) !== undefined, options.layout)
        db.prepare(`INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, ${NOW})`).run(options.pool, LAYOUT_ROW, options.layout.signature)
      } else {
        checkLayoutRecord(where, recorded ?? '', true, options.layout)
      }
    }).immediate()
  } catch (err) {
    db.close()
    throw err
  }
  db.pragma('busy_timeout = 100')
  const claim = db.transaction((workerId: number, owner: string, address: string, from: string | undefined) => {
    insert.run(options.pool, workerId)
    const found = before.get(options.pool, workerId)
    const [seenOwner, seenGeneration, seenExpires] = parseSeen(from)
    take.run(owner, address, options.ttlMs, options.ttlMs, options.pool, workerId, seenOwner, seenGeneration === null ? null : Number(seenGeneration), seenExpires)
    return read.get(options.pool, workerId)?.owner === owner ? { issuedUntil: previousIssuedUntil(found) } : undefined
  })
  return {
    where,
    ttlMs: () => options.ttlMs,
    async list (min, max) {
      return list.all(now.get() as number, options.pool, min, max).map((row) => slotOf(row.worker_id, row.owner, row.generation, row.lease_ms, row.expires_at, row.expires_in))
    },
    async claim (workerId, owner, address, from) {
      return claim.immediate(workerId, owner, address, from)
    },
    async renew (workerId, owner, issuedUntil) {
      return renew.run(options.ttlMs, issuedUntil, options.ttlMs, options.pool, workerId, owner).changes === 1
    },
    async release (workerId, owner, issuedUntil) {
      release.run(issuedUntil ?? null, issuedUntil ?? null, options.pool, workerId, owner)
    },
    async close () {
      db.close()
    },
  }
}
