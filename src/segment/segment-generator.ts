import { LeafError } from '../errors.js'
import type { Logger } from '../logger.js'
import { expandRanges, type IdRange } from '../id-range.js'
import { PRELOAD_USED_FRACTION, Segment, SegmentBuffer, type Id } from './segment-buffer.js'
import { IdSpaceEnded, type Allocation, type SegmentStore, type UnusedRange } from './store.js'
import { settlesWithin, sleep, withTimeout } from '../timers.js'
import { createLogThrottle } from '../log-throttle.js'
import { AllocationHeld, type MaxIdGuard } from './max-id-guard.js'

export type { Id } from './segment-buffer.js'

/** Leaf never doubles the step past this. */
export const MAX_STEP = 1_000_000
/** Loads closer together than this double the step; further apart than twice this halve it. */
export const SEGMENT_DURATION_MS = 15 * 60 * 1000
/** A store call that has not answered by then counts as failed (its range, if any, is skipped). */
export const DEFAULT_LOAD_TIMEOUT_MS = 10_000
/** How often each tag's issue rate is sampled (and its horizon planned again). */
export const RATE_SAMPLE_MS = 1000
/** A tag with IDs issued within this long before a graceful stop is warm-started at the next start. */
export const WARM_WINDOW_MS = 60_000
/** Ranges parked at a stop are taken by the next start of the same identity within this long, else dropped. */
export const PARKED_MAX_AGE_MS = 10 * 60_000
/** A parked row larger than this is not one a stop wrote (it would not fit a Segment's step). */
const MAX_SEGMENT = BigInt(Number.MAX_SAFE_INTEGER)

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
  /**
   * Seconds of each tag's recent issue rate kept buffered, counting every loaded segment
   * (leaf.segment.buffer-seconds). 0: Leaf's double buffer alone.
   */
  bufferSeconds?: number
  /** Most segments a tag holds, the current one included (leaf.segment.max-buffered-segments); 2 is Leaf's double buffer. */
  maxBufferedSegments?: number
  /** Told of the IDs given back at shutdown, per tag: to max_id (`table`) or parked for the next start (`successor`). */
  onGiveBack?: (key: string, ids: bigint, to: 'table' | 'successor') => void
  /**
   * The hand-over between the lives of one instance (its warm-start file): each tag's first
   * load takes what the last life parked under `claimFrom`, and what this life's stop cannot
   * give back to max_id is parked under `parkAs`, a new id each life, which the stop writes to
   * the file for the next. (One id for every life would let a life that overlaps the next,
   * on a copied file, park after its successor claimed, for the life after that to serve
   * below its predecessor.) Undefined: no hand-over.
   */
  handover?: { claimFrom: string | undefined, parkAs: string }
  /** How often rates are sampled (ms); tests shorten it. */
  rateSampleMs?: number
  /** Refuses ranges from a store that went back (a failover); undefined: every range is served. */
  guard?: MaxIdGuard
}

/** What shutdown() did for one tag. */
export interface GiveBack {
  key: string
  /** IDs returned to max_id (0 when none could be). */
  returned: bigint
  /** IDs parked for the next start with the same identity. */
  parked: bigint
  /** IDs held and not handed out: returned, parked, or lost. */
  unused: bigint
  /** Why not all of them went back, when some did not. */
  reason?: string
}

