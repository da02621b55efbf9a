import { join } from 'node:path'
import { LeaseRefused } from '../../errors.js'
import type { Logger } from '../../logger.js'
import type { ResolvedConfig } from '../settings.js'
import { CACHE_FILE, readWorkerCache } from './cache-file.js'
import { HeartbeatLease } from './heartbeat-lease.js'
import { leaseOptions, refuseIfAhead, restartWindow, workerCacheDir, type WorkerLeaseOptions } from './lease-options.js'
import type { WorkerIdSource, WorkerLease } from './source.js'

// The static and statefulset sources: a worker id from the configuration (leaf.snowflake.worker.id)
// or from a StatefulSet pod's host name, kept by a HeartbeatLease over the cache file alone.

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
          throw new LeaseRefused(`the statefulset source takes the worker id from the ordinal at the end of the host name (leaf-3 -> 3), and "${hostname}" has none: ` +
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

export function refuseOutOfRange (workerId: number, config: ResolvedConfig, source: string): void {
  const { workerIdMin: min, workerIdMax: max } = config.snowflake
  if (workerId < min || workerId > max) {
    throw new LeaseRefused(`worker id ${workerId} from the ${source} source is outside [${min}, ${max}] ` +
      '(leaf.snowflake.worker-id.min and leaf.snowflake.worker-id.max): another range, or another ID space, may use it')
  }
}

/** `staticWorkerId` as the worker id, after the clock is checked against the cache file. */
export function acquireStaticLease (options: WorkerLeaseOptions): WorkerLease {
  const cacheDir = workerCacheDir(options)
  const cacheFile = join(cacheDir, CACHE_FILE)
  const cached = readWorkerCache(cacheDir)
  const now = options.clock()
  const source = options.staticSource ?? 'static'
  if (source === 'static') options.logger.warn({ workerId: options.staticWorkerId }, 'snowflake without ZooKeeper: leaf.snowflake.worker.id must be unique per instance')
  const last = cached?.workerId === options.staticWorkerId ? cached.lastTimestamp : undefined
  refuseIfAhead(last, now + (options.aheadMs ?? 0), `the worker-id cache ${cacheFile}`)
  return new HeartbeatLease(options, cacheDir, source, options.staticWorkerId, restartWindow(last, last !== undefined, options, now), undefined).start()
}
