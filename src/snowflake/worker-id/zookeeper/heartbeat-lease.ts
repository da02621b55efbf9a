import { join } from 'node:path'
import { LeafError, LeaseRefused } from '../../../errors.js'
import { createLogThrottle, type LogThrottle } from '../../../log-throttle.js'
import { sleep, withTimeout } from '../../../timers.js'
import { leafLayout } from '../../../layout/layout.js'
import { DEFAULT_TWEPOCH } from '../../leaf-ids.js'
import { CACHE_FILE, readWorkerCache, workerCacheDir, writeWorkerCache } from '../cache-file.js'
import { recordZookeeperLayout } from '../layout-record.js'
import { refuseIfAhead, restartWindow, type WorkerLeaseOptions } from './heartbeat-lease-options.js'
import type { LeaseSource, LeaseStatus, WorkerLease } from '../worker-id-source.js'
import { nodeData, takeEphemeral, type ZkPaths } from './zookeeper-registration.js'
import { authFailedRefusal, authRefusal, closeZookeeper, createZookeeper, isConnected, isNoNode, sessionIdOf, zk, type Client } from '../zookeeper-client.js'

// The lease of the static, statefulset and zookeeper sources: a heartbeat writes the cache file
// and, with ZooKeeper, Java Leaf's two nodes; IDs may be issued up to one heartbeat past the
// last time recorded.

/** How late a heartbeat may be before it counts as a pause (see HeartbeatLease.pauseLimitMs). */
const PAUSE_SLACK_MS = 1000

/** `staticWorkerId` as the worker id, after the clock is checked against the cache file. */
export function acquireStaticLease (options: WorkerLeaseOptions): WorkerLease {
  const cacheDir = workerCacheDir(options)
  const cacheFile = join(cacheDir, CACHE_FILE)
  const cached = readWorkerCache(cacheDir)
  const now = options.clock()
  const source = options.staticSource ?? 'static'
  if (source === 'static') options.logger.warn({ workerId: options.staticWorkerId }, 'snowflake without ZooKeeper: leaf.snowflake.worker.id must be unique per instance')
  const last = cached?.workerId === options.staticWorkerId ? cached.lastTimestamp : undefined
  refuseIfAhead(last, now + (options.aheadMs ?? 0), `the worker-id cache ${cacheFile}`)
  return new HeartbeatLease(options, cacheDir, source, options.staticWorkerId, restartWindow(last, last !== undefined, options, now), undefined).start()
}

export class HeartbeatLease implements WorkerLease {
  onConnectionChange?: (connected: boolean) => void
  issuableUntil = -Infinity
  private client: Client | undefined
  private connected = false
  private closed = false
  /** Why no ID may be issued; undefined while IDs may be. */
  private unavailable: string | undefined
  private lastWritten = 0
  /** The clock when something was last recorded (lastWritten may be ahead of it). */
  private lastRecordedAt = 0
  private lastHeartbeat: number | undefined
  private beating = false
  private syncing = false
  /** The session that holds our ephemeral node; another session must take it again. */
  private ephemeralOf: string | undefined
  private readonly timer: NodeJS.Timeout
  private readonly address: string | undefined
  /** A gap between two records longer than this means the session may have expired unseen. */
  private readonly pauseLimitMs: number
  private readonly throttle: LogThrottle

  /** This instance's persistent node, once known (a start from the cache learns it when ZooKeeper answers). */
  private ownPath: string | undefined

  constructor (
    private readonly options: WorkerLeaseOptions,
    private readonly cacheDir: string,
    private source: LeaseSource,
    readonly workerId: number,
    readonly notBefore: number,
    private readonly paths: ZkPaths | undefined
  ) {
    this.address = paths?.address
    this.ownPath = paths?.own
    this.throttle = createLogThrottle(options.logger)
    // The session timeout, unless heartbeats are further apart than it (a late timer is no pause).
    this.pauseLimitMs = Math.max(options.zkSessionTimeoutMs, options.heartbeatIntervalMs + PAUSE_SLACK_MS)
    this.timer = setInterval(() => { this.heartbeat() }, options.heartbeatIntervalMs)
    this.timer.unref()
  }

  /** Records the current time before any ID can be issued; refuses the start when it cannot. */
  start (): this {
    try {
      this.record(this.options.clock())
    } catch (err) {
      clearInterval(this.timer)
      throw new LeaseRefused('LEASE_CACHE_UNWRITABLE', `the worker-id cache ${join(this.cacheDir, CACHE_FILE)} cannot be written (${(err as Error).message}); ` +
        'without it a restart could not tell which milliseconds were used', { cause: err })
    }
    return this
  }

