import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LeafError, LeaseRefused } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { createLogThrottle, type LogThrottle } from '../../log-throttle.js'
import { sleep, withTimeout } from '../../timers.js'
import { leafLayout, type Layout } from '../layout.js'
import { DEFAULT_TWEPOCH, MAX_WORKER_ID, type IssueGuard } from '../snowflake-generator.js'
import { recordZookeeperLayout } from './layout-record.js'
import { CACHE_FILE, readWorkerCache, writeWorkerCache, type CachedWorker } from './cache-file.js'
import { firstNonLoopbackIPv4 } from './local-ip.js'
import {
  CreateMode, closeZookeeper, createZookeeper, isConnected, isNoNode, isNodeExists, sessionIdOf, waitConnected, zk, type Client,
} from './zookeeper.js'

/** A condition under which the instance must not start (or issue): it could hand out an ID twice. */
/**
 * ZooKeeper expires a session some time after its timeout (its expiry runs once per tick):
 * waiting for another session's node to go allows this much beyond our session timeout.
 */
export const EXPIRY_MARGIN_MS = 2000
/** How late a heartbeat may be before it counts as a pause (see Lease.pauseLimitMs). */
const PAUSE_SLACK_MS = 1000
/** How often a start polls for another session's ephemeral node to go. */
const OWNER_POLL_MS = 200

export interface WorkerLeaseOptions {
  name: string
  /** Empty: no ZooKeeper, `staticWorkerId` is the worker id. */
  zkAddress: string
  /** Empty: the first non-loopback IPv4 address. */
  ip: string
  port: number
  staticWorkerId: number
  /** What the status calls a configured worker id: `static`, or `statefulset` (the host name's ordinal). */
  staticSource?: 'static' | 'statefulset'
  /** Empty: `<tmpdir>/<name>/leafconf/<port>`, as Java Leaf. */
  cacheDir: string
  heartbeatIntervalMs: number
  maxClockDriftMs: number
  zkConnectTimeoutMs: number
  zkSessionTimeoutMs: number
  clock: () => number
  logger: Logger
  /** The ID layout: its worker bits bound the ids, and the ZooKeeper tree records it. Default: Leaf's. */
  layout?: Layout
  /** How far past the clock the generator may record (borrowed time, a unit's rest); default 0. */
  aheadMs?: number
}

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

export interface WorkerLease extends IssueGuard {
  readonly workerId: number
  /** No snowflake ID may be issued for an earlier millisecond (the restart window). */
  readonly notBefore: number
  status (): LeaseStatus
  /** Told when the ZooKeeper connection comes or goes. */
  onConnectionChange?: (connected: boolean) => void
  /** Set by the mode: told when the lease moves to another worker id (a recyclable lease claimed again). */
  onWorkerChange?: ((workerId: number, notBefore: number) => void) | undefined
  close (): Promise<void>
}

/**
 * Leases this instance's worker id: from ZooKeeper with Java Leaf's layout, from the local
 * cache when ZooKeeper cannot be reached at start, or from the configuration. Refuses
 * (LeaseRefused) whenever the clock or another live holder says IDs could repeat. The cache
 * is written before the lease is returned, whatever the source.
 */
