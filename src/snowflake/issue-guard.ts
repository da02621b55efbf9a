/**
 * The lease's promise to the generator: up to `issuableUntil` is safe, because a restart waits
 * past it; `extend(ms)` records more or throws. A lost lease sets it to -Infinity.
 */
export interface IssueGuard {
  readonly issuableUntil: number
  extend (ms: number): void
  /** Asked before the first ID of each new millisecond; throws (a LeafError) when none may be issued. */
  check? (ms: number): void
}

/** A generator without a lease: no limit. */
export const UNGUARDED: IssueGuard = { issuableUntil: Infinity, extend () {} }
