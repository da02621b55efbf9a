import pg from 'pg'
import type { Socket } from 'node:net'
import type { UnansweredError } from '../../driver-errors.js'

// One node-postgres pool to one PostgreSQL server, with the bounds the segment store, the
// db-lease pool and the disposable source need (as mysql-pool.ts gives MySQL):
// - a free connection is waited for, and one is opened, within the connect timeout
//   (node-postgres' connectionTimeoutMillis bounds both);
// - each query within the query timeout, on the client (query_timeout) and on the server
//   (statement_timeout); a transaction left open by a client that vanished ends on the server
//   after idle_in_transaction_session_timeout, so its row locks do not outlive it;
// - a connection whose query failed is destroyed, never reused.
// A query that got no answer (a timeout, a connection lost under it) may still run: its bytes
// can reach the server after the caller gave up. Nothing here ends its backend (MySQL's pool
// kills its thread), so its error says `mayStillRun`, and the callers are written to be safe
// either way: an allocation that lands late only skips a segment; a lease claim that may land
// waits out its TTL (recyclable-claim.ts).

export interface PostgresOptions {
  host: string
  port: number
  user: string
  password: string
  database: string
  connectTimeoutMs: number
  poolSize: number
  queryTimeoutMs: number
}

/** Which server a connection reached: `system_identifier` (kept by a restart, shared by a physical standby) and timeline (a promotion moves it). */
export interface PgServer { system: string, timeline: number }

export interface PostgresRunner {
  /** One statement on a connection of its own. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<pg.QueryResult<R> & { server: PgServer | null }>
  /** `fn` inside BEGIN ... COMMIT on one connection; rolled back (and the connection destroyed) when it throws. */
  transaction<T> (fn: (q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) => Promise<T>): Promise<T>
  /** The server a new connection reaches now (null: it did not say). */
  identify (): Promise<PgServer | null>
  close (): Promise<void>
}

/** SQLSTATE 25006, read_only_sql_transaction: a standby (or default_transaction_read_only) refused a write. */
export const PG_READ_ONLY = '25006'

const TIMESTAMP_OID = 1114
// `timestamp` columns hold UTC (every session's TimeZone is UTC): read them as UTC, whatever
// the Node process's zone.
const types = {
  getTypeParser (oid: number, format?: 'text' | 'binary') {
    if (oid === TIMESTAMP_OID && format !== 'binary') return (text: string) => new Date(text.replace(' ', 'T') + 'Z')
    return pg.types.getTypeParser(oid, format)
  },
}

const IDENTITY_SQL = 'SELECT s.system_identifier::text AS system, c.timeline_id AS timeline, pg_is_in_recovery() AS standby FROM pg_control_system() s, pg_control_checkpoint() c'

/** Marks an error with no answer from the server (no SQLSTATE): the statement may still run. */
function unanswered (err: unknown, sent: boolean): unknown {
  if (typeof err !== 'object' || err === null) return err
  const e = err as Partial<UnansweredError> & { severity?: unknown, notSent?: boolean }
  if (typeof e.severity === 'string') return err // the server answered with an error: it ran, and failed
  if (sent) {
    e.mayStillRun = true
    e.message = `${String(e.message)} (no answer: the statement may still run on the server)`
  } else {
    e.notSent = true
  }
  return err
}

export function createPostgresRunner (options: PostgresOptions): PostgresRunner {
  const pool = new pg.Pool({
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
    keepAlive: true,
    types,
  })
  // A pooled connection that breaks while idle (the server restarted) is reported here; the
  // pool drops it, and the next call opens a fresh one. Without a listener it would end the process.
  pool.on('error', () => {})
  const identities = new WeakMap<pg.PoolClient, PgServer | null>()

  async function setUp (client: pg.PoolClient): Promise<void> {
    let server: PgServer | null = null
    try {
      const { rows } = await client.query<{ system: string, timeline: number, standby: boolean }>(IDENTITY_SQL)
      const row = rows[0]
      if (row?.standby === true) {
        throw Object.assign(new Error(`${options.host}:${options.port} is a standby (pg_is_in_recovery()): nothing is written through it`), { code: PG_READ_ONLY, severity: 'ERROR' })
      }
      if (row !== undefined) server = { system: row.system, timeline: Number(row.timeline) }
    } catch (err) {
      // A server (or proxy) that will not say who it is: no identity, as a MySQL proxy without SHOW GLOBAL STATUS.
      if ((err as { code?: unknown }).code === PG_READ_ONLY || typeof (err as { severity?: unknown }).severity !== 'string') throw err
    }
    identities.set(client, server)
  }

  async function withClient<T> (fn: (client: pg.PoolClient) => Promise<T>): Promise<{ result: T, server: PgServer | null }> {
    let client: pg.PoolClient
    try {
      client = await pool.connect()
    } catch (err) {
      throw unanswered(err, false)
    }
    let sent = false
    try {
      if (!identities.has(client)) await setUp(client)
      sent = true
      const result = await fn(client)
      const server = identities.get(client) ?? null
      client.release()
      return { result, server }
    } catch (err) {
      client.release(err as Error)
      // On a dead path the FIN of a graceful end would linger: tear the socket down.
      ;(client as unknown as { connection?: { stream?: Socket } }).connection?.stream?.destroy()
      throw unanswered(err, sent)
    }
  }

  return {
    async query<R extends pg.QueryResultRow> (sql: string, values?: unknown[]) {
      const { result, server } = await withClient((client) => client.query<R>(sql, values))
      return Object.assign(result, { server })
    },
    async transaction<T> (fn: (q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) => Promise<T>): Promise<T> {
      const { result } = await withClient(async (client) => {
        await client.query('BEGIN')
        const out = await fn((sql, values) => client.query(sql, values))
        await client.query('COMMIT')
        return out
      })
      return result
    },
    async identify () {
      const client = await pool.connect().catch((err: unknown) => { throw unanswered(err, false) })
      try {
        await setUp(client)
        client.release()
      } catch (err) {
        client.release(err as Error)
        throw err
      }
      return identities.get(client) ?? null
    },
    async close () {
      // A connection that already died makes end() reject; at close that loses nothing.
      await pool.end().catch(() => {})
    },
  }
}

/** The store a PostgreSQL server's rows are: its cluster's system identifier and timeline. */
export function pgStoreId (server: PgServer): string {
  return `postgres system ${server.system} timeline ${server.timeline}`
}
