import type { Logger } from '../logger.js'
import { expandRanges, type IdRange } from '../id-range.js'
import { SegmentBuffer, type Id } from './segment-buffer.js'
import type { SegmentStore } from './store.js'
import { createLogThrottle } from '../log-throttle.js'
import type { MaxIdGuard } from './max-id-guard.js'
import { createBufferHorizon } from './buffer-horizon.js'
import { createAllocationRetry } from './allocation-retry.js'
import { giveBackAll, type GiveBack } from './give-back.js'
import { channels } from '../channels.js'
import { isLeafError } from '../errors.js'
import { withTimeout } from '../timers.js'
import { isUnstorableValue } from '../database/driver-errors.js'
import { holdCause, lookupFailed, missingKey, shuttingDown, spaceEnded, storeUnconfirmed } from './segment-errors.js'
import { DEFAULT_LOAD_TIMEOUT_MS, createSegmentLoader } from './segment-loader.js'
import { tagViews, type TagViews } from './segment-views.js'
import { createTagList } from './tag-list.js'
import { createTagLookup, type TagLookupOptions } from './tag-lookup.js'
import { WARM_WINDOW_MS } from './warm-state.js'

export type { Id } from './segment-buffer.js'

/** How often each tag's issue rate is sampled (and its horizon planned again). */
export const RATE_SAMPLE_MS = 1000

export interface SegmentGeneratorOptions {
  store: SegmentStore
  logger: Logger
  /** Wall-clock ms, used only for the step adaptation (Leaf's updateTimestamp); injectable for tests. */
  clock?: () => number
  /** Monotonic ms for everything else: a wall clock stepped back (NTP) would stall waits and preloads. */
  monotonic?: () => number
  waitTimeoutMs: number
  refreshIntervalMs: number
  loadTimeoutMs?: number
  retryMinMs?: number
  retryMaxMs?: number
  bufferSeconds?: number
  maxBufferedSegments?: number
  /** Park ids of the last run and this one: docs/segment-mode.md#giving-the-remainder-back. */
  handover?: { claimFrom: string | undefined, parkAs: string }
  rateSampleMs?: number
  /** Refuses ranges from a store that went back (a failover); undefined: every range is served. */
  guard?: MaxIdGuard
  /** The bounds on looking up unknown tags; TAG_LOOKUPS_PER_SECOND and TAG_LOOKUP_INTERVAL_MS by default. */
  tagLookup?: Pick<TagLookupOptions, 'perSecond' | 'intervalMs'>
}

export interface ShutdownResult {
  giveBacks: GiveBack[]
  /** Tags that issued IDs within WARM_WINDOW_MS before the stop: the next start loads them first. */
  warmTags: string[]
}

