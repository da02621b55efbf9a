import { existsSync, mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import { StartRefused } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type SegmentStore, type TagChanges, type UnusedRange } from '../store.js'

const INT64_MAX = 2n ** 63n - 1n
/**
 * How long a call waits for another process's write lock. better-sqlite3 is synchronous, so
 * the whole event loop waits with it: past this the call fails with SQLITE_BUSY, and the
 * generator retries a failed load with its backoff, timers and requests running meanwhile.
 * A reservation holds the lock for a millisecond or so.
 */
export const BUSY_TIMEOUT_MS = 100
/** At open, before anything is served, waiting longer is harmless: another process may be creating the table. */
const OPEN_BUSY_TIMEOUT_MS = 5000

// The same table as Java Leaf's (sql/leaf_alloc.sql), in SQLite's dialect. SQLite has no
// ON UPDATE, so the statements below set update_time themselves.
const SCHEMA = `
CREATE TABLE leaf_alloc (
  biz_tag     VARCHAR(128) NOT NULL DEFAULT '' PRIMARY KEY,
  max_id      BIGINT       NOT NULL DEFAULT 1,
  step        INT          NOT NULL,
  description VARCHAR(256)          DEFAULT NULL,
  update_time TIMESTAMP    NOT NULL DEFAULT CURRENT_TIMESTAMP
)`

// Ranges a stopping instance could not give back to max_id, for its next start (store.ts).
// parked_at is the host's clock in ms: every process on one SQLite file shares it.
const PARKED_SCHEMA = `
CREATE TABLE IF NOT EXISTS leaf_alloc_parked (
  biz_tag   VARCHAR(128) NOT NULL,
  first_id  BIGINT       NOT NULL,
  end_id    BIGINT       NOT NULL,
  owner     VARCHAR(64)  NOT NULL,
  parked_at INTEGER      NOT NULL,
  PRIMARY KEY (biz_tag, first_id)
)`

export const SEED_ROWS = [
  { key: 'order', maxId: 1n, step: 2000, description: 'Orders' },
  { key: 'leaf-segment-test', maxId: 1n, step: 1000, description: 'Test leaf Segment Mode Get Id' },
] as const

/** Leaf-TS's own tables: a file holding only these is Leaf's (a snowflake lease may have made it). */
const LEAF_TABLES = new Set(['leaf_alloc', 'leaf_alloc_parked', 'leaf_worker_lease', 'WORKER_NODE'])

export interface SqliteStoreOptions {
  /**
   * Only the embedded default gets its folder made and the demo tags: a mistyped path of one's
   * own never serves demo IDs, nor makes folders.
   */
  embeddedDefault?: boolean
  logger?: Pick<Logger, 'warn' | 'info'>
}

interface RowRecord { biz_tag: string, max_id: bigint, step: bigint, description: string | null, update_time: string }

/**
 * The embedded store: one SQLite file (`path` absolute, or `:memory:`), which several processes
 * may share (IMMEDIATE write transactions). Another program's database is refused.
 */
