import { join } from 'node:path'
import { LeaseRefused } from '../../../errors.js'
import type { Logger } from '../../../logger.js'
import { withTimeout } from '../../../timers.js'
import type { ResolvedConfig } from '../../../config/resolve-config.js'
import { CACHE_FILE, readWorkerCache, workerCacheDir, type CachedWorker } from '../cache-file.js'
import { acquireStaticLease, HeartbeatLease } from './heartbeat-lease.js'
import { leaseOptions, refuseIfAhead, refuseOutOfRange, restartWindow, type WorkerLeaseOptions } from './heartbeat-lease-options.js'
import { firstNonLoopbackIPv4 } from '../local-ip.js'
import type { WorkerIdSource, WorkerLease } from '../worker-id-source.js'
import { register, zkPaths, type ZkPaths } from './zookeeper-registration.js'
import { EXPIRY_MARGIN_MS, authRefusal, closeZookeeper, createZookeeper, hasEnded, sessionIdOf, waitConnected, type Client } from '../zookeeper-client.js'

// The zookeeper source: Java Leaf's registration (zookeeper-registration.ts), or its cache file
// when ZooKeeper cannot be reached at start, kept by a HeartbeatLease.

/** leaf.snowflake.worker-id.source=zookeeper. */
export function zookeeperSource (config: ResolvedConfig, logger: Logger, clock: () => number): WorkerIdSource {
  const kept: KeptClient = {}
  return {
    kind: 'zookeeper',
    async acquire () {
      const lease = await acquireWorkerLease({ ...leaseOptions(config, logger, clock), zkAddress: config.snowflake.zkAddress, staticWorkerId: config.snowflake.workerId, staticSource: 'static' }, kept)
      try {
        refuseOutOfRange(lease.workerId, config, 'zookeeper')
      } catch (err) {
        await lease.close()
        throw err
      }
      return lease
    },
    async release () {
      const client = kept.client
      kept.client = undefined
      if (client !== undefined) await closeZookeeper(client)
    },
  }
}

/**
 * The client of an acquire that could not connect, for the next acquire to wait on: a client
 * is closed only once it has connected (zookeeper-client.ts), so one new client per attempt
 * would leave every earlier one trying to connect for as long as ZooKeeper stays away.
 */
export interface KeptClient { client?: Client }

/** Refuses (LeaseRefused) whenever the clock or another live holder says IDs could repeat. */
export async function acquireWorkerLease (options: WorkerLeaseOptions, kept?: KeptClient): Promise<WorkerLease> {
  if (options.zkAddress === '') return acquireStaticLease(options)
  const cacheDir = workerCacheDir(options)
  const cacheFile = join(cacheDir, CACHE_FILE)
  const cached = readWorkerCache(cacheDir)
  const now = options.clock()

  if (options.port === 0) {
    throw new LeaseRefused('LEASE_NO_IDENTITY', 'the registration port is 0, which every such instance would share: set leaf.snowflake.port (or server.port) to the port this instance is reached on')
  }
  const ip = options.ip || firstNonLoopbackIPv4()
  if (ip === undefined) throw new LeaseRefused('LEASE_NO_IDENTITY', 'no non-loopback IPv4 address found: set leaf.snowflake.ip')
  const paths = zkPaths(options.name, ip, options.port)

  // One client for the lease's life: it retries by itself, and is never closed before it has
  // connected (zookeeper-client.ts says why).
  // A kept client whose session expired meanwhile (it connected, then ZooKeeper went away for
  // longer than the session) never connects again: a new one replaces it.
  const reusable = kept?.client !== undefined && !hasEnded(kept.client) ? kept.client : undefined
  const client = reusable ?? createZookeeper(options.zkAddress, options.zkSessionTimeoutMs, options.zkAuth ?? '')
  if (kept !== undefined) kept.client = undefined
  if (!await waitConnected(client, options.zkConnectTimeoutMs)) {
    try {
      return fromCache(options, cacheDir, cached, paths, now, `ZooKeeper at ${options.zkAddress} did not answer within ${options.zkConnectTimeoutMs} ms`, client)
    } catch (err) {
      if (kept !== undefined) kept.client = client
      else await closeZookeeper(client)
      throw err
    }
  }
  try {
    // A connection lost during registration queues requests without a timeout: bound it.
    const { workerId, storedTimestamp } = await withTimeout(register(client, options, paths, now),
      options.zkConnectTimeoutMs + options.zkSessionTimeoutMs + EXPIRY_MARGIN_MS, 'ZooKeeper stopped answering during registration')
    // The cache may know a later time than ZooKeeper (heartbeats while it was down): it is
    // checked against the clock as ZooKeeper's time is.
    const cachedTime = cached?.workerId === workerId && cached.address === paths.address ? cached.lastTimestamp : undefined
    refuseIfAhead(cachedTime, now + (options.aheadMs ?? 0), `the worker-id cache ${cacheFile}`)
    const last = Math.max(storedTimestamp ?? 0, cachedTime ?? 0)
    const lease = new HeartbeatLease(options, cacheDir, 'zookeeper', workerId, restartWindow(last || undefined, cachedTime !== undefined, options, now), paths)
    lease.attach(client, sessionIdOf(client))
    lease.start()
    await lease.heartbeat()
    return lease
  } catch (err) {
    await closeZookeeper(client)
    // A tree of another identity refuses at its first node: no worker id is read or made.
    throw authRefusal(client, err, `/snowflake/${options.name}`)
  }
}

function fromCache (options: WorkerLeaseOptions, cacheDir: string, cached: CachedWorker | undefined, paths: ZkPaths, now: number, why: string, client: Client): WorkerLease {
  const file = join(cacheDir, CACHE_FILE)
  if (cached === undefined) throw new LeaseRefused('LEASE_CACHE_UNUSABLE', `ZooKeeper unreachable (${why}) and no cached worker id in ${file}`)
  if (cached.lastTimestamp === undefined) throw new LeaseRefused('LEASE_CACHE_UNUSABLE', `ZooKeeper unreachable (${why}) and ${file} holds no lastTimestamp to check the clock against`)
  if (cached.address !== paths.address) {
    throw new LeaseRefused('LEASE_CACHE_UNUSABLE', `ZooKeeper unreachable (${why}) and the worker id in ${file} was leased for ${cached.address ?? 'an unrecorded address'}, ` +
      `not for ${paths.address}: another instance may hold it now`)
  }
  if (now + (options.aheadMs ?? 0) <= cached.lastTimestamp) {
    throw new LeaseRefused('LEASE_CLOCK_BEHIND', `ZooKeeper unreachable (${why}) and the clock (${now}) is not past the cached lastTimestamp (${cached.lastTimestamp})`)
  }
  options.logger.warn({ workerId: cached.workerId, file, why }, 'ZooKeeper unreachable at start: using the cached worker id')
  const lease = new HeartbeatLease(options, cacheDir, 'cache', cached.workerId, restartWindow(cached.lastTimestamp, true, options, now), paths)
  lease.start()
  lease.attach(client, undefined)
  return lease
}
