/**
 * What the worker-id lease promises the generator: IDs may be issued for milliseconds up to
 * `issuableUntil`, because a restart waits past it. Past it, `extend(ms)` records `ms` first,
 * or throws (a LeafError) when the instance may not issue at all. A lease that loses its
 * worker id sets `issuableUntil` to -Infinity: issuing stops at the next ID.
 */
export interface IssueGuard {
  readonly issuableUntil: number
  extend (ms: number): void
  /** Asked before the first ID of each new millisecond; throws (a LeafError) when none may be issued. */
  check? (ms: number): void
}

/** A generator without a lease: no limit. */
export const UNGUARDED: IssueGuard = { issuableUntil: Infinity, extend () {} }
