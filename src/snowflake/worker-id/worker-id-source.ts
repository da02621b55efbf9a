import type { WorkerIdSource as SourceName } from '../../config/keys.js'
import type { IssueGuard } from '../issue-guard.js'

// The one interface the generator and the routes see, whichever source create-source.ts picked
// (leaf.snowflake.worker-id.source). The sources: docs/worker-ids.md

export type { SourceName }

/** What the status calls the source a lease came from; `cache`: Java Leaf's ZooKeeper source started from its cache file. */
export type LeaseSource = 'zookeeper' | 'cache' | 'static' | 'statefulset' | 'db-lease' | 'zookeeper-lease' | 'disposable'

export interface LeaseStatus {
  source: LeaseSource
  workerId: number
  zookeeperConnected: boolean
  /** Why no ID may be issued now; undefined while it may. */
  unavailable: string | undefined
  /** Last time (ms) the lease was written (ZooKeeper, or the cache file without it). */
  lastHeartbeat: number | undefined
  foreverPath: string | undefined
  temporaryPath: string | undefined
  cacheFile: string
  /** The recyclable sources only. */
  pool?: string
  range?: [number, number]
  leaseExpiresAt?: number | undefined
  issuedUntil?: number
}

/**
 * A worker id held, and its fence (the IssueGuard): `issuableUntil` is -Infinity once the hold
 * is in doubt or closed; `extend` and `check` throw WORKER_ID_UNAVAILABLE or WORKER_LEASE_LOST.
 */
export interface WorkerLease extends IssueGuard {
  readonly workerId: number
  /** No snowflake ID may be issued for an earlier millisecond (the restart window). */
  readonly notBefore: number
  status (): LeaseStatus
  /** Told when the ZooKeeper connection comes or goes. */
  onConnectionChange?: (connected: boolean) => void
  /** Sets who is told when a recyclable lease claims another worker id. */
  whenWorkerChanges? (listener: (workerId: number, notBefore: number) => void): void
  /** Stops issuing first, then gives the id up where the source can; an unanswered release runs out with its TTL. */
  close (): Promise<void>
}

/**
 * One source of worker ids. `acquire()` resolves only once the id is this instance's alone, its
 * layout matches the pool's record, and `notBefore` lies past every millisecond an earlier holder
 * may have issued; otherwise it refuses the start (LeaseRefused).
 */
export interface WorkerIdSource {
  readonly kind: SourceName
  acquire (): Promise<WorkerLease>
  /** Ends what a failed acquire kept for the next one (the zookeeper source's unconnected client). */
  release? (): Promise<void>
}
