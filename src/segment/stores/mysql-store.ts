import type { Socket } from 'node:net'
import mysql, { type PoolConnection, type RowDataPacket, type ResultSetHeader } from 'mysql2/promise'
import type { AdaptedStep, Allocation, LeafAllocRow, SegmentStore } from '../store.js'

export interface MysqlStoreOptions {
  host: string
  port: number
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
  /** How long one query may go unanswered before its connection is taken for dead. */
  queryTimeoutMs: number
  /** How long a call waits for a pool connection; default: connect timeout + query timeout. */
  acquireTimeoutMs?: number
}

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
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

/** What the pool's events hand over: mysql2's own connection, whatever its typings say. */
interface CoreConnection {
  destroy (): void
  once (event: 'end', listener: () => void): unknown
  on (event: 'error', listener: () => void): unknown
}

function toRow (r: RowDataPacket): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

export function createMysqlStore (options: MysqlStoreOptions): SegmentStore {
  const { queryTimeoutMs, acquireTimeoutMs = options.connectTimeoutMs + options.queryTimeoutMs } = options
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

  // Connections resting in the pool. A query that times out most likely lost its path to the
  // server without a FIN or RST, and the connections opened over the same path are as dead,
  // but each would take a query timeout of its own to show it (the kernel gives up on them
  // only after ~15 minutes): close them all, and let the next calls open fresh ones.
  const idle = new Set<CoreConnection>()
  pool.on('connection', (conn) => {
    // TIMESTAMP columns come back in the session's zone: make it the one mysql2 reads them in.
    conn.query("SET time_zone = '+00:00'")
    const core = conn as unknown as CoreConnection
    const forget = () => idle.delete(core)
    core.once('end', forget)
    core.on('error', forget)
  })
  pool.on('release', (conn) => idle.add(conn as unknown as CoreConnection))
  pool.on('acquire', (conn) => idle.delete(conn as unknown as CoreConnection))

  /**
   * A pool connection within the acquire timeout. mysql2's pool has no such bound: a caller
   * waits in its queue for as long as the connections stay checked out. A connection that
   * arrives after the caller gave up goes straight back to the pool.
   */
  function acquire (): Promise<PoolConnection> {
    return new Promise((resolve, reject) => {
      let expired = false
      const timer = setTimeout(() => {
        expired = true
        reject(new Error(`no MySQL connection free within ${acquireTimeoutMs} ms`))
      }, acquireTimeoutMs)
      pool.getConnection().then((conn) => {
        if (expired) return conn.release()
        clearTimeout(timer)
        resolve(conn)
      }, (err: unknown) => {
        clearTimeout(timer)
        reject(err)
      })
    })
  }

  /**
   * Runs one query (or one multi-statement round trip) on a connection of its own, bounded by
   * the query timeout. A connection whose query failed is destroyed, never reused: after
   * mysql2's timeout it still waits for the answer (the driver only fails the callback, and
   * pool.query would never release it), and a failed reservation may hold its transaction open.
   */
  async function run<T> (sql: string, values: unknown[] = []): Promise<T> {
    const conn = await acquire()
    let result: T
    try {
      [result] = await conn.query({ sql, values, timeout: queryTimeoutMs }) as unknown as [T]
    } catch (err) {
      // destroy() only half-closes the socket, which on a dead path lingers until the kernel
      // gives up on the FIN: tear the socket down too.
      conn.destroy()
      ;(conn.connection as unknown as { stream?: Socket }).stream?.destroy()
      if ((err as { code?: string }).code === 'PROTOCOL_SEQUENCE_TIMEOUT') {
        for (const c of idle) c.destroy()
        idle.clear()
      }
      throw err
    }
    conn.release()
    return result
  }

  async function allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    const results = adapted === undefined
      ? await run<unknown[]>(ALLOCATE_BY_TABLE_STEP, [key, key])
      : await run<unknown[]>(ALLOCATE_BY_ADAPTED_STEP, [adapted.tableStep, adapted.step, key, key])
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
    async close () {
      // A connection that already died (the server or the path gone) makes end() reject; at
      // close that loses nothing, and a shutdown during a database outage must still exit 0.
      await pool.end().catch(() => {})
    },
  }
}
