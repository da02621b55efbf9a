import { channels } from '../channels.js'
import type { Logger } from '../logger.js'
import type { SegmentStore, TagRow } from './store.js'

// Catches a `max_id` that went backwards (an async replica promoted without the last
// allocations). Per tag the instance keeps a mark, the end of what it served or holds; an
// allocation below the mark, or answered by a store of another identity, is never served: the
// marks are pushed into the table and allocations held for `holdMs`. Why, and the interleavings:
// docs/production.md#a-max_id-that-went-backwards, #an-instance-cut-off-from-the-store.

export interface Regression {
  cause: 'store changed' | 'max_id went back'
  /** The tag whose allocation showed it; none when a refresh saw the store change. */
  key?: string
  from?: string
  to?: string
  /** IDs between the range's start and the tag's mark (max_id went back). */
  gap?: bigint
  /** Tags a refresh found below this instance's mark, `key` the first of them. */
  tags?: number
  at: Date
}

/** What the warm-start file keeps of the guard. */
export interface GuardState {
  /** The configured store the marks are for: marks of another are dropped at start, not taken for a failover. */
  where?: string
  store?: string
  /** Tag -> mark (decimal). After a stop, only the served part: a stopped instance holds nothing. */
  marks: Record<string, string>
  /** Wall-clock ms a hold (or raises owed) at the stop ends; the next start holds until then. */
  heldUntil?: number
}

export interface GuardView {
  /** ms of the hold left; 0 when none. */
  holdingMs: number
  /** Wall-clock ms the hold ends, while one lasts. */
  holdEndsAt?: number
  /** The serving bound and ms since the store was last confirmed, where the bound applies. */
  unconfirmed?: { boundMs: number, sinceMs: number }
  /** Tags whose mark is still to be pushed into the table. */
  raisesOwed: number
  regressions: number
  last?: Regression
  store?: string
}

export interface MaxIdGuardOptions {
  store: Pick<SegmentStore, 'raiseMaxId' | 'identity'>
  logger: Logger
  holdMs: number
  monotonic: () => number
  saved?: GuardState
  onRegression?: (r: Regression) => void
  /** Wall-clock ms, for a hold carried across a restart; injectable for tests. */
  clock?: () => number
}

/** An allocation refused: the caller's load fails, and is retried after its backoff. */
export class AllocationHeld extends Error {
  /** RAISES_OWED: tags still to be raised above the IDs served; HOLDING: the hold after a failover; RANGE_HELD: a range below a failover's mark. */
  readonly code: 'ALLOCATION_RAISES_OWED' | 'ALLOCATION_HOLDING' | 'ALLOCATION_RANGE_HELD'

  constructor (code: AllocationHeld['code'], message: string) {
    super(message)
    this.name = 'AllocationHeld'
    this.code = code
  }
}

/** What marksBeforeRead() took: the marks, and whether a regression was already being handled. */
export interface MarksSnapshot {
  marks: ReadonlyMap<string, bigint>
  epoch: number
  /** Marks were being pushed: the rows may be read before the push lands. */
  busy: boolean
  /** Monotonic ms, before the rows were asked for. */
  at: number
}

/** Pushes at once: a few, so that thousands of tags do not take every pool connection. */
const RAISE_CONCURRENCY = 4

export interface MaxIdGuard {
  /** Pushes marks owed; rejects (AllocationHeld) while any is, or during a hold. Resolves the epoch for admit(). */
  beforeAllocate (): Promise<number>
  /** Whether the allocated range `[first, end)` may be served; false starts (or extends) a hold. */
  admit (key: string, first: bigint, end: bigint, store: string | undefined, epoch: number): Promise<boolean>
  /** At each refresh: a store of another identity starts a hold. */
  checkStore (): Promise<void>
  /** Before a refresh reads the rows: pushes marks owed, then snapshots the marks for checkRows(). */
  marksBeforeRead (): Promise<MarksSnapshot>
  /** A row below its mark is a regression whatever answered (a hand edit); a clean refresh confirms the store. */
  checkRows (rows: readonly TagRow[], before: MarksSnapshot): Promise<void>
  /** Bounds serving without a confirmed store (ms; undefined: no bound). */
  boundServing (boundMs: number | undefined): void
  /** Monotonic ms up to which the buffer may be served; Infinity when unbounded. Read on every request. */
  readonly servingUntil: number
  /** Called to drop the buffer when a regression's marks were pushed too late to protect it. */
  onVoid (drop: () => number): void
  /** Ranges held but not allocated through admit() (those the last stop parked). */
  holds (key: string, end: bigint): void
  /** At a stop: the tag holds nothing any more, and the mark drops to what was served (`servedEnd`). */
  released (key: string, servedEnd: bigint): void
  /** Not once a failover was seen: a claim's DELETE the old store never passed on would let a range be taken twice. */
  parkedUsable (): boolean
  state (): GuardState
  view (): GuardView
}

