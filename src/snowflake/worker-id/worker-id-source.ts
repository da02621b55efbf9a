import type { WorkerIdSource as SourceName } from '../../config/keys.js'
import type { IssueGuard } from '../issue-guard.js'

// What the snowflake generator and the routes need from wherever the worker id comes from
// (leaf.snowflake.worker-id.source). They never know which source is behind the lease: a
// configured id (static/: static, statefulset), Java Leaf's ZooKeeper registration
// (zookeeper/), a recyclable lease (recyclable/: zookeeper-lease, db-lease) over a LeaseStore
// (zookeeper-lease/, db-lease/), or a row never handed out before (disposable/).
// create-source.ts picks one from the configuration.

export type { SourceName }

/** What the status calls the source a lease came from; `cache`: Java Leaf's ZooKeeper source started from its cache file. */
export type LeaseSource = 'zookeeper' | 'cache' | 'static' | 'statefulset' | 'db-lease' | 'zookeeper-lease' | 'disposable'

export interface LeaseStatus {
  source: LeaseSource
  workerId: number
  zookeeperConnected: boolean
  /** Why no ID may be issued now (another live instance holds this worker id ...); undefined while it may. */
  unavailable: string | undefined
  /** Last time (ms) the lease was written (ZooKeeper, or the cache file without it). */
  lastHeartbeat: number | undefined
  foreverPath: string | undefined
  temporaryPath: string | undefined
  cacheFile: string
  /** The recyclable sources: where the pool is, its range, the lease's end and its issuedUntil. */
  pool?: string
  range?: [number, number]
  leaseExpiresAt?: number | undefined
  issuedUntil?: number
}

/**
 * A worker id held, and the proof that this instance still holds it. The fencing deadline is
 * the IssueGuard: `issuableUntil` is the last millisecond the generator may issue in without
 * asking (`-Infinity` once the hold is in doubt or closed), `extend(ms)` is asked past it and
 * records more or throws (a LeafError: WORKER_ID_UNAVAILABLE, WORKER_LEASE_LOST), and
 * `check(ms)`, where a lease has it (the recyclable ones), runs before every new millisecond
 * and throws once the lease may have run out by the holder's monotonic clock.
 */
export interface WorkerLease extends IssueGuard {
  readonly workerId: number
  /** No snowflake ID may be issued for an earlier millisecond (the restart window). */
  readonly notBefore: number
  status (): LeaseStatus
  /** Told when the ZooKeeper connection comes or goes. */
  onConnectionChange?: (connected: boolean) => void
  /** Set by the mode: told when the lease moves to another worker id (a recyclable lease claimed again). */
  onWorkerChange?: ((workerId: number, notBefore: number) => void) | undefined
  /**
   * Release: first `issuableUntil` becomes -Infinity and the status says 'the lease is closed',
   * then the id is given up where the source can (Java Leaf's ephemeral node removed, a
   * recyclable id released with the millisecond it reached); what is not answered in time
   * runs out with its session or TTL.
   */
  close (): Promise<void>
}

/**
 * One source of worker ids. `acquire()` is the claim: it resolves a lease only once the id is
 * this instance's alone and its start is safe, and refuses the start (LeaseRefused, one line)
 * otherwise. A claim checks the ID layout against the pool's record (layout-record.ts) where
 * the source keeps one (zookeeper, zookeeper-lease, db-lease; a zookeeper start from its
 * cache file checks it once ZooKeeper answers, and stops issuing if it differs), and the clock
 * against the last time recorded for the id (the cache file, ZooKeeper's timestamp, a lease's `issuedUntil`):
 * the lease's `notBefore` lies past every millisecond an earlier holder may have issued in,
 * and a recyclable claim waits for its holder's `issuedUntil` before it resolves. Renewal is
 * the lease's own heartbeat, every leaf.snowflake.heartbeat-interval-ms, from the claim until
 * `close()`: it records the time reached (cache file, ZooKeeper, the store's `issuedUntil`)
 * and moves the fencing deadline (`issuableUntil`) on; a lease that cannot renew stops issuing
 * at its deadline. A disposable id is never handed out again: its lease neither renews nor
 * fences (`issuableUntil` Infinity until `close()`).
 */
export interface WorkerIdSource {
  readonly kind: SourceName
  acquire (): Promise<WorkerLease>
}
