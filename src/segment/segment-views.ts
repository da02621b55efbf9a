// What /cache, /api/cache and the metrics see of a tag's buffer: Java Leaf's view, grown.

import type { SegmentBuffer } from './segment-buffer.js'
import { horizonSeconds } from './rate-meter.js'
import { WARM_WINDOW_MS } from './warm-state.js'

/**
 * Where the segment after the current one stands, in the order it is checked:
 * - `not_loaded`: the tag does not serve (never loaded, its first loads failed, or stopped);
 * - `ready`: a segment after the current one is loaded;
 * - `used_up`: the current segment has no ID left and none follows: callers wait for a load;
 * - `loading`: a load is in flight;
 * - `not_due`: the current segment is not past the load threshold (Leaf's 10%, or the buffer
 *   horizon's point), or no further load is wanted (the segment cap, the tag gone or ended);
 * - `due`: past the threshold, and the last load did not fail: the next ID taken starts the load,
 *   as Leaf's does (the threshold can move past the position between two requests, as the rate rises);
 * - `late`: past the threshold with no load in flight because the last load failed: the loads
 *   back off and retry while the IDs held last.
 */
export type NextSegment = 'not_loaded' | 'ready' | 'used_up' | 'loading' | 'not_due' | 'due' | 'late'

/** What nextSegment() reads of a SegmentBuffer (a fake in the unit tests). */
export interface NextSegmentInput {
  serving: boolean
  nextReady: boolean
  loading: unknown
  backoffMs: number
  currentSegment: { pos: number, idle: number, preloadAfter: number }
}

export function nextSegment (buf: NextSegmentInput): NextSegment {
  if (!buf.serving) return 'not_loaded'
  if (buf.nextReady) return 'ready'
  const current = buf.currentSegment
  if (current.idle === 0) return 'used_up'
  if (buf.loading !== undefined) return 'loading'
  if (!(current.pos > current.preloadAfter)) return 'not_due'
  return buf.backoffMs > 0 ? 'late' : 'due'
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
  /** Beyond Leaf: every segment held, IDs buffered in them, the rates and the horizon they make. */
  segments: { value: bigint, max: bigint, step: number }[]
  buffered: number
  /** The rate the buffer horizon plans with (a burst at once, decaying over a minute). */
  idsPerSecond: number
  /** The average over the last minute. */
  idsPerSecondLastMinute: number
  /**
   * How long the buffered IDs last at `idsPerSecond`: the one horizon /cache, /api/cache and
   * leaf_segment_buffer_seconds show. Undefined while the tag is idle (horizonSeconds()).
   */
  bufferSeconds: number | undefined
  next: NextSegment
  /** IDs/s per 10 s over the last 15 minutes, oldest first. */
  history: number[]
  lastLoadSeconds: number
  failedLoads: number
  /** The tag's max_id cannot move any more: ID_SPACE_EXHAUSTED. */
  ended: boolean
}

/** `history: false`: the view without its 90 points of history (an empty list), for readers that draw none (the metrics). */
export function toView (buf: SegmentBuffer, idsPerSecond: number, { history = true }: { history?: boolean } = {}): SegmentBufferView {
  const [s0, s1] = buf.segments
  const buffered = buf.buffered
  return {
    key: buf.key,
    initOk: buf.serving,
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
    idsPerSecond,
    idsPerSecondLastMinute: buf.rate.average(WARM_WINDOW_MS),
    bufferSeconds: horizonSeconds(buffered, idsPerSecond),
    next: nextSegment(buf),
    history: history ? buf.rate.history() : [],
    lastLoadSeconds: buf.lastLoadSeconds,
    failedLoads: buf.failedLoads,
    ended: buf.ended,
  }
}

/** A view as /api/cache gives it: 64-bit values as strings, rates to 0.01, an idle horizon as null. */
export function viewJson (v: SegmentBufferView) {
  return {
    key: v.key,
    initOk: v.initOk,
    nextReady: v.nextReady,
    pos: v.pos,
    value0: String(v.value0),
    max0: String(v.max0),
    step0: v.step0,
    value1: String(v.value1),
    max1: String(v.max1),
    step1: v.step1,
    step: v.step,
    minStep: v.minStep,
    updateTimestamp: v.updateTimestamp,
    // Beyond Leaf's fields: the whole chain, the rates, the horizon and the next segment's state.
    segments: v.segments.map((s) => ({ value: String(s.value), max: String(s.max), step: s.step })),
    bufferedIds: v.buffered,
    idsPerSecond: round(v.idsPerSecond),
    idsPerSecondLastMinute: round(v.idsPerSecondLastMinute),
    bufferSeconds: v.bufferSeconds === undefined ? null : round(v.bufferSeconds),
    nextSegment: v.next,
    lastLoadSeconds: v.lastLoadSeconds,
    failedLoads: v.failedLoads,
    ended: v.ended,
  }
}

