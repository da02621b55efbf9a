import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { StartRefused } from '../../errors.js'
import type { Logger } from '../../logger.js'
import { sleep, withTimeout } from '../../timers.js'
import { MAX_WORKER_ID } from '../snowflake-generator.js'
import { CACHE_FILE, readWorkerCache, writeWorkerCache, type CachedWorker } from './cache-file.js'
import { firstNonLoopbackIPv4 } from './local-ip.js'
import { CreateMode, connectZookeeper, isNoNode, zk, type Client } from './zookeeper.js'

/** A condition under which the instance must not start: it could hand out an ID twice. */
export class LeaseRefused extends StartRefused {
  constructor (message: string) {
    super(message)
    this.name = 'LeaseRefused'
  }
}

export interface WorkerLeaseOptions {
  name: string
  /** Empty: no ZooKeeper, `staticWorkerId` is the worker id. */
  zkAddress: string
  /** Empty: the first non-loopback IPv4 address. */
  ip: string
  port: number
  staticWorkerId: number
  /** Empty: `<tmpdir>/<name>/leafconf/<port>`, as Java Leaf. */
  cacheDir: string
  heartbeatIntervalMs: number
  maxClockDriftMs: number
  zkConnectTimeoutMs: number
  zkSessionTimeoutMs: number
  clock: () => number
  logger: Logger
}

export type LeaseSource = 'zookeeper' | 'cache' | 'static'

export interface LeaseStatus {
  source: LeaseSource
  workerId: number
  zookeeperConnected: boolean
  /** Last time (ms) the lease was written (ZooKeeper, or the cache file without it). */
  lastHeartbeat: number | undefined
  foreverPath: string | undefined
  temporaryPath: string | undefined
  cacheFile: string
}

export interface WorkerLease {
  readonly workerId: number
  /** No snowflake ID may be issued for an earlier millisecond (the restart window). */
  readonly notBefore: number
  status (): LeaseStatus
  /** Told when the ZooKeeper connection comes or goes. */
  onConnectionChange?: (connected: boolean) => void
  close (): Promise<void>
}

/**
 * Leases this instance's worker id: from ZooKeeper with Java Leaf's layout, from the local
 * cache when ZooKeeper cannot be reached at start, or from the configuration. Refuses
 * (LeaseRefused) whenever the clock says IDs could repeat.
 */
export async function acquireWorkerLease (o: WorkerLeaseOptions): Promise<WorkerLease> {
  const cacheDir = o.cacheDir || join(tmpdir(), o.name, 'leafconf', String(o.port))
  const cached = readWorkerCache(cacheDir)
  const now = o.clock()

  if (o.zkAddress === '') {
    o.logger.warn({ workerId: o.staticWorkerId }, 'snowflake without ZooKeeper: leaf.snowflake.worker.id must be unique per instance')
    const last = cached?.workerId === o.staticWorkerId ? cached.lastTimestamp : undefined
    refuseIfAhead(last, now, `the worker-id cache ${join(cacheDir, CACHE_FILE)}`)
    return new Lease(o, cacheDir, 'static', o.staticWorkerId, restartWindow(last, o), undefined)
  }

  const ip = o.ip || firstNonLoopbackIPv4()
  if (ip === undefined) throw new LeaseRefused('no non-loopback IPv4 address found: set leaf.snowflake.ip')
  const paths = zkPaths(o.name, ip, o.port)

  let client: Client
  try {
    client = await connectZookeeper(o.zkAddress, o.zkSessionTimeoutMs, o.zkConnectTimeoutMs)
  } catch (err) {
    return fromCache(o, cacheDir, cached, paths, now, (err as Error).message)
  }
  try {
    const { workerId, storedTimestamp } = await register(client, o, paths, now)
    // The cache may know a later time than ZooKeeper (heartbeats while it was down).
    const last = Math.max(storedTimestamp ?? 0, cached?.workerId === workerId ? cached.lastTimestamp ?? 0 : 0)
    const lease = new Lease(o, cacheDir, 'zookeeper', workerId, restartWindow(last || undefined, o), paths)
    lease.attach(client)
    await lease.heartbeat()
    return lease
  } catch (err) {
    await zk.close(client)
    throw err
  }
}

interface ZkPaths { ip: string, forever: string, prefix: string, temporary: string, own: string | undefined }

function zkPaths (name: string, ip: string, port: number): ZkPaths {
  const base = `/snowflake/${name}`
  return { ip, forever: `${base}/forever`, prefix: `${ip}:${port}-`, temporary: `${base}/temporary/${ip}:${port}`, own: undefined }
}

function nodeData (ip: string, port: number, timestamp: number): string {
  return JSON.stringify({ ip, port: String(port), timestamp })
}

function refuseIfAhead (stored: number | undefined, now: number, where: string): void {
  if (stored !== undefined && stored > now) {
    throw new LeaseRefused(`the clock is behind ${where}: stored ${stored} (${new Date(stored).toISOString()}), now ${now} (${new Date(now).toISOString()})`)
  }
}

