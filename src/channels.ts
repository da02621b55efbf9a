import { channel, type Channel } from 'node:diagnostics_channel'

// metrics/ subscribes, and so may users (docs/monitoring.md#diagnostics-channels).

export interface TypedChannel<T> {
  readonly name: string | symbol
  readonly hasSubscribers: boolean
  publish (message: T): void
  subscribe (onMessage: (message: T, name: string | symbol) => void): void
  unsubscribe (onMessage: (message: T, name: string | symbol) => void): boolean
}

function typed<T> (name: string): TypedChannel<T> {
  return channel(name) as Channel as unknown as TypedChannel<T>
}

export interface SegmentLoadMessage {
  key: string
  /** How long the load took, failed or not. */
  seconds: number
  ok: boolean
}

export interface SegmentTagLookupMessage {
  key: string
  /** `found`: the row exists and now serves; `missing`: no such row; `failed`: the store did not answer. */
  result: 'found' | 'missing' | 'failed'
}

export interface SegmentGiveBackMessage {
  key: string
  ids: bigint
  /** `table`: max_id lowered back; `successor`: parked for the next start under the same name. */
  to: 'table' | 'successor'
}

export interface StoreRetryMessage {
  key: string
  /** The driver's code of the conflict (ER_LOCK_DEADLOCK, ...). */
  reason: string
  attempt: number
  /** The host the allocation ran on, host:port. */
  host: string
}

export interface StoreRegressionMessage {
  cause: 'store changed' | 'max_id went back'
  key?: string
  from?: string
  to?: string
}

export interface ClockBackwardsMessage {
  /** How far (ms) the last ID's time unit begins ahead of the clock. */
  aheadMs: number
  workerId: number
}

export interface LeaseClaimMessage {
  result: 'claimed' | 'reclaimed' | 'conflict' | 'drift' | 'exhausted' | 'error'
  /** The claimant's ip:port, as the lease store records it. */
  address: string
}

export interface LeaseLostMessage {
  workerId: number
  why: string
  address: string
}

export const channels = {
  segmentLoad: typed<SegmentLoadMessage>('leaf-ts:segment:load'),
  /** A tag not in the tag list looked up in the store (segment/tag-lookup.ts): one message per query. */
  segmentTagLookup: typed<SegmentTagLookupMessage>('leaf-ts:segment:tag-lookup'),
  segmentGiveBack: typed<SegmentGiveBackMessage>('leaf-ts:segment:give-back'),
  /** An allocation repeated after a conflict (Galera's certification, a lock wait). */
  storeRetry: typed<StoreRetryMessage>('leaf-ts:store:retry'),
  /** The store failed over and may be behind (segment/max-id-guard.ts). */
  storeRegression: typed<StoreRegressionMessage>('leaf-ts:store:regression'),
  clockBackwards: typed<ClockBackwardsMessage>('leaf-ts:snowflake:clock-backwards'),
  leaseClaim: typed<LeaseClaimMessage>('leaf-ts:worker-id:claim'),
  /** The worker-id lease ran out or was taken: issuing stopped. */
  leaseLost: typed<LeaseLostMessage>('leaf-ts:worker-id:lost'),
}
