// The snowflake keys resolved: the layout parsed, the worker-id range checked against it. Done
// at start even with snowflake mode off, since the decode routes read the layout too.

import { ConfigError, refuseIfAny } from './config-error.js'
import type { Config, SnowflakeConfig } from './load-config.js'
import type { Layout } from '../layout/layout.js'
import { LayoutError, parseLayout } from '../layout/layout-spec.js'

/** config.snowflake with the layout parsed and the worker-id max resolved. */
export interface SnowflakeSettings extends SnowflakeConfig {
  layout: Layout
  /** leaf.snowflake.worker-id.max, or the layout's largest worker id when empty. */
  workerIdMax: number
}

/** The configuration the app and the modes take: config/'s, its snowflake section resolved. */
export interface ResolvedConfig extends Config {
  snowflake: SnowflakeSettings
}

/** Throws as loadConfig does: a ConfigError naming the key, or a ConfigErrors with every one. */
export function resolveSnowflakeSettings (snowflake: SnowflakeConfig, now = Date.now()): SnowflakeSettings {
  const layout = resolveLayout(snowflake, now)
  const settings: SnowflakeSettings = { ...snowflake, layout, workerIdMax: snowflake.workerIdMax ?? layout.maxWorkerId }
  const errors: ConfigError[] = []
  // Java Leaf refuses to start snowflake mode without ZooKeeper. Leaf-TS has other sources,
  // and the static one on worker id 0 by default would give a fleet the same IDs everywhere:
  // one must be named. The key named is the one of Java Leaf's refusal.
  if (snowflake.enabled && !snowflake.workerIdSourceNamed) {
    errors.push(new ConfigError('leaf.snowflake.zk.address', 'is not set and snowflake mode is on (leaf.snowflake.enable; unset, it is on, as in Java Leaf): ' +
      'set it, or choose leaf.snowflake.worker-id.source (zookeeper-lease, db-lease, statefulset, ...) or leaf.snowflake.worker.id (static, one per instance), ' +
      'or set leaf.snowflake.enable=false', { code: 'CONFIG_CONFLICT' }))
  }
  checkWorkerIds(settings, errors)
  refuseIfAny(errors)
  return settings
}

export function resolveConfig (config: Config, now = Date.now()): ResolvedConfig {
  return { ...config, snowflake: resolveSnowflakeSettings(config.snowflake, now) }
}

function resolveLayout (snowflake: SnowflakeConfig, now: number): Layout {
  try {
    return parseLayout(snowflake.layoutSpec, { twepoch: snowflake.twepoch, vestaVersion: snowflake.vesta.version, vestaGenMethod: snowflake.vesta.genMethod, now })
  } catch (err) {
    if (err instanceof LayoutError) throw new ConfigError('leaf.snowflake.layout', err.message, { cause: err })
    throw err
  }
}

/** Rules between the worker-id keys and the layout that no single key's parser can see. */
function checkWorkerIds (settings: SnowflakeSettings, errors: ConfigError[]): void {
  const { layout, workerId, workerIdMin, workerIdMax, workerIdSource } = settings
  const largest = layout.maxWorkerId
  const bits = `the ${layout.name} layout's ${layout.worker.bits} worker bits`
  const refuse = (key: string, problem: string) => errors.push(new ConfigError(key, problem, { code: 'CONFIG_CONFLICT' }))
  if (workerIdMax > largest) refuse('leaf.snowflake.worker-id.max', `${workerIdMax} is above ${largest}, the largest worker id of ${bits}`)
  if (workerIdMin > largest) refuse('leaf.snowflake.worker-id.min', `${workerIdMin} is above ${largest}, the largest worker id of ${bits}`)
  if (workerIdSource === 'static' && workerId > largest) refuse('leaf.snowflake.worker.id', `${workerId} is above ${largest}, the largest worker id of ${bits}`)
  if (workerIdSource === 'disposable' && layout.worker.bits < 16) {
    refuse('leaf.snowflake.worker-id.source', `disposable takes a new worker id on every start and never reuses one: it needs a layout with at least 16 worker bits (uid-generator has 22), and ${bits} are too few`)
  }
  // Reported once: a min above the layout's largest is above the max too.
  if (workerIdMin > workerIdMax && workerIdMin <= largest) {
    refuse('leaf.snowflake.worker-id.min', `${workerIdMin} is above leaf.snowflake.worker-id.max (${workerIdMax})`)
  }
}