/** IDs may have been issued up to one heartbeat after the last stored time: wait past it. */
function restartWindow (last: number | undefined, o: WorkerLeaseOptions): number {
  return last === undefined ? 0 : last + o.heartbeatIntervalMs
}

async function register (client: Client, o: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<{ workerId: number, storedTimestamp: number | undefined }> {
  await zk.mkdirp(client, paths.forever)
  const children = await zk.getChildren(client, paths.forever)
  const own = children.find((c) => c.startsWith(paths.prefix))
  let workerId: number
  let storedTimestamp: number | undefined
  if (own !== undefined) {
    paths.own = `${paths.forever}/${own}`
    workerId = Number(own.slice(paths.prefix.length))
    const data = await zk.getData(client, paths.own)
    storedTimestamp = parseTimestamp(data)
    refuseIfAhead(storedTimestamp, now, `its ZooKeeper node ${paths.own}`)
    o.logger.info({ workerId, path: paths.own }, 'snowflake worker id reused from ZooKeeper')
  } else {
    await checkPeerClocks(client, o, paths, now)
    paths.own = await zk.create(client, `${paths.forever}/${paths.prefix}`, nodeData(paths.ip, o.port, now), CreateMode.PERSISTENT_SEQUENTIAL)
    workerId = Number(paths.own.slice(paths.own.lastIndexOf('-') + 1))
    o.logger.info({ workerId, path: paths.own }, 'snowflake worker id created in ZooKeeper')
  }
  if (!Number.isInteger(workerId) || workerId > MAX_WORKER_ID) {
    throw new LeaseRefused(`worker id ${workerId} from ${paths.own} is above ${MAX_WORKER_ID}: ` +
      `remove the nodes of instances that no longer exist under ${paths.forever} (ids are never reused), then start again`)
  }
  return { workerId, storedTimestamp }
}

/** A new instance compares its clock with the average of its live peers' last heartbeats. */
async function checkPeerClocks (client: Client, o: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<void> {
  const dir = paths.temporary.slice(0, paths.temporary.lastIndexOf('/'))
  let peers: string[]
  try {
    peers = await zk.getChildren(client, dir)
  } catch (err) {
    if (isNoNode(err)) return
    throw err
  }
  const times: number[] = []
  for (const peer of peers) {
    const t = parseTimestamp(await zk.getData(client, `${dir}/${peer}`).catch(() => undefined))
    if (t !== undefined) times.push(t)
  }
  if (times.length === 0) return
  const average = times.reduce((a, b) => a + b, 0) / times.length
  if (Math.abs(now - average) > o.maxClockDriftMs) {
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

function fromCache (o: WorkerLeaseOptions, cacheDir: string, cached: CachedWorker | undefined, paths: ZkPaths, now: number, why: string): WorkerLease {
  const file = join(cacheDir, CACHE_FILE)
  if (cached === undefined) throw new LeaseRefused(`ZooKeeper unreachable (${why}) and no cached worker id in ${file}`)
  if (cached.lastTimestamp === undefined) throw new LeaseRefused(`ZooKeeper unreachable (${why}) and ${file} holds no lastTimestamp to check the clock against`)
  if (now <= cached.lastTimestamp) {
    throw new LeaseRefused(`ZooKeeper unreachable (${why}) and the clock (${now}) is not past the cached lastTimestamp (${cached.lastTimestamp})`)
  }
  o.logger.warn({ workerId: cached.workerId, file, why }, 'ZooKeeper unreachable at start: using the cached worker id')
  const lease = new Lease(o, cacheDir, 'cache', cached.workerId, restartWindow(cached.lastTimestamp, o), paths)
  lease.reconnect()
  return lease
}

class Lease implements WorkerLease {
  onConnectionChange?: (connected: boolean) => void
  private client: Client | undefined
  private connected = false
  private closed = false
  private lastWritten = 0
  private lastHeartbeat: number | undefined
  private beating = false
  /** The session that created the ephemeral node; a new session must create it again. */
  private ephemeralOf: Client | undefined
  private readonly timer: NodeJS.Timeout

  constructor (
    private readonly o: WorkerLeaseOptions,
    private readonly cacheDir: string,
    private readonly source: LeaseSource,
    readonly workerId: number,
    readonly notBefore: number,
    private readonly paths: ZkPaths | undefined
  ) {
    this.timer = setInterval(() => { this.heartbeat() }, o.heartbeatIntervalMs)
    this.timer.unref()
    if (paths === undefined) this.heartbeat()
  }

  attach (client: Client): void {
    this.client = client
    this.setConnected(true)
    client.on('disconnected', () => { if (this.client === client) this.setConnected(false) })
    client.on('connected', () => { if (this.client === client) this.setConnected(true) })
    client.on('expired', () => {
      if (this.client !== client || this.closed) return
      this.o.logger.warn('ZooKeeper session expired: reconnecting with a new session')
      this.client = undefined
      this.setConnected(false)
      client.close()
      this.reconnect()
    })
  }

  private setConnected (connected: boolean): void {
    if (this.connected === connected) return
    this.connected = connected
    this.o.logger[connected ? 'info' : 'warn']({ workerId: this.workerId }, connected ? 'ZooKeeper connected' : 'ZooKeeper disconnected: still serving with the leased worker id')
    this.onConnectionChange?.(connected)
  }

  /** A new session, in the background until it works: the ephemeral node comes back. */
  reconnect (): void {
    const attempt = async (delayMs: number): Promise<void> => {
      if (this.closed) return
      let client: Client | undefined
      try {
        client = await connectZookeeper(this.o.zkAddress, this.o.zkSessionTimeoutMs, this.o.zkConnectTimeoutMs)
        if (this.closed) {
          client.close()
          return
        }
        await this.checkOwnNode(client)
        if (this.closed) {
          client.close()
          return
        }
        this.attach(client)
        await this.heartbeat()
      } catch (err) {
        if (client !== undefined && this.client !== client) client.close()
        if (err instanceof LeaseRefused) {
          this.o.logger.error({ err }, 'ZooKeeper does not hold this worker id: serving on without registering')
          return
        }
        this.o.logger.warn({ err: (err as Error).message, retryInMs: delayMs }, 'ZooKeeper reconnect failed')
        setTimeout(() => { attempt(Math.min(delayMs * 2, 5000)) }, delayMs).unref()
      }
    }
    attempt(500)
  }

  /** After a start from the cache, ZooKeeper must hold this ip:port with the same worker id. */
  private async checkOwnNode (client: Client): Promise<void> {
    const paths = this.paths as ZkPaths
    if (paths.own !== undefined) return
    const own = (await zk.getChildren(client, paths.forever)).find((c) => c.startsWith(paths.prefix))
    if (own === undefined || Number(own.slice(paths.prefix.length)) !== this.workerId) {
      throw new LeaseRefused(`no node ${paths.forever}/${paths.prefix}${String(this.workerId).padStart(10, '0')}`)
    }
    paths.own = `${paths.forever}/${own}`
  }

  /** Writes the current time to the cache file and, when connected, to both ZooKeeper nodes. */
  async heartbeat (): Promise<void> {
    if (this.closed) return
    const now = this.o.clock()
    if (now < this.lastWritten) {
      this.o.logger.warn({ now, last: this.lastWritten }, 'clock behind the last heartbeat: heartbeat skipped')
      return
    }
    // The cache file is the clock guard of a start without ZooKeeper: it is written on every
    // beat, whatever ZooKeeper does.
    try {
      writeWorkerCache(this.cacheDir, { workerId: this.workerId, lastTimestamp: now })
    } catch (err) {
      this.o.logger.warn({ err: (err as Error).message }, 'worker-id cache not written')
    }
    this.lastWritten = now
    const { client, paths } = this
    if (paths === undefined) {
      this.lastHeartbeat = now
      return
    }
    // A disconnected client queues requests without a timeout: skip ZooKeeper until it is back,
    // and bound a write that started before the connection went.
    if (this.beating || client === undefined || !this.connected || paths.own === undefined) return
    this.beating = true
    try {
      const data = nodeData(paths.ip, this.o.port, now)
      await withTimeout((async () => {
        await zk.setData(client, paths.own as string, data)
        await this.writeEphemeral(client, data)
      })(), this.o.heartbeatIntervalMs, `ZooKeeper did not answer within ${this.o.heartbeatIntervalMs} ms`)
      this.lastHeartbeat = now
    } catch (err) {
      this.o.logger.warn({ err: (err as Error).message }, 'heartbeat to ZooKeeper failed')
    } finally {
      this.beating = false
    }
  }

  /** The ephemeral node: replaced when a previous session (a killed process) left it. */
  private async writeEphemeral (client: Client, data: string): Promise<void> {
    const path = (this.paths as ZkPaths).temporary
    if (this.ephemeralOf === client) {
      try {
        await zk.setData(client, path, data)
        return
      } catch (err) {
        if (!isNoNode(err)) throw err
      }
    }
    await zk.mkdirp(client, path.slice(0, path.lastIndexOf('/')))
    await zk.removeIfExists(client, path)
    await zk.create(client, path, data, CreateMode.EPHEMERAL)
    this.ephemeralOf = client
  }

  status (): LeaseStatus {
    return {
      source: this.source,
      workerId: this.workerId,
      zookeeperConnected: this.connected,
      lastHeartbeat: this.lastHeartbeat,
      foreverPath: this.paths?.own,
      temporaryPath: this.paths?.temporary,
      cacheFile: join(this.cacheDir, CACHE_FILE),
    }
  }

  async close (): Promise<void> {
    this.closed = true
    clearInterval(this.timer)
    const client = this.client
    this.client = undefined
    if (client === undefined) return
    // Remove the ephemeral node ourselves, then end the session: gone at once, not after a timeout.
    await Promise.race([zk.removeIfExists(client, (this.paths as ZkPaths).temporary).catch(() => {}), sleep(1000)])
    await zk.close(client)
  }
}
