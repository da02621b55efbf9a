import { nextBackoffMs } from '../backoff.js'
import { LeafError, StartRefused } from '../errors.js'
import { settlesWithin } from '../timers.js'
import { createLogThrottle } from '../log-throttle.js'
import type { Logger } from '../logger.js'
import { layoutEnd, type Layout } from '../layout/layout.js'
import { createSnowflakeGenerator, type SnowflakeGenerator, type SnowflakeGeneratorOptions } from '../snowflake/snowflake-generator.js'
import type { ResolvedConfig } from '../config/resolve-config.js'
import { timeLeftSeconds, WARN_SECONDS_LEFT, YEAR_SECONDS } from '../snowflake/time-left.js'
import { aheadOfClockMs } from '../snowflake/worker-id/ahead-of-clock.js'
import { workerIdSource } from '../snowflake/worker-id/create-source.js'
import type { LeaseStatus, WorkerIdSource, WorkerLease } from '../snowflake/worker-id/worker-id-source.js'

/**
 * Between background attempts to start (each also waits up to leaf.snowflake.zk.connect-timeout-ms).
 * An attempt while ZooKeeper stays away costs no connection (it waits on the kept client), so
 * the ceiling is low: a ZooKeeper back is used within 10 s.
 */
export const START_RETRY_MIN_MS = 1000
export const START_RETRY_MAX_MS = 10_000
/** How long close() waits for a background attempt under way. */
const ATTEMPT_CLOSE_WAIT_MS = 2000

export interface SnowflakeMode {
  /** The worker-id lease; while none is held, a stand-in whose status says why (workerId -1). */
  readonly lease: WorkerLease
  /** The generator; while no worker id is held, one that answers SNOWFLAKE_NOT_READY. */
  readonly generator: SnowflakeGenerator
  /** The wall clock the generator and the lease read. */
  clock: () => number
  /** Why no snowflake ID is issued yet (the start is retried, or was refused later); undefined once a worker id is held. */
  notReady (): string | undefined
  close (): Promise<void>
}

export interface SnowflakeModeOptions extends Pick<SnowflakeGeneratorOptions, 'clock'> {
  retryMinMs?: number
  retryMaxMs?: number
}

/**
 * Whether a failed start is retried in the background rather than refusing the start: the
 * zookeeper source could not reach ZooKeeper and its cache file cannot stand in
 * (LEASE_CACHE_UNUSABLE), or ZooKeeper failed in a way that is no refusal (a connection lost,
 * no answer during the registration). Every other refusal needs an operator (a configuration,
 * a clock behind a recorded time, another live holder, an id out of range) and still refuses
 * the start, as do the other sources' (docs/snowflake-mode.md#start-without-zookeeper).
 */
export function retriedInBackground (source: WorkerIdSource['kind'], err: unknown): boolean {
  if (source !== 'zookeeper') return false
  return !(err instanceof StartRefused) || err.code === 'LEASE_CACHE_UNUSABLE'
}

/** Leases the worker id (refusing to start when IDs could repeat) and builds the generator. */
export async function startSnowflakeMode (config: ResolvedConfig, logger: Logger, extra: SnowflakeModeOptions = {}): Promise<SnowflakeMode> {
  const clock = extra.clock ?? Date.now
  const source = workerIdSource(config, logger, { clock })
  let lease: WorkerLease
  try {
    lease = await source.acquire()
  } catch (err) {
    if (!retriedInBackground(source.kind, err)) {
      await source.release?.()
      throw err
    }
    return startInBackground(config, logger, source, clock, err, extra)
  }
  return { lease, generator: await serve(config, logger, lease, clock), clock, notReady: () => undefined, close: () => lease.close() }
}

