import type { Socket } from 'node:net'
import mysql, { type PoolConnection } from 'mysql2/promise'
import type { DatabaseTls } from '../config/database-tls.js'
import type { MysqlHost } from '../config/jdbc-url.js'
import { codeOf, MysqlError } from './driver-errors.js'
import { DatabaseError, ServerRefused, UnansweredStatement } from './errors.js'
import type { Logger } from '../logger.js'
import { killThread, type KillResult } from './kill-thread.js'
import { IDENTITY_SQL, identityOf, storeIdOf, type ServerIdentity } from './server-identity.js'
import { mayFallBack, mysqlSsl, noteDeclined, mysqlTlsSession, warnPlainText, MYSQL_TLS_SQL, type TlsSession } from './tls-options.js'

// One mysql2 pool to one server, with the bounds mysql2 lacks: a query timeout, a bounded wait
// for a free connection, a close that never rejects. A statement that got no answer may still
// run, so its server thread is killed (kill-thread.ts) and its UnansweredStatement says whether
// it may still run. Why: docs/worker-ids.md#every-statement-arriving-late-twice-or-never

/** One server's pool; mysql-hosts.ts's MysqlOptions name several. */
export interface ServerOptions extends MysqlHost {
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
  /** How long one query may go unanswered before its connection is taken for dead. */
  queryTimeoutMs: number
  /** TLS (tls-options.ts); none: plain text. */
  tls?: DatabaseTls
  /** How long a call waits for a pool connection; default: connect timeout + query timeout. */
  acquireTimeoutMs?: number
  /** True for a store this instance failed over from (segment/host-fence.ts): LEAF_STORE_LEFT. */
  refuse?: (server: ServerIdentity) => boolean
  /** Told (at warn) when TLS is preferred and the server offers none. */
  logger?: Logger
}

/** TIMESTAMP columns in UTC, as mysql2 is told to read them. */
const SESSION_ZONE = "SET time_zone = '+00:00'"

/** What the pool's events hand over: mysql2's own connection, whatever its typings say. */
interface CoreConnection {
  destroy (): void
  once (event: 'end', listener: () => void): unknown
  on (event: 'error', listener: () => void): unknown
}

