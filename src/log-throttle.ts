import { codedError } from './database/driver-errors.js'
import type { Logger } from './logger.js'

/** One line per cause per this many ms, unless told otherwise. */
export const DEFAULT_LOG_INTERVAL_MS = 30_000

export interface LogThrottleOptions {
  intervalMs?: number
  /** Monotonic: a wall clock stepped back would hold lines back. */
  clock?: () => number
}

type Fields = Record<string, unknown>

export interface LogThrottle {
  /** At most once per interval per cause; the next line carries `repeated: n`. */
  warn (cause: string, err: unknown, msg: string, fields?: Fields): void
  /** The same at error level. */
  error (cause: string, err: unknown, msg: string, fields?: Fields): void
  /** `cause` recovered: its next failure logs at once. Returns how many were not logged. */
  clear (cause: string): number
}

/** One log line per cause per interval for a failure that repeats (a retry loop, a heartbeat). */
export function createLogThrottle (logger: Logger, { intervalMs = DEFAULT_LOG_INTERVAL_MS, clock = () => performance.now() }: LogThrottleOptions = {}): LogThrottle {
  const causes = new Map<string, { loggedAt: number, held: number }>()

  function log (level: 'warn' | 'error', cause: string, err: unknown, msg: string, fields?: Fields): void {
    const now = clock()
    const state = causes.get(cause)
    if (state !== undefined && now - state.loggedAt < intervalMs) {
      state.held++
      return
    }
    const repeated = state?.held ?? 0
    causes.set(cause, { loggedAt: now, held: 0 })
    logger[level]({ ...fields, ...errorFields(err), ...(repeated > 0 ? { repeated } : {}) }, msg)
  }

  return {
    warn: (cause, err, msg, fields) => log('warn', cause, err, msg, fields),
    error: (cause, err, msg, fields) => log('error', cause, err, msg, fields),
    clear (cause) {
      const held = causes.get(cause)?.held ?? 0
      causes.delete(cause)
      return held
    },
  }
}

/**
 * A known error flat as `code` and `err` (pino's serializer would add a type and a stack);
 * another Error whole, its stack included (it may be a bug).
 */
export function errorFields (err: unknown): { code?: string, err?: unknown } {
  if (err === undefined) return {}
  const known = codedError(err)
  if (known !== undefined) return { code: known.code, err: known.message }
  return { err: err instanceof Error ? err : String(err) }
}
