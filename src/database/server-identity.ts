// A thread is killed only on the server process that ran it; storeIdOf names the store.

export interface ServerIdentity {
  host: string
  port: number
  /**
   * When the process started, in seconds by the server's own clock: UNIX_TIMESTAMP() less
   * Uptime, both read off its wall clock, so a step of that clock moves neither.
   */
  started: number
  /** The id of the connection that read this: ids only grow within one server process. */
  connectionId: number
  serverId: number
  /** A replica, or a primary fenced by its operator: never written through. */
  readOnly: boolean
  /** Galera's `wsrep_cluster_state_uuid`: one for every node of a cluster. */
  cluster?: string
}

/**
 * A Galera cluster, else a server_id (replication needs it to differ); a change is a failover
 * (segment/max-id-guard.ts). Not the host name: a re-created container gets a new one.
 */
export function storeIdOf (server: ServerIdentity): string {
  return server.cluster === undefined ? `server_id ${server.serverId}` : `galera cluster ${server.cluster}`
}

/** Read on every new connection, and again by a kill before it is sent. */
export const IDENTITY_SQL = 'SELECT @@hostname AS host, @@port AS port, UNIX_TIMESTAMP() AS now, CONNECTION_ID() AS id, @@server_id AS server_id, @@global.read_only AS read_only; ' +
  "SHOW GLOBAL STATUS WHERE Variable_name IN ('Uptime', 'wsrep_cluster_state_uuid')"

/** Undefined when the server did not say. */
export function identityOf (results: unknown[]): ServerIdentity | undefined {
  const server = (results[0] as { host?: unknown, port?: unknown, now?: unknown, id?: unknown, server_id?: unknown, read_only?: unknown }[] | undefined)?.[0]
  const status = new Map(((results[1] ?? []) as { Variable_name?: unknown, Value?: unknown }[]).map((r) => [String(r.Variable_name).toLowerCase(), r.Value]))
  const uptime = Number(status.get('uptime'))
  if (server === undefined || !status.has('uptime') || !Number.isFinite(uptime) || !Number.isFinite(Number(server.now))) return undefined
  const cluster = status.get('wsrep_cluster_state_uuid')
  return {
    host: String(server.host),
    port: Number(server.port),
    started: Number(server.now) - uptime,
    connectionId: Number(server.id),
    serverId: Number(server.server_id ?? 0),
    readOnly: Number(server.read_only ?? 0) === 1,
    ...(typeof cluster === 'string' && cluster !== '' && !/^0{8}-/.test(cluster) ? { cluster } : {}),
  }
}

/**
 * Whether `now` (read over a connection of its own) is the server process that ran thread
 * `threadId`, whose connection read `then`: 'same'; 'restarted' (that process is gone); 'other'
 * (another server, or an older one); 'unclear' (a later start, with ids past `threadId`).
 */
export function compareServers (then: ServerIdentity, now: ServerIdentity, threadId: number): 'same' | 'restarted' | 'other' | 'unclear' {
  if (then.host !== now.host || then.port !== now.port) return 'other'
  // The two reads of a start may straddle a second.
  if (Math.abs(now.started - then.started) <= 1) return now.connectionId > threadId ? 'same' : 'other'
  if (now.started < then.started) return 'other'
  // A later start on the same host and port: a restart, if its ids are still below ours.
  return now.connectionId < threadId ? 'restarted' : 'unclear'
}
