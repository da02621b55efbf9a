import type { Logger } from '../../../logger.js'
import { LeaseRefused } from '../../../errors.js'
import { sleep } from '../../../timers.js'
import { leafLayout } from '../../../layout/layout.js'
import { DEFAULT_TWEPOCH, MAX_WORKER_ID } from '../../leaf-ids.js'
import { recordZookeeperLayout } from '../layout-record.js'
import { refuseIfAhead, type WorkerLeaseOptions } from './heartbeat-lease-options.js'
import { CreateMode, EXPIRY_MARGIN_MS, isNoNode, isNodeExists, sessionIdOf, zk, type Client } from '../zookeeper-client.js'

// Java Leaf's ZooKeeper registration, with its exact paths and JSON: /snowflake/<name>/forever/
// <ip:port>-<sequence> (the worker id, for ever) and /snowflake/<name>/temporary/<ip:port> (an
// ephemeral node: the proof that this instance holds it now), each holding
// {"ip","port","timestamp"}.

/** How often a start polls for another session's ephemeral node to go. */
const OWNER_POLL_MS = 200

export interface ZkPaths { ip: string, address: string, forever: string, prefix: string, temporary: string, own: string | undefined }

export function zkPaths (name: string, ip: string, port: number): ZkPaths {
  const base = `/snowflake/${name}`
  const address = `${ip}:${port}`
  return { ip, address, forever: `${base}/forever`, prefix: `${address}-`, temporary: `${base}/temporary/${address}`, own: undefined }
}

export function nodeData (ip: string, port: number, timestamp: number): string {
  return JSON.stringify({ ip, port: String(port), timestamp })
}

/**
 * Takes the ephemeral node of this `ip:port`: the proof that no other live instance issues
 * with its worker id. A node of another session that is still alive is waited for (it goes
 * when that session expires: a killed process) up to `waitMs`; then this refuses, naming both.
 */
export async function takeEphemeral (client: Client, paths: ZkPaths, data: string, waitMs: number, logger: Logger): Promise<void> {
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
      throw new LeaseRefused('LEASE_HELD_ELSEWHERE', `another live instance holds ${paths.temporary} (ZooKeeper session ${node.owner}, data ${String(node.data)}); ` +
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

export async function register (client: Client, options: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<{ workerId: number, storedTimestamp: number | undefined }> {
  await zk.mkdirp(client, paths.forever)
  await zk.mkdirp(client, paths.temporary.slice(0, paths.temporary.lastIndexOf('/')))
  await recordZookeeperLayout(client, options.name, options.layout ?? leafLayout(DEFAULT_TWEPOCH))
  // First the ephemeral node: while we hold it, no other instance of this ip:port gets past
  // this line, so the forever node below is ours alone to read or create.
  await takeEphemeral(client, paths, nodeData(paths.ip, options.port, now), options.zkSessionTimeoutMs + EXPIRY_MARGIN_MS, options.logger)
  const children = await zk.getChildren(client, paths.forever)
  const own = children.find((child) => child.startsWith(paths.prefix))
  let workerId: number
  let storedTimestamp: number | undefined
  if (own !== undefined) {
    paths.own = `${paths.forever}/${own}`
    workerId = Number(own.slice(paths.prefix.length))
    const data = await zk.getData(client, paths.own)
    storedTimestamp = parseTimestamp(data)
    refuseIfAhead(storedTimestamp, now + (options.aheadMs ?? 0), `its ZooKeeper node ${paths.own}`)
    options.logger.info({ workerId, path: paths.own }, 'snowflake worker id reused from ZooKeeper')
  } else {
    await checkPeerClocks(client, options, paths, now)
    paths.own = await zk.create(client, `${paths.forever}/${paths.prefix}`, nodeData(paths.ip, options.port, now), CreateMode.PERSISTENT_SEQUENTIAL)
    workerId = Number(paths.own.slice(paths.own.lastIndexOf('-') + 1))
    options.logger.info({ workerId, path: paths.own }, 'snowflake worker id created in ZooKeeper')
  }
  const max = options.layout?.maxWorkerId ?? MAX_WORKER_ID
  if (!Number.isInteger(workerId) || workerId > max) {
    // ZooKeeper's sequence counter of a folder never goes back: removing nodes frees nothing.
    throw new LeaseRefused('LEASE_ID_OUT_OF_RANGE', `worker id ${workerId} from ${paths.own} is above ${max}. ZooKeeper numbers ${paths.forever}'s children ` +
      'with a counter that never goes back, so deleting the nodes of instances that no longer exist does not help. ' +
      `In Leaf's layout the only remedy is to stop every instance of ${options.name} in a maintenance window, delete and recreate ${paths.forever}, and start them again`)
  }
  return { workerId, storedTimestamp }
}

/** A new instance compares its clock with the average of its live peers' last heartbeats. */
async function checkPeerClocks (client: Client, options: WorkerLeaseOptions, paths: ZkPaths, now: number): Promise<void> {
  const dir = paths.temporary.slice(0, paths.temporary.lastIndexOf('/'))
  const peers = (await zk.getChildren(client, dir)).filter((peer) => peer !== paths.address)
  const times: number[] = []
  for (const peer of peers) {
    // A peer that stopped meanwhile has no clock to compare; one this identity may not read
    // (NO_AUTH) refuses the start, rather than leave its clock unchecked.
    const time = parseTimestamp(await zk.getData(client, `${dir}/${peer}`).catch((err: unknown) => {
      if (isNoNode(err)) return undefined
      throw err
    }))
    if (time !== undefined) times.push(time)
  }
  if (times.length === 0) return
  const average = times.reduce((sum, time) => sum + time, 0) / times.length
  // A peer's heartbeat may carry time recorded ahead of its clock (borrowed time, a unit's rest).
  const peersAhead = options.aheadMs ?? 0
  if (now - average > options.maxClockDriftMs || average - now > options.maxClockDriftMs + peersAhead) {
    throw new LeaseRefused('LEASE_CLOCK_DRIFT', `this clock (${now}) is ${Math.round(now - average)} ms off the average of ${times.length} live peers (${Math.round(average)}); ` +
      `leaf.snowflake.max-clock-drift-ms is ${options.maxClockDriftMs}`)
  }
}

function parseTimestamp (data: Buffer | undefined): number | undefined {
  if (data === undefined) return undefined
  try {
    const timestamp = (JSON.parse(data.toString('utf8')) as { timestamp?: unknown }).timestamp
    return typeof timestamp === 'number' && Number.isFinite(timestamp) ? timestamp : undefined
  } catch {
    return undefined
  }
}
