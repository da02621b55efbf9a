// What the segment generator needs from a database. The generator does not know
// which store is behind it: MySQL/MariaDB (mysql-store.ts) or SQLite (sqlite-store.ts).

/** A `leaf_alloc` row after `max_id` was moved: the segment is `[maxId - step, maxId)`. */
export interface Allocation {
  key: string
  maxId: bigint
  /** The table's `step` column (Java Leaf's `LeafAlloc.step`). */
  step: number
}

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

export interface SegmentStore {
  /** `SELECT biz_tag FROM leaf_alloc` */
  getAllTags (): Promise<string[]>
  /**
   * Moves `max_id` and reads the row back, atomically: by the table's own step, or by
   * `adapted.step` while the table's step is still `adapted.tableStep`. A table step changed
   * since (a PATCH, an UPDATE by hand) is used as it is, so a new step applies from the next
   * load. Resolves undefined when the tag is not in the table.
   */
  allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined>
  /** All rows, for the `/db` views. */
  getAllRows (): Promise<LeafAllocRow[]>
  /** Inserts a tag; resolves undefined when it already exists. */
  createTag (tag: NewTag): Promise<LeafAllocRow | undefined>
  /** Changes a tag's step and/or description (never max_id); undefined when it does not exist. */
  updateTag (key: string, changes: TagChanges): Promise<LeafAllocRow | undefined>
  /** Checks the connection and the table; rejects with the cause. */
  ping (): Promise<void>
  close (): Promise<void>
}
