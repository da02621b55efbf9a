import { nextBackoffMs } from '../backoff.js'
import type { MysqlHost } from '../config/jdbc-url.js'
import { storeIdOf } from './server-identity.js'
import { codeOf, describeCause, MysqlError } from './driver-errors.js'
import { driverCause, fateOf, ServerRefused } from './errors.js'
import type { Logger } from '../logger.js'
import type { HostState } from './host-census.js'
import { hostName, readHosts } from './host-census.js'
import { createServerRunner, type Answer, type MysqlRunner, type ServerOptions, type Statement } from './mysql-pool.js'

// The hosts of leaf.jdbc.url, Connector/J's failover list: one mysql2 pool per host
// (mysql-pool.ts), statements through the one in use, chosen on what the servers answer
// (docs/production.md, "Several database hosts"; mysql2's PoolCluster moves on only when a
// connection cannot be opened). In short: the first writable host, kept while it works; a
// failed host rests for a doubling backoff; a statement that never left, or that a server
// refused, goes to the next host at once, each host at most once per call, while one that may
// have run goes back to its caller. With a gate (segment/host-fence.ts) the list starts at the
// host the last life used, and a move to another host waits for a census (host-census.ts).
// The replication form (jdbc:mysql:replication://) writes through its first host only.

/**
 * What the segment mode tells a store with a host list about the hosts it may write through
 * (segment/host-fence.ts).
 */
export interface HostGate {
  /** True for a store identity this instance failed over from: nothing is sent to it. */
  refuses (store: string): boolean
  /**
   * Before the first statement on another host (`to`) than the last one checked (`from`):
   * reads every host again, and rejects while more than one answers writable (STORE_SPLIT), or
   * when `to` may be an old primary back (segment/host-fence.ts).
   */
  beforeMove (to: string, from: string): Promise<void>
}

export interface MysqlOptions extends Omit<ServerOptions, 'host' | 'port'> {
  /** In the URL's order; at least one. */
  hosts: readonly MysqlHost[]
  /** Told (at warn) when the host in use changes; and by each host's pool, when TLS is preferred and it offers none. */
  logger?: Logger
  /** Only the first host is written (jdbc:mysql:replication://): the others are its replicas. */
  replication?: boolean
  /** The host to start at (`host:port`, the warm-start file's); the first one when it is not in the list. */
  startAt?: string
  /** Which stores and moves are refused (segment/host-fence.ts); none: every host may be used. */
  gate?: HostGate
}

/** A runner over a host list: what the store's census and warm-start file need besides. */
export interface MysqlHostsRunner extends MysqlRunner {
  /** Every host's state, read now (host-census.ts). */
  hosts (): Promise<HostState[]>
  /** The host statements go to now. */
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
  /** Each host's last rest (ms), 0 once it answers again. */
  const restMs = hosts.map(() => 0)
  const restUntil = hosts.map(() => 0)
  const startAt = replication ? 0 : hosts.findIndex((h) => hostName(h) === options.startAt)
  let current = startAt === -1 ? 0 : startAt
  /** The host statements last went through (the gate let them): the start's census covers the first. */
  let passed = current

  const name = (i: number) => hostName(hosts[i] as MysqlHost)

  /** The hosts to try, in order: the one in use, then the list's next ones, none resting. */
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
    // Only when the host in use is resting: a late answer of a host left behind (a call that
    // started before it failed) does not take the list back to it.
    if (i === current || (restUntil[current] as number) <= now()) return
    logger?.warn({ from: name(current), to: name(i) }, 'MySQL host in use changed')
    current = i
  }

  /** `call` on the host in use, then on the next ones, as the rules above say. */
  async function attempt<T> (call: (runner: MysqlRunner) => Promise<T>): Promise<T> {
    let last: unknown
    for (const i of candidates()) {
      if (i !== passed && gate !== undefined) {
        // A move the gate refuses (a split, an old primary back) rests that host as a failed one
        // would, so that the list goes on to the next (back to the host in use after its blip)
        // rather than asking for the same move at every statement; with no host left, the caller
        // gets the gate's error.
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
        // A host counts as moved to once a statement went through it: one that refused it (a
        // store left, read-only) or failed leaves the list where it was, and the way back to
        // the host in use after its blip needs no gate (a split would refuse it).
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
    // With a gate, the host it last let statements go to: `current` may name one whose move it
    // refused (an old primary back writable), which a restart must not start at.
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
