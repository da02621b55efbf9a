import type mysql from 'mysql2/promise'
import { describeCause } from './driver-errors.js'
import { withTimeout } from '../timers.js'
import type { ServerOptions } from './mysql-pool.js'
import { IDENTITY_SQL, identityOf, storeIdOf } from './server-identity.js'
import { openMysqlConnection } from './tls-options.js'

// What every host of leaf.jdbc.url answers now: writable, read-only or unknown. Two writable
// hosts in one list (a crashed primary back with its my.cnf's read_only) would let two
// instances allocate the same ranges, so the segment mode reads every host (segment/host-fence.ts;
// docs/production.md, "Host lists that cannot split"). Over a connection of its own: the
// pool's connections refuse a read-only server at their first round trip, and a census must
// see it. Besides @@global.read_only, super_read_only (read for the record) and
// innodb_read_only also keep a server from writing leaf_alloc; SHOW VARIABLES names one the
// server lacks (MariaDB has no super_read_only) without an error.

const SWITCHES_SQL = "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('super_read_only', 'innodb_read_only')"

/** One host of a store's list, as a census read it. */
export interface HostState {
  /** `host:port`, as the URL names it. */
  host: string
  /** `unknown`: no answer within the query timeout, or an error (`error`). */
  state: 'writable' | 'read-only' | 'unknown'
  /** The store identity it answered with (SegmentStore.identity()'s form). */
  store?: string
  /**
   * Which server process it is, beyond `store`: two addresses of one server give one. A Galera
   * node's is its cluster's: its nodes are one store, writable at once by design.
   */
  server?: string
  error?: string
}

type CensusOptions = Pick<ServerOptions, 'host' | 'port' | 'user' | 'password' | 'database' | 'connectTimeoutMs' | 'queryTimeoutMs' | 'tls'>

/** `host:port` as the URL names it. */
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

/** Every host at once. */
export function readHosts (hosts: readonly { host: string, port: number }[], options: Omit<CensusOptions, 'host' | 'port'>): Promise<HostState[]> {
  return Promise.all(hosts.map((h) => readHost({ ...options, host: h.host, port: h.port })))
}
