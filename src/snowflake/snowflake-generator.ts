import { LeafError, StartRefused } from '../errors.js'
import { expandRanges, type IdRange } from '../id-range.js'

// Java Leaf's layout: 41 bits of milliseconds since twepoch, 10 bits of worker id,
// 12 bits of sequence.
export const WORKER_ID_BITS = 10
export const SEQUENCE_BITS = 12
export const MAX_WORKER_ID = (1 << WORKER_ID_BITS) - 1 // 1023
export const SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1 // 4095
const WORKER_SHIFT = BigInt(SEQUENCE_BITS)
const TIMESTAMP_SHIFT = BigInt(WORKER_ID_BITS + SEQUENCE_BITS)
/** 2^22: a millisecond count times this is exact as a double (below 2^63, a power of two). */
const TIMESTAMP_FACTOR = 2 ** (WORKER_ID_BITS + SEQUENCE_BITS)
/** 41 bits of milliseconds: past this, IDs would leave the positive 64-bit range. */
export const MAX_TIMESTAMP_MS = 2 ** 41
/** 2010-11-04 09:42:54.657 +08:00, Java Leaf's epoch. */
export const DEFAULT_TWEPOCH = 1288834974657
/** A new millisecond starts its sequence at a random value below this, as Leaf does. */
export const SEQUENCE_START_SPREAD = 100
/** A clock this far behind (ms) is waited out (twice the offset); further behind fails. */
export const MAX_BACKWARDS_WAIT_MS = 5
/** Sleeps spent waiting out the restart window before a request is refused. */
const RESTART_WINDOW_PASSES = 3
/** A timer may fire this much early by the wall clock: the wait cap allows for it. */
const TIMER_SLACK_MS = 2

/**
 * What the worker-id lease promises the generator: IDs may be issued for milliseconds up to
 * `issuableUntil`, because a restart waits past it. Past it, `extend(ms)` records `ms` first,
 * or throws (a LeafError) when the instance may not issue at all. A lease that loses its
 * worker id sets `issuableUntil` to -Infinity: issuing stops at the next ID.
 */
export interface IssueGuard {
  readonly issuableUntil: number
  extend (ms: number): void
  /** Asked before the first ID of each new millisecond; throws (a LeafError) when none may be issued. */
  check? (ms: number): void
}

const UNGUARDED: IssueGuard = { issuableUntil: Infinity, extend () {} }

export interface SnowflakeGeneratorOptions {
  workerId: number
  twepoch?: number
  clock?: () => number
  /** Resolves after `ms`; injectable for tests. */
  sleep?: (ms: number) => Promise<void>
  /** An integer in [0, n). */
  random?: (n: number) => number
  /** No ID is issued for a millisecond before this one (the restart window). */
  notBefore?: number
  /** A request waits at most this long (ms) for the restart window, then gets CLOCK_BACKWARDS. */
  maxRestartWaitMs?: number
  /** The lease's recording rule (see IssueGuard); none: no limit. */
  guard?: IssueGuard
  /** Told each time the clock is found behind the last ID's millisecond. */
  onClockBackwards?: (offsetMs: number) => void
}

export interface SnowflakeParts {
  timestamp: number
  workerId: number
  sequence: number
}

export interface SnowflakeGenerator {
  readonly workerId: number
  readonly twepoch: number
  /**
   * Issues with another worker id from now on (a recyclable lease claimed a new one), and
   * nothing for a millisecond before `notBefore` (that id's previous holder's last one).
   */
  rebind (workerId: number, notBefore: number): void
  /** Synchronous except while the clock is waited out. */
  next (key?: string): bigint | Promise<bigint>
  nextBatch (key: string, count: number): bigint[] | Promise<bigint[]>
  /** The same IDs as ranges: one per millisecond they come from (its sequence runs up by one). */
  nextRanges (key: string, count: number): IdRange<bigint>[] | Promise<IdRange<bigint>[]>
  decode (id: bigint): SnowflakeParts
}

