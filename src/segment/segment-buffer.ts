// Java Leaf's SegmentBuffer, grown from two segments into a chain kept a number of seconds of
// traffic ahead (docs/segment-mode.md#the-buffer-horizon). The first segment is the current one.

import type { IdRange } from '../id-range.js'
import { RateMeter } from './rate-meter.js'

/** An ID: a number while it is exactly representable (|id| < 2^53), a bigint beyond. */
export type Id = number | bigint

const SAFE_LIMIT = BigInt(Number.MAX_SAFE_INTEGER) + 1n
/** Leaf preloads the next segment once less than 90% of the current one is left. */
export const PRELOAD_USED_FRACTION = 0.1

/** A range `[max - step, max)` and how many of its IDs were handed out. */
export class Segment {
  readonly base: bigint
  readonly max: bigint
  readonly step: number
  #pos = 0
  /** Number(base) when every ID of the range is a safe integer, else NaN: the fast path. */
  readonly #baseNumber: number
  #preloadAfter = Infinity

  constructor (max: bigint, step: number) {
    this.base = max - BigInt(step)
    this.max = max
    this.step = step
    this.#baseNumber = max <= SAFE_LIMIT && this.base >= -SAFE_LIMIT ? Number(this.base) : Number.NaN
  }

  /** How many IDs were handed out. */
  get pos (): number {
    return this.#pos
  }

  get idle (): number {
    return this.step - this.#pos
  }

  /** `pos` past which the tag's next load starts (buffer-horizon.ts plans it). */
  get preloadAfter (): number {
    return this.#preloadAfter
  }

  planPreload (after: number): void {
    this.#preloadAfter = after
  }

  /** Hands out the next ID; the caller checks `idle > 0` first. */
  take (): Id {
    const offset = this.#pos++
    const b = this.#baseNumber
    return Number.isNaN(b) ? this.base + BigInt(offset) : b + offset
  }

  /** The next `n` IDs as a range; the caller checks `idle >= n` first. */
  takeRange (n: number): IdRange {
    const offset = this.#pos
    this.#pos += n
    const b = this.#baseNumber
    return { first: Number.isNaN(b) ? this.base + BigInt(offset) : b + offset, count: n }
  }

  /** Java Leaf's `value`: the next ID this segment would hand out. */
  get value (): bigint {
    return this.base + BigInt(this.#pos)
  }
}

const NO_SEGMENT = new Segment(0n, 0)

/**
 * 'empty': no segment; the next load is a first load, at the table's step.
 * 'stopped': the generator stopped (shutdown() or close()); a load that lands still joins the chain, to be given back.
 */
export type ServingState = 'empty' | 'serving' | 'stopped'

/** Final once not 'open': 'missing' (no leaf_alloc row), 'ended' (max_id would pass 2^63 - 1). */
export type SupplyState = 'open' | 'missing' | 'ended'

/** One tag's chain of segments; other modules move it only through the transitions below. */
export class SegmentBuffer {
  readonly key: string
  readonly rate = new RateMeter()
  #state: ServingState = 'empty'
  #supply: SupplyState = 'open'
  /** The current segment first, then those loaded ahead, in the order they were reserved. */
  #segments: Segment[] = []
  /** Set once the first load asked for what the last stop parked. */
  #claimed = false
  /** Leaf's fields: the adapted step, the table's step, and when the last adapted load happened. */
  #step = 0
  #minStep = 0
  #updateTimestamp = 0
  /** The load in flight, if any: at most one per tag (Leaf's threadRunning). */
  #loading: Promise<void> | undefined = undefined
  /** After a failed load, no new one starts before `retryAt` (the generator's monotonic ms). */
  #backoffMs = 0
  #retryAt = 0
  #lastLoadSeconds = 0
  #failedLoads = 0
  /** IDs of the segments used up and dropped from the chain, and the end of the last of them. */
  #consumed = 0
  #usedEnd = 0n

  constructor (key: string) {
    this.key = key
  }

  get state (): ServingState {
    return this.#state
  }

  /** Java Leaf's `initOk`. */
  get serving (): boolean {
    return this.#state === 'serving'
  }

