import { nextBatchSize, type SizingOptions } from './batch-size.js'
import { CLIENT_CODES, LeafClientError } from './errors.js'
import type { IdRange } from './id-ranges.js'

/** A batch as fetched: its runs, how many IDs they hold, when its request was sent, who answered. */
export interface Batch { ranges: IdRange[], count: number, fetchedAt: number, server: string }

/** Time as the buffers see it; tests give a fake one. */
export interface Clock {
  now (): number
  /** A wait between attempts, which a background refill makes too; never keeps the process alive. */
  sleep (ms: number): Promise<void>
  /**
   * A waiting caller's deadline: runs `fn` after `ms` unless the returned function is called
   * first. It keeps the process alive until then, so that a script awaiting a call gets its
   * answer or its error (with every timer unref()ed, Node ended it with exit code 13).
   */
  timer (fn: () => void, ms: number): () => void
}

export const REAL_CLOCK: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => { setTimeout(resolve, ms).unref() }),
  timer (fn, ms) {
    const t = setTimeout(fn, ms)
    return () => clearTimeout(t)
  },
}

export interface KeyBufferOptions {
  /** Shared with the client, which may lower `maxBatch` when a server says its own is lower. */
  sizing: SizingOptions
  /** Batches are dropped once this old (from their request's start); Infinity: never (segment). */
  maxAgeMs: number
  /** How long a caller waits for IDs. */
  timeoutMs: number
  clock: Clock
  /** One fetch of `count` IDs with failover, before `deadline` (clock time); told of each failed attempt. */
  fetch (count: number, deadline: number, onAttemptFailed: (err: LeafClientError) => void): Promise<Batch>
}

interface Waiter {
  kind: 'one' | 'number' | 'many'
  need: number
  /** nextIds: the array being filled. */
  ids: bigint[] | undefined
  filled: number
  one: bigint
  num: number
  done: boolean
  /** Clock time the caller gives up at. */
  deadline: number
  cancelTimer: () => void
  resolve (value: unknown): void
  reject (err: Error): void
}

/** What a key's buffer has done, for `stats()`. */
export interface KeyStats {
  /** The batch size the next fetch asks for (before a waiting caller's demand is added). */
  batchSize: number
  fetches: number
  failedFetches: number
  /** IDs of snowflake batches dropped for their age. */
  droppedIds: number
  /**
   * Calls that found the buffer empty and waited for a fetch (nextId, nextIds, their variants).
   * Once warm it stays put: a count that grows means the batch is too small for the traffic.
   */
  waits: number
  /** IDs in the buffer now (current and next batch). */
  buffered: number
}

/**
 * The double buffer of one (mode, key): IDs are served from the current batch; when half of
 * it is used, one fetch of the next batch starts in the background (never two at once), and
 * callers that find both empty wait for it, first come first served.
 */
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)
const MIN_SAFE = -MAX_SAFE

export class KeyBuffer {
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
  private left = 0
  /** The next fetch starts when `left` comes down to this; -1: none is due. */
  private refillAt = -1
  /**
   * The key's fetches came less than the sizing's aim apart: the next batch's refill starts at
   * its first take rather than at half, so a batch capped at maxBatch (or still growing) has a
   * whole batch's time for the answer. A snowflake key's aim is at most half its age limit,
   * so the batch fetched early is used before it ages.
   */
  private hot = false
  private expiresAt = Infinity
  private readonly ageing: boolean
  /** The second buffer: fetched, not yet current. */
  private pending: Held | undefined
  private inFlight = false
  private deferFetch = false
  private refillScheduled = false
  private refillDue = false
  private waiters: Waiter[] = []
  private head = 0
  private lastFetchAt: number | undefined
  private lastError: LeafClientError | undefined
  private closed: LeafClientError | undefined
  private size: number
  private readonly noteFailure = (err: LeafClientError): void => { this.lastError = err }
  private readonly stats = { fetches: 0, failedFetches: 0, droppedIds: 0, waits: 0 }

