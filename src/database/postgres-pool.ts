import pg from 'pg'
import type { Socket } from 'node:net'
import type { DatabaseTls } from '../config/database-tls.js'
import { ServerRefused, UnansweredStatement } from './errors.js'
import type { Logger } from '../logger.js'
import { mayFallBack, pgSsl, pgTlsSession, warnPlainText, PG_TLS_COLUMNS, type PgTlsRow, type TlsSession } from './tls-options.js'

// One node-postgres pool to one server, with the bounds mysql-pool.ts gives MySQL; a left
// transaction ends on the server (idle_in_transaction_session_timeout) so its locks do not
// outlive it. No backend is killed here, so an unanswered query may still run
// (why callers are safe: docs/worker-ids.md#every-statement-arriving-late-twice-or-never).

export interface PostgresOptions {
  host: string
  port: number
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
  queryTimeoutMs: number
  /** None: plain text. */
  tls?: DatabaseTls
  /** application_name of the sessions (the URL's ApplicationName); default: leaf-ts. */
  applicationName?: string
  logger?: Logger
}

/**
 * Which server answered: `system_identifier` (kept by a restart, shared by a physical standby)
 * and the timeline it writes WAL on now (a promotion moves it at once).
 */
export interface PgServer { system: string, timeline: number }

export interface PostgresRunner {
  /** One statement on a connection of its own. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<pg.QueryResult<R>>
  /** A `RETURNING ...` statement, with the identity of the server that ran it (null: none). */
  returning<R extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<pg.QueryResult<R> & { server: PgServer | null }>
  /** Rolled back, and the connection destroyed, when `fn` throws. */
  transaction<T> (fn: (q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) => Promise<T>): Promise<T>
  /** The server a connection of the pool reaches now, read afresh (null: it did not say). */
  identify (): Promise<PgServer | null>
  /** The latest connection's TLS (pg_stat_ssl); undefined before the first. */
  tlsSession (): TlsSession | undefined
  close (): Promise<void>
}

const TIMESTAMP_OID = 1114
// `timestamp` columns hold UTC (every session's TimeZone is UTC): read them as UTC, whatever
// the Node process's zone.
const types = {
  getTypeParser (oid: number, format?: 'text' | 'binary') {
    if (oid === TIMESTAMP_OID && format !== 'binary') return (text: string) => new Date(text.replace(' ', 'T') + 'Z')
    return pg.types.getTypeParser(oid, format)
  },
}

// Read afresh by each statement, never kept on a connection (a pooler may move it between
// servers). The timeline is the current WAL file's, not the last checkpoint's, which lags a
// promotion. Why: docs/production.md#postgresql-the-timeline-the-server-writes-on-now
const IDENTITY_COLUMNS = '(SELECT system_identifier::text FROM pg_control_system()) AS leaf_system, ' +
  'CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END AS leaf_wal'
const IDENTITY_SQL = `SELECT ${IDENTITY_COLUMNS}, pg_is_in_recovery() AS standby, ${PG_TLS_COLUMNS}`

interface IdentityRow { leaf_system?: unknown, leaf_wal?: unknown }

/** The server of a row with IDENTITY_COLUMNS; null when it lacks them (a standby, or no row). */
export function serverOf (row: IdentityRow | undefined): PgServer | null {
  if (row === undefined || typeof row.leaf_system !== 'string' || typeof row.leaf_wal !== 'string') return null
  const timeline = Number.parseInt(row.leaf_wal.slice(0, 8), 16)
  return Number.isInteger(timeline) && timeline > 0 ? { system: row.leaf_system, timeline } : null
}

/** No SQLSTATE means no answer: wrapped with the statement's fate. A server's error passes as is. */
function unanswered (err: unknown, sent: boolean): unknown {
  if (typeof err !== 'object' || err === null || err instanceof ServerRefused) return err
  if (typeof (err as { severity?: unknown }).severity === 'string') return err
  const message = String((err as { message?: unknown }).message)
  return sent
    ? new UnansweredStatement(`${message} (no answer: the statement may still run on the server)`, { state: 'may-still-run', why: 'no answer' }, { cause: err })
    : new UnansweredStatement(message, { state: 'not-sent' }, { cause: err })
}

/** For a checked-out connection's 'error' event: the statement that meets the broken connection reports it. */
function ignoreError (): void {}