export async function acquireWorkerLease (o: WorkerLeaseOptions): Promise<WorkerLease> {
  const cacheDir = workerCacheDir(o)
  const cacheFile = join(cacheDir, CACHE_FILE)
  const cached = readWorkerCache(cacheDir)
  const now = o.clock()

  if (o.zkAddress === '') {
    const source = o.staticSource ?? 'static'
    if (source === 'static') o.logger.warn({ workerId: o.staticWorkerId }, 'snowflake without ZooKeeper: leaf.snowflake.worker.id must be unique per instance')
    const last = cached?.workerId === o.staticWorkerId ? cached.lastTimestamp : undefined
    refuseIfAhead(last, now + (o.aheadMs ?? 0), `the worker-id cache ${cacheFile}`)
    return new Lease(o, cacheDir, source, o.staticWorkerId, restartWindow(last, last !== undefined, o, now), undefined).start()
  }

  if (o.port === 0) {
    throw new LeaseRefused('the registration port is 0, which every such instance would share: set leaf.snowflake.port (or server.port) to the port this instance is reached on')
  }
  const ip = o.ip || firstNonLoopbackIPv4()
  if (ip === undefined) throw new LeaseRefused('no non-loopback IPv4 address found: set leaf.snowflake.ip')
  const paths = zkPaths(o.name, ip, o.port)

  // One client for the lease's life: it retries by itself, and is never closed before it has
  // connected (zookeeper.ts says why).
  const client = createZookeeper(o.zkAddress, o.zkSessionTimeoutMs)
  if (!await waitConnected(client, o.zkConnectTimeoutMs)) {
    try {
      return fromCache(o, cacheDir, cached, paths, now, `ZooKeeper at ${o.zkAddress} did not answer within ${o.zkConnectTimeoutMs} ms`, client)
    } catch (err) {
      await closeZookeeper(client)
      throw err
    }
  }
  try {
    // A connection lost during registration queues requests without a timeout: bound it.
    const { workerId, storedTimestamp } = await withTimeout(register(client, o, paths, now),
      o.zkConnectTimeoutMs + o.zkSessionTimeoutMs + EXPIRY_MARGIN_MS, 'ZooKeeper stopped answering during registration')
    // The cache may know a later time than ZooKeeper (heartbeats while it was down): it is
    // checked against the clock as ZooKeeper's time is.
    const cachedTime = cached?.workerId === workerId && cached.address === paths.address ? cached.lastTimestamp : undefined
    refuseIfAhead(cachedTime, now + (o.aheadMs ?? 0), `the worker-id cache ${cacheFile}`)
    const last = Math.max(storedTimestamp ?? 0, cachedTime ?? 0)
    const lease = new Lease(o, cacheDir, 'zookeeper', workerId, restartWindow(last || undefined, cachedTime !== undefined, o, now), paths)
    lease.attach(client, sessionIdOf(client))
    lease.start()
    await lease.heartbeat()
    return lease
  } catch (err) {
    await closeZookeeper(client)
    throw err
  }
}

/** The cache file's folder: as configured, or `<tmpdir>/<name>/leafconf/<port>` as Java Leaf. */
export function workerCacheDir (o: { cacheDir: string, name: string, port: number }): string {
  return o.cacheDir || join(tmpdir(), o.name, 'leafconf', String(o.port))
}

interface ZkPaths { ip: string, address: string, forever: string, prefix: string, temporary: string, own: string | undefined }

function zkPaths (name: string, ip: string, port: number): ZkPaths {
  const base = `/snowflake/${name}`
  const address = `${ip}:${port}`
  return { ip, address, forever: `${base}/forever`, prefix: `${address}-`, temporary: `${base}/temporary/${address}`, own: undefined }
}

function nodeData (ip: string, port: number, timestamp: number): string {
  return JSON.stringify({ ip, port: String(port), timestamp })
}

function refuseIfAhead (stored: number | undefined, now: number, where: string): void {
  if (stored !== undefined && stored > now) {
    throw new LeaseRefused(`the clock is behind ${where}: stored ${stored} (${new Date(stored).toISOString()}), now ${now} (${new Date(now).toISOString()})`)
  }
}

/**
 * The first millisecond a restart may issue in. IDs may have been issued for every millisecond
 * up to one heartbeat after the cache file's last time, that one included (Lease.issuableUntil).
 * Without the cache file (`fromCache` false: a new container, another host's /tmp) what is left
 * may lag: the generator records time ahead of the clock (borrowed, or a unit's last
 * millisecond) in the cache file first, and ZooKeeper hears of it only at the next beat, or
 * not at all while it is away. The earlier life ended before now, and never issued more than
 * `aheadMs` past its clock: so the first ID comes after both bounds.
 */
export function restartWindow (last: number | undefined, fromCache: boolean, o: Pick<WorkerLeaseOptions, 'heartbeatIntervalMs' | 'aheadMs'>, now: number): number {
  const recorded = last === undefined ? 0 : last + o.heartbeatIntervalMs + 1
  const ahead = o.aheadMs ?? 0
  if (fromCache || ahead === 0) return recorded
  return Math.max(recorded + ahead, now + ahead + 1)
}

/**
 * Takes the ephemeral node of this `ip:port`: the proof that no other live instance issues
 * with its worker id. A node of another session that is still alive is waited for (it goes
 * when that session expires: a killed process) up to `waitMs`; then this refuses, naming both.
 */
