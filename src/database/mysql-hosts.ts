import { nextBackoffMs } from '../backoff.js'
import type { MysqlHost } from '../config/jdbc-url.js'
import { storeIdOf } from './server-identity.js'
import { codeOf, describeCause, MysqlError } from './driver-errors.js'
import { driverCause, fateOf, ServerRefused } from './errors.js'
import type { Logger } from '../logger.js'
import type { HostState } from './host-census.js'
import { hostName, readHosts } from './host-census.js'
import { createServerRunner, type Answer, type MysqlRunner, type ServerOptions, type Statement } from './mysql-pool.js'

// Connector/J's failover list: one pool per host, statements through the first writable one
// (mysql2's PoolCluster moves on only when a connection cannot be opened). A statement that may
// have run is never sent to another host. Rules: docs/production.md#several-database-hosts

/** Which hosts a store may write through (segment/host-fence.ts). */
export interface HostGate {
  /** True for a store identity this instance failed over from: nothing is sent to it. */
  refuses (store: string): boolean
  /** Before a move to another host: rejects a split (STORE_SPLIT) or an old primary back. */
  beforeMove (to: string, from: string): Promise<void>
}

export interface MysqlOptions extends Omit<ServerOptions, 'host' | 'port'> {
  hosts: readonly MysqlHost[]
  logger?: Logger
  /** Only the first host is written (jdbc:mysql:replication://): the others are its replicas. */
  replication?: boolean
  /** `host:port` from the warm-start file; the first host when it is not in the list. */
  startAt?: string
  gate?: HostGate
}

export interface MysqlHostsRunner extends MysqlRunner {
  hosts (): Promise<HostState[]>
  hostInUse (): string
}

export const BACKOFF_MIN_MS = 100
export const BACKOFF_MAX_MS = 5000

/** Errors that say the host, not the statement, failed. */
const HOST_DOWN_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE',
  'PROTOCOL_CONNECTION_LOST', 'PROTOCOL_SEQUENCE_TIMEOUT', 'ER_SERVER_SHUTDOWN',
])

/** A host answering this refused the statement: it did not run, and another host may take it. */
function refusedByServer (err: unknown): boolean {
  const cause = driverCause(err)
  const code = codeOf(cause)
  return cause instanceof ServerRefused || code === MysqlError.READ_ONLY || code === MysqlError.WSREP_NOT_READY
}

/** Whether `err` says the host is down, read-only or not ready (not that the statement was wrong). */
export function hostFailed (err: unknown): boolean {
  const cause = (driverCause(err) ?? {}) as { code?: unknown, fatal?: unknown }
  return refusedByServer(err) || cause.fatal === true || (typeof cause.code === 'string' && HOST_DOWN_CODES.has(cause.code))
}

export function createMysqlRunner (options: MysqlOptions, now: () => number = () => performance.now()): MysqlHostsRunner {
  const { hosts, logger, gate, replication = false } = options
  if (hosts.length === 0) throw new Error('no MySQL host')
  const refuse = gate === undefined ? undefined : (server: Parameters<NonNullable<ServerOptions['refuse']>>[0]) => gate.refuses(storeIdOf(server))
  const runners = hosts.map((h) => createServerRunner({ ...options, host: h.host, port: h.port, ...(refuse === undefined ? {} : { refuse }) }))
  const restMs = hosts.map(() => 0)
  const restUntil = hosts.map(() => 0)
  const startAt = replication ? 0 : hosts.findIndex((h) => hostName(h) === options.startAt)
  let current = startAt === -1 ? 0 : startAt
  /** The host statements last went through; the start's census covers the first. */
  let passed = current

  const name = (i: number) => hostName(hosts[i] as MysqlHost)

  function candidates (): number[] {
    const t = now()
    // The replication form writes through its source alone.
    if (replication) return [0]
    const order = hosts.map((_, k) => (current + k) % hosts.length)
    const awake = order.filter((i) => (restUntil[i] as number) <= t)
    if (awake.length > 0) return awake
    return [order.reduce((a, b) => (restUntil[b] as number) < (restUntil[a] as number) ? b : a)]
  }

  function failed (i: number, err: unknown): void {
    restMs[i] = nextBackoffMs(restMs[i] as number, BACKOFF_MIN_MS, BACKOFF_MAX_MS)
    restUntil[i] = now() + (restMs[i] as number)
    if (i !== current || hosts.length === 1) return
    current = (i + 1) % hosts.length
    logger?.warn({ from: name(i), to: name(current), cause: describeCause(err) }, 'MySQL host failed: moving to the next host of leaf.jdbc.url')
  }

  function succeeded (i: number): void {
    restMs[i] = 0
    restUntil[i] = 0
    // A late answer from a host left behind does not take the list back to it.
    if (i === current || (restUntil[current] as number) <= now()) return
    logger?.warn({ from: name(current), to: name(i) }, 'MySQL host in use changed')
    current = i
  }

  async function attempt<T> (call: (runner: MysqlRunner) => Promise<T>): Promise<T> {
    let last: unknown
    for (const i of candidates()) {
      if (i !== passed && gate !== undefined) {
        // A refused move rests that host as a failure would, so the gate is not asked again at every statement.
        try {
          await gate.beforeMove(name(i), name(passed))
        } catch (err) {
          failed(i, err)
          last = err
          continue
        }
      }
      try {
        const answer = await call(runners[i] as MysqlRunner)
        // Moved only once a statement went through: a refusal or failure leaves the list where it was.
        passed = i
        succeeded(i)
        return answer
      } catch (err) {
        if (!hostFailed(err)) throw err
        failed(i, err)
        last = err
        // May have run: the caller decides whether a repeat is safe.
        if (fateOf(err)?.state !== 'not-sent' && !refusedByServer(err)) throw err
      }
    }
    throw last
  }

  function query<T> (sql: string | readonly Statement[], values?: unknown[]): Promise<Answer<T>> {
    return attempt((r) => r.query<T>(sql, values))
  }

  return {
    query,
    identify: () => attempt((r) => r.identify()),
    hosts: () => readHosts(hosts, options),
    // `current` may name a host whose move the gate refused, which a restart must not start at.
    hostInUse: () => name(gate === undefined ? current : passed),
    tlsSession: () => (runners[gate === undefined ? current : passed] as MysqlRunner).tlsSession(),
    async run<T> (sql: string | readonly Statement[], values?: unknown[]) {
      return (await query<T>(sql, values)).result
    },
    async close () {
      await Promise.all(runners.map((r) => r.close()))
    },
  }
}
