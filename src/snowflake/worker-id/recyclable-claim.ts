import { randomUUID } from 'node:crypto'
import { LeaseRefused } from '../../errors.js'
import { mayStillRun } from '../../database/errors.js'
import { sleep } from '../../timers.js'
import { readWorkerCache, writeWorkerCache } from './cache-file.js'
import type { Claimed, PoolSlot } from './lease-store.js'
import { fenceMarginMs } from './recyclable-options.js'
import { LeaseRenewal } from './recyclable-renewal.js'

// A recyclable lease's claims (the protocol: recyclable-lease.ts): a pass over the pool, the
// hand-over from the id's previous holders, and the hand-backs of claims given up on.

/** A poll of an exhausted pool waits at least this long. */
const EXHAUSTED_POLL_MS = 100

export abstract class LeaseClaims extends LeaseRenewal {
  /** This process's part of every claim token: `<instance>.<n>`, n counting its claims. */
  protected readonly instance = randomUUID()
  protected claims = 0
  /** Each id this process claimed: the previous holders' last millisecond as its claim read it. */
  protected readonly floors = new Map<number, number>()
  /**
   * Claims this process gave up on: handed back without an answer, or without an answer
   * themselves. They are never served. Their hand-back names their token alone, so it is
   * harmless whenever and however often it lands, and it is sent again at the next passes:
   * until one is answered, for a claim known to have run (`settled`); for a claim that may
   * still run later, every heartbeat until its lease would have run out anyway.
   */
  protected readonly abandoned = new Map<string, { workerId: number, issuedUntil: number | undefined, by: string | undefined, until: number, settled: boolean }>()
  /** Each expired or held slot with a version: the version, and when this process first saw it (monotonic). */
  protected watched = new Map<number, { version: string, at: number }>()
  /** The round of hand-backs under way, if any (sendHandBacks). */
  protected handingBack: Promise<void> | undefined
  /** The last pass's store failure, if any. */
  protected storeError: Error | undefined
  /** Ids the last pass gave back because their previous holder ran too far ahead. */
  protected readonly driftRefused = new Set<number>()

  /** A token for a new claim: no statement of another claim matches it. */
  protected newToken (): string {
    return `${this.instance}.${++this.claims}`
  }

  protected isOwn (token: string | undefined): boolean {
    return token !== undefined && token.startsWith(`${this.instance}.`)
  }

  /** Notes when each holder's version was first seen; a version that changed starts again. */
  protected watch (slots: readonly PoolSlot[], at: number): void {
    const seen = new Map<number, { version: string, at: number }>()
    for (const s of slots) {
      if (s.version === undefined) continue
      const before = this.watched.get(s.workerId)
      seen.set(s.workerId, before?.version === s.version ? before : { version: s.version, at })
    }
    this.watched = seen
  }

  /** At start: claims an id, waiting for an exhausted pool's oldest lease up to one TTL. */
  async claimAtStart (): Promise<void> {
    // One TTL for the soonest lease to run out (or, where versions are watched, to be seen
    // standing still that long), the store's own slack, and a margin for the last poll.
    const deadline = this.monotonic() + this.ttl + (this.o.pool.expirySlackMs ?? 0) + fenceMarginMs(this.ttl) + EXHAUSTED_POLL_MS
    while (true) {
      // A store that fails (a lock wait, a lost connection) is tried again until the deadline;
      // one that refuses (ZooKeeper's NO_AUTH) refuses the start at once.
      const soonest = await this.claimOnce().catch((err: Error) => {
        if (err instanceof LeaseRefused) throw err
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
  protected async claimOnce (): Promise<number | undefined> {
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
  protected sendHandBacks (): Promise<void> {
    this.handingBack ??= this.handBackAbandoned().finally(() => { this.handingBack = undefined })
    return this.handingBack
  }

  /** Sends the hand-back of every abandoned claim again (see `abandoned`). */
  protected async handBackAbandoned (): Promise<void> {
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
  protected async handOver (id: number, token: string, claimed: Claimed): Promise<boolean> {
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
}