export function createServerRunner (options: ServerOptions): MysqlRunner {
  const { queryTimeoutMs, acquireTimeoutMs = options.connectTimeoutMs + options.queryTimeoutMs } = options
  // Idle connections are closed when a query times out: they most likely lost the same path.
  // Why: docs/segment-mode.md (dead MySQL connections).
  const idle = new Set<CoreConnection>()
  /** The server each pool connection reached, from its first round trip (null: it did not say). */
  const identities = new WeakMap<object, ServerIdentity | null>()
  let session: TlsSession | undefined

  function openPool (ssl: mysql.SslOptions | undefined): mysql.Pool {
    const opened = mysql.createPool({
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
      ...(ssl === undefined ? {} : { ssl }),
    })
    opened.on('connection', (conn) => {
      const core = conn as unknown as CoreConnection
      const forget = () => idle.delete(core)
      core.once('end', forget)
      core.on('error', forget)
    })
    opened.on('release', (conn) => idle.add(conn as unknown as CoreConnection))
    opened.on('acquire', (conn) => idle.delete(conn as unknown as CoreConnection))
    return opened
  }
  let pool = openPool(mysqlSsl(options.tls))
  let plain = options.tls === undefined || options.tls.mode === 'disable'

  // Under `prefer`, the first call the server refuses TLS swaps in a plain-text pool; calls
  // that failed meanwhile (by the refusal or "Pool is closed.") retry once in the new pool.
  async function getConnection (): Promise<PoolConnection> {
    const started = pool
    try {
      return await started.getConnection()
    } catch (err) {
      if (pool === started) {
        if (plain || !mayFallBack(options.tls, err)) throw err
        fallBack()
      }
      return await pool.getConnection()
    }
  }

  function fallBack (): void {
    plain = true
    noteDeclined(options)
    warnPlainText(options.logger, options, options.tls as DatabaseTls, 'sslMode=REQUIRED')
    const tlsPool = pool
    pool = openPool(undefined)
    tlsPool.end().catch(() => {})
  }

  // mysql2's pool queue has no time bound; a connection that arrives late goes straight back.
  function acquire (): Promise<PoolConnection> {
    return new Promise((resolve, reject) => {
      let expired = false
      const timer = setTimeout(() => {
        expired = true
        reject(new DatabaseError('LEAF_NO_CONNECTION_FREE', `no MySQL connection free within ${acquireTimeoutMs} ms`))
      }, acquireTimeoutMs)
      getConnection().then((conn) => {
        if (expired) return conn.release()
        clearTimeout(timer)
        resolve(conn)
      }, (err: unknown) => {
        clearTimeout(timer)
        reject(err)
      })
    })
  }

  // A connection whose query failed is destroyed, never reused: after mysql2's timeout it still
  // waits for the answer, and a failed transaction may still be open on it.
  function query<T> (sql: string | readonly Statement[], values: unknown[] = []): Promise<Answer<T>> {
    return execute<T>(sql, values, false)
  }

  /** `sql` (none: only the first round trip); `fresh` repeats that round trip (the server may have turned read-only). */
  async function execute<T> (sql: string | readonly Statement[] | undefined, values: unknown[], fresh: boolean): Promise<Answer<T>> {
    let conn: PoolConnection
    try {
      conn = await acquire()
    } catch (err) {
      throw notSent(err)
    }
    let result: T | undefined
    let sent = false
    try {
      if (fresh || !identities.has(conn.connection)) {
        // Sent on its own, bounded: queued behind a statement mysql2 gave up on, it would wait unbounded.
        await setUp(conn)
      }
      const reached = identities.get(conn.connection)
      if (reached !== undefined && reached !== null && options.refuse?.(reached) === true) {
        throw new ServerRefused('LEAF_STORE_LEFT', `${options.host}:${options.port} is ${storeIdOf(reached)}, a store this instance failed over from: nothing is written through it (leaf.segment.trusted-stores)`)
      }
      sent = sql !== undefined
      result = sql === undefined
        ? undefined
        : typeof sql === 'string'
          ? await send<T>(conn, sql, values)
          : await transaction(conn, sql) as T
    } catch (err) {
      const threadId = conn.threadId
      // destroy() only half-closes the socket, which on a dead path lingers until the kernel
      // gives up on the FIN: tear the socket down too.
      conn.destroy()
      ;(conn.connection as unknown as { stream?: Socket }).stream?.destroy()
      const timedOut = codeOf(err) === 'PROTOCOL_SEQUENCE_TIMEOUT'
      if (timedOut) {
        for (const c of idle) c.destroy()
        idle.clear()
      }
      if (err instanceof ServerRefused) throw err
      // A server error is an answer: the statement ran (and failed). Without one, it may run yet.
      const noAnswer = threadId !== null && (timedOut || (err as { fatal?: boolean }).fatal === true)
      if (!sent) throw notSent(err, noAnswer ? ' (never sent: its connection\'s first round trip got no answer)' : '')
      if (noAnswer) throw await unanswered(err, threadId, identities.get(conn.connection) ?? null)
      throw err
    }
    const server = identities.get(conn.connection) ?? null
    conn.release()
    return { result: result as T, server }
  }

  async function send<T> (conn: PoolConnection, sql: string, values: unknown[]): Promise<T> {
    const [result] = await conn.query({ sql, values, timeout: queryTimeoutMs }) as unknown as [T]
    return result
  }

  // One round trip, except on Galera (or an unknown server): there a multi-statement
  // transaction can lose a conflict unreported. Why: docs/production.md#galera
  async function transaction (conn: PoolConnection, statements: readonly Statement[]): Promise<unknown[]> {
    const identity = identities.get(conn.connection)
    if (identity !== undefined && identity !== null && identity.cluster === undefined) {
      return await send<unknown[]>(conn, statements.map((st) => st.sql).join('; '), statements.flatMap((st) => st.values ?? []))
    }
    const results: unknown[] = []
    for (const st of statements) results.push(await send(conn, st.sql, st.values ?? []))
    return results
  }

  /** Kills the server thread of a statement that got no answer. */
  async function unanswered (err: unknown, threadId: number, identity: ServerIdentity | null): Promise<UnansweredStatement> {
    const killed = killThread(options, threadId, identity)
    kills.add(killed)
    const result = await killed
    kills.delete(killed)
    const message = (err as Error).message
    switch (result.outcome) {
      case 'killed':
        return new UnansweredStatement(`${message} (its server thread ${threadId} was killed: the statement ran before, or never will)`,
          { state: 'ended', how: 'killed', threadId }, { cause: err })
      case 'restarted':
        return new UnansweredStatement(`${message} (its server restarted since, ending thread ${threadId}: the statement ran before, or never will)`,
          { state: 'ended', how: 'restarted', threadId }, { cause: err })
      case 'not-killed':
        return new UnansweredStatement(`${message} (it may still run on the server: its thread ${threadId} could not be killed: ${result.reason})`,
          { state: 'may-still-run', why: `its thread ${threadId} could not be killed: ${result.reason}` }, { cause: err })
    }
  }

  // A read-only server is refused: read_only does not bind a user with SUPER.
  async function setUp (conn: PoolConnection): Promise<void> {
    let identity: ServerIdentity | null
    try {
      const [setup] = await conn.query({ sql: `${SESSION_ZONE}; ${IDENTITY_SQL}; ${MYSQL_TLS_SQL}`, timeout: queryTimeoutMs }) as unknown as [unknown[]]
      identity = identityOf(setup.slice(1, 3)) ?? null
      session = mysqlTlsSession(setup[3])
    } catch (err) {
      // A proxy without SHOW GLOBAL STATUS: the time zone alone, and no kills on this connection.
      const e = err as { errno?: unknown, fatal?: unknown }
      if (typeof e.errno !== 'number' || e.fatal === true || codeOf(err) === MysqlError.WSREP_NOT_READY) throw err
      await conn.query({ sql: SESSION_ZONE, timeout: queryTimeoutMs })
      identity = null
    }
    if (identity?.readOnly === true) {
      throw new ServerRefused('LEAF_SERVER_READ_ONLY', `${options.host}:${options.port} is read-only (@@read_only = 1): nothing is written through it`)
    }
    identities.set(conn.connection, identity)
  }

  const kills = new Set<Promise<KillResult>>()

  return {
    query,
    async identify () {
      return (await execute(undefined, [], true)).server
    },
    tlsSession: () => session,
    async run<T> (sql: string | readonly Statement[], values?: unknown[]) {
      return (await query<T>(sql, values)).result
    },
    async close () {
      await Promise.all([...kills])
      // A shutdown during a database outage must still exit 0.
      await pool.end().catch(() => {})
    },
  }
}

/** A result, and the server that answered (null: it did not say who it is). */
export interface Answer<T> { result: T, server: ServerIdentity | null }

/** One statement of a transaction. */
export interface Statement { sql: string, values?: unknown[] }

export interface MysqlRunner {
  /** One query, or a transaction's statements (their results in order). */
  run<T> (sql: string | readonly Statement[], values?: unknown[]): Promise<T>
  /** The same, with the server that ran it. */
  query<T> (sql: string | readonly Statement[], values?: unknown[]): Promise<Answer<T>>
  /** The server a connection reaches now, read afresh (refused if it turned read-only). */
  identify (): Promise<ServerIdentity | null>
  /** The TLS of the latest connection set up; undefined before the first. */
  tlsSession (): TlsSession | undefined
  close (): Promise<void>
}

/** The driver's `err` for a statement that never left: another host may run it instead. */
function notSent (err: unknown, why = ''): UnansweredStatement {
  return new UnansweredStatement(`${(err as Error).message}${why}`, { state: 'not-sent' }, { cause: err })
}
