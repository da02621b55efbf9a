import type { RowDataPacket, ResultSetHeader } from 'mysql2/promise'
import { createMysqlRunner, type MysqlOptions } from './mysql-pool.js'
import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type SegmentStore, type UnusedRange } from '../store.js'

export type MysqlStoreOptions = MysqlOptions

// Java Leaf's statements (LEAF-REFERENCE.md), each reservation as one transaction. They are
// sent as one multi-statement round trip, so a slow network costs one delay per segment.
// `step > 0`: a hand-edited step of 0 or less must not move max_id (the generator refuses it).
const ALLOCATE_BY_TABLE_STEP =
  'START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ? AND step > 0; ' +
  'SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?; COMMIT'
// Leaf's custom step, unless the table's step is no longer the one it was adapted from.
const ALLOCATE_BY_ADAPTED_STEP =
  'START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id + IF(step = ?, ?, step) WHERE biz_tag = ? AND step > 0; ' +
  'SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?; COMMIT'

/** The MySQL DDL, as shipped in sql/leaf_alloc_parked.sql (test/stores.test.ts compares them). */
export const MYSQL_PARKED_DDL = `CREATE TABLE IF NOT EXISTS \`leaf_alloc_parked\` (
  \`biz_tag\` varchar(128) NOT NULL,
  \`first_id\` bigint(20) NOT NULL,
  \`end_id\` bigint(20) NOT NULL,
  \`owner\` varchar(64) NOT NULL,
  \`parked_at\` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (\`biz_tag\`, \`first_id\`),
  KEY \`owner_tag\` (\`owner\`, \`biz_tag\`)
) ENGINE=InnoDB`

// The owner's rows, locked, and every row of the owner and every too old one of the tag
// deleted, in one transaction: a second claimer waits for the lock, then finds nothing.
const CLAIM_PARKED =
  'START TRANSACTION; ' +
  'SELECT first_id, end_id, parked_at >= NOW(3) - INTERVAL ? MICROSECOND AS fresh FROM leaf_alloc_parked ' +
  'WHERE biz_tag = ? AND owner = ? ORDER BY first_id FOR UPDATE; ' +
  'DELETE FROM leaf_alloc_parked WHERE biz_tag = ? AND (owner = ? OR parked_at < NOW(3) - INTERVAL ? MICROSECOND); COMMIT'

const ER_NO_SUCH_TABLE = 1146
// A table the user may not read, write or delete from (a DBA made it with fewer grants):
// the hand-over is off, as without the table, rather than every first load failing.
const ER_DBACCESS_DENIED_ERROR = 1044
const ER_TABLEACCESS_DENIED_ERROR = 1142
const ER_COLUMNACCESS_DENIED_ERROR = 1143
const ER_DUP_ENTRY = 1062
/** `max_id + step` past BIGINT's range. */
const ER_DATA_OUT_OF_RANGE = 1690
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

function toRow (r: RowDataPacket): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

export function createMysqlStore (options: MysqlStoreOptions): SegmentStore {
  const { run, close } = createMysqlRunner(options)
  /** Set once leaf_alloc_parked turned out missing and not creatable: no hand-over. */
  let noParkedTable = false

  /** Runs `fn` on leaf_alloc_parked, creating the table first when it is missing; undefined when it may not be. */
  async function onParkedTable<T> (fn: () => Promise<T>): Promise<T | undefined> {
    if (noParkedTable) return undefined
    try {
      return await fn()
    } catch (err) {
      const errno = (err as { errno?: number }).errno
      if (errno === ER_DBACCESS_DENIED_ERROR || errno === ER_TABLEACCESS_DENIED_ERROR || errno === ER_COLUMNACCESS_DENIED_ERROR) {
        noParkedTable = true
        return undefined
      }
      if (errno !== ER_NO_SUCH_TABLE) throw err
    }
    try {
      await run(MYSQL_PARKED_DDL)
    } catch {
      noParkedTable = true
      return undefined
    }
    return await fn()
  }

  async function allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    let results: unknown[]
    try {
      results = adapted === undefined
        ? await run<unknown[]>(ALLOCATE_BY_TABLE_STEP, [key, key])
        : await run<unknown[]>(ALLOCATE_BY_ADAPTED_STEP, [adapted.tableStep, adapted.step, key, key])
    } catch (err) {
      if ((err as { errno?: number }).errno === ER_DATA_OUT_OF_RANGE) throw new IdSpaceEnded(key)
      throw err
    }
    const rows = (results as [ResultSetHeader, ResultSetHeader, RowDataPacket[], ResultSetHeader])[2]
    const row = rows[0]
    if (row === undefined) return undefined
    return { key: row.biz_tag, maxId: BigInt(row.max_id), step: Number(row.step) }
  }

  async function getRow (key: string): Promise<LeafAllocRow | undefined> {
    const rows = await run<RowDataPacket[]>(`${SELECT_ROWS} WHERE biz_tag = ?`, [key])
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  return {
    async getAllTags () {
      const rows = await run<RowDataPacket[]>('SELECT biz_tag FROM leaf_alloc')
      return rows.map((r) => r.biz_tag as string)
    },
    allocate,
    async giveBack (key, end, firstUnused) {
      const result = await run<ResultSetHeader>('UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ? AND max_id = ?',
        [String(firstUnused), key, String(end)])
      return result.affectedRows === 1
    },
    async park (key, owner, ranges) {
      if (ranges.length === 0) return true
      const values = ranges.flatMap((r) => [key, String(r.first), String(r.end), owner])
      const done = await onParkedTable(() => run(`INSERT INTO leaf_alloc_parked (biz_tag, first_id, end_id, owner) VALUES ${ranges.map(() => '(?, ?, ?, ?)').join(', ')}`, values))
      return done !== undefined
    },
    async claimParked (key, owner, maxAgeMs) {
      const micros = maxAgeMs * 1000
      const results = await onParkedTable(() => run<unknown[]>(CLAIM_PARKED, [micros, key, owner, key, owner, micros]))
      if (results === undefined) return undefined
      const rows = (results as [ResultSetHeader, RowDataPacket[]])[1]
      return rows.filter((r) => Number(r.fresh) === 1).map((r): UnusedRange => ({ first: BigInt(r.first_id), end: BigInt(r.end_id) }))
    },
    async getAllRows (): Promise<LeafAllocRow[]> {
      const rows = await run<RowDataPacket[]>(SELECT_ROWS)
      return rows.map(toRow)
    },
    getTag: getRow,
    async createTag (tag) {
      try {
        await run('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)',
          [tag.key, String(tag.maxId), tag.step, tag.description])
      } catch (err) {
        if ((err as { errno?: number }).errno === ER_DUP_ENTRY) return undefined
        throw err
      }
      return getRow(tag.key)
    },
    async updateTag (key, changes) {
      const sets: string[] = []
      const values: unknown[] = []
      if (changes.step !== undefined) { sets.push('step = ?'); values.push(changes.step) }
      if (changes.description !== undefined) { sets.push('description = ?'); values.push(changes.description) }
      if (sets.length > 0) await run(`UPDATE leaf_alloc SET ${sets.join(', ')} WHERE biz_tag = ?`, [...values, key])
      return getRow(key)
    },
    async ping () {
      await run('SELECT 1 FROM leaf_alloc LIMIT 1')
    },
    close,
  }
}
