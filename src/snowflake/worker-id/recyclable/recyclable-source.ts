import type { Logger } from '../../../logger.js'
import type { ResolvedConfig } from '../../../config/resolve-config.js'
import { createDbLeaseStore } from '../db-lease/db-lease-store.js'
import { aheadOfClockMs } from '../ahead-of-clock.js'
import { workerCacheDir } from '../cache-file.js'
import type { LeaseStore } from '../lease-store.js'
import { firstNonLoopbackIPv4 } from '../local-ip.js'
import { acquireRecyclableLease } from './recyclable-lease.js'
import type { RecyclableSource } from './recyclable-lease-options.js'
import type { WorkerIdSource } from '../worker-id-source.js'
import { createZookeeperLeaseStore } from '../zookeeper-lease/zookeeper-lease-store.js'

// The zookeeper-lease and db-lease sources: the recyclable lease protocol (recyclable-lease.ts)
// over the LeaseStore of each (zookeeper-lease-store.ts, db-lease-store.ts).

export interface RecyclableHooks {
  clock: () => number
}

/** leaf.snowflake.worker-id.source=db-lease or zookeeper-lease. */
export function recyclableSource (kind: RecyclableSource, config: ResolvedConfig, logger: Logger, hooks: RecyclableHooks): WorkerIdSource {
  const snowflake = config.snowflake
  return {
    kind,
    async acquire () {
      const pool: LeaseStore = kind === 'db-lease'
        ? await createDbLeaseStore({ store: config.segment.store, pool: config.name, ttlMs: snowflake.leaseTtlMs, connectTimeoutMs: config.segment.connectTimeoutMs, queryTimeoutMs: config.segment.queryTimeoutMs, layout: snowflake.layout, logger })
        : await createZookeeperLeaseStore({ address: snowflake.zkAddress, name: config.name, ttlMs: snowflake.leaseTtlMs, connectTimeoutMs: snowflake.zkConnectTimeoutMs, auth: snowflake.zkAuth, logger, layout: snowflake.layout })
      return await acquireRecyclableLease({
        source: kind,
        pool,
        address: `${snowflake.ip || firstNonLoopbackIPv4() || '127.0.0.1'}:${snowflake.port}`,
        min: snowflake.workerIdMin,
        max: snowflake.workerIdMax,
        cacheDir: workerCacheDir({ cacheDir: snowflake.cacheDir, name: config.name, port: snowflake.port }),
        heartbeatIntervalMs: snowflake.heartbeatIntervalMs,
        maxClockDriftMs: snowflake.maxClockDriftMs,
        aheadMs: aheadOfClockMs(config),
        clock: hooks.clock,
        logger,
      })
    },
  }
}