async function takeEphemeral (client: Client, paths: ZkPaths, data: string, waitMs: number, logger: Logger): Promise<void> {
  const mine = sessionIdOf(client)
  const deadline = performance.now() + waitMs
  let told = false
  while (true) {
    try {
      await zk.create(client, paths.temporary, data, CreateMode.EPHEMERAL)
      return
    } catch (err) {
      if (!isNodeExists(err)) throw err
    }
    const node = await zk.getOwned(client, paths.temporary)
    if (node === undefined) continue
    if (node.owner === mine) {
      await zk.setData(client, paths.temporary, data)
      return
    }
    const left = deadline - performance.now()
    if (left <= 0) {
      throw new LeaseRefused(`another live instance holds ${paths.temporary} (ZooKeeper session ${node.owner}, data ${String(node.data)}); ` +
        `this instance (session ${mine}) registers as the same ${paths.address} and would issue with the same worker id: ` +
        'give each instance its own leaf.snowflake.ip or leaf.snowflake.port')
    }
    if (!told) {
      told = true
      logger.warn({ path: paths.temporary, owner: node.owner, waitMs }, 'the ephemeral node of this ip:port belongs to another session: waiting for it to expire')
    }
    await sleep(Math.min(OWNER_POLL_MS, left))
  }
}

