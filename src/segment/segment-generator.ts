import { LeafError } from '../errors.js'
import type { Logger } from '../logger.js'
import { expandRanges, type IdRange } from '../id-range.js'
import { SegmentBuffer, type Id } from './segment-buffer.js'
import type { Allocation, SegmentStore } from './store.js'
import { settlesWithin, sleep, withTimeout } from '../timers.js'

export type { Id } from './segment-buffer.js'

/** Leaf never doubles the step past this. */
export const MAX_STEP = 1_000_000
/** Loads closer together than this double the step; further apart than twice this halve it. */
export const SEGMENT_DURATION_MS = 15 * 60 * 1000
/** A store call that has not answered by then counts as failed (its range, if any, is skipped). */
export const DEFAULT_LOAD_TIMEOUT_MS = 10_000

export interface SegmentGeneratorOptions {
  store: SegmentStore
  logger: Logger
  /** Wall-clock ms, used only for the step adaptation (Leaf's updateTimestamp); injectable for tests. */
  clock?: () => number
  /**
   * Monotonic ms for everything else: wait deadlines, the backoff, load durations. A wall
   * clock stepped back (NTP) would otherwise hold waiting callers and preloads for as long.
   */
  monotonic?: () => number
  waitTimeoutMs: number
  refreshIntervalMs: number
  loadTimeoutMs?: number
  /** Backoff between failed loads while callers wait, doubling from min to max. */
  retryMinMs?: number
  retryMaxMs?: number
  /** Told of every segment load, for the metrics. */
  onLoad?: (key: string, seconds: number, ok: boolean) => void
}

/** Java Leaf's SegmentBufferView, with its 64-bit values as bigint. */
export interface SegmentBufferView {
  key: string
  initOk: boolean
  nextReady: boolean
  pos: number
  value0: bigint
  max0: bigint
  step0: number
  value1: bigint
  max1: bigint
  step1: number
  step: number
  minStep: number
  updateTimestamp: number
}

export interface SegmentGenerator {
  /** Loads the tag list (retrying in the background on failure) and starts the refresh timer. */
  init (): Promise<boolean>
  readonly initialized: boolean
  /** The next ID of a tag: synchronous while the current segment has IDs left. */
  next (key: string): Id | Promise<Id>
  /** `count` increasing IDs of a tag, crossing into further segments as needed. */
  nextBatch (key: string, count: number): Id[] | Promise<Id[]>
  /**
   * The same IDs as ranges of consecutive IDs, one per segment they come from: synchronous
   * while the current segment holds the whole batch.
   */
  nextRanges (key: string, count: number): IdRange[] | Promise<IdRange[]>
  /** Re-reads the tag list: adds new tags, drops removed ones. */
  refreshTags (): Promise<void>
  /** Makes a tag servable at once (after it was inserted in the store). */
  addTag (key: string): void
  has (key: string): boolean
  views (): SegmentBufferView[]
  /** Loaded tags with no ID left in either segment: they cannot answer without the store. */
  exhaustedTags (): string[]
  close (): void
}