export interface SegmentGenerator extends TagViews {
  /** Loads the tag list (retrying in the background on failure) and starts the refresh timer. */
  init (): Promise<boolean>
  readonly initialized: boolean
  /** The next ID of a tag: synchronous while the current segment has IDs left. */
  next (key: string): Id | Promise<Id>
  nextBatch (key: string, count: number): Id[] | Promise<Id[]>
  /** The same IDs as one range per segment they come from. */
  nextRanges (key: string, count: number): IdRange[] | Promise<IdRange[]>
  refreshTags (): Promise<void>
  /** Makes a tag servable at once (after it was inserted in the store). */
  addTag (key: string): void
  has (key: string): boolean
  ratesAgeMs (): number
  /** Loads the first segment of each tag; settles when each loaded or failed, within the wait timeout. */
  warm (tags: readonly string[]): Promise<void>
  readonly warming: boolean
  /** Stops serving, waits for loads in flight and gives back unused IDs, within `budgetMs`. */
  shutdown (budgetMs: number): Promise<ShutdownResult>
  /** Stops serving and the timers, without giving anything back (shutdown() does both). */
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
    bufferSeconds = 0,
    maxBufferedSegments = 2,
    rateSampleMs = RATE_SAMPLE_MS,
    handover,
    guard,
    tagLookup: lookupBounds,
  } = options
  const buffers = new Map<string, SegmentBuffer>()
  // A database that stays down would log a failed load per tag per backoff.
  const throttle = createLogThrottle(logger)
  /** Set by shutdown() and close(): every buffer is stopped, those added later too. */
  let stopping = false
  let warming = false
  const tagList = createTagList({ store, logger, throttle, buffers, newBuffer, guard, refreshIntervalMs })
  const { wantsLoad, plan } = createBufferHorizon({ bufferSeconds, maxBufferedSegments, monotonic })
  const loadSegment = createSegmentLoader({ store, logger, clock, monotonic, loadTimeoutMs, handover, guard, buffers, plan })
  const heldBecause = guard === undefined ? undefined : () => holdCause(guard.view())
  const { startLoad, waitForLoad } = createAllocationRetry({ loadSegment, plan, monotonic, waitTimeoutMs, retryMinMs, retryMaxMs, logger, throttle, heldBecause })
  // A failover seen after the serving bound: the ranges held may have been allocated again by a peer.
  guard?.onVoid(() => {
    let dropped = 0
    for (const buf of buffers.values()) {
      dropped += buf.buffered
      buf.dropSegments()
    }
    return dropped
  })
  const tagLookup = createTagLookup({ ...lookupBounds, monotonic, find: findTag })
  let sampledAt = monotonic()
  const rateTimer = setInterval(sampleRates, rateSampleMs)
  rateTimer.unref()

  /** STORE_UNCONFIRMED past the serving bound; reads the clock only where a bound applies (hot path). */
  function checkServing (): void {
    if (guard === undefined) return
    const until = guard.servingUntil
    if (until === Infinity) return
    const now = monotonic()
    if (now > until) throw storeUnconfirmed(guard.view().unconfirmed?.sinceMs ?? Infinity, guard.view().unconfirmed?.boundMs ?? 0)
  }

  function next (key: string): Id | Promise<Id> {
    const buf = buffers.get(key)
    if (buf === undefined) return unknownTag(key, 1).then(firstId)
    checkServing()
    if (buf.serving) {
      const seg = buf.currentSegment
      if (seg.pos < seg.step) {
        const id = seg.take()
        if (buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
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
    if (buf === undefined) return unknownTag(key, count)
    checkServing()
    if (buf.serving) {
      const seg = buf.currentSegment
      if (seg.idle >= count) {
        const range = seg.takeRange(count)
        if (buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
        return [range]
      }
    }
    return take(buf, count)
  }

  /**
   * A tag not in the tag list: looked up in the store (within the bounds of tag-lookup.ts) and
   * served at once when its row exists. Throws at once when the list is not loaded or no lookup
   * is made now; the lookup and the first load share one wait timeout.
   */
  function unknownTag (key: string, count: number): Promise<IdRange[]> {
    if (!tagList.initialized) throw missingKey(key, false)
    const found = tagLookup.lookup(key)
    if (typeof found === 'string') throw missingKey(key, true, found)
    const deadline = monotonic() + waitTimeoutMs
    return withTimeout(found, waitTimeoutMs, `no answer within ${waitTimeoutMs} ms`).then((exists) => {
      if (!exists) throw missingKey(key, true)
      // Added by the lookup itself (findTag), which outlives a waiter that timed out.
      const buf = buffers.get(key)
      if (buf === undefined) throw missingKey(key, true)
      checkServing()
      return take(buf, count, deadline)
    }, (err: unknown) => {
      throw isLeafError(err) ? err : lookupFailed(key, err)
    })
  }

  /**
   * Exactly the key: a case-insensitive collation (MySQL's default) would find "Orders" for
   * "orders". A found tag gets its buffer here, once per lookup, whether or not a waiter is
   * left. A key the table's charset cannot hold (an emoji on Java Leaf's utf8mb3 table) is no
   * row's: missing, not a store failure.
   */
  async function findTag (key: string): Promise<boolean> {
    let result: 'found' | 'missing' | 'failed' = 'failed'
    try {
      let row: Awaited<ReturnType<typeof store.getTag>>
      try {
        row = await store.getTag(key)
      } catch (err) {
        if (!isUnstorableValue(err)) throw err
        row = undefined
      }
      result = row !== undefined && row.key === key ? 'found' : 'missing'
      if (result === 'found' && !stopping && !buffers.has(key)) {
        buffers.set(key, newBuffer(key))
        logger.info({ key }, 'segment tag added: looked up on its first request')
      }
      return result === 'found'
    } finally {
      if (channels.segmentTagLookup.hasSubscribers) channels.segmentTagLookup.publish({ key, result })
    }
  }

  /** A caller fails after a wait timeout with nothing; a batch that makes progress gets a new wait. */
  async function take (buf: SegmentBuffer, count: number, firstDeadline?: number): Promise<IdRange[]> {
    const ranges: IdRange[] = []
    let taken = 0
    let deadline = firstDeadline ?? monotonic() + waitTimeoutMs
    while (true) {
      if (stopping) throw shuttingDown()
      checkServing()
      if (buf.serving) {
        const seg = buf.currentSegment
        const n = Math.min(count - taken, seg.idle)
        if (n > 0) ranges.push(seg.takeRange(n))
        taken += n
        if (buf.loading === undefined && seg.pos > seg.preloadAfter) preload(buf)
        if (taken === count) return ranges
        if (n > 0) deadline = monotonic() + waitTimeoutMs
        if (buf.nextReady) {
          buf.switchSegment()
          plan(buf)
          continue
        }
      }
      if (buf.ended) throw spaceEnded(buf.key)
      await waitForLoad(buf, deadline)
    }
  }

  /** A buffer for a new tag: stopped at once when the tag list adds it after the stop. */
  function newBuffer (key: string): SegmentBuffer {
    const buf = new SegmentBuffer(key)
    if (stopping) buf.stopServing()
    return buf
  }

  function stop (): void {
    stopping = true
    tagList.close()
    clearInterval(rateTimer)
    for (const buf of buffers.values()) buf.stopServing()
  }

  function firstId (ranges: IdRange[]): Id {
    return (ranges[0] as IdRange).first
  }

  /** Asks the plan again: the rate may have moved since it was made. */
  function preload (buf: SegmentBuffer): void {
    if (monotonic() < buf.retryAt || stopping || buf.ended) return
    if (wantsLoad(buf)) startLoad(buf)
    else plan(buf)
  }

  function sampleRates (): void {
    const now = monotonic()
    sampledAt = now
    for (const buf of buffers.values()) {
      // Tags never loaded are skipped: 100,000 of them cost a loop, not 100,000 samples.
      if (!buf.serving) continue
      buf.rate.sample(buf.issued, now)
      if (bufferSeconds > 0 && !stopping) plan(buf)
    }
  }

  return {
    init: tagList.init,
    get initialized () {
      return tagList.initialized
    },
    next,
    nextBatch,
    nextRanges,
    refreshTags: tagList.refreshTags,
    addTag (key) {
      if (!buffers.has(key)) buffers.set(key, newBuffer(key))
    },
    has (key) {
      return buffers.has(key)
    },
    ...tagViews(buffers, monotonic),
    ratesAgeMs () {
      return monotonic() - sampledAt
    },
    get warming () {
      return warming
    },
    async warm (tags) {
      warming = true
      try {
        const deadline = monotonic() + waitTimeoutMs
        await Promise.all(tags.map(async (key) => {
          const buf = buffers.get(key)
          if (buf === undefined || buf.serving) return
          await waitForLoad(buf, deadline).catch((err: unknown) => {
            logger.warn({ key, err: (err as Error).message }, 'warm start: the tag\'s first segment did not load; it loads on its first request')
          })
        }))
      } finally {
        warming = false
      }
    },
    async shutdown (budgetMs) {
      const deadline = monotonic() + budgetMs
      stop()
      const warmTags: string[] = []
      for (const buf of buffers.values()) {
        if (buf.rate.activeWithin(WARM_WINDOW_MS, buf.issued)) warmTags.push(buf.key)
      }
      const giveBacks = await giveBackAll(buffers, deadline, { store, monotonic, handover, guard })
      return { giveBacks, warmTags }
    },
    close: stop,
  }
}