export function createSnowflakeGenerator (options: SnowflakeGeneratorOptions): SnowflakeGenerator {
  const {
    workerId,
    twepoch = DEFAULT_TWEPOCH,
    clock = Date.now,
    sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    random = (n) => Math.floor(Math.random() * n),
    notBefore: firstAllowed = 0,
    maxRestartWaitMs = Infinity,
    guard = UNGUARDED,
    onClockBackwards,
  } = options
  checkWorkerId(workerId)
  const sinceEpoch = clock() - twepoch
  if (sinceEpoch < 0 || sinceEpoch >= MAX_TIMESTAMP_MS) {
    throw new StartRefused(`leaf.snowflake.twepoch ${twepoch} must lie in the past, less than 2^41 ms (about 69 years) ago`)
  }
  let lastTimestamp = -1
  let sequence = 0
  // The high bits of every ID of the current millisecond, built once per millisecond.
  let msBits = 0n
  let currentWorkerId = workerId
  let workerBits = BigInt(workerId) << WORKER_SHIFT
  let notBefore = firstAllowed
  const check = guard.check?.bind(guard)

  function beginMillisecond (ts: number, seq: number): void {
    // A fraction of a millisecond would spill into the worker bits below.
    if (!Number.isInteger(ts)) throw new RangeError(`the clock gave ${ts}, not whole milliseconds`)
    check?.(ts)
    lastTimestamp = ts
    sequence = seq
    // One BigInt conversion per millisecond, no shift: each is a heap allocation.
    msBits = BigInt((ts - twepoch) * TIMESTAMP_FACTOR) | workerBits
  }

  /** One ID now, or undefined when the clock is behind (the caller decides how to wait). */
  function tryNext (): bigint | undefined {
    return advance() ? msBits | BigInt(sequence) : undefined
  }

  /** Moves to the next ID's millisecond and sequence; false when the clock is behind. */
  function advance (): boolean {
    let ts = clock()
    if (ts > guard.issuableUntil) guard.extend(ts)
    if (ts === lastTimestamp) {
      if (sequence < SEQUENCE_MASK) {
        sequence++
      } else {
        // This millisecond is used up: spin to the next one, as Leaf does (at most 1 ms). A
        // clock stepping back meanwhile goes to the backwards rule, the millisecond still spent.
        while (ts <= lastTimestamp) {
          ts = clock()
          if (ts < lastTimestamp) return false
        }
        if (ts < notBefore) return false
        if (ts > guard.issuableUntil) guard.extend(ts)
        beginMillisecond(ts, random(SEQUENCE_START_SPREAD))
      }
    } else if (ts > lastTimestamp && ts >= notBefore) {
      beginMillisecond(ts, random(SEQUENCE_START_SPREAD))
    } else {
      return false
    }
    return true
  }

  /** The clock is behind the last ID (or inside the restart window): wait or refuse. */
  async function nextAfterWait (): Promise<bigint> {
    let now = clock()
    if (now < notBefore) {
      // A timer can fire up to a millisecond early by the wall clock (libuv's clock is
      // monotonic and truncated to the millisecond), so wait until the clock is there; but
      // never longer in all than the cap, whatever the clock does meanwhile.
      const budget = maxRestartWaitMs + TIMER_SLACK_MS
      if (notBefore - now > budget) throw clockBackwards(notBefore - now)
      let waited = 0
      for (let pass = 0; now < notBefore && pass < RESTART_WINDOW_PASSES && waited < budget; pass++) {
        const ms = Math.min(notBefore - now, budget - waited)
        await sleep(ms)
        waited += ms
        now = clock()
      }
    } else if (now < lastTimestamp) {
      // (A clock already at or past both, read between the two reads, needs no wait.)
      const offset = lastTimestamp - now
      onClockBackwards?.(offset)
      if (offset > MAX_BACKWARDS_WAIT_MS) throw clockBackwards(offset)
      await sleep(offset * 2)
    }
    const id = tryNext()
    if (id === undefined) {
      now = clock()
      throw clockBackwards(Math.max(lastTimestamp, notBefore) - now)
    }
    return id
  }

  function next (): bigint | Promise<bigint> {
    return tryNext() ?? nextAfterWait()
  }

  function nextBatch (key: string, count: number): bigint[] | Promise<bigint[]> {
    const ranges = nextRanges(key, count)
    return ranges instanceof Promise ? ranges.then(expandRanges) : expandRanges(ranges)
  }

  function nextRanges (_key: string, count: number): IdRange<bigint>[] | Promise<IdRange<bigint>[]> {
    return fillRanges([], 0, count)
  }

  /** Adds IDs to `ranges` until they hold `count`; waits (asynchronously) only when the clock is behind. */
  function fillRanges (ranges: IdRange<bigint>[], taken: number, count: number): IdRange<bigint>[] | Promise<IdRange<bigint>[]> {
    // The range the next ID extends: only one begun in this same synchronous stretch, since
    // other requests take IDs of the same millisecond during a wait.
    let open: IdRange<bigint> | undefined
    for (; taken < count; taken++) {
      const ms = lastTimestamp
      if (!advance()) return fillAfterWait(ranges, taken, count)
      if (open !== undefined && lastTimestamp === ms) open.count++
      else ranges.push(open = { first: msBits | BigInt(sequence), count: 1 })
    }
    return ranges
  }

  async function fillAfterWait (ranges: IdRange<bigint>[], taken: number, count: number): Promise<IdRange<bigint>[]> {
    ranges.push({ first: await nextAfterWait(), count: 1 })
    return fillRanges(ranges, taken + 1, count)
  }

  function rebind (id: number, from: number): void {
    checkWorkerId(id)
    currentWorkerId = id
    workerBits = BigInt(id) << WORKER_SHIFT
    notBefore = Math.max(notBefore, from)
    // The current millisecond's IDs carry the old worker id: the next ID begins a new one.
    sequence = SEQUENCE_MASK
  }

  return {
    get workerId () { return currentWorkerId },
    twepoch,
    rebind,
    next,
    nextBatch,
    nextRanges,
    decode: (id) => decodeSnowflakeId(id, twepoch),
  }
}

function checkWorkerId (workerId: number): void {
  if (!Number.isInteger(workerId) || workerId < 0 || workerId > MAX_WORKER_ID) {
    throw new RangeError(`worker id ${workerId} is outside [0, ${MAX_WORKER_ID}]`)
  }
}

function clockBackwards (offsetMs: number): LeafError {
  return new LeafError('CLOCK_BACKWARDS', `The clock is ${offsetMs} ms behind the last ID issued; no ID until it catches up.`)
}

export function decodeSnowflakeId (id: bigint, twepoch = DEFAULT_TWEPOCH): SnowflakeParts {
  return {
    timestamp: Number(id >> TIMESTAMP_SHIFT) + twepoch,
    workerId: Number((id >> WORKER_SHIFT) & BigInt(MAX_WORKER_ID)),
    sequence: Number(id & BigInt(SEQUENCE_MASK)),
  }
}
