import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { LeafError, LeaseRefused } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { createLogThrottle, type LogThrottle } from '../../log-throttle.js'
import { mayStillRun } from '../../driver-errors.js'
import { settlesWithin, sleep, withTimeout } from '../../timers.js'
import { CACHE_FILE, readWorkerCache, writeWorkerCache } from './cache-file.js'
import type { LeaseStatus, WorkerLease } from './worker-lease.js'

// The lease protocol of the recyclable sources (db-lease, zookeeper-lease), over any store
// that offers the LeasePool operations. docs/worker-ids.md argues each rule, for statements
// that arrive late, twice or never; in short:
//
// - A claim is one conditional write in the store (LeasePool.claim): two claimants of one
//   id cannot both win. Every claim has a token of its own, and renewals and releases name
//   it: a statement of an earlier claim, even one of this process, can never touch a later
//   claim. A claim whose outcome is unknown is abandoned, never taken up again.
// - A holder renews every heartbeat. A renewal sent at monotonic time t makes the lease run at
//   least until t + TTL (the store dates it when it runs, after t). The holder stops issuing
//   at t + TTL - margin by its monotonic clock, checked before every new millisecond
//   (check()): it has stopped before anyone can claim the id.
// - A claimant takes over a holder that stopped renewing only when the store says its lease
//   expired and, where the store's expiry rests on a wall clock that may step (a database's
//   NOW()), when it has itself seen the holder's row unchanged for a whole TTL on its own
//   monotonic clock (PoolSlot.version).
// - Every renewal records `issuedUntil`, the last millisecond the holder may issue before
//   that fence, and the holder never issues past the last one the store confirmed. A new
//   holder issues nothing at or before the recorded value.
// - A clean stop stops issuing, then records the millisecond it actually reached and frees
//   the id: the next holder waits for that millisecond only.

/** One worker id of a pool, as the store sees it now. */
export interface PoolSlot {
  workerId: number
  /** free: never leased, or released; expired: its holder's lease ran out; held: leased now. */
  state: 'free' | 'expired' | 'held'
  /** Held: ms until it expires; expired: ms since it did (negative); by the store's clock. */
  expiresInMs: number
  /**
   * The holder's claim and renewal count as the store shows them, where the store judges expiry
   * by a wall clock that may step: a claimant takes over an expired holder only once it has
   * seen this unchanged for a whole TTL on its own monotonic clock (and passes it to claim()).
   */
  version?: string
  /** The TTL its holder asked for, where the store records it: it is watched that long at least. */
  ttlMs?: number | undefined
}

export interface Claimed {
  /** The last millisecond the id's previous holders may have issued (0: none). */
  issuedUntil: number
  /** The claim (token) that recorded it, when the store keeps that. */
  by?: string | undefined
}

/** The store side of the lease protocol. `owner` is the token of one claim. */
export interface LeasePool {
  /** Where the pool lives, for logs and the status (never a password). */
  readonly where: string
  /** The lease time the store grants (ZooKeeper may negotiate another session timeout). */
  ttlMs (): number
  /** Whether the store's connection is up now, when it keeps one (ZooKeeper). */
  connected? (): boolean
  /** How late past its TTL the store may free an expired lease (ZooKeeper expires sessions once per tick). */
  readonly expirySlackMs?: number
  /** The slots in [min, max] the store knows; an id not listed was never leased. */
  list (min: number, max: number): Promise<PoolSlot[]>
  /**
   * Takes `workerId` for the claim `owner` when it is free, or when its holder is the one seen
   * as `from` (a PoolSlot.version) and expired: one atomic write. Stores without versions take
   * an expired id whatever `from` says (their expiry does not rest on a wall clock).
   */
  claim (workerId: number, owner: string, address: string, from?: string): Promise<Claimed | undefined>
  /** Extends `owner`'s lease and raises its issuedUntil; false when the id is no longer `owner`'s. */
  renew (workerId: number, owner: string, issuedUntil: number): Promise<boolean>
  /**
   * Frees the id when it is `owner`'s, recording the millisecond actually reached (issuedUntil;
   * the recorded bound only rises) as recorded by `recordedBy` (the claim that issued up to it:
   * an id handed back unused keeps its previous holder's value and name). `undefined`: a claim
   * whose answer never came, so the previous holders' millisecond is unknown: the next holder
   * waits for the recorded bound.
   */
  release (workerId: number, owner: string, issuedUntil: number | undefined, recordedBy: string | undefined): Promise<void>
  close (): Promise<void>
}