export interface ShutdownResult {
  giveBacks: GiveBack[]
  /** Tags that issued IDs within WARM_WINDOW_MS before the stop: the next start loads them first. */
  warmTags: string[]
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
  /** Beyond Leaf: every segment held, IDs buffered in them, the rate and what it makes of them. */
  segments: { value: bigint, max: bigint, step: number }[]
  buffered: number
  /** IDs/s the horizon plans with (a burst at once, decaying over a minute). */
  rate: number
  /** IDs/s over the last minute. */
  ratePerMinute: number
  /** How long the buffered IDs last at `rate`; Infinity while the tag is idle. */
  bufferSeconds: number
  /** IDs/s per 10 s over the last 15 minutes, oldest first. */
  history: number[]
  lastLoadSeconds: number
  failedLoads: number
  /** The tag's max_id cannot move any more: ID_SPACE_EXHAUSTED. */
  ended: boolean
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
  /** Loaded tags with no ID left in any segment: they cannot answer without the store. */
  exhaustedTags (): string[]
  /** Tags whose ID space has ended (max_id at 2^63 - 1): they answer ID_SPACE_EXHAUSTED. */
  endedTags (): string[]
  /** How long ago the rates were last sampled (ms). */
  ratesAgeMs (): number
  /**
   * Loads the first segment of each tag (a warm start), in the background of nothing: the
   * promise settles when each has loaded or failed, within the wait timeout.
   */
  warm (tags: readonly string[]): Promise<void>
  /** True while warm() runs. */
  readonly warming: boolean
  /**
   * A graceful stop: stops serving, waits for loads in flight, and gives back what it can of
   * each tag's unused IDs (see giveBackTail), all within `budgetMs`.
   */
  shutdown (budgetMs: number): Promise<ShutdownResult>
  /** Stops the timers (shutdown() does too). */
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
    bufferSeconds = 0,
    maxBufferedSegments = 2,
    onGiveBack,
    rateSampleMs = RATE_SAMPLE_MS,
    handover,
    guard,
  } = options
  const buffers = new Map<string, SegmentBuffer>()
  // A database that stays down fails a load per tag per backoff, and the tag list every
  // second: one line per cause per 30 s, with how many were held back.
  const throttle = createLogThrottle(logger)
  let initialized = false
  let closed = false
  /** Set by shutdown(): nothing is served any more. */
  let stopping = false
  let warming = false
  let storeHealthy = true
  let refreshTimer: NodeJS.Timeout | undefined
  let sampledAt = monotonic()
  const rateTimer = setInterval(sampleRates, rateSampleMs)
  rateTimer.unref()

  function next (key: string): Id | Promise<Id> {
    const buf = buffers.get(key)
    if (buf === undefined) throw missingKey(key)
    if (buf.initOk) {
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
    if (buf === undefined) throw missingKey(key)
    if (buf.initOk) {
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
   * Takes `count` IDs, waiting for loads as needed. A caller that gets nothing for the wait
   * timeout fails, however many loads others used up meanwhile; a batch that makes progress
   * gets a new wait for each further segment.
   */
  async function take (buf: SegmentBuffer, count: number): Promise<IdRange[]> {
    const ranges: IdRange[] = []
    let taken = 0
    let deadline = monotonic() + waitTimeoutMs
    while (true) {
      if (stopping) throw shuttingDown()
      if (buf.initOk) {
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

  function firstId (ranges: IdRange[]): Id {
    return (ranges[0] as IdRange).first
  }

  function missingKey (key: string): LeafError {
    return initialized
      ? new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
      : new LeafError('NOT_READY', 'The segment generator has not loaded its tags yet.')
  }

  function spaceEnded (key: string): LeafError {
    return new LeafError('ID_SPACE_EXHAUSTED', `The ID space of "${key}" has ended: its max_id cannot move by its step without passing 2^63 - 1.`)
  }

  function shuttingDown (): LeafError {
    return new LeafError('NOT_READY', 'This instance is shutting down.')
  }

  /**
   * A background load, when the plan still wants one (the rate may have moved since it was
   * made); skipped while a failed load backs off.
   */
  function preload (buf: SegmentBuffer): void {
    if (monotonic() < buf.retryAt || stopping || buf.ended) return
    if (wantsLoad(buf)) startLoad(buf)
    else plan(buf)
  }

  /** IDs the tag should hold at its current rate: the horizon. */
  function horizonIds (buf: SegmentBuffer): number {
    return bufferSeconds === 0 ? 0 : buf.rate.current(buf.issued, monotonic()) * bufferSeconds
  }

  /**
   * Whether the tag should load another segment now: Leaf's rule (the current segment is
   * more than 10% used and none is loaded behind it), or fewer IDs held than the horizon
   * asks for; never more than maxBufferedSegments held.
   */
  function wantsLoad (buf: SegmentBuffer): boolean {
    if (!buf.initOk) return true
    const held = buf.segments.length
    if (held >= maxBufferedSegments) return false
    const cur = buf.currentSegment
    if (held === 1 && cur.pos > cur.step * PRELOAD_USED_FRACTION) return true
    return buf.buffered < horizonIds(buf)
  }

  /**
   * Sets the current segment's preloadAfter: the position past which wantsLoad turns true at
   * the rate known now, so the hot path compares one number. Planned again when a load lands,
   * when the current segment changes and at every rate sample.
   */
  function plan (buf: SegmentBuffer): void {
    const cur = buf.currentSegment
    const held = buf.segments.length
    if (held === 0) return
    if (held >= maxBufferedSegments || buf.ended || buf.missing) {
      cur.preloadAfter = Infinity
      return
    }
    const leaf = held === 1 ? cur.step * PRELOAD_USED_FRACTION : Infinity
    const ahead = buf.buffered - cur.idle
    const horizon = horizonIds(buf)
    // buffered < horizon once cur.idle < horizon - ahead, that is past pos = step + ahead - horizon.
    const byHorizon = horizon > 0 ? cur.step + ahead - horizon : Infinity
    cur.preloadAfter = Math.min(leaf, byHorizon)
  }

  function sampleRates (): void {
    const now = monotonic()
    sampledAt = now
    for (const buf of buffers.values()) {
      buf.rate.sample(buf.issued, now)
      if (bufferSeconds > 0 && buf.initOk && !stopping) plan(buf)
    }
  }

  /**
   * Waits until the load in flight settles, starting one (after the failure backoff) when
   * none runs. Rejects with SEGMENTS_NOT_READY when nothing settles within the wait timeout.
   */
  async function waitForLoad (buf: SegmentBuffer, deadline: number): Promise<void> {
    while (true) {
      // Another caller's load may have landed while this one slept: take from it first.
      if (buf.initOk && (buf.nextReady || buf.currentSegment.idle > 0)) return
      if (stopping) throw shuttingDown()
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
      if (buf.missing) throw new LeafError('KEY_NOT_FOUND', `Tag "${buf.key}" is not in the leaf_alloc table.`)
      if (buf.ended) throw spaceEnded(buf.key)
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
        buf.lastLoadSeconds = (monotonic() - started) / 1000
        onLoad?.(buf.key, buf.lastLoadSeconds, true)
        if (!storeHealthy) {
          storeHealthy = true
          logger.info({ failedLoadsNotLogged: throttle.clear('segment-load') }, 'database reachable again: segment loads succeed')
        }
      },
      (err: unknown) => {
        buf.backoffMs = Math.min(Math.max(buf.backoffMs * 2, retryMinMs), retryMaxMs)
        buf.retryAt = monotonic() + buf.backoffMs
        buf.failedLoads++
        onLoad?.(buf.key, (monotonic() - started) / 1000, false)
        if (err instanceof IdSpaceEnded) {
          buf.ended = true
          plan(buf)
          logger.error({ key: buf.key }, 'the tag\'s ID space has ended: max_id cannot move by its step without passing 2^63 - 1; it answers ID_SPACE_EXHAUSTED once its buffered IDs are used')
          return
        }
        storeHealthy = false
        throttle.warn('segment-load', err, 'segment load failed: serving buffered IDs, retrying loads', { key: buf.key })
      }
    ).finally(() => {
      if (buf.loading === load) buf.loading = undefined
    })
    buf.loading = load
  }

  /**
   * Java Leaf's updateSegmentFromDb: reserve a range, adapting the step to the load rate, and
   * append it to the tag's chain. One load runs at a time per tag, so segments join the
   * chain in the order the table reserved them, each above the last.
   */
  async function loadSegment (buf: SegmentBuffer): Promise<void> {
    let alloc: Allocation | undefined
    let nextStep: number | undefined
    const allocate = (adapted?: { step: number, tableStep: number }) =>
      withTimeout(store.allocate(buf.key, adapted), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
    // A tag's first load takes what the last stop of this identity parked, once: those IDs
    // were reserved before and are above every ID that stop handed out.
    // Also held by a store failover (the guard refuses before it answers), and never after one.
    const epoch = guard === undefined ? 0 : await guard.beforeAllocate()
    if (handover?.claimFrom !== undefined && !buf.claimed && !buf.initOk && buf.segments.length === 0 && guard?.parkedUsable() !== false) {
      const claimed = await withTimeout(store.claimParked(buf.key, handover.claimFrom, PARKED_MAX_AGE_MS), loadTimeoutMs, `store did not answer within ${loadTimeoutMs} ms`)
      buf.claimed = true
      const parked = (claimed ?? []).filter((r) => r.end > r.first && r.end - r.first <= MAX_SEGMENT)
      if (parked.length < (claimed?.length ?? 0)) logger.warn({ key: buf.key, rows: claimed?.length }, 'parked rows that are not a range of IDs were dropped')
      if (parked.length > 0) {
        buf.segments = parked.map((r) => new Segment(r.end, Number(r.end - r.first)))
        for (const r of parked) guard?.holds(buf.key, r.end)
        // A load that lands after shutdown() began must not turn serving back on.
        buf.initOk = !stopping
        buf.rate.sample(buf.issued, monotonic())
        plan(buf)
        logger.info({ key: buf.key, ranges: parked.length, ids: String(buf.buffered) }, 'took over the IDs the last stop parked')
        return
      }
    }
    if (!buf.initOk || buf.updateTimestamp === 0) {
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
      buf.missing = true
      if (buffers.get(buf.key) === buf) buffers.delete(buf.key)
      logger.warn({ key: buf.key }, 'tag no longer in leaf_alloc: dropped')
      return
    }
    const reserved = nextStep ?? alloc.step
    if (guard !== undefined && !await guard.admit(buf.key, alloc.maxId - BigInt(reserved), alloc.maxId, alloc.store, epoch)) {
      throw new AllocationHeld(`the range below ${alloc.maxId} of "${buf.key}" is not served: the store failed over (see /readyz)`)
    }
    // (A tag whose serving shutdown() stopped has initOk off but keeps its chain: append.)
    if (!buf.initOk && buf.segments.length === 0) {
      buf.step = alloc.step
      buf.minStep = alloc.step
      buf.segments = [new Segment(alloc.maxId, buf.step)]
      buf.initOk = !stopping
      buf.rate.sample(buf.issued, monotonic())
      plan(buf)
      return
    }
    // The second load (table step) starts the step clock; later ones use the adapted step.
    buf.updateTimestamp = clock()
    buf.step = reserved
    buf.minStep = alloc.step
    buf.segments.push(new Segment(alloc.maxId, buf.step))
    plan(buf)
    logger.debug({ key: buf.key, max: String(alloc.maxId), step: buf.step, held: buf.segments.length }, 'segment loaded')
  }

  /**
   * Gives back what a stopping instance holds of a tag and never handed out (serving stopped
   * first). The run of segments at the end of the chain that follow each other without a gap
   * were reserved one after another with nobody else reserving in between; if the last of
   * them still ends at max_id, nobody has reserved since either, so one compare-and-set puts
   * max_id back at the first unused ID of that run. What that cannot return (all of it when
   * someone reserved since, or segments before a gap) is parked for the next start of this
   * identity, which takes it before it reserves anything (see store.ts).
   */
  async function giveBackTail (buf: SegmentBuffer, deadline: number): Promise<GiveBack> {
    const segs = buf.segments
    const result: GiveBack = { key: buf.key, returned: 0n, parked: 0n, unused: 0n }
    for (const seg of segs) result.unused += BigInt(seg.idle)
    const last = segs.at(-1)
    if (last === undefined || result.unused === 0n) return result
    const reasons: string[] = []
    const timeLeft = () => deadline - monotonic()
    let i = segs.length - 1
    while (i > 0 && (segs[i - 1] as Segment).max === (segs[i] as Segment).base && (segs[i - 1] as Segment).idle > 0) i--
    const first = segs[i] as Segment
    const firstUnused = first.base + BigInt(first.pos)
    let keep = segs.length // segments from here on are not parked
    // A load still out could reserve right after the compare-and-set, from the IDs it returns:
    // lost for nobody, but the range would come back below this tag's max_id mark, a false
    // alarm of the guard. Parking the run is safe whatever the load does.
    if (firstUnused < last.max && buf.loading !== undefined) reasons.push('a load was still out')
    else if (firstUnused < last.max && timeLeft() > 0) {
      try {
        if (await withTimeout(store.giveBack(buf.key, last.max, firstUnused), timeLeft(), 'no answer in time')) {
          result.returned = last.max - firstUnused
          keep = i
        } else {
          reasons.push('another instance reserved a segment since')
        }
      } catch (err) {
        // No answer is no knowing: the UPDATE may have committed (a timed-out query, a reset
        // after the commit). Parking the run then would hand its IDs out twice, from the
        // parked rows and from max_id: they are lost instead. Either way none was served.
        keep = i
        reasons.push(`database: ${(err as Error).message} (the compare-and-set's outcome is unknown: its IDs are lost, not parked)`)
      }
    }
    const rest = unusedRanges(segs.slice(0, keep))
    if (rest.length > 0) {
      if (handover === undefined) reasons.push('no warm-start file to park the rest under')
      else if (timeLeft() <= 0) reasons.push('no time left to park the rest')
      else {
        try {
          if (await withTimeout(store.park(buf.key, handover.parkAs, rest), timeLeft(), 'no answer in time')) {
            for (const r of rest) result.parked += r.end - r.first
          } else {
            reasons.push('no leaf_alloc_parked table (and no right to create it)')
          }
        } catch (err) {
          reasons.push(`database: ${(err as Error).message}`)
        }
      }
    }
    if (reasons.length > 0) result.reason = reasons.join('; ')
    return result
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
    // Every refresh looks at who answers too: a peer that allocates nothing still sees a failover.
    await guard?.checkStore()
  }

  function scheduleRefresh (delayMs: number): void {
    if (closed) return
    refreshTimer = setTimeout(() => {
      refreshTags().then(
        () => {
          throttle.clear('tag-refresh')
          scheduleRefresh(refreshIntervalMs)
        },
        (err: unknown) => {
          throttle.warn('tag-refresh', err, 'segment tag refresh failed; retrying')
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
        throttle.warn('tag-refresh', err, 'segment generator could not load its tags; retrying in the background')
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
      const now = monotonic()
      return [...buffers.values()].map((buf) => toView(buf, buf.rate.current(buf.issued, now)))
    },
    exhaustedTags () {
      const tags: string[] = []
      for (const buf of buffers.values()) {
        if (buf.initOk && !buf.nextReady && buf.currentSegment.idle === 0) tags.push(buf.key)
      }
      return tags
    },
    ratesAgeMs () {
      return monotonic() - sampledAt
    },
    endedTags () {
      return [...buffers.values()].filter((b) => b.ended).map((b) => b.key)
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
          if (buf === undefined || buf.initOk) return
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
      stopping = true
      closed = true
      clearTimeout(refreshTimer)
      clearInterval(rateTimer)
      const warmTags: string[] = []
      for (const buf of buffers.values()) {
        // The fast paths read initOk first: from here on every take goes the slow way, which refuses.
        buf.initOk = false
        if (buf.rate.activeWithin(WARM_WINDOW_MS, buf.issued)) warmTags.push(buf.key)
      }
      // A load that lands now joins the chain and is given back with it. For a tag whose load
      // is still out when the wait ends, nothing is returned to max_id (giveBackTail parks).
      const inFlight = [...buffers.values()].flatMap((b) => b.loading === undefined ? [] : [b.loading])
      if (inFlight.length > 0) await settlesWithin(Promise.all(inFlight), Math.max(0, deadline - monotonic()))
      // Once a tag holds nothing any more (returned, parked for the next life, or lost), its
      // max_id mark is what was served: at once, before a late load of another tag is admitted.
      const giveBacks = await Promise.all([...buffers.values()].map(async (buf) => {
        if (buf.segments.length === 0) return guard?.released(buf.key, buf.servedEnd)
        const result = await giveBackTail(buf, deadline)
        guard?.released(buf.key, buf.servedEnd)
        if (result.returned > 0n) onGiveBack?.(buf.key, result.returned, 'table')
        if (result.parked > 0n) onGiveBack?.(buf.key, result.parked, 'successor')
        return result
      }))
      return { giveBacks: giveBacks.filter((g) => g !== undefined), warmTags }
    },
    close () {
      closed = true
      stopping = true
      clearTimeout(refreshTimer)
      clearInterval(rateTimer)
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

function toView (buf: SegmentBuffer, rate: number): SegmentBufferView {
  const [s0, s1] = buf.segments
  const buffered = buf.buffered
  return {
    key: buf.key,
    initOk: buf.initOk,
    nextReady: buf.nextReady,
    pos: 0, // the chain's first segment is always the current one
    value0: s0?.value ?? 0n,
    max0: s0?.max ?? 0n,
    step0: s0?.step ?? 0,
    value1: s1?.value ?? 0n,
    max1: s1?.max ?? 0n,
    step1: s1?.step ?? 0,
    step: buf.step,
    minStep: buf.minStep,
    updateTimestamp: buf.updateTimestamp,
    segments: buf.segments.map((s) => ({ value: s.value, max: s.max, step: s.step })),
    buffered,
    rate,
    ratePerMinute: buf.rate.average(WARM_WINDOW_MS),
    bufferSeconds: rate > 0 ? buffered / rate : Infinity,
    history: buf.rate.history(),
    lastLoadSeconds: buf.lastLoadSeconds,
    failedLoads: buf.failedLoads,
    ended: buf.ended,
  }
}

/** The unused part of each segment, adjacent ones merged. */
function unusedRanges (segs: readonly Segment[]): UnusedRange[] {
  const ranges: UnusedRange[] = []
  for (const seg of segs) {
    if (seg.idle === 0) continue
    const first = seg.base + BigInt(seg.pos)
    const prev = ranges.at(-1)
    if (prev !== undefined && prev.end === first) prev.end = seg.max
    else ranges.push({ first, end: seg.max })
  }
  return ranges
}
