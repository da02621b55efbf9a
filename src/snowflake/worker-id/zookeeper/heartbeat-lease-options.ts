import { LeaseRefused } from '../../../errors.js'
import type { Logger } from '../../../logger.js'
import type { Layout } from '../../../layout/layout.js'
import type { ResolvedConfig } from '../../../config/resolve-config.js'
import { aheadOfClockMs } from '../ahead-of-clock.js'

// What the static, statefulset and zookeeper sources (and their heartbeat lease) are given, and
// the restart rules they share: the first millisecond a restart may issue in.

export interface WorkerLeaseOptions {
  name: string
  /** Empty: no ZooKeeper, `staticWorkerId` is the worker id. */
  zkAddress: string
  /** leaf.snowflake.zk.auth, `digest:user:password`; empty or absent: none. */
  zkAuth?: string
  /** Empty: the first non-loopback IPv4 address. */
  ip: string
  port: number
  staticWorkerId: number
  /** What the status calls a configured worker id: `static`, or `statefulset` (the host name's ordinal). */
  staticSource?: 'static' | 'statefulset'
  /** Empty: `<tmpdir>/<name>/leafconf/<port>`, as Java Leaf. */
  cacheDir: string
  heartbeatIntervalMs: number
  maxClockDriftMs: number
  zkConnectTimeoutMs: number
  zkSessionTimeoutMs: number
  clock: () => number
  logger: Logger
  /** Default: Leaf's. Its worker bits bound the ids, and the ZooKeeper tree records it. */
  layout?: Layout
  /** How far past the clock the generator may record (borrowed time, a unit's rest); default 0. */
  aheadMs?: number
}

/** The options every source of these takes from the configuration (the zookeeper address and the static id apart). */
export function leaseOptions (config: ResolvedConfig, logger: Logger, clock: () => number): Omit<WorkerLeaseOptions, 'zkAddress' | 'staticWorkerId'> {
  const snowflake = config.snowflake
  return {
    name: config.name,
    ip: snowflake.ip,
    port: snowflake.port,
    cacheDir: snowflake.cacheDir,
    heartbeatIntervalMs: snowflake.heartbeatIntervalMs,
    maxClockDriftMs: snowflake.maxClockDriftMs,
    zkConnectTimeoutMs: snowflake.zkConnectTimeoutMs,
    zkSessionTimeoutMs: snowflake.zkSessionTimeoutMs,
    zkAuth: snowflake.zkAuth,
    clock,
    logger,
    layout: snowflake.layout,
    aheadMs: aheadOfClockMs(config),
  }
}

export function refuseIfAhead (stored: number | undefined, now: number, where: string): void {
  if (stored !== undefined && stored > now) {
    throw new LeaseRefused('LEASE_CLOCK_BEHIND', `the clock is behind ${where}: stored ${stored} (${new Date(stored).toISOString()}), now ${now} (${new Date(now).toISOString()})`)
  }
}

/**
 * The first millisecond a restart may issue in: past one heartbeat after the last recorded time.
 * Without the cache file, ZooKeeper's record may lag time recorded ahead of the clock, so the
 * first ID also waits `aheadMs` past now (the earlier process never issued further ahead).
 */
export function restartWindow (last: number | undefined, fromCache: boolean, options: Pick<WorkerLeaseOptions, 'heartbeatIntervalMs' | 'aheadMs'>, now: number): number {
  const recorded = last === undefined ? 0 : last + options.heartbeatIntervalMs + 1
  const ahead = options.aheadMs ?? 0
  if (fromCache || ahead === 0) return recorded
  return Math.max(recorded + ahead, now + ahead + 1)
}

export function refuseOutOfRange (workerId: number, config: ResolvedConfig, source: string): void {
  const { workerIdMin: min, workerIdMax: max } = config.snowflake
  if (workerId < min || workerId > max) {
    throw new LeaseRefused('LEASE_ID_OUT_OF_RANGE', `worker id ${workerId} from the ${source} source is outside [${min}, ${max}] ` +
      '(leaf.snowflake.worker-id.min and leaf.snowflake.worker-id.max): another range, or another ID space, may use it')
  }
}
