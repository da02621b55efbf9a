// The store side of the recyclable lease (recyclable-lease.ts), for zookeeper-lease and db-lease.

export interface PoolSlot {
  workerId: number
  /** free: never leased, or released; expired: its holder's lease ran out; held: leased now. */
  state: 'free' | 'expired' | 'held'
  /** Held: ms until it expires; expired: ms since it did (negative); by the store's clock. */
  expiresInMs: number
  /**
   * Where expiry rests on a wall clock that may step: the holder's claim and renewal count. A
   * claimant must see it unchanged for a whole TTL before it takes over (docs/worker-ids.md).
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

/** `owner` is always the token of one claim. */
export interface LeaseStore {
  /** For logs and the status: never a password. */
  readonly where: string
  /** The lease time the store grants (ZooKeeper may negotiate another session timeout). */
  ttlMs (): number
  connected? (): boolean
  /** How late past its TTL the store may free an expired lease (ZooKeeper expires sessions once per tick). */
  readonly expirySlackMs?: number
  /** An id not listed was never leased. */
  list (min: number, max: number): Promise<PoolSlot[]>
  /**
   * One atomic write: takes the id when free, or expired and still as seen in `from` (a
   * PoolSlot.version). Stores without versions ignore `from`: their expiry needs no wall clock.
   */
  claim (workerId: number, owner: string, address: string, from?: string): Promise<Claimed | undefined>
  /** Extends `owner`'s lease and raises its issuedUntil; false when the id is no longer `owner`'s. */
  renew (workerId: number, owner: string, issuedUntil: number): Promise<boolean>
  /**
   * Frees the id when it is `owner`'s, recording the millisecond reached and `recordedBy`, the
   * claim that issued up to it. `issuedUntil` undefined (a claim whose answer never came):
   * nothing is recorded, and the next holder waits for the recorded bound, which only rises.
   */
  release (workerId: number, owner: string, issuedUntil: number | undefined, recordedBy: string | undefined): Promise<void>
  close (): Promise<void>
}
