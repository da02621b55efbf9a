import { channels } from '../channels.js'
import { LeafError, StartRefused } from '../errors.js'
import { expandRanges, type IdRange } from '../id-range.js'
import { explainId, leafLayout, msOf, timeOf, type Layout } from '../layout/layout.js'
import { DEFAULT_TWEPOCH, type SnowflakeParts } from './leaf-ids.js'
import { UNGUARDED, type IssueGuard } from './issue-guard.js'

/** A new millisecond starts its sequence at a random value below this, as Leaf does. */
export const SEQUENCE_START_SPREAD = 100
/** A clock this far behind (ms) is waited out (twice the offset); further behind fails. */
export const MAX_BACKWARDS_WAIT_MS = 5
/** Sleeps spent waiting out the restart window before a request is refused. */
const RESTART_WINDOW_PASSES = 3
/** A timer may fire this much early by the wall clock: the wait cap allows for it. */
const TIMER_SLACK_MS = 2

export interface SnowflakeGeneratorOptions {
  workerId: number
  /** The ID layout; by default Leaf's with `twepoch`. */
  layout?: Layout
  twepoch?: number
  /** How far ahead of the clock (ms) its own time may run instead of waiting (0: never, as Leaf). */
  borrowAheadMs?: number
  clock?: () => number
  /** Resolves after `ms`; injectable for tests. */
  sleep?: (ms: number) => Promise<void>
  /** Real time (ms, monotonic) that bounds a spin at the borrowing bound; injectable for tests. */
  spinClock?: () => number
  /** An integer in [0, n). */
  random?: (n: number) => number
  /** No ID is issued for a millisecond before this one (the restart window). */
  notBefore?: number
  /** A request waits at most this long (ms) for the restart window, then gets CLOCK_BACKWARDS. */
  maxRestartWaitMs?: number
  /** The lease's recording rule (see IssueGuard); none: no limit. */
  guard?: IssueGuard
}

export interface SnowflakeGenerator {
  readonly workerId: number
  readonly layout: Layout
  /** Switches to a newly claimed worker id, issuing nothing before `notBefore` (its previous holder's last millisecond). */
  rebind (workerId: number, notBefore: number): void
  /** Synchronous except while the clock is waited out. */
  next (key?: string): bigint | Promise<bigint>
  nextBatch (key: string, count: number): bigint[] | Promise<bigint[]>
  /** The same IDs as ranges: one per time unit they come from (its sequence runs up by one). */
  nextRanges (key: string, count: number): IdRange<bigint>[] | Promise<IdRange<bigint>[]>
  decode (id: bigint): SnowflakeParts
  /** How far (ms) the last ID's time unit begins ahead of the clock: time borrowed now. */
  borrowedMs (): number
}

/** A request waits for this many fresh time units at most while their sequences are used up. */
const EXHAUSTED_WAIT_PASSES = 3
/** Borrowing at its bound spins at most this long (real ms) for the clock's next millisecond. */
const BORROW_SPIN_MS = 1.5