/** The generator of a lease just acquired; closes the lease when the generator cannot be made. */
async function serve (config: ResolvedConfig, logger: Logger, lease: WorkerLease, clock: () => number): Promise<SnowflakeGenerator> {
  const s = config.snowflake
  let generator: SnowflakeGenerator
  try {
    generator = createSnowflakeGenerator({
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
  } catch (err) {
    await lease.close()
    throw err
  }
  lease.whenWorkerChanges?.((workerId, notBefore) => generator.rebind(workerId, notBefore))
  const waitMs = Math.max(0, lease.notBefore - clock())
  logger.info({ workerId: lease.workerId, source: lease.status().source, layout: s.layout.spec, borrowAheadMs: s.borrowAheadMs, restartWindowMs: waitMs }, 'snowflake mode enabled')
  warnIfEnding(s.layout, clock(), logger)
  return generator
}

/** Why, in words a client may read (no host, path or driver message: the log has those). */
function describeFailure (err: unknown): string {
  if (err instanceof StartRefused && err.code === 'LEASE_CACHE_UNUSABLE') return 'ZooKeeper could not be reached and the worker-id cache cannot stand in (LEASE_CACHE_UNUSABLE)'
  if (err instanceof StartRefused) return `the worker id was refused (${err.code})`
  const code = (err as { code?: unknown, name?: unknown })?.code
  return `ZooKeeper failed during the registration (${typeof code === 'string' || typeof code === 'number' ? code : (err as Error)?.name ?? 'error'})`
}

/**
 * Snowflake mode without a worker id: segment mode serves meanwhile, snowflake answers
 * SNOWFLAKE_NOT_READY, and the start is tried again with a backoff, by the source's own
 * acquire (every clock and lease check of a start), until it holds a worker id or is refused.
 */
function startInBackground (config: ResolvedConfig, logger: Logger, source: WorkerIdSource, clock: () => number, first: unknown, options: SnowflakeModeOptions): SnowflakeMode {
  const { retryMinMs = START_RETRY_MIN_MS, retryMaxMs = START_RETRY_MAX_MS } = options
  let lease: WorkerLease | undefined
  let generator: SnowflakeGenerator | undefined
  let closed = false
  let attempts = 1
  let delayMs = 0
  let nextAttemptAt = 0
  let timer: NodeJS.Timeout | undefined
  let attempt: Promise<void> | undefined
  /** Set when a later attempt is refused: no retry follows. */
  let refused: string | undefined
  let lastFailure = describeFailure(first)
  // An attempt every 10 s for as long as ZooKeeper stays away: one line per 30 s.
  const throttle = createLogThrottle(logger)

  function notReady (): string | undefined {
    if (generator !== undefined) return undefined
    if (refused !== undefined) return `snowflake mode did not start: ${refused}; it is not retried: fix the cause named in the log and restart`
    const inSeconds = Math.max(0, Math.ceil((nextAttemptAt - Date.now()) / 1000))
    return `snowflake mode holds no worker id yet: ${lastFailure}; retrying in the background (${attempts} attempt(s), ${attempt === undefined ? `next in ${inSeconds} s` : 'one under way'})`
  }

  function refuse (): never {
    throw new LeafError('SNOWFLAKE_NOT_READY', `${notReady() ?? 'snowflake mode is starting'}. Segment mode is not affected.`)
  }

  function schedule (): void {
    if (closed) return
    delayMs = nextBackoffMs(delayMs, retryMinMs, retryMaxMs)
    nextAttemptAt = Date.now() + delayMs
    timer = setTimeout(() => {
      attempt = tryAgain().finally(() => { attempt = undefined })
    }, delayMs)
    timer.unref()
  }

  async function tryAgain (): Promise<void> {
    attempts++
    let acquired: WorkerLease
    try {
      acquired = await source.acquire()
    } catch (err) {
      // Closed meanwhile: the client this attempt kept is let go here, not by close().
      if (closed) {
        await source.release?.()
        return
      }
      if (retriedInBackground(source.kind, err)) {
        lastFailure = describeFailure(err)
        throttle.warn('snowflake-start', err, 'snowflake mode: still no worker id; retrying in the background', { attempts })
        schedule()
      } else {
        refused = describeFailure(err)
        logger.error({ err, attempts }, `snowflake mode: the background start was refused (${err instanceof StartRefused ? err.message : String(err)}); snowflake answers SNOWFLAKE_NOT_READY until a restart, segment mode is not affected`)
        await source.release?.()
      }
      return
    }
    if (closed) {
      await acquired.close()
      return
    }
    try {
      generator = await serve(config, logger, acquired, clock)
      lease = acquired
      logger.info({ attempts, workerId: acquired.workerId }, 'snowflake mode: worker id held after a start without one; serving')
    } catch (err) {
      refused = describeFailure(err)
      logger.error({ err }, `snowflake mode: the background start was refused (${(err as Error).message}); snowflake answers SNOWFLAKE_NOT_READY until a restart`)
    }
  }

  const pendingLease: WorkerLease = {
    workerId: -1,
    notBefore: Infinity,
    issuableUntil: -Infinity,
    extend: refuse,
    status: (): LeaseStatus => ({
      source: source.kind,
      workerId: -1,
      zookeeperConnected: false,
      unavailable: notReady(),
      lastHeartbeat: undefined,
      foreverPath: undefined,
      temporaryPath: undefined,
      cacheFile: '',
    }),
    close: async () => {},
  }
  // The route holds this object: it hands each call on once a worker id is held.
  const standIn: SnowflakeGenerator = {
    get workerId () { return generator?.workerId ?? -1 },
    layout: config.snowflake.layout,
    rebind: (workerId, notBefore) => generator?.rebind(workerId, notBefore),
    next: (key) => (generator ?? refuse()).next(key),
    nextBatch: (key, count) => (generator ?? refuse()).nextBatch(key, count),
    nextRanges: (key, count) => (generator ?? refuse()).nextRanges(key, count),
    decode: (id) => (generator ?? refuse()).decode(id),
    borrowedMs: () => generator?.borrowedMs() ?? 0,
  }

  logger.warn({ err: first }, 'snowflake mode has no worker id: ZooKeeper unreachable at start and no usable worker-id cache; ' +
    'snowflake answers 503 SNOWFLAKE_NOT_READY and retries in the background, segment mode is not affected')
  schedule()
  return {
    get lease () { return lease ?? pendingLease },
    generator: standIn,
    clock,
    notReady,
    async close () {
      closed = true
      clearTimeout(timer)
      // An attempt under way ends by itself (and closes a lease it gets after this); waiting
      // for it whole (a registration can take connect + session timeout) could outlast the
      // shutdown's grace.
      if (attempt !== undefined) await settlesWithin(attempt, ATTEMPT_CLOSE_WAIT_MS)
      await source.release?.()
      await lease?.close()
    },
  }
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
