import type { RowDataPacket, ResultSetHeader } from 'mysql2/promise'
import { createMysqlRunner, type MysqlOptions } from './mysql-pool.js'
import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type SegmentStore } from '../store.js'

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

const ER_DUP_ENTRY = 1062
/** `max_id + step` past BIGINT's range. */
const ER_DATA_OUT_OF_RANGE = 1690
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

function toRow (r: RowDataPacket): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

export function createMysqlStore (options: MysqlStoreOptions): SegmentStore {
  const { run, close } = createMysqlRunner(options)

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
    async getAllRows (): Promise<LeafAllocRow[]> {
      const rows = await run<RowDataPacket[]>(SELECT_ROWS)
      return rows.map(toRow)
    },
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