  /** Writes `ms` to the cache file: IDs may be issued up to one heartbeat past it. Throws when it cannot. */
  private record (ms: number): void {
    // Judged by the clock, not by `ms`: what is recorded may lie ahead of it (borrowed time).
    const now = this.options.clock()
    if (this.paths !== undefined && this.lastRecordedAt > 0 && now - this.lastRecordedAt > this.pauseLimitMs) {
      // Paused past the session timeout: ZooKeeper may have let another instance of this
      // ip:port take the worker id. No ID until our session holds the ephemeral node again.
      this.ephemeralOf = undefined
      this.setUnavailable(`nothing recorded for ${now - this.lastRecordedAt} ms, longer than the ZooKeeper session timeout: the ephemeral node is checked again`)
    }
    this.lastRecordedAt = Math.max(this.lastRecordedAt, now)
    if (ms > this.lastWritten) {
      writeWorkerCache(this.cacheDir, { workerId: this.workerId, lastTimestamp: ms, address: this.address })
      this.lastWritten = ms
    }
    this.issuableUntil = this.unavailable === undefined ? this.lastWritten + this.options.heartbeatIntervalMs : -Infinity
    if (this.paths === undefined) this.lastHeartbeat = this.lastWritten
  }

  /** The generator reached the end of what is recorded (a late heartbeat): record first, or refuse. */
  extend (ms: number): void {
    try {
      if (this.unavailable === undefined) this.record(ms)
    } catch (err) {
      this.throttle.error('cache-extend', err, 'worker-id cache not written: no snowflake ID past the last recorded time')
      throw new LeafError('WORKER_ID_UNAVAILABLE', 'The worker-id lease cannot be recorded; no snowflake ID is issued past the last recorded time.')
    }
    // (record() itself may have found a pause that calls our hold on the worker id into question.)
    if (this.unavailable !== undefined) {
      throw new LeafError('WORKER_ID_UNAVAILABLE', 'This instance\'s hold on its worker id is in doubt; no snowflake ID is issued until it is confirmed.')
    }
  }

  private setUnavailable (why: string | undefined): void {
    if (why === this.unavailable) return
    this.unavailable = why
    if (why !== undefined) {
      this.issuableUntil = -Infinity
      this.options.logger.error({ workerId: this.workerId, why }, 'snowflake issuing stopped: this worker id is not ours alone')
    } else {
      this.issuableUntil = this.lastWritten + this.options.heartbeatIntervalMs
      this.options.logger.info({ workerId: this.workerId }, 'snowflake issuing resumed: the worker id is ours in ZooKeeper')
    }
  }

  /** Follows a client: connection changes, and a new client when its session expires. */
  attach (client: Client, ephemeralOf: string | undefined): void {
    this.client = client
    this.ephemeralOf = ephemeralOf
    this.setConnected(isConnected(client))
    client.on('disconnected', () => { if (this.client === client) this.setConnected(false) })
    client.on('connected', () => {
      if (this.client !== client) return
      this.setConnected(true)
      this.heartbeat()
    })
    client.on('expired', () => {
      if (this.client !== client || this.closed) return
      // The library ends an expired session itself; its ephemeral node is gone with it.
      this.options.logger.warn('ZooKeeper session expired: reconnecting with a new session')
      this.setConnected(false)
      this.attach(createZookeeper(this.options.zkAddress, this.options.zkSessionTimeoutMs, this.options.zkAuth ?? ''), undefined)
    })
    // The library stops for good: the ephemeral node goes with the session, unseen.
    client.on('authenticationFailed', () => {
      if (this.client === client && !this.closed) this.setUnavailable(authFailedRefusal().message)
    })
  }

  private setConnected (connected: boolean): void {
    if (this.connected === connected) return
    this.connected = connected
    this.options.logger[connected ? 'info' : 'warn']({ workerId: this.workerId }, connected ? 'ZooKeeper connected' : 'ZooKeeper disconnected: still serving with the leased worker id')
    this.onConnectionChange?.(connected)
  }

