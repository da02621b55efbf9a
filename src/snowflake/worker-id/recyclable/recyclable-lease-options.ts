import type { Logger } from '../../../logger.js'
import type { LeaseStore } from '../lease-store.js'

// What a recyclable lease (recyclable-lease.ts) is given, and what it tells of its claims.

export type RecyclableSource = 'db-lease' | 'zookeeper-lease'

export interface RecyclableLeaseOptions {
  source: RecyclableSource
  pool: LeaseStore
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
}

export type ClaimResult = 'claimed' | 'reclaimed' | 'conflict' | 'drift' | 'exhausted' | 'error'

/** The part of the TTL kept back from the fence, for clock rates and the check's granularity. */
export function fenceMarginMs (ttlMs: number): number {
  return Math.max(50, Math.round(ttlMs / 10))
}