export type RecyclableSource = 'db-lease' | 'zookeeper-lease'

export interface RecyclableLeaseOptions {
  source: RecyclableSource
  pool: LeasePool
  /** ip:port, recorded with the lease for operators. */
  address: string
  min: number
  max: number
  cacheDir: string
  heartbeatIntervalMs: number
  maxClockDriftMs: number
  /** How far past the clock the generator may go (borrowed time, a unit's rest): each renewal covers it. */
  aheadMs?: number
  clock: () => number
  /** Monotonic milliseconds; performance.now by default. */
  monotonic?: () => number
  logger: Logger
  /** Told of every claim attempt's result, and of every fence. */
  onClaim?: (result: ClaimResult) => void
  onLost?: () => void
}

export type ClaimResult = 'claimed' | 'reclaimed' | 'conflict' | 'drift' | 'exhausted' | 'error'

/** The part of the TTL kept back from the fence, for clock rates and the check's granularity. */
export function fenceMarginMs (ttlMs: number): number {
  return Math.max(50, Math.round(ttlMs / 10))
}

/** A stop waits this long at most for the release: a store that does not answer lets the lease expire instead. */
const RELEASE_TIMEOUT_MS = 2000
/** A poll of an exhausted pool waits at least this long. */
const EXHAUSTED_POLL_MS = 100

/**
 * Claims a worker id from `pool` and keeps it leased (see the notes above). Refuses the start
 * (LeaseRefused) when the pool stays exhausted past one TTL.
 */
export async function acquireRecyclableLease (o: RecyclableLeaseOptions): Promise<RecyclableLease> {
  const ttl = o.pool.ttlMs()
  if (ttl < 3 * o.heartbeatIntervalMs) {
    // ZooKeeper grants a session timeout within its own bounds, whatever was asked for.
    await o.pool.close()
    throw new LeaseRefused(`${o.pool.where} grants a lease of ${ttl} ms, less than 3 heartbeat intervals ` +
      `(leaf.snowflake.heartbeat-interval-ms is ${o.heartbeatIntervalMs}): one late renewal would stop issuing`)
  }
  const lease = new RecyclableLease(o)
  try {
    await lease.claimAtStart()
  } catch (err) {
    await lease.close()
    throw err
  }
  lease.start()
  return lease
}

export class RecyclableLease implements WorkerLease {
  workerId = -1
  notBefore = 0
  issuableUntil = -Infinity
  /** Told when a new claim changes the worker id or the first millisecond allowed. */
  onWorkerChange: ((workerId: number, notBefore: number) => void) | undefined
  /** This process's part of every claim token: `<instance>.<n>`, n counting its claims. */
  private readonly instance = randomUUID()
  private claims = 0
  /** The token of the claim served now (renewals and the release name it). */
  private token = ''
  /** Each id this process claimed: the previous holders' last millisecond as its claim read it. */
  private readonly floors = new Map<number, number>()
  /**
   * Claims this process gave up on: handed back without an answer, or without an answer
   * themselves. They are never served. Their hand-back names their token alone, so it is
   * harmless whenever and however often it lands, and it is sent again at the next passes:
   * until one is answered, for a claim known to have run (`settled`); for a claim that may
   * still run later, every heartbeat until its lease would have run out anyway.
   */
  private readonly abandoned = new Map<string, { workerId: number, issuedUntil: number | undefined, by: string | undefined, until: number, settled: boolean }>()
  /** Each expired or held slot with a version: the version, and when this process first saw it (monotonic). */
  private watched = new Map<number, { version: string, at: number }>()
  private readonly monotonic: () => number
  private readonly cacheFile: string
  /** Monotonic time by which issuing stops, unless a renewal confirms more. */
  private fenceAt = -Infinity
  /** The wall clock's estimate of the lease's end, for the status. */
  private expiresAt: number | undefined
  /** The last issuedUntil the store confirmed. */
  private recorded = 0
  /** The newest millisecond this instance let the generator begin. */
  private admitted = 0
  private unavailable: string | undefined = 'no worker id claimed yet'
  /** Why issuing waits for a renewal though the lease holds: the clock reached the recorded issuedUntil. */
  private paused: string | undefined
  private timer: NodeJS.Timeout | undefined
  /** The heartbeat under way, if any: close() lets its claim pass hand its claim back before the pool closes. */
  private beat: Promise<void> | undefined
  /** The round of hand-backs under way, if any (sendHandBacks). */
  private handingBack: Promise<void> | undefined
  private fenceTimer: NodeJS.Timeout | undefined
  private beating = false
  private closed = false
  /** The store gave our id to another instance: lease one again. */
  private taken = false
  private lastRenewal: number | undefined
  private lastServed = -1
  /** The last pass's store failure, if any. */
  private storeError: Error | undefined
  /** Ids the last pass gave back because their previous holder ran too far ahead. */
  private readonly driftRefused = new Set<number>()

