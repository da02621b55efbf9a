import { nextBatchSize, type SizingOptions } from './batch-size.js'
import { CLIENT_CODES, LeafClientError } from './errors.js'
import { HeldBatches, runNumbers, type Batch, type Held, type HeldBatchesOptions } from './held-batches.js'

export interface KeyBufferOptions extends HeldBatchesOptions {
  /** Shared with the client, which may lower `maxBatch` when a server says its own is lower. */
  sizing: SizingOptions
  timeoutMs: number
  /** One fetch of `count` IDs with failover, before `deadline` (clock time); told of each failed attempt. */
  fetch (count: number, deadline: number, onAttemptFailed: (err: LeafClientError) => void): Promise<Batch>
}

interface Waiter {
  kind: 'one' | 'number' | 'many'
  need: number
  ids: bigint[] | undefined
  filled: number
  one: bigint
  num: number
  done: boolean
  deadline: number
  cancelTimer: () => void
  resolve (value: unknown): void
  reject (err: Error): void
}

export interface KeyStats {
  /** The batch size the next fetch asks for (before a waiting caller's demand is added). */
  batchSize: number
  fetches: number
  failedFetches: number
  /** IDs of snowflake batches dropped for their age. */
  droppedIds: number
  /** Calls that waited for a fetch; growing once warm means the batch is too small for the traffic. */
  waits: number
  buffered: number
}

/** Leaf's double buffer for one (mode, key): one fetch at a time; waiters first come, first served. */
export class KeyBuffer extends HeldBatches {
  private deferFetch = false
  private refillScheduled = false
  private refillDue = false
  private waiters: Waiter[] = []
  private head = 0
  private lastFetchAt: number | undefined
  private lastError: LeafClientError | undefined
  private fetchDeadline = 0
  private closed: LeafClientError | undefined
  private size: number
  private readonly noteFailure = (err: LeafClientError): void => { this.lastError = err }

  constructor (protected override readonly options: KeyBufferOptions) {
    super(options)
    this.size = options.sizing.minBatch
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

  private wait<T> (kind: Waiter['kind'], need: number, ids: bigint[] | undefined, filled = 0): Promise<T> {
    if (this.closed !== undefined) return Promise.reject(this.closed)
    this.stats.waits++
    return new Promise<T>((resolve, reject) => {
      const w: Waiter = { kind, need, ids, filled, one: 0n, num: 0, done: false, deadline: this.options.clock.now() + this.options.timeoutMs, cancelTimer: noop, resolve: resolve as (v: unknown) => void, reject }
      w.cancelTimer = this.options.clock.timer(() => this.settle(w, this.timedOut()), this.options.timeoutMs)
      this.waiters.push(w)
      this.startFetch()
    })
  }

  private timedOut (): LeafClientError {
    const last = this.lastError
    const message = `no IDs within ${this.options.timeoutMs} ms${last === undefined ? '' : `; last failure: ${last.message}`}`
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

  /** On the next turn: sending a request takes tens of µs, which the take at the threshold would pay. */
  protected override refillSoon (): void {
    if (this.refillScheduled) return
    this.refillScheduled = true
    setImmediate(this.scheduledRefill)
  }

  private readonly scheduledRefill = (): void => {
    this.refillScheduled = false
    this.startFetch()
  }

  protected override startFetch (): void {
    if (this.deferFetch) {
      this.refillDue = true
      return
    }
    this.refillDue = false
    if (this.inFlight || this.closed !== undefined) return
    this.inFlight = true
    this.refillAt = -1
    const { sizing, clock } = this.options
    const now = clock.now()
    const since = this.lastFetchAt === undefined ? undefined : now - this.lastFetchAt
    this.size = nextBatchSize(this.size, since, sizing)
    this.hot = since !== undefined && since < sizing.targetIntervalMs
    this.lastFetchAt = now
    // A fetch for waiting callers lasts as long as the last of them waits; a refill nobody
    // waits for yet, a caller's timeout.
    const waiting = this.demand()
    const count = Math.max(1, Math.min(sizing.maxBatch, Math.max(this.size, waiting.need)))
    const deadline = waiting.deadline > now ? waiting.deadline : now + this.options.timeoutMs
    this.fetchDeadline = deadline
    this.stats.fetches++
    this.options.fetch(count, deadline, this.noteFailure).then((batch) => this.arrived(batch), (err: unknown) => this.fetchFailed(err))
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
    // A bare TIMEOUT does not hide the failure an earlier fetch met.
    if (!(e.code === CLIENT_CODES.TIMEOUT && e.server === undefined && this.lastError !== undefined)) this.lastError = e
    if (!e.retryable) {
      // The same answer would come again (KEY_NOT_FOUND, UNAUTHORIZED): every waiter gets it.
      this.rejectAll(e)
      return
    }
    // Every server refused the connection, round after round: the callers learn it now.
    if (e.code === CLIENT_CODES.UNREACHABLE) this.rejectAll(e)
    // Every server failed: the callers get their error at their deadline, since another fetch
    // would ask the servers again as fast as they refuse. Later callers get another fetch.
    this.compact()
    if (this.head === this.waiters.length) {
      this.refillAt = this.left > 0 ? Math.floor(this.left / 2) : -1
      return
    }
    for (let i = this.head; i < this.waiters.length; i++) {
      const w = this.waiters[i] as Waiter
      if (!w.done && w.deadline > this.fetchDeadline) {
        this.startFetch()
        return
      }
    }
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

function noop (): void {}
