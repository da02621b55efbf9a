// The segments one business tag holds: Java Leaf's SegmentBuffer, grown from two segments
// into a chain kept a number of seconds of traffic ahead (buffer-horizon.ts decides when
// to load). The first segment is the current one; loads are appended behind the last.

import type { IdRange } from '../id-range.js'
import { RateMeter } from './rate-meter.js'

/** An ID: a number while it is exactly representable (|id| < 2^53), a bigint beyond. */
export type Id = number | bigint

const SAFE_LIMIT = BigInt(Number.MAX_SAFE_INTEGER) + 1n
/** Leaf preloads the next segment once less than 90% of the current one is left. */
export const PRELOAD_USED_FRACTION = 0.1

/** A range `[max - step, max)` and how many of its IDs were handed out. */
export class Segment {
  base = 0n
  max = 0n
  step = 0
  pos = 0
  /** Number(base) when every ID of the range is a safe integer, else NaN: the fast path. */
  private baseNumber = Number.NaN
  /** `pos` past which the next load starts (the generator plans it). */
  preloadAfter = Infinity

  constructor (max: bigint, step: number) {
    this.base = max - BigInt(step)
    this.max = max
    this.step = step
    this.baseNumber = max <= SAFE_LIMIT && this.base >= -SAFE_LIMIT ? Number(this.base) : Number.NaN
  }

  get idle (): number {
    return this.step - this.pos
  }

  /** Hands out the next ID; the caller checks `idle > 0` first. */
  take (): Id {
    const offset = this.pos++
    const b = this.baseNumber
    return Number.isNaN(b) ? this.base + BigInt(offset) : b + offset
  }

  /** The next `n` IDs as a range; the caller checks `idle >= n` first. */
  takeRange (n: number): IdRange {
    const offset = this.pos
    this.pos += n
    const b = this.baseNumber
    return { first: Number.isNaN(b) ? this.base + BigInt(offset) : b + offset, count: n }
  }

  /** Java Leaf's `value`: the next ID this segment would hand out. */
  get value (): bigint {
    return this.base + BigInt(this.pos)
  }
}

const NO_SEGMENT = new Segment(0n, 0)

export class SegmentBuffer {
  readonly key: string
  /** The current segment first, then those loaded ahead, in the order they were reserved. */
  segments: Segment[] = []
  initOk = false
  /** The load in flight, if any: at most one per tag (Leaf's threadRunning). */
  loading: Promise<void> | undefined = undefined
  /** Adapted step, the table's step, and when the last adapted load happened (Leaf's fields). */
  step = 0
  minStep = 0
  updateTimestamp = 0
  /** After a failed load, no new one starts before this time (the generator's monotonic ms). */
  retryAt = 0
  backoffMs = 0
  /** Set when the store no longer has the tag. */
  missing = false
  /** Set once the first load asked for what the last stop parked. */
  claimed = false
  /** Set when max_id cannot move any more without passing 2^63 - 1. */
  ended = false
  /** IDs of the segments already used up and dropped from the chain. */
  consumed = 0
  /** The end of the last segment used up and dropped; 0n before any. */
  private usedEnd = 0n
  readonly rate = new RateMeter()
  /** The last load's duration (s), and how many loads failed. */
  lastLoadSeconds = 0
  failedLoads = 0

  constructor (key: string) {
    this.key = key
  }

  get currentSegment (): Segment {
    return this.segments[0] ?? NO_SEGMENT
  }

  /** A segment is loaded behind the current one. */
  get nextReady (): boolean {
    return this.segments.length > 1
  }

  /** Drops the used-up current segment; the next one becomes current. */
  switchSegment (): void {
    const used = this.segments.shift()
    if (used !== undefined) {
      this.consumed += used.step
      this.usedEnd = used.max
    }
  }

  /**
   * Drops every segment held, unserved: a store failover seen too late to protect them (the
   * max_id guard). What was served stays counted; the next take loads anew.
   */
  dropSegments (): void {
    const current = this.segments[0]
    if (current !== undefined && current.pos > 0) {
      this.consumed += current.pos
      this.usedEnd = current.value
    }
    this.segments = []
    this.initOk = false
  }

  /**
   * The highest ID handed out + 1; 0n when none was. The chain serves in order, each segment
   * above the last, so it is the current segment's next ID once it served one.
   */
  get servedEnd (): bigint {
    const current = this.currentSegment
    return current.pos > 0 ? current.value : this.usedEnd
  }

  /** IDs handed out since the first load. */
  get issued (): number {
    return this.consumed + this.currentSegment.pos
  }

  /** IDs held and not handed out yet, in every loaded segment. */
  get buffered (): number {
    let n = 0
    for (const s of this.segments) n += s.idle
    return n
  }
}
