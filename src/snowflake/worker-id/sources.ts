import { randomInt } from 'node:crypto'
import type { Logger } from '../../logger.js'
import type { ResolvedConfig } from '../settings.js'
import { createDbLeasePool } from './db-lease-pool.js'
import { acquireDisposableWorkerId } from './disposable.js'
import { firstNonLoopbackIPv4 } from './local-ip.js'
import { acquireRecyclableLease, type ClaimResult, type LeasePool } from './recyclable-lease.js'
import { acquireWorkerLease, workerCacheDir, type WorkerLease } from './worker-lease.js'
import { createZookeeperLeasePool } from './zookeeper-lease-pool.js'
import { LeaseRefused } from '../../errors.js'

// Where the worker id comes from (leaf.snowflake.worker-id.source). Every source returns a
// WorkerLease, so the generator and the routes never know which one is in use.

export interface SourceHooks {
  clock: () => number
  onLeaseClaim?: (result: ClaimResult) => void
  onLeaseLost?: () => void
}

/** `leaf-3` -> 3: a StatefulSet pod's ordinal, the digits after the host name's last dash. */
export function ordinalOf (hostname: string): number | undefined {
  const match = /-(\d{1,4})$/.exec(hostname)
  return match === null ? undefined : Number(match[1])
}

/**
 * How far past the clock the generator may take the time it records with the lease: the time it
 * borrows, plus the rest of a time unit longer than a millisecond (an ID of a second is
 * recorded at that second's last millisecond).
 */
export function aheadOfClockMs (config: ResolvedConfig): number {
  return config.snowflake.borrowAheadMs + config.snowflake.layout.unitMs - 1
}

export async function acquireWorkerId (config: ResolvedConfig, logger: Logger, hooks: SourceHooks): Promise<WorkerLease> {
  const s = config.snowflake
  const common = {
    name: config.name,
    ip: s.ip,
    port: s.port,
    cacheDir: s.cacheDir,
    heartbeatIntervalMs: s.heartbeatIntervalMs,
    maxClockDriftMs: s.maxClockDriftMs,
    zkConnectTimeoutMs: s.zkConnectTimeoutMs,
    zkSessionTimeoutMs: s.zkSessionTimeoutMs,
    clock: hooks.clock,
    logger,
    layout: s.layout,
    aheadMs: aheadOfClockMs(config),
  }
  const source = s.workerIdSource
  if (source === 'disposable') {
    return acquireDisposableWorkerId({
      store: config.segment.store,
      // As UidGenerator: the host's address, and a port no other start shares.
      hostName: s.ip || firstNonLoopbackIPv4() || '127.0.0.1',
      port: `${s.port}-${Date.now()}-${randomInt(100_000)}`,
      type: process.env.KUBERNETES_SERVICE_HOST !== undefined ? 1 : 2,
      min: s.workerIdMin,
      max: s.workerIdMax,
      connectTimeoutMs: config.segment.connectTimeoutMs,
      queryTimeoutMs: config.segment.queryTimeoutMs,
      borrowAheadMs: s.borrowAheadMs,
      clock: hooks.clock,
      logger,
    })
  }
  if (source === 'db-lease' || source === 'zookeeper-lease') {
    const pool: LeasePool = source === 'db-lease'
      ? await createDbLeasePool({ store: config.segment.store, pool: config.name, ttlMs: s.leaseTtlMs, connectTimeoutMs: config.segment.connectTimeoutMs, queryTimeoutMs: config.segment.queryTimeoutMs, layout: s.layout })
      : await createZookeeperLeasePool({ address: s.zkAddress, name: config.name, ttlMs: s.leaseTtlMs, connectTimeoutMs: s.zkConnectTimeoutMs, logger, layout: s.layout })
    return acquireRecyclableLease({
      source,
      pool,
      address: `${s.ip || firstNonLoopbackIPv4() || '127.0.0.1'}:${s.port}`,
      min: s.workerIdMin,
      max: s.workerIdMax,
      cacheDir: workerCacheDir(common),
      heartbeatIntervalMs: s.heartbeatIntervalMs,
      maxClockDriftMs: s.maxClockDriftMs,
      aheadMs: common.aheadMs,
      clock: hooks.clock,
      logger,
      onClaim: hooks.onLeaseClaim,
      onLost: hooks.onLeaseLost,
    })
  }

  let staticWorkerId = s.workerId
  if (source === 'statefulset') {
    const hostname = s.hostname || process.env.HOSTNAME || ''
    const ordinal = ordinalOf(hostname)
    if (ordinal === undefined) {
      throw new LeaseRefused(`the statefulset source takes the worker id from the ordinal at the end of the host name (leaf-3 -> 3), and "${hostname}" has none: ` +
        'set leaf.snowflake.worker-id.hostname, or run as a StatefulSet pod')
    }
    staticWorkerId = ordinal
  }
  // Checked before anything is written: a static id out of range never reaches the cache.
  if (source !== 'zookeeper') refuseOutOfRange(staticWorkerId, config, source)
  const lease = await acquireWorkerLease({
    ...common,
    zkAddress: source === 'zookeeper' ? s.zkAddress : '',
    staticWorkerId,
    staticSource: source === 'statefulset' ? 'statefulset' : 'static',
  })
  try {
    refuseOutOfRange(lease.workerId, config, source)
  } catch (err) {
    await lease.close()
    throw err
  }
  return lease
}

function refuseOutOfRange (workerId: number, config: ResolvedConfig, source: string): void {
  const { workerIdMin: min, workerIdMax: max } = config.snowflake
  if (workerId < min || workerId > max) {
    throw new LeaseRefused(`worker id ${workerId} from the ${source} source is outside [${min}, ${max}] ` +
      '(leaf.snowflake.worker-id.min and leaf.snowflake.worker-id.max): another range, or another ID space, may use it')
  }
}
