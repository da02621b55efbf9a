import pg from 'pg'
import type { Socket } from 'node:net'
import type { DatabaseTls } from '../config/database-tls.js'
import { ServerRefused, UnansweredStatement } from './errors.js'
import type { Logger } from '../logger.js'
import { mayFallBack, pgSsl, pgTlsSession, warnPlainText, PG_TLS_COLUMNS, type PgTlsRow, type TlsSession } from './tls-options.js'

// One node-postgres pool to one PostgreSQL server, with the bounds mysql-pool.ts gives MySQL:
// a connection within the connect timeout (connectionTimeoutMillis bounds the wait and the
// opening); each query within the query timeout, on the client (query_timeout) and on the
// server (statement_timeout); a transaction its client left ends on the server after
// idle_in_transaction_session_timeout, so its row locks do not outlive it; a connection whose
// query failed is destroyed. Nothing here ends the backend of a query that got no answer, so
// its UnansweredStatement says it may still run (docs/worker-ids.md says why callers are safe).

export interface PostgresOptions {
  host: string
  port: number
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
  queryTimeoutMs: number
  /** TLS (tls-options.ts); none: plain text. */
  tls?: DatabaseTls
  /** application_name of the sessions (the URL's ApplicationName); default: leaf-ts. */
  applicationName?: string
  /** Told (at warn) when TLS is preferred and the server offers none. */
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
  /**
   * One statement ending in `RETURNING ...`, with the identity of the server that ran it read
   * by the same statement (null: no row returned, or the server will not say who it is).
   */
  returning<R extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<pg.QueryResult<R> & { server: PgServer | null }>
  /** `fn` inside BEGIN ... COMMIT on one connection; rolled back (and the connection destroyed) when it throws. */
  transaction<T> (fn: (q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) => Promise<T>): Promise<T>
  /** The server a connection of the pool reaches now, read afresh (null: it did not say). */
  identify (): Promise<PgServer | null>
  /** The TLS of the latest connection opened, as the server reports it (pg_stat_ssl); undefined before the first. */
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

// The identity, read afresh by every statement that needs it, never kept on a connection: a
// connection may outlive what it tells (a pooler such as PgBouncer moves a client's statements
// between servers), and nothing is saved by keeping it (a few microseconds on the server).
// The timeline is the one WAL is written on now, the first 8 hex digits of the current WAL
// file's name (PostgreSQL 15 names it by the insertion timeline). Not pg_control_checkpoint()'s:
// after a promotion, that stays on the old timeline until the end-of-recovery checkpoint ends,
// seconds on an idle server and up to 0.9 x checkpoint_timeout with dirty buffers, and
// meanwhile the promoted server would pass for its old primary (docs/production.md). A standby
// has no current WAL position: its timeline column is null.
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

/**
 * The driver's `err` wrapped with the statement's fate when the server sent no answer (no
 * SQLSTATE): never sent, or it may still run. A server's error (it ran, and failed) and a
 * refused server pass as they are.
 */
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
    // A pooled connection that breaks while idle (the server restarted) is reported here; the
    // pool drops it, and the next call opens a fresh one. Without a listener it would end the process.
    opened.on('error', () => {})
    return opened
  }
  let pool = openPool(pgSsl(options.tls))
  /** TLS preferred and the server offers none: the pool was opened again in plain text. */
  let plain = options.tls === undefined || options.tls.mode === 'disable'
  /** The TLS pool that fallback left, until it ends. */
  let left: pg.Pool | undefined
  /** Per connection, once: whether its server says who it is (IDENTITY_COLUMNS run there). */
  const saysWho = new WeakMap<pg.PoolClient, boolean>()
  /** The TLS of the latest connection identified. */
  let session: TlsSession | undefined

  /**
   * A pool connection; under `prefer`, in plain text from the first server that says it has no
   * TLS. Calls started at once on a fresh runner all start on the TLS pool: the first refused
   * swaps it, and the others, refused in turn, go on once in the pool that replaced it.
   */
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

  /**
   * Ends the pool left once no call waits on it. Not at once: node-postgres' end() leaves the
   * calls in its queue waiting out their connect timeout; while it is open, each gets a
   * connection of its own, refused as the first was, and goes on in the new pool.
   */
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
      // A server (or proxy) that will not say who it is: no identity, as a MySQL proxy without SHOW GLOBAL STATUS.
      if (err instanceof ServerRefused || typeof (err as { severity?: unknown }).severity !== 'string') throw err
    }
    saysWho.set(client, server !== null)
    return server
  }

  /**
   * A connection of the pool, checked out. The pool listens for errors on its idle connections
   * only: one checked out whose server ends it between two statements (a postmaster killed, the
   * `FATAL 57P01` it sends) emits 'error', which without a listener ends the process. The
   * listener drops it: the statement in flight, or the next one, fails with it instead.
   */
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
        // The identity in the statement's own RETURNING: the server and timeline that made
        // the change, in the same round trip.
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