export function createMaxIdGuard (options: MaxIdGuardOptions): MaxIdGuard {
  const { store, logger, holdMs, monotonic, onRegression, clock = Date.now } = options
  const marks = new Map<string, bigint>()
  for (const [key, mark] of Object.entries(options.saved?.marks ?? {})) {
    if (/^\d+$/.test(mark)) marks.set(key, BigInt(mark))
  }
  /** What earlier runs served: released() never puts a mark below it. */
  const servedBefore = new Map(marks)
  let known = options.saved?.store
  let holdUntil = 0
  /** Counts regressions: an allocation asked for before one is not served after it. */
  let epoch = 0
  let last: Regression | undefined
  const owed = new Set<string>()
  let pushing: Promise<void> | undefined
  // A stop during a hold: the peers may not have pushed yet, so this run holds as long, and
  // pushes its own marks again (a raise is idempotent).
  const heldUntil = options.saved?.heldUntil
  if (typeof heldUntil === 'number') {
    holdUntil = monotonic() + Math.max(0, heldUntil - clock())
    for (const key of marks.keys()) owed.add(key)
  }

  // The buffer serves only within `bound` of the last confirming refresh's send time, so this
  // instance stops before any peer's hold ends. Why: docs/production.md#an-instance-cut-off-from-the-store
  let bound = Infinity
  let confirmedAt = -Infinity
  let servingUntil = Infinity
  /** Set by a regression: once its marks are pushed, whether they came in time to keep the buffer. */
  let voidCheck = false
  let drop: (() => number) | undefined
  function confirm (at: number): void {
    if (at > confirmedAt) confirmedAt = at
    servingUntil = bound === Infinity ? Infinity : confirmedAt + bound
  }
  /** A push that landed past servingUntil may come after a peer allocated what this instance holds: drop it. */
  function afterPush (): void {
    if (!voidCheck || owed.size > 0) return
    voidCheck = false
    if (monotonic() <= servingUntil) return
    const dropped = drop?.() ?? 0
    if (dropped > 0) {
      logger.error({ boundMs: bound, sinceMs: Math.round(monotonic() - confirmedAt), dropped },
        'segment store failover seen after the serving bound: a peer may have allocated the ranges this instance holds; its buffered IDs are dropped')
    }
  }

  /** Raises the tags owed, one push at a time; a push under way when another regression comes is followed by one more. */
  async function pushMarks (): Promise<void> {
    for (let under = pushing; under !== undefined; under = pushing) await under
    if (owed.size === 0) return
    pushing = (async () => {
      const keys = [...owed]
      for (let i = 0; i < keys.length; i += RAISE_CONCURRENCY) {
        await Promise.all(keys.slice(i, i + RAISE_CONCURRENCY).map(async (key) => {
          const mark = marks.get(key)
          if (mark === undefined) return owed.delete(key)
          // A raise sent before a newer failover does not count: it may have reached the old store.
          const asked = epoch
          try {
            await store.raiseMaxId(key, mark)
            if (asked === epoch) owed.delete(key)
          } catch (err) {
            logger.warn({ key, mark: String(mark), err: (err as Error).message }, 'max_id not raised yet: retried before the next allocation')
          }
        }))
      }
    })().finally(() => { pushing = undefined })
    await pushing
    afterPush()
  }

  async function regressed (r: Omit<Regression, 'at'>): Promise<void> {
    const event: Regression = { ...r, at: new Date() }
    if (r.to !== undefined) known = r.to
    epoch++
    holdUntil = monotonic() + holdMs
    voidCheck = true
    last = event
    for (const key of marks.keys()) owed.add(key)
    logger.error({ cause: r.cause, key: r.key, from: r.from, to: r.to, gap: r.gap === undefined ? undefined : String(r.gap), tags: r.tags, holdMs, marks: marks.size },
      'segment store failover: max_id may be behind IDs already served; raising every tag above them and holding allocations')
    channels.storeRegression.publish({ cause: r.cause, key: r.key, from: r.from, to: r.to })
    onRegression?.(event)
    await pushMarks()
  }

  /** Rows below the mark each tag had before the read: one regression for them all. */
  async function compareRows (rows: readonly TagRow[], before: MarksSnapshot): Promise<void> {
    let first: { key: string, gap: bigint } | undefined
    let behind = 0
    for (const row of rows) {
      const then = before.marks.get(row.key)
      if (then === undefined) continue
      // The mark as it was before the read, or lower now: a stop's give-back puts max_id
      // back to what it served (released()), never below it.
      const now = marks.get(row.key)
      if (now === undefined) continue
      const mark = now < then ? now : then
      if (row.maxId >= mark) continue
      behind++
      first ??= { key: row.key, gap: mark - row.maxId }
    }
    if (first !== undefined) await regressed({ cause: 'max_id went back', key: first.key, from: known, gap: first.gap, tags: behind })
  }

  return {
    async beforeAllocate () {
      if (owed.size > 0) await pushMarks()
      if (owed.size > 0) throw new AllocationHeld('ALLOCATION_RAISES_OWED', `${owed.size} tag(s) still to be raised above the IDs served before the store failover`)
      const left = holdUntil - monotonic()
      if (left > 0) throw new AllocationHeld('ALLOCATION_HOLDING', `allocations held for ${Math.ceil(left)} ms more after a store failover, for every instance to raise max_id above what it served`)
      return epoch
    },
    async admit (key, first, end, from, asked) {
      if (asked !== epoch) return false
      const mark = marks.get(key)
      const changed = from !== undefined && known !== undefined && from !== known
      if (changed || (mark !== undefined && first < mark)) {
        await regressed({
          cause: changed ? 'store changed' : 'max_id went back',
          key,
          from: known,
          to: from,
          ...(mark !== undefined && first < mark ? { gap: mark - first } : {}),
        })
        return false
      }
      if (from !== undefined) known = from
      if (mark === undefined || end > mark) marks.set(key, end)
      return true
    },
    async checkStore () {
      const now = await store.identity()
      if (now === undefined) return
      if (known !== undefined && now !== known) await regressed({ cause: 'store changed', from: known, to: now })
      known = now
    },
    async marksBeforeRead () {
      if (owed.size > 0) await pushMarks()
      return { marks: new Map(marks), epoch, busy: owed.size > 0 || pushing !== undefined, at: monotonic() }
    },
    async checkRows (rows, before) {
      // A row may have been read before its raise landed; the next refresh looks again.
      if (before.busy) return
      // A regression since the read (the identity this refresh read, an allocation) pushed
      // every mark: each row is at or above it now, and there is nothing to compare.
      if (before.epoch === epoch) await compareRows(rows, before)
      // Confirmed as of the read: the store answered, and every mark is in it (sent in time).
      if (owed.size === 0 && !voidCheck) confirm(before.at)
    },
    boundServing (boundMs) {
      bound = boundMs ?? Infinity
      servingUntil = bound === Infinity ? Infinity : confirmedAt + bound
    },
    get servingUntil () {
      return servingUntil
    },
    onVoid (fn) {
      drop = fn
    },
    holds (key, end) {
      const mark = marks.get(key)
      if (mark === undefined || end > mark) marks.set(key, end)
    },
    released (key, servedEnd) {
      const before = servedBefore.get(key) ?? 0n
      const mark = servedEnd > before ? servedEnd : before
      if (mark > 0n) marks.set(key, mark)
      else marks.delete(key)
    },
    parkedUsable () {
      return epoch === 0
    },
    state () {
      const left = holdUntil - monotonic()
      return {
        ...(known === undefined ? {} : { store: known }),
        marks: Object.fromEntries([...marks].map(([k, v]) => [k, String(v)])),
        ...(left > 0 || owed.size > 0 ? { heldUntil: clock() + Math.max(left, 0) } : {}),
      }
    },
    view () {
      const left = Math.max(0, Math.ceil(holdUntil - monotonic()))
      return {
        holdingMs: left,
        ...(left > 0 ? { holdEndsAt: clock() + left } : {}),
        ...(bound === Infinity ? {} : { unconfirmed: { boundMs: bound, sinceMs: monotonic() - confirmedAt } }),
        raisesOwed: owed.size,
        regressions: epoch,
        ...(last === undefined ? {} : { last }),
        ...(known === undefined ? {} : { store: known }),
      }
    },
  }
}