  /** Failures that repeat every heartbeat or claim pass are logged once per 30 s each. */
  private readonly throttle: LogThrottle

  constructor (private readonly o: RecyclableLeaseOptions) {
    this.monotonic = o.monotonic ?? (() => performance.now())
    this.throttle = createLogThrottle(o.logger, { clock: this.monotonic })
    this.cacheFile = join(o.cacheDir, CACHE_FILE)
  }

  private get ttl (): number { return this.o.pool.ttlMs() }
  /** How long after a renewal was sent issuing may go on. */
  private get window (): number { return this.ttl - fenceMarginMs(this.ttl) }

  /** Before every new millisecond: refuses once the lease may have run out (a pause, a partition). */
  check (ms: number): void {
    this.fenceIfDue()
    if (this.unavailable !== undefined) throw this.lostError()
    if (ms > this.admitted) this.admitted = ms
  }

  /** The clock passed the last recorded issuedUntil (it jumped ahead): nothing past it. */
  extend (ms: number): void {
    // A renewal's issuedUntil ends about where its fence does: the generator asks this first,
    // and a lost lease is told as one here too, not as a pause.
    this.fenceIfDue()
    if (this.unavailable !== undefined) throw this.lostError()
    this.renewSoon()
    if (this.paused === undefined) {
      // Told once, at the moment it happens: the log and /readyz say why IDs stopped.
      this.paused = `the clock (${ms}) passed the last millisecond this lease recorded (${this.recorded}): no snowflake ID until a renewal records more`
      this.o.logger.warn({ workerId: this.workerId, ms, issuedUntil: this.recorded }, 'snowflake issuing paused: the clock passed the last millisecond the worker-id lease recorded')
    }
    throw new LeafError('WORKER_LEASE_LOST', `The clock (${ms}) passed the last millisecond this lease recorded (${this.recorded}); no snowflake ID until a renewal records more.`)
  }

  /** A token for a new claim: no statement of another claim matches it. */
  private newToken (): string {
    return `${this.instance}.${++this.claims}`
  }

  private isOwn (token: string | undefined): boolean {
    return token !== undefined && token.startsWith(`${this.instance}.`)
  }

  /** Notes when each holder's version was first seen; a version that changed starts again. */
  private watch (slots: readonly PoolSlot[], at: number): void {
    const seen = new Map<number, { version: string, at: number }>()
    for (const s of slots) {
      if (s.version === undefined) continue
      const before = this.watched.get(s.workerId)
      seen.set(s.workerId, before?.version === s.version ? before : { version: s.version, at })
    }
    this.watched = seen
  }

  private lostError (): LeafError {
    return new LeafError('WORKER_LEASE_LOST', `This instance lost its worker-id lease (${this.unavailable ?? ''}); no snowflake ID until it leases one again.`)
  }

  private fenceIfDue (): void {
    if (this.monotonic() >= this.fenceAt) this.fence('no renewal confirmed within the lease time')
  }

  /** Stops issuing at once. */
  private fence (why: string): void {
    this.issuableUntil = -Infinity
    this.fenceAt = -Infinity
    if (this.unavailable !== undefined) return
    this.unavailable = why
    this.o.onLost?.()
    this.o.logger.warn({ workerId: this.workerId, why }, 'worker-id lease lost: snowflake issuing stopped')
  }