export function createPostgresRunner (options: PostgresOptions): PostgresRunner {
  function openPool (ssl: ReturnType<typeof pgSsl>): pg.Pool {
    const opened = new pg.Pool({
      host: options.host,
      port: options.port,
      user: options.user,
      password: options.password,
      database: options.database,
      max: options.poolSize,
      connectionTimeoutMillis: options.connectTimeoutMs,
      query_timeout: options.queryTimeoutMs,
      statement_timeout: options.queryTimeoutMs,
      idle_in_transaction_session_timeout: options.connectTimeoutMs + 2 * options.queryTimeoutMs,
      options: '-c TimeZone=UTC',
      application_name: options.applicationName ?? 'leaf-ts',
      keepAlive: true,
      types,
      ssl,
    })
    // Without a listener, an idle connection that breaks would end the process.
    opened.on('error', () => {})
    return opened
  }
  let pool = openPool(pgSsl(options.tls))
  let plain = options.tls === undefined || options.tls.mode === 'disable'
  /** The TLS pool that fallback left, until it ends. */
  let left: pg.Pool | undefined
  /** Whether each connection's server says who it is (IDENTITY_COLUMNS run there). */
  const saysWho = new WeakMap<pg.PoolClient, boolean>()
  let session: TlsSession | undefined

  // Under `prefer`, the first refusal swaps in a plain-text pool; calls refused meanwhile retry there once.
  async function connect (): Promise<pg.PoolClient> {
    const started = pool
    try {
      return await started.connect()
    } catch (err) {
      if (pool === started) {
        if (plain || !mayFallBack(options.tls, err)) throw err
        fallBack()
      } else {
        endWhenDrained(started)
      }
      return await pool.connect()
    }
  }

  function fallBack (): void {
    plain = true
    warnPlainText(options.logger, options, options.tls as DatabaseTls, 'sslmode=require')
    left = pool
    pool = openPool(false)
    endWhenDrained(left)
  }

  // Not at once: node-postgres' end() leaves queued calls waiting out their connect timeout.
  function endWhenDrained (tlsPool: pg.Pool): void {
    if (tlsPool !== left || tlsPool.waitingCount > 0 || tlsPool.totalCount > 0) return
    left = undefined
    tlsPool.end().catch(() => {})
  }

  /** The server `client` reaches now; a standby refused (ServerRefused); null when it will not say. */
  async function identifyOn (client: pg.PoolClient): Promise<PgServer | null> {
    let server: PgServer | null = null
    try {
      const { rows } = await client.query<IdentityRow & { standby: boolean } & PgTlsRow>(IDENTITY_SQL)
      const row = rows[0]
      session = pgTlsSession(row)
      if (row?.standby === true) {
        throw new ServerRefused('LEAF_SERVER_READ_ONLY', `${options.host}:${options.port} is a standby (pg_is_in_recovery()): nothing is written through it`)
      }
      server = serverOf(row)
    } catch (err) {
      // A server or proxy that will not say who it is.
      if (err instanceof ServerRefused || typeof (err as { severity?: unknown }).severity !== 'string') throw err
    }
    saysWho.set(client, server !== null)
    return server
  }

  // The pool listens for errors on idle connections only: a checked-out one ended by its server
  // (FATAL 57P01) would end the process. The statement in flight, or the next, fails instead.
  async function checkOut (): Promise<pg.PoolClient> {
    let client: pg.PoolClient
    try {
      client = await connect()
    } catch (err) {
      throw unanswered(err, false)
    }
    client.on('error', ignoreError)
    return client
  }

  function checkIn (client: pg.PoolClient, err?: unknown): void {
    client.off('error', ignoreError)
    if (err === undefined) {
      client.release()
      return
    }
    client.release(err as Error)
    // On a dead path the FIN of a graceful end would linger: tear the socket down.
    ;(client as unknown as { connection?: { stream?: Socket } }).connection?.stream?.destroy()
  }

  async function withClient<T> (fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await checkOut()
    let sent = false
    try {
      if (!saysWho.has(client)) await identifyOn(client)
      sent = true
      const result = await fn(client)
      checkIn(client)
      return result
    } catch (err) {
      checkIn(client, err)
      throw unanswered(err, sent)
    }
  }

  return {
    async query<R extends pg.QueryResultRow> (sql: string, values?: unknown[]) {
      return await withClient((client) => client.query<R>(sql, values))
    },
    async returning<R extends pg.QueryResultRow> (sql: string, values?: unknown[]) {
      return await withClient(async (client) => {
        // The identity of the server that made the change, in the same round trip.
        const who = saysWho.get(client) === true
        const result = await client.query<R & IdentityRow>(who ? `${sql}, ${IDENTITY_COLUMNS}` : sql, values)
        return Object.assign(result, { server: who ? serverOf(result.rows[0]) : null })
      })
    },
    async transaction<T> (fn: (q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) => Promise<T>): Promise<T> {
      return await withClient(async (client) => {
        await client.query('BEGIN')
        const out = await fn((sql, values) => client.query(sql, values))
        await client.query('COMMIT')
        return out
      })
    },
    async identify () {
      const client = await checkOut()
      try {
        const server = await identifyOn(client)
        checkIn(client)
        return server
      } catch (err) {
        checkIn(client, err)
        throw err
      }
    },
    tlsSession: () => session,
    async close () {
      // A connection that already died makes end() reject; at close that loses nothing.
      await Promise.all([pool, left].map(async (p) => await p?.end().catch(() => {})))
    },
  }
}

/** The store a PostgreSQL server's rows are: its cluster's system identifier and timeline. */
export function pgStoreId (server: PgServer): string {
  return `postgres system ${server.system} timeline ${server.timeline}`
}