  get supply (): SupplyState {
    return this.#supply
  }

  get missing (): boolean {
    return this.#supply === 'missing'
  }

  get ended (): boolean {
    return this.#supply === 'ended'
  }

  get segments (): readonly Segment[] {
    return this.#segments
  }

  get claimed (): boolean {
    return this.#claimed
  }

  get step (): number {
    return this.#step
  }

  get minStep (): number {
    return this.#minStep
  }

  get updateTimestamp (): number {
    return this.#updateTimestamp
  }

  get loading (): Promise<void> | undefined {
    return this.#loading
  }

  get backoffMs (): number {
    return this.#backoffMs
  }

  get retryAt (): number {
    return this.#retryAt
  }

  get lastLoadSeconds (): number {
    return this.#lastLoadSeconds
  }

  get failedLoads (): number {
    return this.#failedLoads
  }

  get currentSegment (): Segment {
    return this.#segments[0] ?? NO_SEGMENT
  }

  get nextReady (): boolean {
    return this.#segments.length > 1
  }

  /** No segment, not serving and no failed load: never asked for (or its first load is in flight). */
  get neverLoaded (): boolean {
    return this.#state !== 'serving' && this.#segments.length === 0 && this.#failedLoads === 0
  }

  /** The highest ID handed out + 1; 0n when none was. */
  get servedEnd (): bigint {
    const current = this.currentSegment
    return current.pos > 0 ? current.value : this.#usedEnd
  }

  get issued (): number {
    return this.#consumed + this.currentSegment.pos
  }

  get buffered (): number {
    let n = 0
    for (const s of this.#segments) n += s.idle
    return n
  }

  /** The first load took what the last stop parked (maybe none); the steps stay unset, so the next load uses the table's. */
  claimedParked (parked: Segment[]): void {
    this.#claimed = true
    if (parked.length === 0) return
    this.#segments = parked
    this.#startServing()
  }

  /** A first load landed in a buffer that holds no segment: the step adaptation starts from the table's step. */
  firstLoaded (segment: Segment): void {
    this.#step = segment.step
    this.#minStep = segment.step
    this.#segments = [segment]
    this.#startServing()
  }

  /** `at` (wall-clock ms) restarts the step adaptation's clock. */
  appendLoaded (segment: Segment, tableStep: number, at: number): void {
    this.#updateTimestamp = at
    this.#step = segment.step
    this.#minStep = tableStep
    this.#segments.push(segment)
  }

  /** An empty buffer serves once it holds a segment; a stopped one never again. */
  #startServing (): void {
    if (this.#state === 'empty') this.#state = 'serving'
  }

  switchSegment (): void {
    const used = this.#segments.shift()
    if (used !== undefined) {
      this.#consumed += used.step
      this.#usedEnd = used.max
    }
  }

  /** A store failover seen too late to protect the segments held: they are never served. */
  dropSegments (): void {
    const current = this.#segments[0]
    if (current !== undefined && current.pos > 0) {
      this.#consumed += current.pos
      this.#usedEnd = current.value
    }
    this.#segments = []
    if (this.#state === 'serving') this.#state = 'empty'
  }

  /** The generator stopped (shutdown() or close()): every take from now on goes the slow way, which refuses. */
  stopServing (): void {
    this.#state = 'stopped'
  }

  markMissing (): void {
    if (this.#supply === 'open') this.#supply = 'missing'
  }

  markEnded (): void {
    if (this.#supply === 'open') this.#supply = 'ended'
  }

  loadStarted (load: Promise<void>): void {
    this.#loading = load
  }

  /** The load in flight settled (`load` is the one loadStarted() was given). */
  loadSettled (load: Promise<void>): void {
    if (this.#loading === load) this.#loading = undefined
  }

  loadSucceeded (seconds: number): void {
    this.#backoffMs = 0
    this.#retryAt = 0
    this.#lastLoadSeconds = seconds
  }

  loadFailed (backoffMs: number, retryAt: number): void {
    this.#backoffMs = backoffMs
    this.#retryAt = retryAt
    this.#failedLoads++
  }
}
