// The sync path of a key's buffer: the batches it holds and the IDs taken from them without
// waiting. When to fetch is the subclass's (key-buffer.ts): it is told at the refill mark
// (refillSoon) and when the buffer is empty (startFetch).

import { CLIENT_CODES, LeafClientError } from './errors.js'
import type { IdRange } from './id-ranges.js'
import type { Clock } from './clock.js'

/** A batch as fetched: its runs, how many IDs they hold, when its request was sent, who answered. */
export interface Batch { ranges: IdRange[], count: number, fetchedAt: number, server: string }

export interface HeldBatchesOptions {
  /** Batches are dropped once this old (from their request's start); Infinity: never (segment). */
  maxAgeMs: number
  clock: Clock
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)
const MIN_SAFE = -MAX_SAFE

export abstract class HeldBatches {
  // The current run, as numbers while it is below 2^53 (nextNum..lastNum, so tryNextNumber
  // allocates nothing), else as bigints (next..last); empty when next > last.
  private nextNum = 0
  private lastNum = -1
  private next = 0n
  private last = -1n
  // The current batch's runs, and the same as numbers (see Held).
  private ranges: IdRange[] = []
  private nums: number[] = NO_RUNS
  private rangeIndex = 0
  /** IDs left in the current batch, the current run included. */
  protected left = 0
  /** The next fetch starts when `left` comes down to this; -1: none is due. */
  protected refillAt = -1
  /**
   * The key's fetches came less than the sizing's aim apart: the next batch's refill starts at
   * its first take rather than at half, so a batch capped at maxBatch (or still growing) has a
   * whole batch's time for the answer. A snowflake key's aim is at most half its age limit,
   * so the batch fetched early is used before it ages.
   */
  protected hot = false
  private expiresAt = Infinity
  private readonly ageing: boolean
  /** The second buffer: fetched, not yet current. */
  protected pending: Held | undefined
  protected inFlight = false
  protected readonly stats = { fetches: 0, failedFetches: 0, droppedIds: 0, waits: 0 }

  constructor (protected readonly o: HeldBatchesOptions) {
    this.ageing = Number.isFinite(o.maxAgeMs)
  }

  /**
   * The next ID of a run held as numbers; NaN when the current run is held as bigints (past
   * 2^53) or the buffer is empty.
   *
   * Every ID goes through here, so V8 optimizes it. The switch to the batch's next run, or
   * to the fetched batch, is written out here with no call on its way: in a function of its
   * own it ran once per batch, too seldom for V8 to optimize it, and cost the take that made
   * it 1 to 2 µs (at one take in 10,000, the whole p99.99 of nextId).
   */
  private takeNumber (): number {
    for (;;) {
      if (this.nextNum <= this.lastNum) {
        if (this.ageing && this.o.clock.now() >= this.expiresAt) {
          this.dropCurrent()
          continue
        }
        if (--this.left === this.refillAt) this.refillSoon()
        return this.nextNum++
      }
      if (this.next <= this.last) return NaN
      const i = this.rangeIndex
      if (i < this.ranges.length) {
        this.rangeIndex = i + 1
        const first = this.nums[2 * i] as number
        if (!Number.isNaN(first)) {
          this.nextNum = first
          this.lastNum = this.nums[2 * i + 1] as number
        } else {
          const run = this.ranges[i] as IdRange
          this.next = run.first
          this.last = run.last
        }
        continue
      }
      const p = this.pending
      if (p === undefined) {
        this.left = 0
        return NaN
      }
      this.pending = undefined
      if (this.ageing && this.o.clock.now() >= p.fetchedAt + this.o.maxAgeMs) {
        this.stats.droppedIds += p.count
        continue
      }
      this.ranges = p.ranges
      this.nums = p.nums
      this.rangeIndex = 0
      this.left = p.count
      this.expiresAt = p.fetchedAt + this.o.maxAgeMs
      this.refillAt = this.inFlight ? -1 : this.hot ? p.count - 1 : Math.floor(p.count / 2)
    }
  }

  /** The next ID, or undefined when the buffer is empty. */
  protected takeId (): bigint | undefined {
    const n = this.takeNumber()
    if (!Number.isNaN(n)) return BigInt(n)
    if (this.next > this.last) return undefined
    if (this.ageing && this.o.clock.now() >= this.expiresAt) {
      this.dropCurrent()
      return this.takeId()
    }
    if (--this.left === this.refillAt) this.refillSoon()
    return this.next++
  }

