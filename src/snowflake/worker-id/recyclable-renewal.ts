import { join } from 'node:path'
import { LeafError } from '../../errors.js'
import { createLogThrottle, type LogThrottle } from '../../log-throttle.js'
import { withTimeout } from '../../timers.js'
import { CACHE_FILE } from './cache-file.js'
import { fenceMarginMs, type RecyclableLeaseOptions } from './recyclable-options.js'

// A recyclable lease's renewal and fence (the protocol: recyclable-lease.ts): the state of the
// claim served now, the check before every new millisecond, and the renewal that records
// issuedUntil and moves the fence on. recyclable-claim.ts claims the ids, recyclable-lease.ts
// beats, reports and releases.

export abstract class LeaseRenewal {
  workerId = -1
  notBefore = 0
  issuableUntil = -Infinity
  /** Told when a new claim changes the worker id or the first millisecond allowed. */
  onWorkerChange: ((workerId: number, notBefore: number) => void) | undefined
  /** The token of the claim served now (renewals and the release name it). */
  protected token = ''
  protected readonly monotonic: () => number
  protected readonly cacheFile: string
  /** Monotonic time by which issuing stops, unless a renewal confirms more. */
  protected fenceAt = -Infinity
  /** The wall clock's estimate of the lease's end, for the status. */
  protected expiresAt: number | undefined
  /** The last issuedUntil the store confirmed. */
  protected recorded = 0
  /** The newest millisecond this instance let the generator begin. */
  protected admitted = 0
  protected unavailable: string | undefined = 'no worker id claimed yet'
  /** Why issuing waits for a renewal though the lease holds: the clock reached the recorded issuedUntil. */
  protected paused: string | undefined
  protected fenceTimer: NodeJS.Timeout | undefined
  protected closed = false
  /** The store gave our id to another instance: lease one again. */
  protected taken = false
  protected lastRenewal: number | undefined
  protected lastServed = -1
  /** Failures that repeat every heartbeat or claim pass are logged once per 30 s each. */
  protected readonly throttle: LogThrottle

  constructor (protected readonly o: RecyclableLeaseOptions) {
    this.monotonic = o.monotonic ?? (() => performance.now())
    this.throttle = createLogThrottle(o.logger, { clock: this.monotonic })
    this.cacheFile = join(o.cacheDir, CACHE_FILE)
  }

  protected get ttl (): number { return this.o.pool.ttlMs() }
  /** How long after a renewal was sent issuing may go on. */
  protected get window (): number { return this.ttl - fenceMarginMs(this.ttl) }

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

  protected lostError (): LeafError {
    return new LeafError('WORKER_LEASE_LOST', `This instance lost its worker-id lease (${this.unavailable ?? ''}); no snowflake ID until it leases one again.`)
  }

  protected fenceIfDue (): void {
    if (this.monotonic() >= this.fenceAt) this.fence('no renewal confirmed within the lease time')
  }

  /** Stops issuing at once. */
  protected fence (why: string): void {
    this.issuableUntil = -Infinity
    this.fenceAt = -Infinity
    if (this.unavailable !== undefined) return
    this.unavailable = why
    this.o.onLost?.()
    this.o.logger.warn({ workerId: this.workerId, why }, 'worker-id lease lost: snowflake issuing stopped')
  }

  /**
   * Extends the lease and records the millisecond issuing may reach before the fence this
   * renewal sets: the store runs it after `sentAt`, so the lease lasts until sentAt + TTL.
   */
  protected async renew (): Promise<boolean> {
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
  protected armFenceTimer (): void {
    clearTimeout(this.fenceTimer)
    // A timer may fire a little early by the monotonic clock: then it is armed again.
    this.fenceTimer = setTimeout(() => {
      if (this.monotonic() >= this.fenceAt) this.fence('no renewal confirmed within the lease time')
      else if (!this.closed) this.armFenceTimer()
    }, Math.max(0, this.fenceAt - this.monotonic()) + 1)
    this.fenceTimer.unref()
  }

  /** Renews (recyclable-lease.ts); a lease another instance took is claimed again. */
  abstract heartbeat (): Promise<void>

  protected renewSoon (): void {
    setImmediate(() => { this.heartbeat().catch(() => {}) })
  }
}