async function register (client: Client, o: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<{ workerId: number, storedTimestamp: number | undefined }> {
  await zk.mkdirp(client, paths.forever)
  await zk.mkdirp(client, paths.temporary.slice(0, paths.temporary.lastIndexOf('/')))
  await recordZookeeperLayout(client, o.name, o.layout ?? leafLayout(DEFAULT_TWEPOCH))
  // First the ephemeral node: while we hold it, no other instance of this ip:port gets past
  // this line, so the forever node below is ours alone to read or create.
  await takeEphemeral(client, paths, nodeData(paths.ip, o.port, now), o.zkSessionTimeoutMs + EXPIRY_MARGIN_MS, o.logger)
  const children = await zk.getChildren(client, paths.forever)
  const own = children.find((c) => c.startsWith(paths.prefix))
  let workerId: number
  let storedTimestamp: number | undefined
  if (own !== undefined) {
    paths.own = `${paths.forever}/${own}`
    workerId = Number(own.slice(paths.prefix.length))
    const data = await zk.getData(client, paths.own)
    storedTimestamp = parseTimestamp(data)
    refuseIfAhead(storedTimestamp, now + (o.aheadMs ?? 0), `its ZooKeeper node ${paths.own}`)
    o.logger.info({ workerId, path: paths.own }, 'snowflake worker id reused from ZooKeeper')
  } else {
    await checkPeerClocks(client, o, paths, now)
    paths.own = await zk.create(client, `${paths.forever}/${paths.prefix}`, nodeData(paths.ip, o.port, now), CreateMode.PERSISTENT_SEQUENTIAL)
    workerId = Number(paths.own.slice(paths.own.lastIndexOf('-') + 1))
    o.logger.info({ workerId, path: paths.own }, 'snowflake worker id created in ZooKeeper')
  }
  const max = o.layout?.maxWorkerId ?? MAX_WORKER_ID
  if (!Number.isInteger(workerId) || workerId > max) {
    // ZooKeeper's sequence counter of a folder never goes back: removing nodes frees nothing.
    throw new LeaseRefused(`worker id ${workerId} from ${paths.own} is above ${max}. ZooKeeper numbers ${paths.forever}'s children ` +
      'with a counter that never goes back, so deleting the nodes of instances that no longer exist does not help. ' +
      `In Leaf's layout the only remedy is to stop every instance of ${o.name} in a maintenance window, delete and recreate ${paths.forever}, and start them again`)
  }
  return { workerId, storedTimestamp }
}

/** A new instance compares its clock with the average of its live peers' last heartbeats. */
async function checkPeerClocks (client: Client, o: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<void> {
  const dir = paths.temporary.slice(0, paths.temporary.lastIndexOf('/'))
  const peers = (await zk.getChildren(client, dir)).filter((p) => p !== paths.address)
  const times: number[] = []
  for (const peer of peers) {
    const t = parseTimestamp(await zk.getData(client, `${dir}/${peer}`).catch(() => undefined))
    if (t !== undefined) times.push(t)
  }
  if (times.length === 0) return
  const average = times.reduce((a, b) => a + b, 0) / times.length
  // A peer's heartbeat may carry time recorded ahead of its clock (borrowed time, a unit's rest).
  const peersAhead = o.aheadMs ?? 0
  if (now - average > o.maxClockDriftMs || average - now > o.maxClockDriftMs + peersAhead) {
    throw new LeaseRefused(`this clock (${now}) is ${Math.round(now - average)} ms off the average of ${times.length} live peers (${Math.round(average)}); ` +
      `leaf.snowflake.max-clock-drift-ms is ${o.maxClockDriftMs}`)
  }
}

function parseTimestamp (data: Buffer | undefined): number | undefined {
  if (data === undefined) return undefined
  try {
    const t = (JSON.parse(data.toString('utf8')) as { timestamp?: unknown }).timestamp
    return typeof t === 'number' && Number.isFinite(t) ? t : undefined
  } catch {
    return undefined
  }
}

function fromCache (o: WorkerLeaseOptions, cacheDir: string, cached: CachedWorker | undefined, paths: ZkPaths, now: number, why: string, client: Client): WorkerLease {
  const file = join(cacheDir, CACHE_FILE)
  if (cached === undefined) throw new LeaseRefused(`ZooKeeper unreachable (${why}) and no cached worker id in ${file}`)
  if (cached.lastTimestamp === undefined) throw new LeaseRefused(`ZooKeeper unreachable (${why}) and ${file} holds no lastTimestamp to check the clock against`)
  if (cached.address !== paths.address) {
    throw new LeaseRefused(`ZooKeeper unreachable (${why}) and the worker id in ${file} was leased for ${cached.address ?? 'an unrecorded address'}, ` +
      `not for ${paths.address}: another instance may hold it now`)
  }
  if (now + (o.aheadMs ?? 0) <= cached.lastTimestamp) {
    throw new LeaseRefused(`ZooKeeper unreachable (${why}) and the clock (${now}) is not past the cached lastTimestamp (${cached.lastTimestamp})`)
  }
  o.logger.warn({ workerId: cached.workerId, file, why }, 'ZooKeeper unreachable at start: using the cached worker id')
  const lease = new Lease(o, cacheDir, 'cache', cached.workerId, restartWindow(cached.lastTimestamp, true, o, now), paths)
  lease.start()
  lease.attach(client, undefined)
  return lease
}

class Lease implements WorkerLease {
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
  /** Failures that repeat every heartbeat (or every request) are logged once per 30 s each. */
  private readonly throttle: LogThrottle

  constructor (
    private readonly o: WorkerLeaseOptions,
    private readonly cacheDir: string,
    private source: LeaseSource,
    readonly workerId: number,
    readonly notBefore: number,
    private readonly paths: ZkPaths | undefined
  ) {
    this.address = paths?.address
    this.throttle = createLogThrottle(o.logger)
    // The session timeout, unless heartbeats are further apart than it (a late timer is no pause).
    this.pauseLimitMs = Math.max(o.zkSessionTimeoutMs, o.heartbeatIntervalMs + PAUSE_SLACK_MS)
    this.timer = setInterval(() => { this.heartbeat() }, o.heartbeatIntervalMs)
    this.timer.unref()
  }

  /** Records the current time before any ID can be issued; refuses the start when it cannot. */
  start (): this {
    try {
      this.record(this.o.clock())
    } catch (err) {
      clearInterval(this.timer)
      throw new LeaseRefused(`the worker-id cache ${join(this.cacheDir, CACHE_FILE)} cannot be written (${(err as Error).message}); ` +
        'without it a restart could not tell which milliseconds were used')
    }
    return this
  }

  /** Writes `ms` to the cache file: IDs may be issued up to one heartbeat past it. Throws when it cannot. */
  private record (ms: number): void {
    // Judged by the clock, not by `ms`: what is recorded may lie ahead of it (borrowed time).
    const now = this.o.clock()
    if (this.paths !== undefined && this.lastRecordedAt > 0 && now - this.lastRecordedAt > this.pauseLimitMs) {
      // Nothing was recorded for longer than the session timeout: this process was paused
      // (or starved), and ZooKeeper may have expired its session meanwhile and let another
      // instance of this ip:port take the worker id. No ID until our session is seen holding
      // the ephemeral node again (sync, at the next heartbeat).
      this.ephemeralOf = undefined
      this.setUnavailable(`nothing recorded for ${now - this.lastRecordedAt} ms, longer than the ZooKeeper session timeout: the ephemeral node is checked again`)
    }
    this.lastRecordedAt = Math.max(this.lastRecordedAt, now)
    if (ms > this.lastWritten) {
      writeWorkerCache(this.cacheDir, { workerId: this.workerId, lastTimestamp: ms, address: this.address })
      this.lastWritten = ms
    }
    this.issuableUntil = this.unavailable === undefined ? this.lastWritten + this.o.heartbeatIntervalMs : -Infinity
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
      this.o.logger.error({ workerId: this.workerId, why }, 'snowflake issuing stopped: this worker id is not ours alone')
    } else {
      this.issuableUntil = this.lastWritten + this.o.heartbeatIntervalMs
      this.o.logger.info({ workerId: this.workerId }, 'snowflake issuing resumed: the worker id is ours in ZooKeeper')
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
      this.o.logger.warn('ZooKeeper session expired: reconnecting with a new session')
      this.setConnected(false)
      this.attach(createZookeeper(this.o.zkAddress, this.o.zkSessionTimeoutMs), undefined)
    })
  }

  private setConnected (connected: boolean): void {
    if (this.connected === connected) return
    this.connected = connected
    this.o.logger[connected ? 'info' : 'warn']({ workerId: this.workerId }, connected ? 'ZooKeeper connected' : 'ZooKeeper disconnected: still serving with the leased worker id')
    this.onConnectionChange?.(connected)
  }

  /**
   * A session that does not hold our ephemeral node yet (a start from the cache, or a new
   * session after an expiry): ZooKeeper must hold this ip:port with our worker id, and no
   * other live session may hold the ephemeral node. Otherwise issuing stops until it does.
   */
  private async sync (client: Client, data: string): Promise<void> {
    const paths = this.paths as ZkPaths
    if (this.syncing) return
    this.syncing = true
    try {
      await zk.mkdirp(client, paths.forever)
      // A start from the cache saw no layout record: it is checked (or written) now.
      await recordZookeeperLayout(client, this.o.name, this.o.layout ?? leafLayout(DEFAULT_TWEPOCH))
      const own = (await zk.getChildren(client, paths.forever)).find((c) => c.startsWith(paths.prefix))
      if (own === undefined || Number(own.slice(paths.prefix.length)) !== this.workerId) {
        throw new LeaseRefused(`ZooKeeper holds ${own === undefined ? 'no node' : `${paths.forever}/${own}`} for ${paths.address}, ` +
          `not worker id ${this.workerId}: restart this instance with ZooKeeper up to lease a worker id of its own`)
      }
      paths.own = `${paths.forever}/${own}`
      await zk.mkdirp(client, paths.temporary.slice(0, paths.temporary.lastIndexOf('/')))
      await takeEphemeral(client, paths, data, 0, this.o.logger)
      if (this.client !== client || this.closed) return
      this.ephemeralOf = sessionIdOf(client)
      if (this.source === 'cache') this.source = 'zookeeper'
      this.setUnavailable(undefined)
      await zk.setData(client, paths.own, data)
    } catch (err) {
      if (err instanceof LeaseRefused) this.setUnavailable(err.message)
      else this.throttle.warn('zookeeper-registration', err, 'ZooKeeper registration failed: retried at the next heartbeat')
    } finally {
      this.syncing = false
    }
  }

  /** Writes the current time to the cache file and, when connected, to both ZooKeeper nodes. */
  async heartbeat (): Promise<void> {
    if (this.closed) return
    const now = this.o.clock()
    // (Borrowed time, or an ID of a second, is recorded ahead of the clock: that is no step back.)
    if (now + (this.o.aheadMs ?? 0) < this.lastWritten) {
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
    // A disconnected client queues requests without a timeout: skip ZooKeeper until it is
    // back, and bound a write that started before the connection went.
    if (paths === undefined || this.beating || client === undefined || !this.connected) return
    // ZooKeeper holds the last time recorded, so a restart that lost the cache file knows it too.
    const data = nodeData(paths.ip, this.o.port, Math.max(now, this.lastWritten))
    if (this.ephemeralOf !== sessionIdOf(client) || this.unavailable !== undefined) {
      await withTimeout(this.sync(client, data), this.o.heartbeatIntervalMs, `ZooKeeper did not answer within ${this.o.heartbeatIntervalMs} ms`)
        .then(() => { if (this.unavailable === undefined) this.lastHeartbeat = now },
          (err: unknown) => this.throttle.warn('zookeeper-registration', err, 'ZooKeeper registration failed: retried at the next heartbeat'))
      return
    }
    this.beating = true
    try {
      await withTimeout((async () => {
        await zk.setData(client, paths.own as string, data)
        await zk.setData(client, paths.temporary, data)
      })(), this.o.heartbeatIntervalMs, `ZooKeeper did not answer within ${this.o.heartbeatIntervalMs} ms`)
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
      foreverPath: this.paths?.own,
      temporaryPath: this.paths?.temporary,
      cacheFile: join(this.cacheDir, CACHE_FILE),
    }
  }

  async close (): Promise<void> {
    // From here on another instance may take the worker id: issue nothing more.
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