export function createSegmentGenerator (options: SegmentGeneratorOptions): SegmentGenerator {
  const {
    store,
    logger,
    clock = Date.now,
    monotonic = () => performance.now(),
    waitTimeoutMs,
    refreshIntervalMs,
    loadTimeoutMs = DEFAULT_LOAD_TIMEOUT_MS,
    retryMinMs = 50,
    retryMaxMs = 1000,
    onLoad,
  } = options
  const buffers = new Map<string, SegmentBuffer>()
  let initialized = false
  let closed = false
  let storeHealthy = true
  let refreshTimer: NodeJS.Timeout | undefined

  function next (key: string): Id | Promise<Id> {
    const buf = buffers.get(key)
    if (buf === undefined) throw missingKey(key)
    if (buf.initOk) {
      const seg = buf.currentSegment
      if (seg.pos < seg.step) {
        const id = seg.take()
        if (!buf.nextReady && buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
        return id
      }
    }
    return take(buf, 1).then(firstId)
  }

  function nextBatch (key: string, count: number): Id[] | Promise<Id[]> {
    const ranges = nextRanges(key, count)
    return ranges instanceof Promise ? ranges.then(expandRanges) : expandRanges(ranges)
  }

  function nextRanges (key: string, count: number): IdRange[] | Promise<IdRange[]> {
    const buf = buffers.get(key)
    if (buf === undefined) throw missingKey(key)
    if (buf.initOk) {
      const seg = buf.currentSegment
      if (seg.idle >= count) {
        const range = seg.takeRange(count)
        if (!buf.nextReady && buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
        return [range]
      }
    }
    return take(buf, count)
  }

  /**
   * Takes `count` IDs, waiting for loads as needed. A caller that gets nothing for the wait
   * timeout fails, however many loads others used up meanwhile; a batch that makes progress
   * gets a new wait for each further segment.
   */
  async function take (buf: SegmentBuffer, count: number): Promise<IdRange[]> {
    const ranges: IdRange[] = []
    let taken = 0
    let deadline = monotonic() + waitTimeoutMs
    while (true) {
      if (buf.initOk) {
        const seg = buf.currentSegment
        const n = Math.min(count - taken, seg.idle)
        if (n > 0) ranges.push(seg.takeRange(n))
        taken += n
        if (!buf.nextReady && buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
        if (taken === count) return ranges
        if (n > 0) deadline = monotonic() + waitTimeoutMs
        if (buf.nextReady) {
          buf.switchSegment()
          continue
        }
      }
      await waitForLoad(buf, deadline)
    }
  }

  function firstId (ranges: IdRange[]): Id {
    return (ranges[0] as IdRange).first
  }

  function missingKey (key: string): LeafError {
    return initialized
      ? new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
      : new LeafError('NOT_READY', 'The segment generator has not loaded its tags yet.')
  }

  /** Background preload of the next segment; skipped while a failed load backs off. */
  function preload (buf: SegmentBuffer): void {
    if (monotonic() >= buf.retryAt) startLoad(buf)
  }

  /**
   * Waits until the load in flight settles, starting one (after the failure backoff) when
   * none runs. Rejects with SEGMENTS_NOT_READY when nothing settles within the wait timeout.
   */
  async function waitForLoad (buf: SegmentBuffer, deadline: number): Promise<void> {
    while (true) {
      // Another caller's load may have landed while this one slept: take from it first.
      if (buf.initOk && (buf.nextReady || buf.currentSegment.idle > 0)) return
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
      if (buf.missing) throw new LeafError('KEY_NOT_FOUND', `Tag "${buf.key}" is not in the leaf_alloc table.`)
      if (buf.backoffMs === 0) return // the load brought a segment
    }
    throw new LeafError('SEGMENTS_NOT_READY', `Both segments of "${buf.key}" are used up and the database did not answer within ${waitTimeoutMs} ms.`)
  }

  function startLoad (buf: SegmentBuffer): void {
    const started = monotonic()
    const load = loadSegment(buf).then(
      () => {
        buf.backoffMs = 0
        buf.retryAt = 0
        onLoad?.(buf.key, (monotonic() - started) / 1000, true)
        if (!storeHealthy) {
          storeHealthy = true
          logger.info('database reachable again: segment loads succeed')
        }
      },
      (err: unknown) => {
        buf.backoffMs = Math.min(Math.max(buf.backoffMs * 2, retryMinMs), retryMaxMs)
        buf.retryAt = monotonic() + buf.backoffMs
        onLoad?.(buf.key, (monotonic() - started) / 1000, false)
        if (storeHealthy) {
          storeHealthy = false
          logger.warn({ key: buf.key, err }, 'database unreachable: serving buffered IDs, retrying loads')
        } else {
          logger.debug({ key: buf.key, err: (err as Error).message, retryInMs: buf.backoffMs }, 'segment load failed')
        }
      }
    ).finally(() => {
      if (buf.loading === load) buf.loading = undefined
    })
    buf.loading = load
  }

  /** Java Leaf's updateSegmentFromDb: reserve a range, adapting the step to the load rate. */
  async function loadSegment (buf: SegmentBuffer): Promise<void> {
    let alloc: Allocation | undefined
    let nextStep: number | undefined
    if (!buf.initOk || buf.updateTimestamp === 0) {
      alloc = await withTimeout(store.allocate(buf.key), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
    } else {
      nextStep = adaptStep(buf.step, buf.minStep, clock() - buf.updateTimestamp)
      alloc = await withTimeout(store.allocate(buf.key, { step: nextStep, tableStep: buf.minStep }), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
      // The table's step changed since the last load: the store reserved it, and the
      // adaptation starts again from it.
      if (alloc !== undefined && alloc.step !== buf.minStep) nextStep = undefined
    }
    if (alloc !== undefined && !(alloc.step >= 1)) {
      throw new Error(`leaf_alloc.step of "${buf.key}" is ${alloc.step}: it must be 1 or more`)
    }
    if (alloc === undefined) {
      buf.missing = true
      if (buffers.get(buf.key) === buf) buffers.delete(buf.key)
      logger.warn({ key: buf.key }, 'tag no longer in leaf_alloc: dropped')
      return
    }
    if (!buf.initOk) {
      buf.step = alloc.step
      buf.minStep = alloc.step
      buf.currentSegment.reset(alloc.maxId, buf.step)
      buf.initOk = true
      return
    }
    // The second load (table step) starts the step clock; later ones use the adapted step.
    buf.updateTimestamp = clock()
    buf.step = nextStep ?? alloc.step
    buf.minStep = alloc.step
    buf.nextSegment.reset(alloc.maxId, buf.step)
    buf.nextReady = true
    logger.debug({ key: buf.key, max: String(alloc.maxId), step: buf.step }, 'segment loaded')
  }

  async function refreshTags (): Promise<void> {
    // Only tags known before the read may be dropped: one added meanwhile (addTag) stays.
    const known = [...buffers.keys()]
    const tags = await store.getAllTags()
    const current = new Set(tags)
    const added: string[] = []
    for (const tag of tags) {
      if (!buffers.has(tag)) {
        buffers.set(tag, new SegmentBuffer(tag))
        added.push(tag)
      }
    }
    const removed: string[] = []
    for (const tag of known) {
      if (!current.has(tag) && buffers.delete(tag)) removed.push(tag)
    }
    if (added.length > 0 || removed.length > 0) logger.info({ added, removed }, 'segment tags refreshed')
    initialized = true
  }

  function scheduleRefresh (delayMs: number): void {
    if (closed) return
    refreshTimer = setTimeout(() => {
      refreshTags().then(
        () => scheduleRefresh(refreshIntervalMs),
        (err: unknown) => {
          logger.warn({ err }, 'segment tag refresh failed')
          scheduleRefresh(initialized ? refreshIntervalMs : Math.min(refreshIntervalMs, 1000))
        }
      )
    }, delayMs)
    refreshTimer.unref()
  }

  return {
    async init () {
      try {
        await refreshTags()
        scheduleRefresh(refreshIntervalMs)
        return true
      } catch (err) {
        logger.error({ err }, 'segment generator could not load its tags; retrying in the background')
        scheduleRefresh(Math.min(refreshIntervalMs, 1000))
        return false
      }
    },
    get initialized () {
      return initialized
    },
    next,
    nextBatch,
    nextRanges,
    refreshTags,
    addTag (key) {
      if (!buffers.has(key)) buffers.set(key, new SegmentBuffer(key))
    },
    has (key) {
      return buffers.has(key)
    },
    views () {
      return [...buffers.values()].map(toView)
    },
    exhaustedTags () {
      const tags: string[] = []
      for (const buf of buffers.values()) {
        if (buf.initOk && !buf.nextReady && buf.currentSegment.idle === 0) tags.push(buf.key)
      }
      return tags
    },
    close () {
      closed = true
      clearTimeout(refreshTimer)
    },
  }
}

/**
 * Java Leaf's step rule, from the third load on: loads less than 15 minutes apart double the
 * step (up to MAX_STEP), 15 to 30 minutes keep it, more than 30 halve it (never below the
 * table's step).
 */
export function adaptStep (step: number, minStep: number, sinceLastLoadMs: number): number {
  if (sinceLastLoadMs < SEGMENT_DURATION_MS) return step * 2 > MAX_STEP ? step : step * 2
  if (sinceLastLoadMs < SEGMENT_DURATION_MS * 2) return step
  return Math.max(Math.floor(step / 2), minStep)
}

function toView (buf: SegmentBuffer): SegmentBufferView {
  const [s0, s1] = buf.segments
  return {
    key: buf.key,
    initOk: buf.initOk,
    nextReady: buf.nextReady,
    pos: buf.current,
    value0: s0.value,
    max0: s0.max,
    step0: s0.step,
    value1: s1.value,
    max1: s1.max,
    step1: s1.step,
    step: buf.step,
    minStep: buf.minStep,
    updateTimestamp: buf.updateTimestamp,
  }
}