  /** At start: claims an id, waiting for an exhausted pool's oldest lease up to one TTL. */
  async claimAtStart (): Promise<void> {
    // One TTL for the soonest lease to run out (or, where versions are watched, to be seen
    // standing still that long), the store's own slack, and a margin for the last poll.
    const deadline = this.monotonic() + this.ttl + (this.o.pool.expirySlackMs ?? 0) + fenceMarginMs(this.ttl) + EXHAUSTED_POLL_MS
    while (true) {
      // A store that fails (a lock wait, a lost connection) is tried again until the deadline.
      const soonest = await this.claimOnce().catch((err: Error) => {
        this.storeError = err
        this.throttle.warn('claim', err, 'worker-id claim failed: trying again', { pool: this.o.pool.where })
        return 0
      })
      if (soonest === undefined) return
      const waitMs = Math.max(EXHAUSTED_POLL_MS, soonest)
      if (this.monotonic() + waitMs > deadline) {
        if (this.storeError !== undefined) {
          this.o.onClaim?.('error')
          throw new LeaseRefused(`no worker id could be leased from ${this.o.pool.where} within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
            `the store failed (${this.storeError.message})`)
        }
        this.o.onClaim?.('exhausted')
        const range = `${this.o.pool.where} in [${this.o.min}, ${this.o.max}] (${this.o.max - this.o.min + 1} ids)`
        if (this.driftRefused.size > 0) {
          throw new LeaseRefused(`no worker id of ${range} could be leased within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
            `${this.driftRefused.size} (${[...this.driftRefused].slice(0, 10).join(', ')}) were passed over because their previous holder's last millisecond ` +
            `is more than leaf.snowflake.max-clock-drift-ms (${this.o.maxClockDriftMs} ms) ahead of this clock, and the others are leased: check the clocks`)
        }
        throw new LeaseRefused(`every worker id of ${range} is leased, and none expires within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
          'stop an instance, or widen leaf.snowflake.worker-id.min/max')
      }
      this.throttle.warn('exhausted', undefined, 'every worker id is leased: waiting for the oldest lease to expire', { waitMs, pool: this.o.pool.where })
      // Looked at again at least every heartbeat: an id may be released before any lease runs out.
      await sleep(Math.max(EXHAUSTED_POLL_MS, Math.min(waitMs, this.o.heartbeatIntervalMs)))
    }
  }

  /**
   * One pass over the pool: the id held last, then the lowest free id, then the one that
   * expired longest ago (where versions are watched: that has stood still for a whole TTL).
   * Resolves undefined once an id is ours, or the ms until one might be when none could be taken.
   */
  private async claimOnce (): Promise<number | undefined> {
    const { min, max, pool } = this.o
    await this.sendHandBacks()
    const slots = await pool.list(min, max)
    // When the list's answer was in: the versions it shows were current at or before this.
    const listedAt = this.monotonic()
    this.watch(slots, listedAt)
    const ttl = this.ttl
    const stillFor = (s: PoolSlot): number => s.version === undefined ? Infinity : listedAt - (this.watched.get(s.workerId)?.at ?? listedAt)
    /** How long a holder must be seen standing still: its own TTL, or ours if longer. */
    const watchFor = (s: PoolSlot): number => Math.max(ttl, s.ttlMs ?? 0)
    const takeable = (s: PoolSlot | undefined): boolean => s === undefined || s.state === 'free' || (s.state === 'expired' && stillFor(s) >= watchFor(s))
    const known = new Map(slots.map((s) => [s.workerId, s]))
    const expired = slots.filter((s) => s.state === 'expired' && takeable(s)).sort((a, b) => a.expiresInMs - b.expiresInMs).map((s) => s.workerId)
    const cached = readWorkerCache(this.o.cacheDir)
    const last = this.workerId >= 0 ? this.workerId : cached?.workerId
    this.driftRefused.clear()
    this.storeError = undefined
    // Generated as the pass goes: a range may hold millions of ids (22 worker bits), and the
    // pass seldom gets past the first.
    const preferred = last !== undefined && last >= min && last <= max && takeable(known.get(last)) ? last : undefined
    function * candidates (): Generator<number> {
      if (preferred !== undefined) yield preferred
      for (let id = min; id <= max; id++) {
        const state = known.get(id)?.state
        if (id !== preferred && state !== 'held' && state !== 'expired') yield id
      }
      for (const id of expired) if (id !== preferred) yield id
    }
    for (const id of candidates()) {
      // Closed meanwhile (a heartbeat's pass): nothing more is claimed.
      if (this.closed) break
      const token = this.newToken()
      const slot = known.get(id)
      let claimed: Claimed | undefined
      try {
        claimed = await pool.claim(id, token, this.o.address, slot?.state === 'expired' ? slot.version : undefined)
      } catch (err) {
        // The store failed (a lock wait, SQLITE_BUSY, a lost connection): the pass ends here.
        // The claim may still land: its token is never used again, and it is handed back at
        // the next passes (knowing nothing of the id's previous holders).
        this.abandoned.set(token, { workerId: id, issuedUntil: undefined, by: undefined, until: this.monotonic() + 2 * this.ttl, settled: !mayStillRun(err) })
        this.o.onClaim?.('error')
        throw err
      }
      if (claimed === undefined) {
        this.o.onClaim?.('conflict')
        continue
      }
      if (await this.handOver(id, token, claimed)) return undefined
    }
    // What may become free soonest: a lease running out, or a holder being watched.
    const pending = slots.filter((s) => s.state === 'held' || (s.state === 'expired' && s.version !== undefined))
      .map((s) => Math.max(s.expiresInMs, s.version === undefined ? 0 : watchFor(s) - stillFor(s)))
    // A claim of ours still waits for its hand-back: looked at again soon, not after its expiry.
    for (const a of this.abandoned.values()) pending.push(a.settled ? 0 : this.o.heartbeatIntervalMs)
    return pending.length === 0 ? 0 : Math.min(...pending)
  }

  /** Sends the hand-backs still owed, one round at a time: a round under way is the one returned. */
  private sendHandBacks (): Promise<void> {
    this.handingBack ??= this.handBackAbandoned().finally(() => { this.handingBack = undefined })
    return this.handingBack
  }

  /** Sends the hand-back of every abandoned claim again (see `abandoned`). */
  private async handBackAbandoned (): Promise<void> {
    for (const [token, a] of this.abandoned) {
      if (this.monotonic() > a.until) {
        this.abandoned.delete(token)
        continue
      }
      try {
        await this.o.pool.release(a.workerId, token, a.issuedUntil, a.by)
        if (a.settled) this.abandoned.delete(token)
      } catch (err) {
        this.throttle.warn('hand-back', err, 'a worker id handed back got no answer: sent again at the next pass', { workerId: a.workerId })
      }
    }
  }

  /**
   * The id is ours in the store under `token`: wait for its previous holders' last millisecond
   * (bounded by max-clock-drift-ms; beyond that the id goes back and the next one is tried),
   * record our own issuedUntil, and serve.
   */
  private async handOver (id: number, token: string, claimed: Claimed): Promise<boolean> {
    // Recorded by an earlier claim of this process (a ZooKeeper session that expired): what
    // counts is the millisecond it actually reached, not the one it was allowed, and never less
    // than what that claim read of the holders before it.
    const last = this.isOwn(claimed.by)
      ? Math.max(Math.min(claimed.issuedUntil, this.admitted), this.floors.get(id) ?? claimed.issuedUntil)
      : claimed.issuedUntil
    claimed = { ...claimed, issuedUntil: last }
    // A hand-back (below) whose answer never comes may run later: it names this claim's token
    // alone, so it can free only this claim, which nothing takes up again.
    const handBack = async (): Promise<void> => {
      await this.o.pool.release(id, token, claimed.issuedUntil, claimed.by).catch(() => {
        this.abandoned.set(token, { workerId: id, issuedUntil: claimed.issuedUntil, by: claimed.by, until: this.monotonic() + 2 * this.ttl, settled: true })
      })
    }
    const waitMs = claimed.issuedUntil + 1 - this.o.clock()
    // (A holder records up to aheadMs past its clock by design: that is no drift.)
    if (waitMs > this.o.maxClockDriftMs + (this.o.aheadMs ?? 0)) {
      this.throttle.warn('drift', undefined, 'the previous holder of this worker id may have issued IDs further ahead than leaf.snowflake.max-clock-drift-ms: trying another id',
        { workerId: id, issuedUntil: claimed.issuedUntil, waitMs, maxClockDriftMs: this.o.maxClockDriftMs })
      this.o.onClaim?.('drift')
      this.driftRefused.add(id)
      await handBack()
      return false
    }
    if (waitMs > 0) {
      this.o.logger.info({ workerId: id, issuedUntil: claimed.issuedUntil, waitMs }, 'waiting for the previous holder\'s last millisecond')
      // In steps: a close() meanwhile ends the wait, and the id goes back below. (A timer may
      // also fire a little early by the wall clock.)
      while (!this.closed && this.o.clock() <= claimed.issuedUntil) await sleep(Math.min(100, Math.max(1, claimed.issuedUntil + 1 - this.o.clock())))
    }
    if (this.closed) {
      await handBack()
      return true
    }
    const previous = { workerId: this.workerId, notBefore: this.notBefore, token: this.token, taken: this.taken }
    this.workerId = id
    this.token = token
    this.notBefore = claimed.issuedUntil + 1
    this.floors.set(id, Math.max(this.floors.get(id) ?? 0, claimed.issuedUntil))
    this.taken = false
    // The generator switches to the new id before issuing may resume (still unavailable
    // here), and nothing recorded for another id counts for this one.
    this.recorded = 0
    this.onWorkerChange?.(id, this.notBefore)
    // The first renewal confirms the lease and records our issuedUntil: nothing is issued
    // before it. (The claim's own expiry may have passed during a long wait above; then the
    // renewal succeeds only if nobody claimed the id meanwhile.)
    if (!await this.renew()) {
      await handBack()
      // Never served: the next claim counts as claimed or reclaimed against the id served before.
      this.workerId = previous.workerId
      this.notBefore = previous.notBefore
      this.token = previous.token
      this.taken = previous.taken
      if (previous.workerId >= 0) this.onWorkerChange?.(previous.workerId, previous.notBefore)
      this.o.onClaim?.('error')
      return false
    }
    this.o.onClaim?.(previous.workerId === -1 ? 'claimed' : 'reclaimed')
    this.o.logger.info({ workerId: id, pool: this.o.pool.where, previousIssuedUntil: claimed.issuedUntil, issuedUntil: this.recorded },
      previous.workerId === -1 ? 'worker id leased' : 'worker id leased again')
    try {
      writeWorkerCache(this.o.cacheDir, { workerId: id, lastTimestamp: this.o.clock(), address: this.o.address })
    } catch (err) {
      this.throttle.warn('cache', err, 'worker-id cache not written: the next start may take another id', { file: this.cacheFile })
    }
    return true
  }

  /**
   * Extends the lease and records the millisecond issuing may reach before the fence this
   * renewal sets: the store runs it after `sentAt`, so the lease lasts until sentAt + TTL.
   */
  private async renew (): Promise<boolean> {
    const sentAt = this.monotonic()
    const until = Math.max(this.o.clock() + (this.o.aheadMs ?? 0), this.admitted) + this.window
    let ok: boolean
    try {
      // A renewal without an answer may still land later: it only extends this claim's lease
      // and raises its issuedUntil, which nothing of this process counts on until confirmed.
      ok = await withTimeout(this.o.pool.renew(this.workerId, this.token, until), this.window, `no answer from ${this.o.pool.where} within ${this.window} ms`)
    } catch (err) {
      this.throttle.warn('renew', err, 'worker-id lease not renewed: retried at the next heartbeat', { workerId: this.workerId })
      return false
    }
    if (this.closed) return false
    if (!ok) {
      const why = `worker id ${this.workerId} is no longer leased to this instance in ${this.o.pool.where}`
      this.fence(why)
      this.unavailable = why
      this.taken = true
      return false
    }
    const from = sentAt
    this.fenceAt = Math.max(this.fenceAt, from + this.window)
    this.recorded = Math.max(this.recorded, until)
    if (this.monotonic() >= this.fenceAt) {
      // The answer came after the fence it set (this process was paused meanwhile): it
      // proves nothing about now. The next renewal is sent from here.
      this.fence('no renewal confirmed within the lease time')
      return false
    }
    this.expiresAt = this.o.clock() - (this.monotonic() - from) + this.ttl
    this.lastRenewal = this.o.clock()
    if (this.unavailable !== undefined && this.workerId === this.lastServed) {
      this.o.logger.info({ workerId: this.workerId }, 'worker-id lease renewed: snowflake issuing resumed')
    }
    this.lastServed = this.workerId
    this.unavailable = undefined
    if (this.paused !== undefined) {
      this.paused = undefined
      this.o.logger.info({ workerId: this.workerId, issuedUntil: this.recorded }, 'snowflake issuing resumed: a renewal recorded a later issuedUntil')
    }
    this.issuableUntil = this.recorded
    this.armFenceTimer()
    return true
  }

  /** The per-millisecond check is what stops issuing; this timer only tells the status and the log in time. */
  private armFenceTimer (): void {
    clearTimeout(this.fenceTimer)
    // A timer may fire a little early by the monotonic clock: then it is armed again.
    this.fenceTimer = setTimeout(() => {
      if (this.monotonic() >= this.fenceAt) this.fence('no renewal confirmed within the lease time')
      else if (!this.closed) this.armFenceTimer()
    }, Math.max(0, this.fenceAt - this.monotonic()) + 1)
    this.fenceTimer.unref()
  }

  start (): void {
    this.timer = setInterval(() => { this.heartbeat().catch(() => {}) }, this.o.heartbeatIntervalMs)
    this.timer.unref()
  }

  private renewSoon (): void {
    setImmediate(() => { this.heartbeat().catch(() => {}) })
  }

  /** Renews; a lease another instance took is claimed again (any id), with no restart. */
  async heartbeat (): Promise<void> {
    if (this.closed || this.beating) return
    this.beating = true
    this.beat = this.beatOnce()
    try {
      await this.beat
    } finally {
      this.beating = false
      this.beat = undefined
    }
  }

  private async beatOnce (): Promise<void> {
    if (!this.taken) {
      const renewed = await this.renew()
      // Hand-backs still owed are sent while serving too, beside the renewals (never in their
      // way): a claim that lands late is freed at the next heartbeat, not left to run out.
      if (this.abandoned.size > 0) this.sendHandBacks().catch(() => {})
      if (renewed || !this.taken) return
    }
    if (this.closed) return
    // Another instance holds our id now: lease any id again.
    const soonest = await this.claimOnce().catch((err: unknown) => {
      this.throttle.warn('claim', err, 'worker-id claim failed: retried at the next heartbeat', { pool: this.o.pool.where })
      return -1
    })
    if (soonest !== undefined && soonest >= 0 && !this.closed) this.throttle.warn('exhausted', undefined, 'no worker id free to lease again: retried at the next heartbeat', { pool: this.o.pool.where })
  }

  status (): LeaseStatus {
    return {
      source: this.o.source,
      workerId: this.workerId,
      zookeeperConnected: this.o.pool.connected?.() ?? false,
      unavailable: this.unavailable ?? this.paused,
      lastHeartbeat: this.lastRenewal,
      foreverPath: undefined,
      temporaryPath: undefined,
      cacheFile: this.cacheFile,
      pool: this.o.pool.where,
      range: [this.o.min, this.o.max],
      leaseExpiresAt: this.unavailable === undefined ? this.expiresAt : undefined,
      issuedUntil: this.recorded,
    }
  }

  async close (): Promise<void> {
    if (this.closed) return
    // Issue nothing more, then hand the id back with the millisecond actually reached.
    this.closed = true
    this.issuableUntil = -Infinity
    this.fenceAt = -Infinity
    this.unavailable = 'the lease is closed'
    clearInterval(this.timer)
    clearTimeout(this.fenceTimer)
    if (this.workerId >= 0) {
      const reached = Math.max(this.o.clock(), this.admitted, this.notBefore - 1)
      try {
        await withTimeout(this.o.pool.release(this.workerId, this.token, reached, this.token), Math.min(this.window, RELEASE_TIMEOUT_MS), 'release not answered')
        this.o.logger.info({ workerId: this.workerId, issuedUntil: reached }, 'worker-id lease released')
      } catch (err) {
        this.o.logger.warn({ workerId: this.workerId, err: (err as Error).message }, 'worker-id lease not released: it expires after its TTL')
      }
    }
    // A heartbeat under way sees `closed` (its claim pass hands its claim back); the hand-backs
    // still owed go out once more. Both bounded: what gets no answer runs out with its lease.
    if (this.beat !== undefined) await settlesWithin(this.beat, RELEASE_TIMEOUT_MS)
    if (this.abandoned.size > 0 || this.handingBack !== undefined) await settlesWithin(this.sendHandBacks(), RELEASE_TIMEOUT_MS)
    await this.o.pool.close()
  }
}