  /** The next ID as a number; undefined when the buffer is empty; UNSAFE_INTEGER past 2^53. */
  protected takeSafeNumber (): number | undefined {
    const n = this.takeNumber()
    if (!Number.isNaN(n)) return n
    if (this.next <= this.last) throw unsafe(this.next)
    return undefined
  }

  /** The next ID from the buffer, or undefined when it is empty (a fetch is then under way). */
  tryNextId (): bigint | undefined {
    const id = this.takeId()
    if (id === undefined) this.startFetch()
    return id
  }

  /**
   * As tryNextId, as a number, without a bigint. Throws UNSAFE_INTEGER (and keeps the ID)
   * when the next ID is past 2^53, which a number cannot hold exactly.
   */
  tryNextNumber (): number | undefined {
    const id = this.takeSafeNumber()
    if (id === undefined) this.startFetch()
    return id
  }

  /** Makes `batch` the current one; false when it is too old already. */
  protected install (batch: Held): boolean {
    if (this.ageing && this.o.clock.now() >= batch.fetchedAt + this.o.maxAgeMs) {
      this.stats.droppedIds += batch.count
      return false
    }
    this.ranges = batch.ranges
    this.nums = batch.nums
    this.rangeIndex = 0
    this.clearRun()
    this.left = batch.count
    this.expiresAt = batch.fetchedAt + this.o.maxAgeMs
    this.refillAt = this.inFlight ? -1 : this.hot ? batch.count - 1 : Math.floor(batch.count / 2)
    return true
  }

  private clearRun (): void {
    this.nextNum = 0
    this.lastNum = -1
    this.next = 0n
    this.last = -1n
  }

  protected dropCurrent (): void {
    if (this.left > 0) this.stats.droppedIds += this.left
    this.clearRun()
    this.ranges = []
    this.nums = NO_RUNS
    this.rangeIndex = 0
    this.left = 0
    this.refillAt = -1
  }

  /** Fills ids[from..from+n) from the buffer; returns how far it got. */
  protected fill (ids: bigint[], from: number, n: number): number {
    let i = from
    const end = from + n
    while (i < end) {
      const inNumbers = this.nextNum <= this.lastNum
      if ((!inNumbers && this.next > this.last) || (this.ageing && this.o.clock.now() >= this.expiresAt)) {
        const id = this.tryNextId() // moves to the next run or batch, or starts a fetch
        if (id === undefined) break
        ids[i++] = id
        continue
      }
      // A stretch of the current run at once, with the refill check tryNextId makes per ID.
      let take: number
      if (inNumbers) {
        take = Math.min(this.lastNum - this.nextNum + 1, end - i)
        let id = this.nextNum
        for (let k = 0; k < take; k++) ids[i++] = BigInt(id++)
        this.nextNum = id
      } else {
        take = Math.min(Number(this.last - this.next) + 1, end - i)
        let id = this.next
        for (let k = 0; k < take; k++) ids[i++] = id++
        this.next = id
      }
      const before = this.left
      this.left -= take
      if (this.refillAt >= this.left && this.refillAt < before) this.refillSoon()
    }
    return i - from
  }

  /** Called when `left` comes down to `refillAt`. */
  protected abstract refillSoon (): void
  /** Called when the buffer is found empty. */
  protected abstract startFetch (): void
}

/**
 * A batch as held: its runs also as numbers, [first, last] per run, NaN for a run past 2^53,
 * made when it arrives, so taking the next run converts nothing.
 */
export interface Held extends Batch { nums: number[] }

const NO_RUNS: number[] = []

export function runNumbers (ranges: readonly IdRange[]): number[] {
  // A plain array, not a Float64Array: its small integers stay V8 Smis in nextNum, and
  // BigInt() of a Smi is twice as fast as of a double.
  const nums = new Array<number>(ranges.length * 2)
  for (let i = 0; i < ranges.length; i++) {
    const run = ranges[i] as IdRange
    const safe = run.last <= MAX_SAFE && run.first >= MIN_SAFE
    nums[2 * i] = safe ? Number(run.first) : NaN
    nums[2 * i + 1] = safe ? Number(run.last) : NaN
  }
  return nums
}

function unsafe (id: bigint): LeafClientError {
  return new LeafClientError(CLIENT_CODES.UNSAFE_INTEGER, `ID ${id} is past 2^53: a number cannot hold it exactly; use nextId for a bigint`)
}