function round (n: number): number {
  return Math.round(n * 100) / 100
}

/** Which tags a view shows: those whose name contains `search` (any case), `limit` of them from `offset`. */
export interface ViewQuery {
  search: string
  offset: number
  limit: number
}

/** One page of the tags in memory: the busiest first (by `idsPerSecond`, then name), tags never loaded last (by name). */
export interface ViewPage {
  /** Tags in memory, and those of them the search matched. */
  total: number
  matched: number
  offset: number
  views: SegmentBufferView[]
}

/** SegmentBuffer.neverLoaded, read from a view: what the pages show as not loaded yet. */
export function neverLoaded (v: { initOk: boolean, segments: readonly unknown[], failedLoads: number }): boolean {
  return !v.initOk && v.segments.length === 0 && v.failedLoads === 0
}

/** Views are made for the page's tags only: with 100,000 tags, a page costs what it shows. */
export function viewPage (buffers: Iterable<SegmentBuffer>, rateOf: (buf: SegmentBuffer) => number, query: ViewQuery): ViewPage {
  const needle = query.search.toLowerCase()
  const rows: { buf: SegmentBuffer, rate: number }[] = []
  let total = 0
  for (const buf of buffers) {
    total++
    if (needle !== '' && !buf.key.toLowerCase().includes(needle)) continue
    // Never loaded: below every loaded tag, an idle one included.
    rows.push({ buf, rate: buf.neverLoaded ? -1 : rateOf(buf) })
  }
  rows.sort((a, b) => b.rate - a.rate || (a.buf.key < b.buf.key ? -1 : a.buf.key > b.buf.key ? 1 : 0))
  const page = rows.slice(query.offset, query.offset + query.limit)
  return { total, matched: rows.length, offset: query.offset, views: page.map((r) => toView(r.buf, Math.max(r.rate, 0))) }
}

/** What the generator shows of its tags, for the views and the metrics. */
export interface TagViews {
  /** `loaded: true` leaves out tags never loaded, which have nothing to show. */
  views (options?: { history?: boolean, loaded?: boolean }): SegmentBufferView[]
  view (key: string, options?: { history?: boolean }): SegmentBufferView | undefined
  tagCount (): number
  /** A page of the views, the busiest tags first: what /cache and /api/cache show. */
  viewPage (query: ViewQuery): ViewPage
  /** Loaded tags with no ID left in any segment: they cannot answer without the store. */
  exhaustedTags (): string[]
  /** Tags whose ID space has ended (max_id at 2^63 - 1): they answer ID_SPACE_EXHAUSTED. */
  endedTags (): string[]
}

/** The views of the generator's `buffers`, each tag's rate read at the time of the call on `monotonic`. */
export function tagViews (buffers: ReadonlyMap<string, SegmentBuffer>, monotonic: () => number): TagViews {
  return {
    views (options) {
      const now = monotonic()
      const views: SegmentBufferView[] = []
      for (const buf of buffers.values()) {
        if (options?.loaded === true && buf.neverLoaded) continue
        views.push(toView(buf, buf.rate.current(buf.issued, now), options))
      }
      return views
    },
    view (key, options) {
      const buf = buffers.get(key)
      return buf === undefined ? undefined : toView(buf, buf.rate.current(buf.issued, monotonic()), options)
    },
    tagCount () {
      return buffers.size
    },
    viewPage (query) {
      const now = monotonic()
      return viewPage(buffers.values(), (buf) => buf.rate.current(buf.issued, now), query)
    },
    exhaustedTags () {
      const tags: string[] = []
      for (const buf of buffers.values()) {
        if (buf.serving && !buf.nextReady && buf.currentSegment.idle === 0) tags.push(buf.key)
      }
      return tags
    },
    endedTags () {
      return [...buffers.values()].filter((b) => b.ended).map((b) => b.key)
    },
  }
}
