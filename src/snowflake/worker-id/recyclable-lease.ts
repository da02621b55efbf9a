import { settlesWithin, withTimeout } from '../../timers.js'
import { LeaseRefused } from '../../errors.js'
import type { LeaseStatus, WorkerLease } from './source.js'
import { LeaseClaims } from './recyclable-claim.js'
import type { RecyclableLeaseOptions } from './recyclable-options.js'

// The lease protocol of the recyclable sources (db-lease, zookeeper-lease), over any store
// that offers the LeaseStore operations (lease-store.ts). docs/worker-ids.md argues each rule, for statements
// that arrive late, twice or never; in short:
//
// - A claim is one conditional write in the store (LeaseStore.claim): two claimants of one
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

/** A stop waits this long at most for the release: a store that does not answer lets the lease expire instead. */
const RELEASE_TIMEOUT_MS = 2000

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

export class RecyclableLease extends LeaseClaims implements WorkerLease {
  private timer: NodeJS.Timeout | undefined
  /** The heartbeat under way, if any: close() lets its claim pass hand its claim back before the pool closes. */
  private beat: Promise<void> | undefined
  private beating = false

  start (): void {
    this.timer = setInterval(() => { this.heartbeat().catch(() => {}) }, this.o.heartbeatIntervalMs)
    this.timer.unref()
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
