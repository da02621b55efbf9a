import { codedError } from './database/driver-errors.js'
import type { Logger } from './logger.js'

/** One line per cause per this many ms, unless told otherwise. */
export const DEFAULT_LOG_INTERVAL_MS = 30_000

export interface LogThrottleOptions {
  /** At most one line per cause per interval. */
  intervalMs?: number
  /** Milliseconds, monotonic: performance.now by default (a wall clock stepped back would hold lines back). */
  clock?: () => number
}

type Fields = Record<string, unknown>

export interface LogThrottle {
  /**
   * Logs `msg` at warn with `err` (and `fields`) at the first failure of `cause`, then at most
   * once per interval: the failures in between are counted, and the next line carries
   * `repeated: n`, how many were not logged since the last line of that cause.
   */
  warn (cause: string, err: unknown, msg: string, fields?: Fields): void
  /** The same at error level. */
  error (cause: string, err: unknown, msg: string, fields?: Fields): void
  /**
   * `cause` recovered: its next failure logs at once. Returns how many of its failures were
   * not logged since its last line (for a recovery line to mention).
   */
  clear (cause: string): number
}

/**
 * Keeps a failure that repeats (a retry loop, a heartbeat, every request while a file
 * cannot be written) to one log line per cause per interval. A driver's error is logged as
 * its code and message, without the stack; any other error as pino serializes it.
 */
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
 * What a line says of an error (none for undefined: a failure that is no exception, such as a
 * clock behind): a driver's, a timeout's or the database plumbing's as `code` and `err` (its
 * message), flat, since pino's serializer would give any object under `err` a type and a
 * stack; another Error whole under `err`, its stack included (it may be a bug); anything else
 * as text.
 */
export function errorFields (err: unknown): { code?: string, err?: unknown } {
  if (err === undefined) return {}
  const known = codedError(err)
  if (known !== undefined) return { code: known.code, err: known.message }
  return { err: err instanceof Error ? err : String(err) }
}
