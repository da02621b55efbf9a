// Reserving a tag's next segment: Java Leaf's updateSegmentFromDb and its step rule, and the
// first load's take-over of what the last stop parked.

import type { Logger } from '../logger.js'
import { Segment, type SegmentBuffer } from './segment-buffer.js'
import { IdSpaceEnded, type Allocation, type SegmentStore } from './store.js'
import { withTimeout } from '../timers.js'
import { AllocationHeld, type MaxIdGuard } from './max-id-guard.js'

/** Leaf never doubles the step past this. */
export const MAX_STEP = 1_000_000
/** Loads closer together than this double the step; further apart than twice this halve it. */
export const SEGMENT_DURATION_MS = 15 * 60 * 1000
/** A store call that has not answered by then counts as failed (its range, if any, is skipped). */
export const DEFAULT_LOAD_TIMEOUT_MS = 10_000
/** Ranges parked at a stop are taken by the next start of the same identity within this long, else dropped. */
export const PARKED_MAX_AGE_MS = 10 * 60_000
/** A parked row larger than this is not one a stop wrote (it would not fit a Segment's step). */
const MAX_SEGMENT = BigInt(Number.MAX_SAFE_INTEGER)

export interface SegmentLoaderOptions {
  store: SegmentStore
  logger: Logger
  /** Wall-clock ms, for the step adaptation only. */
  clock: () => number
  monotonic: () => number
  loadTimeoutMs: number
  handover: { claimFrom: string | undefined } | undefined
  guard: MaxIdGuard | undefined
  /** The generator's tags: one the store no longer has is dropped from it. */
  buffers: Map<string, SegmentBuffer>
  plan: (buf: SegmentBuffer) => void
}

export function createSegmentLoader (options: SegmentLoaderOptions): (buf: SegmentBuffer) => Promise<void> {
  const { store, logger, clock, monotonic, loadTimeoutMs, handover, guard, buffers, plan } = options

  /**
   * Java Leaf's updateSegmentFromDb. One load runs at a time per tag, so segments join the
   * chain in the order the table reserved them, each above the last.
   */
  async function loadSegment (buf: SegmentBuffer): Promise<void> {
    let alloc: Allocation | undefined
    let nextStep: number | undefined
    const allocate = (adapted?: { step: number, tableStep: number }) =>
      withTimeout(store.allocate(buf.key, adapted), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
    // A tag's first load takes what the last stop parked: above every ID that stop handed out.
    // Never after a failover: the old store may not have passed on a claim's DELETE.
    const epoch = guard === undefined ? 0 : await guard.beforeAllocate()
    if (handover?.claimFrom !== undefined && !buf.claimed && buf.segments.length === 0 && guard?.parkedUsable() !== false) {
      const claimed = await withTimeout(store.claimParked(buf.key, handover.claimFrom, PARKED_MAX_AGE_MS), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
      const parked = (claimed ?? []).filter((r) => r.end > r.first && r.end - r.first <= MAX_SEGMENT)
      if (parked.length < (claimed?.length ?? 0)) logger.warn({ key: buf.key, rows: claimed?.length }, 'parked rows that are not a range of IDs were dropped')
      buf.claimedParked(parked.map((r) => new Segment(r.end, Number(r.end - r.first))))
      if (parked.length > 0) {
        for (const r of parked) guard?.holds(buf.key, r.end)
        buf.rate.sample(buf.issued, monotonic())
        plan(buf)
        logger.info({ key: buf.key, ranges: parked.length, ids: String(buf.buffered) }, 'took over the IDs the last stop parked')
        return
      }
    }
    if (!buf.serving || buf.updateTimestamp === 0) {
      alloc = await allocate()
    } else {
      nextStep = adaptStep(buf.step, buf.minStep, clock() - buf.updateTimestamp)
      try {
        alloc = await allocate({ step: nextStep, tableStep: buf.minStep })
      } catch (err) {
        // Near 2^63 the doubled step may not fit where the table's still does.
        if (!(err instanceof IdSpaceEnded) || nextStep === buf.minStep) throw err
        nextStep = undefined
        alloc = await allocate()
      }
      // The table's step changed since the last load: the store reserved it, and the
      // adaptation starts again from it.
      if (alloc !== undefined && alloc.step !== buf.minStep) nextStep = undefined
    }
    if (alloc !== undefined && !(alloc.step >= 1)) {
      throw new Error(`leaf_alloc.step of "${buf.key}" is ${alloc.step}: it must be 1 or more`)
    }
    if (alloc === undefined) {
      buf.markMissing()
      if (buffers.get(buf.key) === buf) buffers.delete(buf.key)
      logger.warn({ key: buf.key }, 'tag no longer in leaf_alloc: dropped')
      return
    }
    const reserved = nextStep ?? alloc.step
    if (guard !== undefined && !await guard.admit(buf.key, alloc.maxId - BigInt(reserved), alloc.maxId, alloc.store, epoch)) {
      throw new AllocationHeld('ALLOCATION_RANGE_HELD', `the range below ${alloc.maxId} of "${buf.key}" is not served: the store failed over (see /readyz)`)
    }
    if (buf.segments.length === 0) {
      buf.firstLoaded(new Segment(alloc.maxId, alloc.step))
      buf.rate.sample(buf.issued, monotonic())
      plan(buf)
      return
    }
    // The second load (table step) starts the step clock; later ones use the adapted step.
    buf.appendLoaded(new Segment(alloc.maxId, reserved), alloc.step, clock())
    plan(buf)
    logger.debug({ key: buf.key, max: String(alloc.maxId), step: buf.step, held: buf.segments.length }, 'segment loaded')
  }

  return loadSegment
}

/** Java Leaf's step rule, from the third load on: docs/segment-mode.md#segment-mode. */
export function adaptStep (step: number, minStep: number, sinceLastLoadMs: number): number {
  if (sinceLastLoadMs < SEGMENT_DURATION_MS) return step * 2 > MAX_STEP ? step : step * 2
  if (sinceLastLoadMs < SEGMENT_DURATION_MS * 2) return step
  return Math.max(Math.floor(step / 2), minStep)
}
