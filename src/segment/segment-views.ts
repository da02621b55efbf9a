// What /cache, /api/cache and the metrics see of a tag's buffer: Java Leaf's view, grown.

import type { SegmentBuffer } from './segment-buffer.js'
import { WARM_WINDOW_MS } from './warm-state.js'

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

/** `history: false`: the view without its 90 points of history (an empty list), for readers that draw none (the metrics). */
export function toView (buf: SegmentBuffer, rate: number, { history = true }: { history?: boolean } = {}): SegmentBufferView {
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
    rate,
    ratePerMinute: buf.rate.average(WARM_WINDOW_MS),
    bufferSeconds: rate > 0 ? buffered / rate : Infinity,
    history: history ? buf.rate.history() : [],
    lastLoadSeconds: buf.lastLoadSeconds,
    failedLoads: buf.failedLoads,
    ended: buf.ended,
  }
}

/** Which tags a view shows: those whose name contains `search` (any case), `limit` of them from `offset`. */
export interface ViewQuery {
  search: string
  offset: number
  limit: number
}

/** One page of the tags in memory: the busiest first (by `rate`, then name), tags never loaded last (by name). */
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
