import type { Logger } from '../logger.js'
import { layoutEnd, type Layout } from '../layout/layout.js'
import { createSnowflakeGenerator, type SnowflakeGenerator, type SnowflakeGeneratorOptions } from '../snowflake/snowflake-generator.js'
import type { ResolvedConfig } from '../config/resolve-config.js'
import { timeLeftSeconds, WARN_SECONDS_LEFT, YEAR_SECONDS } from '../snowflake/time-left.js'
import { aheadOfClockMs } from '../snowflake/worker-id/ahead-of-clock.js'
import { acquireWorkerId } from '../snowflake/worker-id/create-source.js'
import type { WorkerLease } from '../snowflake/worker-id/worker-id-source.js'

export interface SnowflakeMode {
  lease: WorkerLease
  generator: SnowflakeGenerator
  /** The wall clock the generator and the lease read. */
  clock: () => number
  close (): Promise<void>
}

/** Leases the worker id (refusing to start when IDs could repeat) and builds the generator. */
export async function startSnowflakeMode (
  config: ResolvedConfig,
  logger: Logger,
  extra: Pick<SnowflakeGeneratorOptions, 'clock'> = {}
): Promise<SnowflakeMode> {
  const s = config.snowflake
  const clock = extra.clock ?? Date.now
  const lease = await acquireWorkerId(config, logger, { clock })
  const generator = createSnowflakeGenerator({
    workerId: lease.workerId,
    layout: s.layout,
    borrowAheadMs: s.borrowAheadMs,
    notBefore: lease.notBefore,
    // The stored times are at most aheadOfClockMs past the clock (the lease refuses otherwise),
    // and a restart without its cache file waits that much again (restartWindow).
    maxRestartWaitMs: s.heartbeatIntervalMs + 2 * aheadOfClockMs(config) + 1,
    guard: lease,
    clock,
  })
  lease.whenWorkerChanges?.((workerId, notBefore) => generator.rebind(workerId, notBefore))
  const waitMs = Math.max(0, lease.notBefore - clock())
  logger.info({ workerId: lease.workerId, source: lease.status().source, layout: s.layout.spec, borrowAheadMs: s.borrowAheadMs, restartWindowMs: waitMs }, 'snowflake mode enabled')
  warnIfEnding(s.layout, clock(), logger)
  return { lease, generator, clock, close: () => lease.close() }
}

/** Under 2 years left (LeafSnowflakeLayoutEnding's warning), the start says so. */
function warnIfEnding (layout: Layout, now: number, logger: Logger): void {
  const left = timeLeftSeconds(layout, now)
  if (left >= WARN_SECONDS_LEFT) return
  const runsOutAt = new Date(layoutEnd(layout)).toISOString()
  logger.warn({ layout: layout.spec, runsOutAt, timeLeftSeconds: Math.floor(left) },
    `the time field of snowflake layout ${layout.spec} runs out on ${runsOutAt}, in ${(left / YEAR_SECONDS).toFixed(1)} years: ` +
    'after that every snowflake request answers 503 ID_SPACE_EXHAUSTED; move to a layout with more time bits before then (docs/id-layouts.md)')
}
