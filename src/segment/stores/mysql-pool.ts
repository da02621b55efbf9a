import type { Socket } from 'node:net'
import mysql, { type PoolConnection } from 'mysql2/promise'

// One mysql2 pool with the bounds mysql2 lacks: a query timeout that takes its connection for
// dead, a bounded wait for a free connection, and a close that never rejects. The segment
// store and the db-lease worker-id pool each run their statements through one.

export interface MysqlOptions {
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

/** What the pool's events hand over: mysql2's own connection, whatever its typings say. */
interface CoreConnection {
  destroy (): void
  once (event: 'end', listener: () => void): unknown
  on (event: 'error', listener: () => void): unknown
}

export function createMysqlRunner (options: MysqlOptions): MysqlRunner {
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

  return {
    run,
    async close () {
      // A connection that already died (the server or the path gone) makes end() reject; at
      // close that loses nothing, and a shutdown during a database outage must still exit 0.
      await pool.end().catch(() => {})
    },
  }
}

export interface MysqlRunner {
  /** Runs one query (or one multi-statement round trip); see run() above. */
  run<T> (sql: string, values?: unknown[]): Promise<T>
  close (): Promise<void>
}
