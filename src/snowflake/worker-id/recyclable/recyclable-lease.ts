import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { channels } from '../../../channels.js'
import { LeafError, LeaseRefused } from '../../../errors.js'
import { mayStillRun } from '../../../database/errors.js'
import { createLogThrottle, type LogThrottle } from '../../../log-throttle.js'
import { settlesWithin, sleep, withTimeout } from '../../../timers.js'
import { CACHE_FILE, readWorkerCache, writeWorkerCache } from '../cache-file.js'
import type { Claimed, PoolSlot } from '../lease-store.js'
import { fenceMarginMs, type ClaimResult, type RecyclableLeaseOptions } from './recyclable-lease-options.js'
import type { LeaseStatus, WorkerLease } from '../worker-id-source.js'

// The lease protocol of db-lease and zookeeper-lease, over any LeaseStore: a token per claim,
// self-fencing before the TTL, and a handover of the last millisecond issued. Each rule, and
// why no ID repeats: docs/worker-ids.md#the-lease-protocol-db-lease-zookeeper-lease

/** A poll of an exhausted pool waits at least this long. */
const EXHAUSTED_POLL_MS = 100
/** A stop waits this long at most for the release: a store that does not answer lets the lease expire instead. */
const RELEASE_TIMEOUT_MS = 2000

