// A tag's loads when the store fails: one at a time, backing off between failures, and the
// callers that wait for one held to their deadline.

import { nextBackoffMs } from '../backoff.js'
import { channels } from '../channels.js'
import { LeafError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { LogThrottle } from '../log-throttle.js'
import type { SegmentBuffer } from './segment-buffer.js'
import { IdSpaceEnded } from './store.js'
import { settlesWithin, sleep } from '../timers.js'
import { missingKey, shuttingDown, spaceEnded } from './segment-errors.js'

export interface AllocationRetryOptions {
  loadSegment: (buf: SegmentBuffer) => Promise<void>
  plan: (buf: SegmentBuffer) => void
  monotonic: () => number
  waitTimeoutMs: number
  retryMinMs: number
  retryMaxMs: number
  logger: Logger
  throttle: LogThrottle
  /** Why loads are refused though the database answers (a failover hold), if they are. */
  heldBecause?: () => string | undefined
}

export interface AllocationRetry {
  startLoad (buf: SegmentBuffer): void
  waitForLoad (buf: SegmentBuffer, deadline: number): Promise<void>
}

export function createAllocationRetry (options: AllocationRetryOptions): AllocationRetry {
  const { loadSegment, plan, monotonic, waitTimeoutMs, retryMinMs, retryMaxMs, logger, throttle, heldBecause } = options
  let storeHealthy = true
  /**
   * A tag's last load, when it was refused with a code of its own (STORE_SPLIT: segment/host-fence.ts):
   * a caller that waits in vain is answered with it, not with a database that did not answer.
   */
  const refusals = new WeakMap<SegmentBuffer, LeafError>()

  /**
   * Waits until the load in flight settles, starting one (after the failure backoff) when
   * none runs. Rejects with SEGMENTS_NOT_READY when nothing settles within the wait timeout.
   */
  async function waitForLoad (buf: SegmentBuffer, deadline: number): Promise<void> {
    while (true) {
      // Another caller's load may have landed while this one slept: take from it first.
      if (buf.serving && (buf.nextReady || buf.currentSegment.idle > 0)) return
      if (buf.state === 'stopped') throw shuttingDown()
      if (buf.ended) throw spaceEnded(buf.key)
      const remaining = deadline - monotonic()
      if (remaining <= 0) break
      if (buf.loading === undefined) {
        const backoff = buf.retryAt - monotonic()
        if (backoff > 0) {
          await sleep(Math.min(backoff, remaining))
          continue
        }
        startLoad(buf)
      }
      if (!await settlesWithin(buf.loading as Promise<void>, remaining)) break
      if (buf.missing) throw missingKey(buf.key, true)
      if (buf.ended) throw spaceEnded(buf.key)
      if (buf.backoffMs === 0) return // the load brought a segment
    }
    const refused = refusals.get(buf)
    if (refused !== undefined) throw refused
    const held = heldBecause?.()
    if (held !== undefined) throw new LeafError('SEGMENTS_NOT_READY', `Both segments of "${buf.key}" are used up and ${held}.`)
    throw new LeafError('SEGMENTS_NOT_READY', `Both segments of "${buf.key}" are used up and the database did not answer within ${waitTimeoutMs} ms.`)
  }

  function startLoad (buf: SegmentBuffer): void {
    const started = monotonic()
    const load = loadSegment(buf).then(
      () => {
        refusals.delete(buf)
        buf.loadSucceeded((monotonic() - started) / 1000)
        channels.segmentLoad.publish({ key: buf.key, seconds: buf.lastLoadSeconds, ok: true })
        if (!storeHealthy) {
          storeHealthy = true
          logger.info({ failedLoadsNotLogged: throttle.clear('segment-load') }, 'database reachable again: segment loads succeed')
        }
      },
      (err: unknown) => {
        const backoffMs = nextBackoffMs(buf.backoffMs, retryMinMs, retryMaxMs)
        buf.loadFailed(backoffMs, monotonic() + backoffMs)
        if (err instanceof LeafError) refusals.set(buf, err)
        else refusals.delete(buf)
        channels.segmentLoad.publish({ key: buf.key, seconds: (monotonic() - started) / 1000, ok: false })
        if (err instanceof IdSpaceEnded) {
          buf.markEnded()
          plan(buf)
          logger.error({ key: buf.key }, 'the tag\'s ID space has ended: max_id cannot move by its step without passing 2^63 - 1; it answers ID_SPACE_EXHAUSTED once its buffered IDs are used')
          return
        }
        storeHealthy = false
        throttle.warn('segment-load', err, 'segment load failed: serving buffered IDs, retrying loads', { key: buf.key })
      }
    ).finally(() => buf.loadSettled(load))
    buf.loadStarted(load)
  }

  return { startLoad, waitForLoad }
}
