import { LeaseRefused } from '../../../errors.js'
import type { Logger } from '../../../logger.js'
import type { ResolvedConfig } from '../../../config/resolve-config.js'
import { acquireStaticLease } from '../zookeeper/heartbeat-lease.js'
import { leaseOptions, refuseOutOfRange } from '../zookeeper/heartbeat-lease-options.js'
import type { WorkerIdSource } from '../worker-id-source.js'

// The static and statefulset sources: a worker id from the configuration (leaf.snowflake.worker.id)
// or from a StatefulSet pod's host name, kept by a HeartbeatLease over the cache file alone
// (zookeeper/heartbeat-lease.ts: Java Leaf's lease without ZooKeeper).

/** leaf.snowflake.worker-id.source=static or statefulset. */
export function staticSource (kind: 'static' | 'statefulset', config: ResolvedConfig, logger: Logger, clock: () => number): WorkerIdSource {
  const snowflake = config.snowflake
  return {
    kind,
    async acquire () {
      let staticWorkerId = snowflake.workerId
      if (kind === 'statefulset') {
        const hostname = snowflake.hostname || process.env.HOSTNAME || ''
        const ordinal = ordinalOf(hostname)
        if (ordinal === undefined) {
          throw new LeaseRefused('LEASE_NO_IDENTITY', `the statefulset source takes the worker id from the ordinal at the end of the host name (leaf-3 -> 3), and "${hostname}" has none: ` +
            'set leaf.snowflake.worker-id.hostname, or run as a StatefulSet pod')
        }
        staticWorkerId = ordinal
      }
      // Checked before anything is written: a static id out of range never reaches the cache.
      refuseOutOfRange(staticWorkerId, config, kind)
      const lease = acquireStaticLease({ ...leaseOptions(config, logger, clock), zkAddress: '', staticWorkerId, staticSource: kind })
      try {
        refuseOutOfRange(lease.workerId, config, kind)
      } catch (err) {
        await lease.close()
        throw err
      }
      return lease
    },
  }
}

/** `leaf-3` -> 3: a StatefulSet pod's ordinal, the digits after the host name's last dash. */
export function ordinalOf (hostname: string): number | undefined {
  const match = /-(\d{1,4})$/.exec(hostname)
  return match === null ? undefined : Number(match[1])
}
