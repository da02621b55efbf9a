// The snowflake keys as the mode takes them: the layout spec parsed (layout.ts) and the worker-id
// range resolved and checked against its worker bits. config/ hands up the values as given;
// server.ts resolves them right after loading, so a bad layout refuses the start as a
// configuration error, whether or not snowflake mode is enabled (the decode routes read it too).

import { ConfigError } from '../config/keys.js'
import type { Config, SnowflakeConfig } from '../config/load-config.js'
import type { Layout } from './layout.js'
import { LayoutError, parseLayout } from './layout-spec.js'

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

/**
 * Parses leaf.snowflake.layout (its epoch and lifetime checked against `now`) and checks the
 * worker-id keys against its worker bits. Throws ConfigError naming the key, as loadConfig does.
 */
export function resolveSnowflakeSettings (s: SnowflakeConfig, now = Date.now()): SnowflakeSettings {
  const layout = resolveLayout(s, now)
  const settings: SnowflakeSettings = { ...s, layout, workerIdMax: s.workerIdMax ?? layout.maxWorkerId }
  checkWorkerIds(settings)
  return settings
}

/** The config with its snowflake section resolved (resolveSnowflakeSettings). */
export function resolveConfig (config: Config, now = Date.now()): ResolvedConfig {
  return { ...config, snowflake: resolveSnowflakeSettings(config.snowflake, now) }
}

function resolveLayout (s: SnowflakeConfig, now: number): Layout {
  try {
    return parseLayout(s.layoutSpec, { twepoch: s.twepoch, vestaVersion: s.vesta.version, vestaGenMethod: s.vesta.genMethod, now })
  } catch (err) {
    if (err instanceof LayoutError) throw new ConfigError('leaf.snowflake.layout', err.message)
    throw err
  }
}

/** Rules between the worker-id keys and the layout that no single key's parser can see. */
function checkWorkerIds (s: SnowflakeSettings): void {
  const largest = s.layout.maxWorkerId
  const layout = `the ${s.layout.name} layout's ${s.layout.worker.bits} worker bits`
  if (s.workerIdMax > largest) throw new ConfigError('leaf.snowflake.worker-id.max', `${s.workerIdMax} is above ${largest}, the largest worker id of ${layout}`)
  if (s.workerIdMin > largest) throw new ConfigError('leaf.snowflake.worker-id.min', `${s.workerIdMin} is above ${largest}, the largest worker id of ${layout}`)
  if (s.workerIdSource === 'static' && s.workerId > largest) throw new ConfigError('leaf.snowflake.worker.id', `${s.workerId} is above ${largest}, the largest worker id of ${layout}`)
  if (s.workerIdSource === 'disposable' && s.layout.worker.bits < 16) {
    throw new ConfigError('leaf.snowflake.worker-id.source', `disposable takes a new worker id on every start and never reuses one: it needs a layout with at least 16 worker bits (uid-generator has 22), and ${layout} are too few`)
  }
  if (s.workerIdMin > s.workerIdMax) {
    throw new ConfigError('leaf.snowflake.worker-id.min', `${s.workerIdMin} is above leaf.snowflake.worker-id.max (${s.workerIdMax})`)
  }
}
