// The store side of the recyclable lease protocol (recyclable-lease.ts): one interface for the
// zookeeper-lease and db-lease sources, implemented by zookeeper-lease-store.ts (ZooKeeper) and
// db-lease-store.ts (MySQL/MariaDB, SQLite). A new lease store is a file implementing it.

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
export interface LeaseStore {
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
