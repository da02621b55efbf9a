// The double buffer of one business tag (Java Leaf's SegmentBuffer and Segment).

import type { IdRange } from '../id-range.js'

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
  /** `pos` past which the preload starts. */
  preloadAfter = 0

  reset (max: bigint, step: number): void {
    this.base = max - BigInt(step)
    this.max = max
    this.step = step
    this.pos = 0
    this.baseNumber = max <= SAFE_LIMIT && this.base >= -SAFE_LIMIT ? Number(this.base) : Number.NaN
    this.preloadAfter = step * PRELOAD_USED_FRACTION
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

export class SegmentBuffer {
  readonly key: string
  readonly segments: [Segment, Segment] = [new Segment(), new Segment()]
  current = 0
  initOk = false
  nextReady = false
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

  constructor (key: string) {
    this.key = key
  }

  get currentSegment (): Segment {
    return this.segments[this.current] as Segment
  }

  get nextSegment (): Segment {
    return this.segments[this.current ^ 1] as Segment
  }

  switchSegment (): void {
    this.current ^= 1
    this.nextReady = false
  }
}
