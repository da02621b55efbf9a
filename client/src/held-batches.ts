// The sync path of a key's buffer; when to fetch is the subclass's (key-buffer.ts).

import { CLIENT_CODES, LeafClientError } from './errors.js'
import type { IdRange } from './id-ranges.js'
import type { Clock } from './clock.js'

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
  private ranges: IdRange[] = []
  private nums: number[] = NO_RUNS
  private rangeIndex = 0
  protected left = 0
  /** The next fetch starts when `left` comes down to this; -1: none is due. */
  protected refillAt = -1
  /**
   * Fetches came faster than the sizing aims: the next refill starts at the first take, not at
   * half, so a batch capped at maxBatch has a whole batch's time for the answer.
   */
  protected hot = false
  private expiresAt = Infinity
  private readonly ageing: boolean
  /** The second buffer: fetched, not yet current. */
  protected pending: Held | undefined
  protected inFlight = false
  protected readonly stats = { fetches: 0, failedFetches: 0, droppedIds: 0, waits: 0 }

  constructor (protected readonly options: HeldBatchesOptions) {
    this.ageing = Number.isFinite(options.maxAgeMs)
  }

  /**
   * NaN when the run is held as bigints (past 2^53) or the buffer is empty. The switch to the
   * next run or batch is inlined: as a function it ran too seldom for V8 to optimize, and cost
   * that take 1 to 2 µs (the whole p99.99 of nextId).
   */
  private takeNumber (): number {
    for (;;) {
      if (this.nextNum <= this.lastNum) {
        if (this.ageing && this.options.clock.now() >= this.expiresAt) {
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
      if (this.ageing && this.options.clock.now() >= p.fetchedAt + this.options.maxAgeMs) {
        this.stats.droppedIds += p.count
        continue
      }
      this.ranges = p.ranges
      this.nums = p.nums
      this.rangeIndex = 0
      this.left = p.count
      this.expiresAt = p.fetchedAt + this.options.maxAgeMs
      this.refillAt = this.inFlight ? -1 : this.hot ? p.count - 1 : Math.floor(p.count / 2)
    }
  }

  /** The next ID, or undefined when the buffer is empty. */
  protected takeId (): bigint | undefined {
    const n = this.takeNumber()
    if (!Number.isNaN(n)) return BigInt(n)
    if (this.next > this.last) return undefined
    if (this.ageing && this.options.clock.now() >= this.expiresAt) {
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

  tryNextId (): bigint | undefined {
    const id = this.takeId()
    if (id === undefined) this.startFetch()
    return id
  }

  /** Throws UNSAFE_INTEGER (and keeps the ID) past 2^53. */
  tryNextNumber (): number | undefined {
    const id = this.takeSafeNumber()
    if (id === undefined) this.startFetch()
    return id
  }

  /** Makes `batch` the current one; false when it is too old already. */
  protected install (batch: Held): boolean {
    if (this.ageing && this.options.clock.now() >= batch.fetchedAt + this.options.maxAgeMs) {
      this.stats.droppedIds += batch.count
      return false
    }
    this.ranges = batch.ranges
    this.nums = batch.nums
    this.rangeIndex = 0
    this.clearRun()
    this.left = batch.count
    this.expiresAt = batch.fetchedAt + this.options.maxAgeMs
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

  protected fill (ids: bigint[], from: number, n: number): number {
    let i = from
    const end = from + n
    while (i < end) {
      const inNumbers = this.nextNum <= this.lastNum
      if ((!inNumbers && this.next > this.last) || (this.ageing && this.options.clock.now() >= this.expiresAt)) {
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

/** Runs also as numbers (NaN past 2^53), made on arrival so taking the next run converts nothing. */
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