export function createSnowflakeGenerator (options: SnowflakeGeneratorOptions): SnowflakeGenerator {
  const {
    workerId,
    twepoch = DEFAULT_TWEPOCH,
    layout = leafLayout(twepoch),
    borrowAheadMs = 0,
    clock = Date.now,
    sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    spinClock = () => performance.now(),
    random = (n) => Math.floor(Math.random() * n),
    notBefore: firstAllowed = 0,
    maxRestartWaitMs = Infinity,
    guard = UNGUARDED,
  } = options
  const { epoch, unitMs, maxSequence, maxTime } = layout
  checkWorkerId(workerId, layout)
  const sinceEpoch = clock() - epoch
  if (sinceEpoch < 0 || sinceEpoch >= (maxTime + 1) * unitMs) {
    throw new StartRefused(`the ${layout.name} layout's epoch ${epoch} must lie in the past, and its ${layout.time.bits}-bit time field must not have run out`, { code: 'LAYOUT_OUT_OF_TIME' })
  }
  /** A time value times this is the time field in place: exact as a double (a power of two). */
  const timeFactor = 2 ** layout.time.shift
  const sequenceFactor = 2 ** layout.sequence.shift
  const spread = layout.randomSequenceStart ? Math.min(SEQUENCE_START_SPREAD, maxSequence + 1) : 1
  // The last ID's time unit (units since the epoch), its last millisecond, and its sequence.
  let lastTime = -1
  let lastEnd = -1
  let sequence = 0
  // The bits of every ID of the current time unit but the sequence, built once per unit.
  let unitBits = 0n
  let currentWorkerId = workerId
  let fixedBits = layout.fixedBits | (BigInt(workerId) << BigInt(layout.worker.shift))
  let notBefore = firstAllowed
  /** No ID for a time unit before this one: the one notBefore falls in (see docs/id-layouts.md). */
  let minTime = timeOf(layout, notBefore)
  const check = guard.check?.bind(guard)

  const timeAt = unitMs === 1 ? (ms: number) => ms - epoch : (ms: number) => Math.floor((ms - epoch) / unitMs)
  const endOf = (time: number) => epoch + (time + 1) * unitMs - 1

  function beginUnit (time: number, end: number): void {
    // A fraction of a millisecond would spill into the worker bits below.
    if (!Number.isInteger(time)) throw new RangeError(`the clock gave a time of ${time} units, not a whole number`)
    if (time > maxTime) throw new LeafError('ID_SPACE_EXHAUSTED', `The ${layout.name} layout's time field ran out on ${new Date(endOf(maxTime) + 1).toISOString()}; no snowflake ID can be made.`)
    if (end > guard.issuableUntil) guard.extend(end)
    check?.(end)
    lastTime = time
    lastEnd = end
    sequence = spread === 1 ? 0 : random(spread)
    // One BigInt conversion per time unit, no shift: each is a heap allocation.
    unitBits = BigInt(time * timeFactor) | fixedBits
  }

  /** One ID now, or undefined when the clock is behind (the caller decides how to wait). */
  function tryNext (): bigint | undefined {
    return advance() ? unitBits | BigInt(sequence * sequenceFactor) : undefined
  }

  /** Moves to the next ID's time unit and sequence; false when the clock is behind. */
  function advance (): boolean {
    const now = clock()
    let time = timeAt(now)
    if (time === lastTime) {
      if (lastEnd > guard.issuableUntil) guard.extend(lastEnd)
      if (sequence < maxSequence) {
        sequence++
        return true
      }
      if (borrowAheadMs > 0) return borrow(now, time)
      // Used up: a millisecond is spun out, as Leaf does; a longer unit is waited for
      // (nextAfterWait), and so is a clock that steps back meanwhile.
      if (unitMs !== 1) return false
      while (time <= lastTime) {
        time = timeAt(clock())
        if (time < lastTime) return false
      }
      if (time < minTime) return false
      beginUnit(time, endOf(time))
      return true
    }
    if (time > lastTime && time >= minTime) {
      beginUnit(time, endOf(time))
      return true
    }
    return borrowAheadMs > 0 && borrow(now, time)
  }

  /** Borrowed time: docs/id-layouts.md#borrowed-time */
  function borrow (now: number, time: number): boolean {
    let limit = timeAt(now + borrowAheadMs)
    const target = lastTime >= time && lastTime >= minTime && sequence < maxSequence ? lastTime : Math.max(lastTime + 1, minTime, time)
    if (target > limit) {
      // Spin, not sleep, for the next millisecond at the bound: a timer cost a third of the
      // steady rate (docs/id-layouts.md#borrowed-time). Anything further waits.
      if (unitMs !== 1 || target > limit + 1) return false
      const spinEnd = spinClock() + BORROW_SPIN_MS
      for (let t = clock(); target > limit; t = clock()) {
        if (timeAt(t) < time || spinClock() > spinEnd) return false
        limit = timeAt(t + borrowAheadMs)
      }
    }
    if (target === lastTime) {
      if (lastEnd > guard.issuableUntil) guard.extend(lastEnd)
      sequence++
    } else {
      beginUnit(target, endOf(target))
    }
    return true
  }

  /** The clock is behind the last ID (or inside the restart window): wait or refuse. */
  async function nextAfterWait (): Promise<bigint> {
    let now = clock()
    if (now < notBefore) {
      // A timer can fire up to a millisecond early by the wall clock (libuv truncates its
      // monotonic clock), so loop until the clock is there, never past the cap in all.
      const budget = maxRestartWaitMs + TIMER_SLACK_MS
      if (notBefore - now > budget) throw clockBackwards(notBefore - now)
      let waited = 0
      for (let pass = 0; now < notBefore && pass < RESTART_WINDOW_PASSES && waited < budget; pass++) {
        const ms = Math.min(notBefore - now, budget - waited)
        await sleep(ms)
        waited += ms
        now = clock()
      }
    } else if (timeAt(now) < lastTime) {
      // (A clock already at or past both, read between the two reads, needs no wait.)
      const ahead = msOf(layout, lastTime) - now
      const excess = ahead - borrowAheadMs
      if (excess > 0) {
        // The clock stepped back further than time may be borrowed (always, without borrowing).
        channels.clockBackwards.publish({ aheadMs: ahead, workerId: currentWorkerId })
        if (excess > MAX_BACKWARDS_WAIT_MS) throw clockBackwards(ahead)
        await sleep(excess * 2)
      } else {
        // Borrowing within the bound, and the next unit lies beyond it (a long burst): wait for it.
        await sleep(Math.max(1, msOf(layout, lastTime + 1) - borrowAheadMs - now))
      }
    }
    let id = tryNext()
    // A unit longer than a millisecond whose sequence is used up: wait for the next ones.
    for (let pass = 0; id === undefined && pass < EXHAUSTED_WAIT_PASSES && exhausted(now = clock()); pass++) {
      await sleep(Math.max(1, msOf(layout, lastTime + 1) - borrowAheadMs - now))
      id = tryNext()
    }
    if (id === undefined) {
      now = clock()
      if (exhausted(now)) throw new LeafError('SEQUENCE_EXHAUSTED', `Every ID of this ${layout.unit === 's' ? 'second' : 'millisecond'} for worker id ${currentWorkerId} is issued, and of the next ${EXHAUSTED_WAIT_PASSES} too; try again.`)
      throw clockBackwards(Math.max(msOf(layout, lastTime), notBefore) - now)
    }
    return id
  }

  /** The clock is in the last ID's unit (or the one before it, borrowing) and its sequence is used up. */
  function exhausted (now: number): boolean {
    return now >= notBefore && sequence >= maxSequence && timeAt(now + borrowAheadMs) === lastTime
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

  // IDs of one unit are consecutive integers only when the sequence is the lowest field.
  const consecutive = sequenceFactor === 1

  /** Adds IDs to `ranges` until they hold `count`; waits (asynchronously) only when the clock is behind. */
  function fillRanges (ranges: IdRange<bigint>[], taken: number, count: number): IdRange<bigint>[] | Promise<IdRange<bigint>[]> {
    // The range the next ID extends: only one begun in this same synchronous stretch, since
    // other requests take IDs of the same unit during a wait.
    let open: IdRange<bigint> | undefined
    for (; taken < count; taken++) {
      const time = lastTime
      if (!advance()) return fillAfterWait(ranges, taken, count)
      if (open !== undefined && lastTime === time && consecutive) open.count++
      else ranges.push(open = { first: unitBits | BigInt(sequence * sequenceFactor), count: 1 })
    }
    return ranges
  }

  async function fillAfterWait (ranges: IdRange<bigint>[], taken: number, count: number): Promise<IdRange<bigint>[]> {
    ranges.push({ first: await nextAfterWait(), count: 1 })
    return fillRanges(ranges, taken + 1, count)
  }

  function rebind (id: number, from: number): void {
    checkWorkerId(id, layout)
    currentWorkerId = id
    fixedBits = layout.fixedBits | (BigInt(id) << BigInt(layout.worker.shift))
    notBefore = Math.max(notBefore, from)
    minTime = timeOf(layout, notBefore)
    // The current unit's IDs carry the old worker id: the next ID begins a new one.
    sequence = maxSequence
  }

  return {
    get workerId () { return currentWorkerId },
    layout,
    rebind,
    next,
    nextBatch,
    nextRanges,
    decode: (id) => {
      const { timestamp, workerId, sequence } = explainId(layout, id)
      return { timestamp, workerId, sequence }
    },
    borrowedMs: () => lastTime < 0 ? 0 : Math.max(0, msOf(layout, lastTime) - clock()),
  }
}

function checkWorkerId (workerId: number, layout: Layout): void {
  if (!Number.isInteger(workerId) || workerId < 0 || workerId > layout.maxWorkerId) {
    throw new RangeError(`worker id ${workerId} is outside [0, ${layout.maxWorkerId}] (the ${layout.name} layout's ${layout.worker.bits} worker bits)`)
  }
}

function clockBackwards (offsetMs: number): LeafError {
  return new LeafError('CLOCK_BACKWARDS', `The clock is ${offsetMs} ms behind the last ID issued; no ID until it catches up.`)
}
