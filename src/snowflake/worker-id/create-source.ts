import type { Logger } from '../../logger.js'
import type { ResolvedConfig } from '../../config/resolve-config.js'
import { disposableSource } from './disposable/disposable-source.js'
import { recyclableSource, type RecyclableHooks } from './recyclable/recyclable-source.js'
import type { WorkerIdSource, WorkerLease } from './worker-id-source.js'
import { staticSource } from './static/static-source.js'
import { zookeeperSource } from './zookeeper/zookeeper-source.js'

// Where the worker id comes from (leaf.snowflake.worker-id.source). Every source returns a
// WorkerLease (worker-id-source.ts), so the generator and the routes never know which one is in use.

export type SourceHooks = RecyclableHooks

/** The source leaf.snowflake.worker-id.source names. */
export function workerIdSource (config: ResolvedConfig, logger: Logger, hooks: SourceHooks): WorkerIdSource {
  const kind = config.snowflake.workerIdSource
  switch (kind) {
    case 'disposable': return disposableSource(config, logger, hooks.clock)
    case 'db-lease':
    case 'zookeeper-lease': return recyclableSource(kind, config, logger, hooks)
    case 'zookeeper': return zookeeperSource(config, logger, hooks.clock)
    case 'static':
    case 'statefulset': return staticSource(kind, config, logger, hooks.clock)
  }
}

export async function acquireWorkerId (config: ResolvedConfig, logger: Logger, hooks: SourceHooks): Promise<WorkerLease> {
  return await workerIdSource(config, logger, hooks).acquire()
}