/** Claims a worker id from `pool` and keeps it leased; LeaseRefused if it stays exhausted past one TTL. */
export async function acquireRecyclableLease (options: RecyclableLeaseOptions): Promise<RecyclableLease> {
  const ttl = options.pool.ttlMs()
  if (ttl < 3 * options.heartbeatIntervalMs) {
    // ZooKeeper grants a session timeout within its own bounds, whatever was asked for.
    await options.pool.close()
    throw new LeaseRefused('LEASE_TTL_TOO_SHORT', `${options.pool.where} grants a lease of ${ttl} ms, less than 3 heartbeat intervals ` +
      `(leaf.snowflake.heartbeat-interval-ms is ${options.heartbeatIntervalMs}): one late renewal would stop issuing`)
  }
  const lease = new RecyclableLease(options)
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
  // The claim served now, and its fence.
  workerId = -1
  notBefore = 0
  issuableUntil = -Infinity
  private workerChanged: ((workerId: number, notBefore: number) => void) | undefined
  private token = ''
  private readonly monotonic: () => number
  private readonly cacheFile: string
  /** Monotonic time by which issuing stops, unless a renewal confirms more. */
  private fenceAt = -Infinity
  private expiresAt: number | undefined
  /** The last issuedUntil the store confirmed. */
  private recorded = 0
  /** The newest millisecond this instance let the generator begin. */
  private admitted = 0
  private unavailable: string | undefined = 'no worker id claimed yet'
  /** Why issuing waits for a renewal though the lease holds: the clock reached the recorded issuedUntil. */
  private paused: string | undefined
  private fenceTimer: NodeJS.Timeout | undefined
  private closed = false
  /** The store gave our id to another instance: lease one again. */
  private taken = false
  private lastRenewal: number | undefined
  private lastServed = -1
  private readonly throttle: LogThrottle

  /** This process's part of every claim token: `<instance>.<n>`, n counting its claims. */
  private readonly instance = randomUUID()
  private claims = 0
  /** Each id this process claimed: the previous holders' last millisecond as its claim read it. */
  private readonly floors = new Map<number, number>()
  /**
   * Claims whose answer (or hand-back's answer) never came: never served, and handed back again
   * at each pass until answered (`settled`) or, if the claim may still run, until its lease ends.
   */
  private readonly abandoned = new Map<string, { workerId: number, issuedUntil: number | undefined, by: string | undefined, until: number, settled: boolean }>()
  /** Each expired or held slot with a version: the version, and when this process first saw it (monotonic). */
  private watched = new Map<number, { version: string, at: number }>()
  private handingBack: Promise<void> | undefined
  private storeError: Error | undefined
  /** Ids the last pass gave back because their previous holder's clock ran too far ahead. */
  private readonly driftRefused = new Set<number>()

  private timer: NodeJS.Timeout | undefined
  /** The heartbeat under way, if any: close() lets its claim pass hand its claim back before the pool closes. */
  private beat: Promise<void> | undefined
  private beating = false

  constructor (private readonly options: RecyclableLeaseOptions) {
    this.monotonic = options.monotonic ?? (() => performance.now())
    this.throttle = createLogThrottle(options.logger, { clock: this.monotonic })
    this.cacheFile = join(options.cacheDir, CACHE_FILE)
  }

  private get ttl (): number { return this.options.pool.ttlMs() }
  /** How long after a renewal was sent issuing may go on. */
  private get window (): number { return this.ttl - fenceMarginMs(this.ttl) }

  start (): void {
    this.timer = setInterval(() => { this.heartbeat().catch(() => {}) }, this.options.heartbeatIntervalMs)
    this.timer.unref()
  }

  /** Renews; a lease another instance took is claimed again (any id). */
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
    const soonest = await this.claimOnce().catch((err: unknown) => {
      this.throttle.warn('claim', err, 'worker-id claim failed: retried at the next heartbeat', { pool: this.options.pool.where })
      return -1
    })
    if (soonest !== undefined && soonest >= 0 && !this.closed) this.throttle.warn('exhausted', undefined, 'no worker id free to lease again: retried at the next heartbeat', { pool: this.options.pool.where })
  }

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
      // Logged once: the log and /readyz say why IDs stopped.
      this.paused = `the clock (${ms}) passed the last millisecond this lease recorded (${this.recorded}): no snowflake ID until a renewal records more`
      this.options.logger.warn({ workerId: this.workerId, ms, issuedUntil: this.recorded }, 'snowflake issuing paused: the clock passed the last millisecond the worker-id lease recorded')
    }
    throw new LeafError('WORKER_LEASE_LOST', `The clock (${ms}) passed the last millisecond this lease recorded (${this.recorded}); no snowflake ID until a renewal records more.`)
  }

  private lostError (): LeafError {
    return new LeafError('WORKER_LEASE_LOST', `This instance lost its worker-id lease (${this.unavailable ?? ''}); no snowflake ID until it leases one again.`)
  }

  private fenceIfDue (): void {
    if (this.monotonic() >= this.fenceAt) this.fence('no renewal confirmed within the lease time')
  }

  private claimEnded (result: ClaimResult): void {
    channels.leaseClaim.publish({ result, address: this.options.address })
  }

  /** Stops issuing at once. */
  private fence (why: string): void {
    this.issuableUntil = -Infinity
    this.fenceAt = -Infinity
    if (this.unavailable !== undefined) return
    this.unavailable = why
    channels.leaseLost.publish({ workerId: this.workerId, why, address: this.options.address })
    this.options.logger.warn({ workerId: this.workerId, why }, 'worker-id lease lost: snowflake issuing stopped')
  }

  /** The store runs a renewal after `sentAt`, so the lease lasts at least until sentAt + TTL. */
  private async renew (): Promise<boolean> {
    const sentAt = this.monotonic()
    const until = Math.max(this.options.clock() + (this.options.aheadMs ?? 0), this.admitted) + this.window
    let ok: boolean
    try {
      // A renewal without an answer may still land later: it only extends this claim's lease
      // and raises its issuedUntil, which nothing of this process counts on until confirmed.
      ok = await withTimeout(this.options.pool.renew(this.workerId, this.token, until), this.window, `no answer from ${this.options.pool.where} within ${this.window} ms`)
    } catch (err) {
      this.throttle.warn('renew', err, 'worker-id lease not renewed: retried at the next heartbeat', { workerId: this.workerId })
      return false
    }
    if (this.closed) return false
    if (!ok) {
      const why = `worker id ${this.workerId} is no longer leased to this instance in ${this.options.pool.where}`
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
    this.expiresAt = this.options.clock() - (this.monotonic() - from) + this.ttl
    this.lastRenewal = this.options.clock()
    if (this.unavailable !== undefined && this.workerId === this.lastServed) {
      this.options.logger.info({ workerId: this.workerId }, 'worker-id lease renewed: snowflake issuing resumed')
    }
    this.lastServed = this.workerId
    this.unavailable = undefined
    if (this.paused !== undefined) {
      this.paused = undefined
      this.options.logger.info({ workerId: this.workerId, issuedUntil: this.recorded }, 'snowflake issuing resumed: a renewal recorded a later issuedUntil')
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

  private renewSoon (): void {
    setImmediate(() => { this.heartbeat().catch(() => {}) })
  }

  // The claims, and the hand-backs of claims given up on.

  private newToken (): string {
    return `${this.instance}.${++this.claims}`
  }

  private isOwn (token: string | undefined): boolean {
    return token !== undefined && token.startsWith(`${this.instance}.`)
  }

  /** Notes when each holder's version was first seen; a version that changed starts again. */
  private watch (slots: readonly PoolSlot[], at: number): void {
    const seen = new Map<number, { version: string, at: number }>()
    for (const slot of slots) {
      if (slot.version === undefined) continue
      const before = this.watched.get(slot.workerId)
      seen.set(slot.workerId, before?.version === slot.version ? before : { version: slot.version, at })
    }
    this.watched = seen
  }

  /** At start: claims an id, waiting for an exhausted pool's oldest lease up to one TTL. */
  async claimAtStart (): Promise<void> {
    // One TTL for the soonest lease to run out (or, where versions are watched, to be seen
    // standing still that long), the store's own slack, and a margin for the last poll.
    const deadline = this.monotonic() + this.ttl + (this.options.pool.expirySlackMs ?? 0) + fenceMarginMs(this.ttl) + EXHAUSTED_POLL_MS
    while (true) {
      // A store that fails (a lock wait, a lost connection) is tried again until the deadline;
      // one that refuses (ZooKeeper's NO_AUTH) refuses the start at once.
      const soonest = await this.claimOnce().catch((err: Error) => {
        if (err instanceof LeaseRefused) throw err
        this.storeError = err
        this.throttle.warn('claim', err, 'worker-id claim failed: trying again', { pool: this.options.pool.where })
        return 0
      })
      if (soonest === undefined) return
      const waitMs = Math.max(EXHAUSTED_POLL_MS, soonest)
      if (this.monotonic() + waitMs > deadline) {
        if (this.storeError !== undefined) {
          this.claimEnded('error')
          throw new LeaseRefused('LEASE_STORE_UNAVAILABLE', `no worker id could be leased from ${this.options.pool.where} within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
            `the store failed (${this.storeError.message})`, { cause: this.storeError })
        }
        this.claimEnded('exhausted')
        const range = `${this.options.pool.where} in [${this.options.min}, ${this.options.max}] (${this.options.max - this.options.min + 1} ids)`
        if (this.driftRefused.size > 0) {
          throw new LeaseRefused('LEASE_CLOCK_DRIFT', `no worker id of ${range} could be leased within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
            `${this.driftRefused.size} (${[...this.driftRefused].slice(0, 10).join(', ')}) were passed over because their previous holder's last millisecond ` +
            `is more than leaf.snowflake.max-clock-drift-ms (${this.options.maxClockDriftMs} ms) ahead of this clock, and the others are leased: check the clocks`)
        }
        throw new LeaseRefused('LEASE_POOL_EXHAUSTED', `every worker id of ${range} is leased, and none expires within leaf.snowflake.lease.ttl-ms (${this.ttl} ms): ` +
          'stop an instance, or widen leaf.snowflake.worker-id.min/max')
      }
      this.throttle.warn('exhausted', undefined, 'every worker id is leased: waiting for the oldest lease to expire', { waitMs, pool: this.options.pool.where })
      // Looked at again at least every heartbeat: an id may be released before any lease runs out.
      await sleep(Math.max(EXHAUSTED_POLL_MS, Math.min(waitMs, this.options.heartbeatIntervalMs)))
    }
  }

  /**
   * One pass: the id held last, the lowest free id, then the one expired (or still) longest.
   * Resolves undefined once an id is ours, else the ms until one might be free.
   */
  private async claimOnce (): Promise<number | undefined> {
    const { min, max, pool } = this.options
    await this.sendHandBacks()
    const slots = await pool.list(min, max)
    // When the list's answer was in: the versions it shows were current at or before this.
    const listedAt = this.monotonic()
    this.watch(slots, listedAt)
    const ttl = this.ttl
    const stillFor = (slot: PoolSlot): number => slot.version === undefined ? Infinity : listedAt - (this.watched.get(slot.workerId)?.at ?? listedAt)
    /** How long a holder must be seen standing still: its own TTL, or ours if longer. */
    const watchFor = (slot: PoolSlot): number => Math.max(ttl, slot.ttlMs ?? 0)
    const takeable = (slot: PoolSlot | undefined): boolean => slot === undefined || slot.state === 'free' || (slot.state === 'expired' && stillFor(slot) >= watchFor(slot))
    const known = new Map(slots.map((slot) => [slot.workerId, slot]))
    const expired = slots.filter((slot) => slot.state === 'expired' && takeable(slot)).sort((first, second) => first.expiresInMs - second.expiresInMs).map((slot) => slot.workerId)
    const cached = readWorkerCache(this.options.cacheDir)
    const last = this.workerId >= 0 ? this.workerId : cached?.workerId
    this.driftRefused.clear()
    this.storeError = undefined
    // Lazy: a range may hold millions of ids, and the pass seldom gets past the first.
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
      if (this.closed) break
      const token = this.newToken()
      const slot = known.get(id)
      let claimed: Claimed | undefined
      try {
        claimed = await pool.claim(id, token, this.options.address, slot?.state === 'expired' ? slot.version : undefined)
      } catch (err) {
        // A store failure ends the pass, but the claim may still land: its token is never
        // served, and it is handed back at the next passes.
        this.abandoned.set(token, { workerId: id, issuedUntil: undefined, by: undefined, until: this.monotonic() + 2 * this.ttl, settled: !mayStillRun(err) })
        this.claimEnded('error')
        throw err
      }
      if (claimed === undefined) {
        this.claimEnded('conflict')
        continue
      }
      if (await this.handOver(id, token, claimed)) return undefined
    }
    // What may become free soonest: a lease running out, or a holder being watched.
    const pending = slots.filter((slot) => slot.state === 'held' || (slot.state === 'expired' && slot.version !== undefined))
      .map((slot) => Math.max(slot.expiresInMs, slot.version === undefined ? 0 : watchFor(slot) - stillFor(slot)))
    // A claim of ours still waits for its hand-back: looked at again soon, not after its expiry.
    for (const claim of this.abandoned.values()) pending.push(claim.settled ? 0 : this.options.heartbeatIntervalMs)
    return pending.length === 0 ? 0 : Math.min(...pending)
  }

  /** Sends the hand-backs still owed, one round at a time: a round under way is the one returned. */
  private sendHandBacks (): Promise<void> {
    this.handingBack ??= this.handBackAbandoned().finally(() => { this.handingBack = undefined })
    return this.handingBack
  }

  private async handBackAbandoned (): Promise<void> {
    for (const [token, claim] of this.abandoned) {
      if (this.monotonic() > claim.until) {
        this.abandoned.delete(token)
        continue
      }
      try {
        await this.options.pool.release(claim.workerId, token, claim.issuedUntil, claim.by)
        if (claim.settled) this.abandoned.delete(token)
      } catch (err) {
        this.throttle.warn('hand-back', err, 'a worker id handed back got no answer: sent again at the next pass', { workerId: claim.workerId })
      }
    }
  }

  /** Waits for the previous holders' last millisecond (at most max-clock-drift-ms, else hands the id back), then serves. */
  private async handOver (id: number, token: string, claimed: Claimed): Promise<boolean> {
    // Recorded by an earlier claim of this process (a ZooKeeper session that expired): what
    // counts is the millisecond it actually reached, not the one it was allowed, and never less
    // than what that claim read of the holders before it.
    const last = this.isOwn(claimed.by)
      ? Math.max(Math.min(claimed.issuedUntil, this.admitted), this.floors.get(id) ?? claimed.issuedUntil)
      : claimed.issuedUntil
    claimed = { ...claimed, issuedUntil: last }
    // A hand-back that lands late names this claim's token alone: it frees only this claim.
    const handBack = async (): Promise<void> => {
      await this.options.pool.release(id, token, claimed.issuedUntil, claimed.by).catch(() => {
        this.abandoned.set(token, { workerId: id, issuedUntil: claimed.issuedUntil, by: claimed.by, until: this.monotonic() + 2 * this.ttl, settled: true })
      })
    }
    const waitMs = claimed.issuedUntil + 1 - this.options.clock()
    // (A holder records up to aheadMs past its clock by design: that is no drift.)
    if (waitMs > this.options.maxClockDriftMs + (this.options.aheadMs ?? 0)) {
      this.throttle.warn('drift', undefined, 'the previous holder of this worker id may have issued IDs further ahead than leaf.snowflake.max-clock-drift-ms: trying another id',
        { workerId: id, issuedUntil: claimed.issuedUntil, waitMs, maxClockDriftMs: this.options.maxClockDriftMs })
      this.claimEnded('drift')
      this.driftRefused.add(id)
      await handBack()
      return false
    }
    if (waitMs > 0) {
      this.options.logger.info({ workerId: id, issuedUntil: claimed.issuedUntil, waitMs }, 'waiting for the previous holder\'s last millisecond')
      // In steps, so a close() ends the wait; a timer may also fire early by the wall clock.
      while (!this.closed && this.options.clock() <= claimed.issuedUntil) await sleep(Math.min(100, Math.max(1, claimed.issuedUntil + 1 - this.options.clock())))
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
    this.workerChanged?.(id, this.notBefore)
    // Nothing is issued before the first renewal records our issuedUntil. If the claim expired
    // during the wait, it succeeds only if nobody claimed the id meanwhile.
    if (!await this.renew()) {
      await handBack()
      // Never served: the next claim counts as claimed or reclaimed against the id served before.
      this.workerId = previous.workerId
      this.notBefore = previous.notBefore
      this.token = previous.token
      this.taken = previous.taken
      if (previous.workerId >= 0) this.workerChanged?.(previous.workerId, previous.notBefore)
      this.claimEnded('error')
      return false
    }
    this.claimEnded(previous.workerId === -1 ? 'claimed' : 'reclaimed')
    this.options.logger.info({ workerId: id, pool: this.options.pool.where, previousIssuedUntil: claimed.issuedUntil, issuedUntil: this.recorded },
      previous.workerId === -1 ? 'worker id leased' : 'worker id leased again')
    try {
      writeWorkerCache(this.options.cacheDir, { workerId: id, lastTimestamp: this.options.clock(), address: this.options.address })
    } catch (err) {
      this.throttle.warn('cache', err, 'worker-id cache not written: the next start may take another id', { file: this.cacheFile })
    }
    return true
  }

  /** `listener` is told when a new claim changes the worker id or the first millisecond allowed. */
  whenWorkerChanges (listener: (workerId: number, notBefore: number) => void): void {
    this.workerChanged = listener
  }

  // The status, and the release.

  status (): LeaseStatus {
    return {
      source: this.options.source,
      workerId: this.workerId,
      zookeeperConnected: this.options.pool.connected?.() ?? false,
      unavailable: this.unavailable ?? this.paused,
      lastHeartbeat: this.lastRenewal,
      foreverPath: undefined,
      temporaryPath: undefined,
      cacheFile: this.cacheFile,
      pool: this.options.pool.where,
      range: [this.options.min, this.options.max],
      leaseExpiresAt: this.unavailable === undefined ? this.expiresAt : undefined,
      issuedUntil: this.recorded,
    }
  }

  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.issuableUntil = -Infinity
    this.fenceAt = -Infinity
    this.unavailable = 'the lease is closed'
    clearInterval(this.timer)
    clearTimeout(this.fenceTimer)
    if (this.workerId >= 0) {
      const reached = Math.max(this.options.clock(), this.admitted, this.notBefore - 1)
      try {
        await withTimeout(this.options.pool.release(this.workerId, this.token, reached, this.token), Math.min(this.window, RELEASE_TIMEOUT_MS), 'release not answered')
        this.options.logger.info({ workerId: this.workerId, issuedUntil: reached }, 'worker-id lease released')
      } catch (err) {
        this.options.logger.warn({ workerId: this.workerId, err: (err as Error).message }, 'worker-id lease not released: it expires after its TTL')
      }
    }
    // A heartbeat under way sees `closed` (its claim pass hands its claim back); the hand-backs
    // still owed go out once more. Both bounded: what gets no answer runs out with its lease.
    if (this.beat !== undefined) await settlesWithin(this.beat, RELEASE_TIMEOUT_MS)
    if (this.abandoned.size > 0 || this.handingBack !== undefined) await settlesWithin(this.sendHandBacks(), RELEASE_TIMEOUT_MS)
    await this.options.pool.close()
  }
}
