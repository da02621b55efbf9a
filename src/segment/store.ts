import type { HostState } from '../database/host-census.js'
import type { TlsSession } from '../database/tls-options.js'

// What the segment generator needs from a database. The generator does not know
// which store is behind it: MySQL/MariaDB (mysql-store.ts) or SQLite (sqlite-store.ts).

/** A `leaf_alloc` row after `max_id` was moved: the segment is `[maxId - step, maxId)`. */
export interface Allocation {
  key: string
  maxId: bigint
  /** The table's `step` column (Java Leaf's `LeafAlloc.step`). */
  step: number
  /** What answered (a server, a Galera cluster), where the store can tell: see identity(). */
  store?: string
}

/** IDs `first` up to `end` (excluded) that were reserved and never handed out. */
export interface UnusedRange { first: bigint, end: bigint }

/** A whole `leaf_alloc` row, for the admin views. */
export interface LeafAllocRow {
  key: string
  maxId: bigint
  step: number
  description: string | null
  updateTime: Date
}

export interface NewTag {
  key: string
  step: number
  maxId: bigint
  description: string | null
}

/** A step the generator adapted, and the table step it adapted from. */
export interface AdaptedStep {
  step: number
  tableStep: number
}

export interface TagChanges {
  step?: number
  description?: string | null
}

/** A tag and its `max_id` as the tag list's refresh read them. */
export interface TagRow {
  key: string
  maxId: bigint
}

export interface SegmentStore {
  /**
   * `SELECT biz_tag, max_id FROM leaf_alloc`: the refresh compares each `max_id` with this
   * instance's mark for the tag (segment/max-id-guard.ts), whatever store answered.
   */
  getAllTags (): Promise<TagRow[]>
  /**
   * Moves `max_id` and reads the row back, atomically: by the table's own step, or by
   * `adapted.step` while the table's step is still `adapted.tableStep`. A table step changed
   * since (a PATCH, an UPDATE by hand) is used as it is, so a new step applies from the next
   * load. Resolves undefined when the tag is not in the table.
   */
  allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined>
  /**
   * `UPDATE leaf_alloc SET max_id = GREATEST(max_id, atLeast)`: puts a row that went back (a
   * promoted replica missing allocations) above IDs served from it. Never lowers it. Resolves
   * whether the tag exists.
   */
  raiseMaxId (key: string, atLeast: bigint): Promise<boolean>
  /**
   * Who holds the rows: a server (where it listens, its server_id) or a Galera cluster (its
   * state UUID); a change is a failover (segment/max-id-guard.ts). Undefined where the store
   * cannot tell (the embedded SQLite file).
   */
  identity (): Promise<string | undefined>
  /**
   * Gives unused IDs back: `UPDATE leaf_alloc SET max_id = firstUnused WHERE biz_tag = ? AND
   * max_id = end`, a compare-and-set that holds only while no other instance reserved a
   * segment after the one ending at `end`. Resolves whether it did.
   */
  giveBack (key: string, end: bigint, firstUnused: bigint): Promise<boolean>
  /**
   * Keeps ranges a stopping instance held and never handed out, and could not return to
   * max_id, for the next start with the same identity (`owner`): rows of leaf_alloc_parked.
   * Resolves false when there is no such table and it may not be created.
   */
  park (key: string, owner: string, ranges: readonly UnusedRange[]): Promise<boolean>
  /**
   * Takes the ranges `owner` parked for `key` within the last `maxAgeMs`, lowest first, and
   * deletes them in the same transaction, with the tag's older rows: each range is taken
   * once, whoever else asks. Resolves undefined when there is no such table and it may not
   * be created.
   */
  claimParked (key: string, owner: string, maxAgeMs: number): Promise<UnusedRange[] | undefined>
  /** All rows, for the `/db` views. */
  getAllRows (): Promise<LeafAllocRow[]>
  /** One row; undefined when the tag is not in the table. */
  getTag (key: string): Promise<LeafAllocRow | undefined>
  /** Inserts a tag; resolves undefined when it already exists. */
  createTag (tag: NewTag): Promise<LeafAllocRow | undefined>
  /** Changes a tag's step and/or description (never max_id); undefined when it does not exist. */
  updateTag (key: string, changes: TagChanges): Promise<LeafAllocRow | undefined>
  /**
   * The store's replication, read off the server, and what a failover of it can cost an ID
   * service, in one line for the start's log. Absent where nothing replicates (SQLite).
   */
  topology? (): Promise<string>
  /**
   * Every host of the store's list and what it answers now: writable, read-only or unknown (no
   * answer within the query timeout), each read over a connection of its own, all at once.
   * Absent where the store has one server it cannot fail over from (SQLite, PostgreSQL).
   */
  hosts? (): Promise<HostState[]>
  /** The host statements go to now (`host:port`), where the store has a list of them. */
  hostInUse? (): string
  /** MySQL and PostgreSQL: the TLS of the latest session, as the server reports it (undefined before the first). */
  tlsSession? (): TlsSession | undefined
  /** Checks the connection and the table; rejects with the cause. */
  ping (): Promise<void>
  close (): Promise<void>
}

/**
 * Whether a store of this topology() line can lose committed allocations in a promotion: the
 * lines of asynchronous replication (MySQL/MariaDB with a binary log and neither Galera nor
 * semi-synchronous replication, PostgreSQL streaming to asynchronous standbys) begin so. A
 * single server, Galera and semi-synchronous replication keep serving their buffers unbounded.
 */
export function canLoseWrites (topology: string): boolean {
  return topology.startsWith('asynchronous')
}

/** max_id cannot move by the step without passing 2^63 - 1: the tag's ID space has ended. */
export class IdSpaceEnded extends Error {
  readonly code = 'ID_SPACE_ENDED'

  constructor (key: string, options?: { cause?: unknown }) {
    super(`max_id of "${key}" would pass 2^63 - 1`, options)
    this.name = 'IdSpaceEnded'
  }
}
