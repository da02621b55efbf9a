import type { HostState } from '../database/host-census.js'
import type { TlsSession } from '../database/tls-options.js'

// What the segment generator needs from a database; stores/ holds the implementations.

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
  /** Every tag and its `max_id`; the refresh compares each with this instance's mark. */
  getAllTags (): Promise<TagRow[]>
  /**
   * Moves `max_id` and reads the row back, atomically: by `adapted.step` only while the table's
   * step is still `adapted.tableStep`, so a step changed in the table applies from the next load.
   * Undefined when the tag is not in the table.
   */
  allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined>
  /** `max_id = GREATEST(max_id, atLeast)`, after a failover; never lowers it. Resolves whether the tag exists. */
  raiseMaxId (key: string, atLeast: bigint): Promise<boolean>
  /** Who holds the rows (a server, a Galera cluster): a change is a failover. Undefined where the store cannot tell. */
  identity (): Promise<string | undefined>
  /** Compare-and-set `max_id = firstUnused WHERE max_id = end`; false when someone reserved after `end`. */
  giveBack (key: string, end: bigint, firstUnused: bigint): Promise<boolean>
  /** Parks unreturned ranges for the next start of `owner`; false when leaf_alloc_parked is missing and cannot be made. */
  park (key: string, owner: string, ranges: readonly UnusedRange[]): Promise<boolean>
  /**
   * Takes (lowest first) and deletes, in one transaction, what `owner` parked for `key` within
   * `maxAgeMs`, so each range is taken once. Undefined when there is no parked table.
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
  /** The store's replication and what a failover of it can cost, one line for the start's log (not SQLite). */
  topology? (): Promise<string>
  /** Every host of the list and what it answers now (writable, read-only, unknown); MySQL only. */
  hosts? (): Promise<HostState[]>
  /** The host statements go to now (`host:port`), where the store has a list of them. */
  hostInUse? (): string
  /** MySQL and PostgreSQL: the TLS of the latest session, as the server reports it (undefined before the first). */
  tlsSession? (): TlsSession | undefined
  /** Checks the connection and the table; rejects with the cause. */
  ping (): Promise<void>
  close (): Promise<void>
}

/** Whether a promotion of this topology() can lose committed allocations (async replication). */
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