  /** A session without our ephemeral node yet: issuing stops until ZooKeeper confirms our worker id and node. */
  private async sync (client: Client, data: string): Promise<void> {
    const paths = this.paths as ZkPaths
    if (this.syncing) return
    this.syncing = true
    try {
      await zk.mkdirp(client, paths.forever)
      // A start from the cache saw no layout record: it is checked (or written) now.
      await recordZookeeperLayout(client, this.options.name, this.options.layout ?? leafLayout(DEFAULT_TWEPOCH))
      const own = (await zk.getChildren(client, paths.forever)).find((child) => child.startsWith(paths.prefix))
      if (own === undefined || Number(own.slice(paths.prefix.length)) !== this.workerId) {
        throw new LeaseRefused('LEASE_HELD_ELSEWHERE', `ZooKeeper holds ${own === undefined ? 'no node' : `${paths.forever}/${own}`} for ${paths.address}, ` +
          `not worker id ${this.workerId}: restart this instance with ZooKeeper up to lease a worker id of its own`)
      }
      this.ownPath = `${paths.forever}/${own}`
      await zk.mkdirp(client, paths.temporary.slice(0, paths.temporary.lastIndexOf('/')))
      await takeEphemeral(client, paths, data, 0, this.options.logger)
      if (this.client !== client || this.closed) return
      this.ephemeralOf = sessionIdOf(client)
      if (this.source === 'cache') this.source = 'zookeeper'
      this.setUnavailable(undefined)
      await zk.setData(client, this.ownPath, data)
    } catch (caught) {
      // A tree this identity may not read (leaf.snowflake.zk.auth) cannot confirm the worker id either.
      const err = authRefusal(client, caught, `/snowflake/${this.options.name}`)
      if (err instanceof LeaseRefused) this.setUnavailable(err.message)
      else this.throttle.warn('zookeeper-registration', err, 'ZooKeeper registration failed: retried at the next heartbeat')
    } finally {
      this.syncing = false
    }
  }

  /** Writes the current time to the cache file and, when connected, to both ZooKeeper nodes. */
  async heartbeat (): Promise<void> {
    if (this.closed) return
    const now = this.options.clock()
    // (Borrowed time, or an ID of a second, is recorded ahead of the clock: that is no step back.)
    if (now + (this.options.aheadMs ?? 0) < this.lastWritten) {
      this.throttle.warn('clock-behind', undefined, 'clock behind the last heartbeat: heartbeat skipped', { now, last: this.lastWritten })
      return
    }
    // The cache file is the record a restart trusts: written on every beat, whatever ZooKeeper does.
    try {
      this.record(now)
    } catch (err) {
      this.throttle.warn('cache-heartbeat', err, 'worker-id cache not written')
    }
    const { client, paths } = this
    // A disconnected client queues requests without a timeout: skip it, and bound a write in flight.
    if (paths === undefined || this.beating || client === undefined || !this.connected) return
    // ZooKeeper holds the last time recorded, so a restart that lost the cache file knows it too.
    const data = nodeData(paths.ip, this.options.port, Math.max(now, this.lastWritten))
    if (this.ephemeralOf !== sessionIdOf(client) || this.unavailable !== undefined) {
      await withTimeout(this.sync(client, data), this.options.heartbeatIntervalMs, `ZooKeeper did not answer within ${this.options.heartbeatIntervalMs} ms`)
        .then(() => { if (this.unavailable === undefined) this.lastHeartbeat = now },
          (err: unknown) => this.throttle.warn('zookeeper-registration', err, 'ZooKeeper registration failed: retried at the next heartbeat'))
      return
    }
    this.beating = true
    try {
      await withTimeout((async () => {
        await zk.setData(client, this.ownPath as string, data)
        await zk.setData(client, paths.temporary, data)
      })(), this.options.heartbeatIntervalMs, `ZooKeeper did not answer within ${this.options.heartbeatIntervalMs} ms`)
      this.lastHeartbeat = now
    } catch (err) {
      // Our ephemeral node is gone though the session lives on: take it again at the next beat.
      if (isNoNode(err)) this.ephemeralOf = undefined
      this.throttle.warn('zookeeper-heartbeat', err, 'heartbeat to ZooKeeper failed')
    } finally {
      this.beating = false
    }
  }

  status (): LeaseStatus {
    return {
      source: this.source,
      workerId: this.workerId,
      zookeeperConnected: this.connected,
      unavailable: this.unavailable,
      lastHeartbeat: this.lastHeartbeat,
      foreverPath: this.ownPath,
      temporaryPath: this.paths?.temporary,
      cacheFile: join(this.cacheDir, CACHE_FILE),
    }
  }

  async close (): Promise<void> {
    this.unavailable = 'the lease is closed'
    this.issuableUntil = -Infinity
    this.closed = true
    clearInterval(this.timer)
    const client = this.client
    this.client = undefined
    if (client === undefined) return
    // Remove the ephemeral node ourselves, then end the session: gone at once, not after a timeout.
    if (this.paths !== undefined && this.ephemeralOf !== undefined && isConnected(client)) {
      await Promise.race([zk.removeIfExists(client, this.paths.temporary).catch(() => {}), sleep(1000)])
    }
    await closeZookeeper(client)
  }
}
