import mysql, { type RowDataPacket, type ResultSetHeader } from 'mysql2/promise'
import type { Allocation, LeafAllocRow, SegmentStore } from '../store.js'

export interface MysqlStoreOptions {
  host: string
  port: number
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
}

// Java Leaf's statements (LEAF-REFERENCE.md), each reservation as one transaction. They are
// sent as one multi-statement round trip, so a slow network costs one delay per segment.
// `step > 0`: a hand-edited step of 0 or less must not move max_id (the generator refuses it).
const ALLOCATE_BY_TABLE_STEP =
  'START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ? AND step > 0; ' +
  'SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?; COMMIT'
const ALLOCATE_BY_STEP =
  'START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id + ? WHERE biz_tag = ?; ' +
  'SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?; COMMIT'

const ER_DUP_ENTRY = 1062
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

function toRow (r: RowDataPacket): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

export function createMysqlStore (options: MysqlStoreOptions): SegmentStore {
  const pool = mysql.createPool({
    host: options.host,
    port: options.port,
    user: options.user,
    password: options.password,
    database: options.database,
    connectionLimit: options.poolSize,
    connectTimeout: options.connectTimeoutMs, // mysql2's default of 10 s outlasts the request wait
    supportBigNumbers: true, // BIGINT as exact decimal strings, never a rounded number
    bigNumberStrings: true,
    multipleStatements: true, // values still go through placeholders
    timezone: 'Z',
    enableKeepAlive: true,
  })
  // TIMESTAMP columns come back in the session's zone: make it the one mysql2 reads them in.
  pool.on('connection', (conn) => { conn.query("SET time_zone = '+00:00'") })

  async function allocate (key: string, step?: number): Promise<Allocation | undefined> {
    const conn = await pool.getConnection()
    let results: unknown
    try {
      [results] = step === undefined
        ? await conn.query(ALLOCATE_BY_TABLE_STEP, [key, key])
        : await conn.query(ALLOCATE_BY_STEP, [step, key, key])
    } catch (err) {
      // The transaction may be left open on this connection: never give it back to the pool.
      conn.destroy()
      throw err
    }
    conn.release()
    const rows = (results as [ResultSetHeader, ResultSetHeader, RowDataPacket[], ResultSetHeader])[2]
    const row = rows[0]
    if (row === undefined) return undefined
    return { key: row.biz_tag, maxId: BigInt(row.max_id), step: Number(row.step) }
  }

  async function getRow (key: string): Promise<LeafAllocRow | undefined> {
    const [rows] = await pool.query<RowDataPacket[]>(`${SELECT_ROWS} WHERE biz_tag = ?`, [key])
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  return {
    async getAllTags () {
      const [rows] = await pool.query<RowDataPacket[]>('SELECT biz_tag FROM leaf_alloc')
      return rows.map((r) => r.biz_tag as string)
    },
    allocate,
    async getAllRows (): Promise<LeafAllocRow[]> {
      const [rows] = await pool.query<RowDataPacket[]>(SELECT_ROWS)
      return rows.map(toRow)
    },
    async createTag (tag) {
      try {
        await pool.query('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)',
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
      if (sets.length > 0) await pool.query(`UPDATE leaf_alloc SET ${sets.join(', ')} WHERE biz_tag = ?`, [...values, key])
      return getRow(key)
    },
    async ping () {
      await pool.query('SELECT 1 FROM leaf_alloc LIMIT 1')
    },
    async close () {
      await pool.end()
    },
  }
}
