import type { Logger } from '../../../logger.js'
import type { StoreConfig } from '../../../config/jdbc-url.js'
import type { Layout } from '../../../layout/layout.js'
import type { PoolSlot } from '../lease-store.js'

// The db-lease pool: one row per (pool, worker id) in `leaf_worker_lease`, and what the three
// engines' statement sets share. `owner` is one claim's token (NULL: released); `generation`
// lets a claimant tell a live holder without trusting the database's clock; `issued_until` only
// rises. Each column and statement: docs/worker-ids.md#the-lease-protocol-db-lease-zookeeper-lease

export const LEASE_TABLE = 'leaf_worker_lease'
/** Columns a table made by an earlier version lacks, with their MySQL and SQLite types. */
export const ADDED_COLUMNS: [name: string, mysql: string, sqlite: string][] = [
  ['generation', "bigint(20) NOT NULL DEFAULT '0'", 'INTEGER NOT NULL DEFAULT 0'],
  ['lease_ms', 'int(11) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
  ['released_until', 'bigint(20) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
  ['released_at', 'datetime(3) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
]

/** What a claim read of the row before it took it. */
export interface Before { owner: string | null, issued_until: number | string, released_until: number | string | null, clean: number | boolean | null }

/** The last millisecond the id's previous holders may have issued, from the row as the claim found it. */
export function previousIssuedUntil (row: Before | undefined): number {
  if (row === undefined) return 0
  // A release untouched since covers the holders before it too: that holder waited for them.
  if (row.owner === null && Number(row.clean) === 1 && row.released_until !== null) return Number(row.released_until)
  return Number(row.issued_until)
}

/** The holder as seen by list(), in the form claim() takes it over from: [owner, generation, expires_at]. */
export type Seen = [owner: string, generation: string, expires: string | number]

export function parseSeen (from: string | undefined): Seen | [null, null, null] {
  if (from === undefined) return [null, null, null]
  const seen = JSON.parse(from) as unknown
  if (!Array.isArray(seen) || seen.length !== 3) throw new Error(`not a holder seen by list(): ${from}`)
  return seen as Seen
}

export interface DbLeaseStoreOptions {
  store: StoreConfig
  /** leaf.name: one table holds the pools of several services. */
  pool: string
  ttlMs: number
  connectTimeoutMs: number
  queryTimeoutMs: number
  /** Recorded by the pool's first instance (layout-record.ts). */
  layout: Layout
  /** Told when TLS is preferred and the database offers none (database/tls-options.ts). */
  logger?: Logger
}

// The row with worker id -1 records the pool's ID layout in `address` (no claim ever lists it).
export const LAYOUT_ROW = -1

export function slotOf (workerId: number, owner: string | null, generation: number | string, leaseMs: number | null, expires: string | number, expiresInMs: number): PoolSlot {
  if (owner === null) return { workerId, state: 'free', expiresInMs }
  const version = JSON.stringify([owner, String(generation), expires] satisfies Seen)
  return { workerId, state: expiresInMs >= 0 ? 'held' : 'expired', expiresInMs, version, ttlMs: leaseMs ?? undefined }
}
