import type mysql from 'mysql2/promise'
import { describeCause } from './driver-errors.js'
import { withTimeout } from '../timers.js'
import type { ServerOptions } from './mysql-pool.js'
import { IDENTITY_SQL, identityOf, storeIdOf } from './server-identity.js'
import { openMysqlConnection } from './tls-options.js'

// Two writable hosts in one list would let two instances allocate the same ranges, so every
// host is read (docs/production.md#host-lists-that-cannot-split), over a connection of its own:
// the pool's refuse a read-only server, and a census must see it. SHOW VARIABLES, because it
// skips a variable the server lacks (MariaDB has no super_read_only) without an error.

const SWITCHES_SQL = "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('super_read_only', 'innodb_read_only')"

/** One host of a store's list, as a census read it. */
export interface HostState {
  host: string
  /** `unknown`: no answer within the query timeout, or an error (`error`). */
  state: 'writable' | 'read-only' | 'unknown'
  store?: string
  /** Two addresses of one server give one; a Galera cluster's nodes are one store, writable by design. */
  server?: string
  error?: string
}

type CensusOptions = Pick<ServerOptions, 'host' | 'port' | 'user' | 'password' | 'database' | 'connectTimeoutMs' | 'queryTimeoutMs' | 'tls'>

export function hostName (h: { host: string, port: number }): string {
  return `${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}`
}

/** One host's state: never rejects, and settles within the connect timeout and the query timeout. */
export async function readHost (options: CensusOptions): Promise<HostState> {
  const host = hostName(options)
  const boundMs = options.connectTimeoutMs + options.queryTimeoutMs
  let conn: mysql.Connection | undefined
  const read = (async () => {
    conn = await openMysqlConnection({
      host: options.host,
      port: options.port,
      user: options.user,
      password: options.password,
      database: options.database,
      connectTimeout: options.connectTimeoutMs,
      multipleStatements: true,
      supportBigNumbers: true,
      bigNumberStrings: true,
    }, options.tls)
    const [results] = await conn.query({ sql: `${IDENTITY_SQL}; ${SWITCHES_SQL}`, timeout: options.queryTimeoutMs }) as unknown as [unknown[]]
    return results
  })()
  try {
    const results = await withTimeout(read, boundMs, `no answer within ${boundMs} ms`)
    const identity = identityOf(results.slice(0, 2))
    if (identity === undefined) return { host, state: 'unknown', error: 'the server did not say who it is' }
    const switches = new Map(((results[2] ?? []) as { Variable_name?: unknown, Value?: unknown }[]).map((r) => [String(r.Variable_name).toLowerCase(), String(r.Value).toUpperCase()]))
    const readOnly = identity.readOnly || switches.get('super_read_only') === 'ON' || switches.get('innodb_read_only') === 'ON'
    const store = storeIdOf(identity)
    return {
      host,
      state: readOnly ? 'read-only' : 'writable',
      store,
      server: identity.cluster === undefined ? `${store} at ${identity.host}:${identity.port}` : store,
    }
  } catch (err) {
    return { host, state: 'unknown', error: describeCause(err) }
  } finally {
    // destroy(), not end(): a server that stopped answering would hold end() unbounded.
    read.then(() => conn?.destroy(), () => conn?.destroy())
  }
}

export function readHosts (hosts: readonly { host: string, port: number }[], options: Omit<CensusOptions, 'host' | 'port'>): Promise<HostState[]> {
  return Promise.all(hosts.map((h) => readHost({ ...options, host: h.host, port: h.port })))
}