  constructor (private readonly o: KeyBufferOptions) {
    this.ageing = Number.isFinite(o.maxAgeMs)
    this.size = o.sizing.minBatch
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
  private takeId (): bigint | undefined {
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
  private takeSafeNumber (): number | undefined {
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

  /** One ID: from the buffer, or after a fetch (which wait starts, with this caller queued). */
  nextId (): Promise<bigint> {
    const id = this.takeId()
    return id !== undefined ? Promise.resolve(id) : this.wait('one', 1, undefined)
  }

  nextNumber (): Promise<number> {
    let id: number | undefined
    try {
      id = this.takeSafeNumber()
    } catch (err) {
      return Promise.reject(err)
    }
    return id !== undefined ? Promise.resolve(id) : this.wait('number', 1, undefined)
  }

  /** `count` IDs, in the order the buffer holds them. */
  nextIds (count: number): Promise<bigint[]> {
    const ids = new Array<bigint>(count)
    // A fetch the fill starts waits for this caller's demand to size it (wait starts it).
    this.deferFetch = true
    let filled: number
    try {
      filled = this.head === this.waiters.length ? this.fill(ids, 0, count) : 0
    } finally {
      this.deferFetch = false
    }
    if (filled === count) {
      if (this.refillDue) this.startFetch()
      return Promise.resolve(ids)
    }
    return this.wait('many', count - filled, ids, filled)
  }

  keyStats (): KeyStats {
    let buffered = this.left
    if (this.pending !== undefined) buffered += this.pending.count
    return { batchSize: this.size, ...this.stats, buffered }
  }

  /** Drops the buffers; every waiting caller gets `err`. */
  close (err: LeafClientError): void {
    this.closed = err
    this.dropCurrent()
    this.pending = undefined
    this.rejectAll(err)
  }

  /** Makes `batch` the current one; false when it is too old already. */
  private install (batch: Held): boolean {
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

  private dropCurrent (): void {
    if (this.left > 0) this.stats.droppedIds += this.left
    this.clearRun()
    this.ranges = []
    this.nums = NO_RUNS
    this.rangeIndex = 0
    this.left = 0
    this.refillAt = -1
  }

  /** Fills ids[from..from+n) from the buffer; returns how far it got. */
  private fill (ids: bigint[], from: number, n: number): number {
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

  private wait<T> (kind: Waiter['kind'], need: number, ids: bigint[] | undefined, filled = 0): Promise<T> {
    if (this.closed !== undefined) return Promise.reject(this.closed)
    this.stats.waits++
    return new Promise<T>((resolve, reject) => {
      const w: Waiter = { kind, need, ids, filled, one: 0n, num: 0, done: false, deadline: this.o.clock.now() + this.o.timeoutMs, cancelTimer: noop, resolve: resolve as (v: unknown) => void, reject }
      w.cancelTimer = this.o.clock.timer(() => this.settle(w, this.timedOut()), this.o.timeoutMs)
      this.waiters.push(w)
      this.startFetch()
    })
  }

  private timedOut (): LeafClientError {
    const last = this.lastError
    const message = `no IDs within ${this.o.timeoutMs} ms${last === undefined ? '' : `; last failure: ${last.message}`}`
    return last === undefined
      ? new LeafClientError(CLIENT_CODES.TIMEOUT, message)
      : new LeafClientError(last.code, message, { status: last.status, server: last.server, attempts: last.attempts, cause: last })
  }

  private settle (w: Waiter, err?: Error): void {
    if (w.done) return
    w.done = true
    w.cancelTimer()
    if (err !== undefined) w.reject(err)
    else w.resolve(w.kind === 'many' ? w.ids : w.kind === 'number' ? w.num : w.one)
  }

  private rejectAll (err: Error): void {
    for (let i = this.head; i < this.waiters.length; i++) this.settle(this.waiters[i] as Waiter, err)
    this.waiters = []
    this.head = 0
  }

  /** IDs the waiting callers still need, and the last of their deadlines (0: nobody waits). */
  private demand (): { need: number, deadline: number } {
    let need = 0
    let deadline = 0
    for (let i = this.head; i < this.waiters.length; i++) {
      const w = this.waiters[i] as Waiter
      if (w.done) continue
      need += w.need
      if (w.deadline > deadline) deadline = w.deadline
    }
    return { need, deadline }
  }

  /**
   * A refill nobody waits for starts on the event loop's next turn, not inside the take
   * that came to the threshold: sending a request takes tens of µs, and that caller would pay
   * them as latency.
   */
  private refillSoon (): void {
    if (this.refillScheduled) return
    this.refillScheduled = true
    setImmediate(this.scheduledRefill)
  }

  private readonly scheduledRefill = (): void => {
    this.refillScheduled = false
    this.startFetch()
  }

  private startFetch (): void {
    if (this.deferFetch) {
      this.refillDue = true
      return
    }
    this.refillDue = false
    if (this.inFlight || this.closed !== undefined) return
    this.inFlight = true
    this.refillAt = -1
    const { sizing, clock } = this.o
    const now = clock.now()
    const since = this.lastFetchAt === undefined ? undefined : now - this.lastFetchAt
    this.size = nextBatchSize(this.size, since, sizing)
    this.hot = since !== undefined && since < sizing.targetIntervalMs
    this.lastFetchAt = now
    // A fetch for waiting callers lasts as long as the last of them waits; a refill nobody
    // waits for yet, a caller's timeout.
    const waiting = this.demand()
    const count = Math.max(1, Math.min(sizing.maxBatch, Math.max(this.size, waiting.need)))
    const deadline = waiting.deadline > now ? waiting.deadline : now + this.o.timeoutMs
    this.stats.fetches++
    this.o.fetch(count, deadline, this.noteFailure).then((batch) => this.arrived(batch), (err: unknown) => this.fetchFailed(err))
  }

  private arrived (fetched: Batch): void {
    this.inFlight = false
    if (this.closed !== undefined) return
    this.lastError = undefined
    // A literal, not a spread: a spread object's fields cost 2 µs to read at the switch.
    const batch: Held = { ranges: fetched.ranges, count: fetched.count, fetchedAt: fetched.fetchedAt, server: fetched.server, nums: runNumbers(fetched.ranges) }
    if (this.left === 0 && this.pending === undefined) {
      if (!this.install(batch)) {
        if (this.head < this.waiters.length) this.startFetch()
        return
      }
    } else {
      this.pending = batch
    }
    this.serveWaiters()
  }

  private fetchFailed (err: unknown): void {
    this.inFlight = false
    this.stats.failedFetches++
    if (this.closed !== undefined) return
    const e = err instanceof LeafClientError ? err : new LeafClientError(CLIENT_CODES.NETWORK, String(err), { cause: err })
    // A fetch whose budget ran out before any server failed in it (TIMEOUT, no server named)
    // does not hide the failure an earlier fetch met.
    if (!(e.code === CLIENT_CODES.TIMEOUT && e.server === undefined && this.lastError !== undefined)) this.lastError = e
    if (!e.retryable) {
      // The same answer would come again (KEY_NOT_FOUND, UNAUTHORIZED): every waiter gets it.
      this.rejectAll(e)
      return
    }
    // The fetch used the budget of the callers waiting when it started, so they are past
    // their deadlines; later ones get another fetch. With nobody waiting, the refill is tried
    // again when half of what is left is used, or at once when it is empty.
    this.compact()
    if (this.head < this.waiters.length) this.startFetch()
    else this.refillAt = this.left > 0 ? Math.floor(this.left / 2) : -1
  }

  private serveWaiters (): void {
    while (this.head < this.waiters.length) {
      const w = this.waiters[this.head] as Waiter
      if (!w.done) {
        if (w.kind === 'one') {
          const id = this.tryNextId()
          if (id === undefined) break
          w.one = id
        } else if (w.kind === 'number') {
          let id: number | undefined
          try {
            id = this.tryNextNumber()
          } catch (err) {
            this.settle(w, err as Error)
            this.head++
            continue
          }
          if (id === undefined) break
          w.num = id
        } else {
          const got = this.fill(w.ids as bigint[], w.filled, w.need)
          w.filled += got
          w.need -= got
          if (w.need > 0) break
        }
        w.need = 0
        this.settle(w)
      }
      this.head++
    }
    this.compact()
    if (this.head < this.waiters.length) this.startFetch()
  }

  /** Drops settled waiters from the front of the queue. */
  private compact (): void {
    while (this.head < this.waiters.length && (this.waiters[this.head] as Waiter).done) this.head++
    if (this.head === this.waiters.length) {
      this.waiters = []
      this.head = 0
    } else if (this.head > 1024) {
      this.waiters = this.waiters.slice(this.head)
      this.head = 0
    }
  }
}

/**
 * A batch as held: its runs also as numbers, [first, last] per run, NaN for a run past 2^53,
 * made when it arrives, so taking the next run converts nothing.
 */
interface Held extends Batch { nums: number[] }

const NO_RUNS: number[] = []

function runNumbers (ranges: readonly IdRange[]): number[] {
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

function noop (): void {}