export function createSqliteStore (path: string, { embeddedDefault = false, logger }: SqliteStoreOptions = {}): SegmentStore {
  const where = `segment store sqlite:${path}`
  if (path !== ':memory:') {
    if (embeddedDefault) {
      try {
        mkdirSync(dirname(path), { recursive: true })
      } catch (err) {
        throw new StartRefused(`${where}: the embedded store's folder ${dirname(path)} cannot be made (${(err as NodeJS.ErrnoException).code ?? 'error'}): make the install folder writable, or set leaf.jdbc.url to sqlite:PATH in a writable folder`, { code: 'STORE_FOLDER_UNWRITABLE', cause: err })
      }
    } else if (!existsSync(dirname(path))) {
      throw new StartRefused(`${where}: the folder ${dirname(path)} does not exist: correct leaf.jdbc.url, or create the folder (only the embedded default's folder is made)`, { code: 'STORE_FOLDER_MISSING' })
    }
  }
  const db = new Database(path, { timeout: OPEN_BUSY_TIMEOUT_MS })
  let created: 'demo' | 'empty' | undefined
  try {
    db.defaultSafeIntegers(true) // BIGINTs as BigInt: max_id is exact over the whole 64-bit range

    db.transaction(() => {
      const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").pluck().all() as string[]
      if (!tables.includes('leaf_alloc')) {
        const others = tables.filter((t) => !LEAF_TABLES.has(t))
        if (others.length > 0) {
          throw new StartRefused(`${where}: the file has tables (${others.slice(0, 5).join(', ')}${others.length > 5 ? ', ...' : ''}) and no leaf_alloc: it is another program's database; correct leaf.jdbc.url, or add Leaf's table to it (sql/leaf_alloc.sql, without its ENGINE clause)`, { code: 'STORE_FOREIGN_DATABASE' })
        }
        db.exec(SCHEMA)
        created = embeddedDefault ? 'demo' : 'empty'
        if (embeddedDefault) {
          const insert = db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)')
          for (const row of SEED_ROWS) insert.run(row.key, row.maxId, row.step, row.description)
        }
      }
      db.exec(PARKED_SCHEMA)
    }).immediate()
    // After the check above: WAL rewrites the file's header, and another program's file is left as it was.
    db.pragma('journal_mode = WAL')
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`)
  } catch (err) {
    db.close()
    throw err
  }
  if (created === 'demo') logger?.info({ file: path, tags: SEED_ROWS.map((r) => r.key) }, `new embedded store ${path}: leaf_alloc created with the demo tags`)
  if (created === 'empty') {
    logger?.warn({ file: path }, `new SQLite store ${path}: leaf_alloc created with no tags (every key answers KEY_NOT_FOUND until tags are added); if this is not the file meant, correct leaf.jdbc.url`)
  }

  const selectTags = db.prepare<[], { biz_tag: string, max_id: bigint }>('SELECT biz_tag, max_id FROM leaf_alloc')
  const selectRow = db.prepare<[string], RowRecord>('SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc WHERE biz_tag = ?')
  const selectRows = db.prepare<[], RowRecord>('SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc')
  const updateMaxId = db.prepare('UPDATE leaf_alloc SET max_id = ?, update_time = CURRENT_TIMESTAMP WHERE biz_tag = ?')
  const insertTag = db.prepare('INSERT OR IGNORE INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)')
  const insertParked = db.prepare('INSERT INTO leaf_alloc_parked (biz_tag, first_id, end_id, owner, parked_at) VALUES (?, ?, ?, ?, ?)')
  const selectParked = db.prepare<[string, string], { first_id: bigint, end_id: bigint, parked_at: bigint }>(
    'SELECT first_id, end_id, parked_at FROM leaf_alloc_parked WHERE biz_tag = ? AND owner = ? ORDER BY first_id')
  const deleteParked = db.prepare('DELETE FROM leaf_alloc_parked WHERE biz_tag = ? AND (owner = ? OR parked_at < ?)')
  const parkTx = db.transaction((key: string, owner: string, ranges: readonly UnusedRange[], now: number) => {
    for (const r of ranges) insertParked.run(key, r.first, r.end, owner, now)
  })
  const claimTx = db.transaction((key: string, owner: string, oldest: number): UnusedRange[] => {
    const rows = selectParked.all(key, owner)
    deleteParked.run(key, owner, oldest)
    return rows.filter((r) => Number(r.parked_at) >= oldest).map((r) => ({ first: r.first_id, end: r.end_id }))
  })
  const giveBack = db.prepare('UPDATE leaf_alloc SET max_id = ?, update_time = CURRENT_TIMESTAMP WHERE biz_tag = ? AND max_id = ?')
  const raise = db.prepare('UPDATE leaf_alloc SET max_id = MAX(max_id, ?), update_time = CURRENT_TIMESTAMP WHERE biz_tag = ?')
  const updateTag = db.prepare(`UPDATE leaf_alloc SET step = COALESCE(?, step),
    description = CASE WHEN ? THEN ? ELSE description END, update_time = CURRENT_TIMESTAMP WHERE biz_tag = ?`)

  // SQLite would turn an overflowing max_id + step into a REAL; compute it exactly instead,
  // inside the write transaction so no other process moves max_id in between.
  const allocateTx = db.transaction((key: string, adapted: AdaptedStep | undefined): Allocation | undefined => {
    const row = selectRow.get(key)
    if (row === undefined) return undefined
    if (row.step < 1n) throw new RangeError(`leaf_alloc.step of ${key} is ${row.step}: it must be 1 or more`)
    const step = adapted !== undefined && row.step === BigInt(adapted.tableStep) ? BigInt(adapted.step) : row.step
    const next = row.max_id + step
    if (next > INT64_MAX) throw new IdSpaceEnded(key)
    updateMaxId.run(next, key)
    return { key: row.biz_tag, maxId: next, step: Number(row.step) }
  })

  return {
    async getAllTags () {
      return selectTags.all().map((r) => ({ key: r.biz_tag, maxId: BigInt(r.max_id) }))
    },
    async allocate (key, adapted) {
      return allocateTx.immediate(key, adapted)
    },
    async raiseMaxId (key, atLeast) {
      return raise.run(atLeast, key).changes === 1
    },
    async identity () {
      return undefined
    },
    async giveBack (key, end, firstUnused) {
      return giveBack.run(firstUnused, key, end).changes === 1
    },
    async park (key, owner, ranges) {
      parkTx.immediate(key, owner, ranges, Date.now())
      return true
    },
    async claimParked (key, owner, maxAgeMs) {
      return claimTx.immediate(key, owner, Date.now() - maxAgeMs)
    },
    async getAllRows () {
      return selectRows.all().map(toRow)
    },
    async getTag (key) {
      const row = selectRow.get(key)
      return row === undefined ? undefined : toRow(row)
    },
    async createTag (tag) {
      const { changes } = insertTag.run(tag.key, tag.maxId, tag.step, tag.description)
      const row = selectRow.get(tag.key)
      return changes === 0 || row === undefined ? undefined : toRow(row)
    },
    async updateTag (key: string, changes: TagChanges) {
      const hasDescription = changes.description !== undefined
      updateTag.run(changes.step ?? null, hasDescription ? 1 : 0, changes.description ?? null, key)
      const row = selectRow.get(key)
      return row === undefined ? undefined : toRow(row)
    },
    async ping () {
      selectTags.get()
    },
    async close () {
      db.close()
    },
  }
}

function toRow (r: RowRecord): LeafAllocRow {
  return {
    key: r.biz_tag,
    maxId: r.max_id,
    step: Number(r.step),
    description: r.description,
    updateTime: new Date(r.update_time.replace(' ', 'T') + 'Z'), // CURRENT_TIMESTAMP is UTC
  }
}
