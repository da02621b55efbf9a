import type { Logger } from '../logger.js'
import type { SegmentStore } from './store.js'

// A `max_id` that went backwards. An async replica promoted after its primary died lacks the
// allocations it never received: its rows are behind ranges instances already served, and
// the next allocation would hand one out again. No store can tell; the instances can:
// - each keeps, per tag, a mark: the end of what it served or holds, the larger of the
//   highest ID it served + 1 and the end of the ranges it holds. It keeps it in memory, the
//   served part in the warm-start file, and the identity of the store that answered
//   (stores/mysql-pool.ts: a server, or a Galera cluster). In one store, max_id never goes
//   below any instance's mark: a give-back returns only its giver's own unserved IDs, the run
//   that ends at max_id, so no peer served or holds anything from where it puts max_id. A mark
//   is not what an instance received: a range it gave back is nobody's, and a peer's later
//   give-back may legally put max_id below it (a successor that takes a range parked just below
//   it, then returns the run from inside that range);
// - an allocation whose range starts below the tag's mark, or that a store of another
//   identity answered, is never served. The instance then pushes every mark it holds into
//   the table (`max_id = GREATEST(max_id, mark)`), and holds all allocations for `holdMs`
//   (leaf.segment.failover-hold-ms), serving the buffer it holds meanwhile;
// - every refresh of the tag list reads the store's identity too, so an instance that
//   allocates nothing still sees the change within a refresh interval, and pushes its
//   marks. The hold (two refresh intervals and a refresh's worst time, by default) outlasts
//   that: when it ends, every live peer has pushed, and the rows are above every range a live
//   instance served.
// docs/production.md walks through the interleavings, and what stays open: ranges served only
// by instances that were dead during the failover.

export interface Regression {
  cause: 'store changed' | 'max_id went back'
  /** The tag whose allocation showed it; none when a refresh saw the store change. */
  key?: string
  from?: string
  to?: string
  /** IDs between the range's start and the tag's mark (max_id went back). */
  gap?: bigint
  at: Date
}

/** What the warm-start file keeps of the guard. */
export interface GuardState {
  /**
   * The configured store the marks are for (a database's name, a SQLite file): marks of
   * another (leaf.jdbc.url changed, a file copied between instances of different stores) are
   * dropped at start, not taken for a failover. segment-mode.ts sets it.
   */
  where?: string
  store?: string
  /**
   * Tag -> its mark, as a decimal string: what a stop writes is the part served (the highest ID
   * served + 1), since it holds nothing any more.
   */
  marks: Record<string, string>
  /**
   * Set when the stop came during a hold, or with raises owed: the wall-clock ms the hold
   * ends. The next life holds until then, and pushes its marks again first.
   */
  heldUntil?: number
}

export interface GuardView {
  /** ms of the hold left; 0 when none. */
  holdingMs: number
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
  constructor (message: string) {
    super(message)
    this.name = 'AllocationHeld'
  }
}

/** Pushes at once: a few, so that thousands of tags do not take every pool connection. */
const RAISE_CONCURRENCY = 4

export interface MaxIdGuard {
  /**
   * Before an allocation: pushes marks still owed, and rejects (AllocationHeld) while any is,
   * or while the hold lasts. Resolves the epoch to hand to admit().
   */
  beforeAllocate (): Promise<number>
  /** Whether the allocated range `[first, end)` may be served; false starts (or extends) a hold. */
  admit (key: string, first: bigint, end: bigint, store: string | undefined, epoch: number): Promise<boolean>
  /** At each refresh: a store of another identity starts a hold. */
  checkStore (): Promise<void>
  /**
   * Ranges this instance holds that were not allocated through admit() (those the last stop
   * parked): the mark covers them.
   */
  holds (key: string, end: bigint): void
  /**
   * At a stop, once the tag's unused IDs are given back, parked or lost: the instance holds
   * nothing of it any more, and served up to `servedEnd` (highest ID served + 1; 0n: none in
   * this life). The mark becomes the served part, of this life or an earlier one.
   */
  released (key: string, servedEnd: bigint): void
  /**
   * Whether ranges parked by the last life may be taken: not once a failover was seen, since a
   * claim's DELETE the old store never passed on would let them be taken twice.
   */
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
  /** What earlier lives served, the floor of a mark that released() puts back. */
  const servedBefore = new Map(marks)
  let known = options.saved?.store
  let holdUntil = 0
  /** Counts regressions: an allocation asked for before one is not served after it. */
  let epoch = 0
  let last: Regression | undefined
  const owed = new Set<string>()
  let pushing: Promise<void> | undefined
  // A stop during a hold: the peers may not have pushed yet, so this life holds as long, and
  // pushes its own marks again (a raise is idempotent).
  const heldUntil = options.saved?.heldUntil
  if (typeof heldUntil === 'number') {
    holdUntil = monotonic() + Math.max(0, heldUntil - clock())
    for (const key of marks.keys()) owed.add(key)
  }

  /** Raises the tags owed, one push at a time; a push under way when another regression comes is followed by one more. */
  async function pushMarks (): Promise<void> {
    // (`pushing` is cleared by the push it names, when it settles.)
    for (let under = pushing; under !== undefined; under = pushing) await under
    if (owed.size === 0) return
    pushing = (async () => {
      const keys = [...owed]
      for (let i = 0; i < keys.length; i += RAISE_CONCURRENCY) {
        await Promise.all(keys.slice(i, i + RAISE_CONCURRENCY).map(async (key) => {
          const mark = marks.get(key)
          if (mark === undefined) return owed.delete(key)
          // A raise that lands on the store of an earlier failover pays nothing of this one.
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
  }

  async function regressed (r: Omit<Regression, 'at'>): Promise<void> {
    const event: Regression = { ...r, at: new Date() }
    if (r.to !== undefined) known = r.to
    epoch++
    holdUntil = monotonic() + holdMs
    last = event
    for (const key of marks.keys()) owed.add(key)
    logger.error({ cause: r.cause, key: r.key, from: r.from, to: r.to, gap: r.gap === undefined ? undefined : String(r.gap), holdMs, marks: marks.size },
      'segment store failover: max_id may be behind IDs already served; raising every tag above them and holding allocations')
    onRegression?.(event)
    await pushMarks()
  }

  return {
    async beforeAllocate () {
      if (owed.size > 0) await pushMarks()
      if (owed.size > 0) throw new AllocationHeld(`${owed.size} tag(s) still to be raised above the IDs served before the store failover`)
      const left = holdUntil - monotonic()
      if (left > 0) throw new AllocationHeld(`allocations held for ${Math.ceil(left)} ms more after a store failover, for every instance to raise max_id above what it served`)
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
      return { holdingMs: Math.max(0, Math.ceil(holdUntil - monotonic())), raisesOwed: owed.size, regressions: epoch, ...(last === undefined ? {} : { last }), ...(known === undefined ? {} : { store: known }) }
    },
  }
}
