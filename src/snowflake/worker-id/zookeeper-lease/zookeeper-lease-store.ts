import type { Logger } from '../../../logger.js'
import type { Layout } from '../../../layout/layout.js'
import { recordZookeeperLayout } from '../layout-record.js'
import { withTimeout } from '../../../timers.js'
import type { Claimed, LeaseStore, PoolSlot } from '../lease-store.js'
import {
  CreateMode, EXPIRY_MARGIN_MS, aclOf, authRefusal, closeZookeeper, createZookeeper, isConnected, isNoNode, isNodeExists, ownerOf, sessionIdOf, waitConnected, zk,
  type Client,
} from '../zookeeper-client.js'
import { LeaseRefused } from '../../../errors.js'

// The zookeeper-lease pool, under /snowflake/<leaf.name>/lease: holders/<id> is an ephemeral
// node per leased id (creating it is the claim; the TTL is the session timeout), and issued/<id>
// the last millisecond its holders may have issued, written only in a transaction that checks
// the holder node. Why that check suffices, and why one session's operations run one after
// another (serial()): docs/worker-ids.md#why-the-new-holder-starts-later

export interface ZookeeperLeaseStoreOptions {
  address: string
  name: string
  /** The session timeout asked for; ZooKeeper may grant another within its bounds. */
  ttlMs: number
  connectTimeoutMs: number
  /** leaf.snowflake.zk.auth, `digest:user:password`; empty or absent: none. */
  auth?: string
  logger: Logger
  /** Recorded by the tree's first instance; another layout refuses to start (layout-record.ts). */
  layout: Layout
}

interface Issued { issuedUntil: number, by: string | undefined, released: boolean }

function parseIssued (data: Buffer | undefined): Issued {
  try {
    const recorded = JSON.parse(data?.toString('utf8') ?? '{}') as { issuedUntil?: unknown, by?: unknown, released?: unknown }
    return {
      issuedUntil: typeof recorded.issuedUntil === 'number' && Number.isFinite(recorded.issuedUntil) ? recorded.issuedUntil : 0,
      by: typeof recorded.by === 'string' ? recorded.by : undefined,
      released: recorded.released === true,
    }
  } catch {
    return { issuedUntil: 0, by: undefined, released: false }
  }
}

export async function createZookeeperLeaseStore (options: ZookeeperLeaseStoreOptions): Promise<LeaseStore> {
  const tree = `/snowflake/${options.name}`
  const base = `${tree}/lease`
  const holders = `${base}/holders`
  const issued = `${base}/issued`
  /** One call to ZooKeeper may take this long: a silent connection never answers at all. */
  const callTimeoutMs = Math.max(500, Math.round(options.ttlMs / 3))
  let closed = false
  /** The session timeout ZooKeeper granted last (a client not connected yet reports 0). */
  let granted = options.ttlMs
  /** The start's connect timeout (the connection and the tree's set-up) counts from here. */
  const connecting = performance.now()
  let client = connect()
  /** Monotonic time of ZooKeeper's last answer to this pool. */
  let answeredAt = performance.now()
  const tails = new WeakMap<Client, Promise<unknown>>()

  function connect (): Client {
    const session = createZookeeper(options.address, options.ttlMs, options.auth ?? '')
    session.on('connected', () => {
      if (session.getSessionTimeout() > 0) granted = session.getSessionTimeout()
    })
    session.on('expired', () => {
      if (closed || client !== session) return
      // Our holder node went with the session: the lease finds it gone and claims again.
      options.logger.warn('ZooKeeper session of the worker-id lease expired: reconnecting with a new session')
      client = connect()
    })
    return session
  }

  function ttlMs (): number {
    return granted
  }

  /**
   * One ZooKeeper call, bounded. A node this identity may not use refuses the start at once
   * (LeaseRefused): an id whose issued/<id> it cannot read is never taken.
   */
  async function call<T> (session: Client, what: Promise<T>): Promise<T> {
    let value: T
    try {
      value = await withTimeout(what, callTimeoutMs, `ZooKeeper did not answer within ${callTimeoutMs} ms`)
    } catch (err) {
      throw authRefusal(session, err, tree)
    }
    answeredAt = performance.now()
    return value
  }

  function serial<T> (session: Client, fn: () => Promise<T>): Promise<T> {
    const run = (tails.get(session) ?? Promise.resolve()).then(fn, fn)
    tails.set(session, run.catch(() => {}))
    return run
  }

  /**
   * The client to use now; refuses while not connected (requests would queue without bound).
   * node-zookeeper-client keeps a silent connection (no FIN or RST) forever and never hears its
   * session expired, so one silent for a whole session timeout is probed, then replaced.
   */
  async function current (): Promise<Client> {
    const session = client
    if (!isConnected(session)) throw authRefusal(session, new Error(`not connected to ZooKeeper at ${options.address}`), tree)
    const silentMs = performance.now() - answeredAt
    if (closed || silentMs <= ttlMs()) return session
    if (await call(session, zk.getWithStat(session, base)).then(() => true, () => false)) return session
    if (client === session) {
      options.logger.warn({ silentMs: Math.round(silentMs) }, 'ZooKeeper has not answered the worker-id lease for a whole session timeout: starting a new session')
      client = connect()
      answeredAt = performance.now()
      closeZookeeper(session).catch(() => {})
    }
    throw new Error(`ZooKeeper at ${options.address} went silent: reconnecting with a new session`)
  }

  if (!await waitConnected(client, options.connectTimeoutMs)) {
    closed = true
    await closeZookeeper(client)
    throw new LeaseRefused('LEASE_STORE_UNAVAILABLE', `ZooKeeper at ${options.address} did not answer within ${options.connectTimeoutMs} ms: the zookeeper-lease source cannot lease a worker id without it`)
  }
  // No lease to fence yet: the set-up may take the rest of the connect timeout, not the per-call bound.
  const setUp = async () => {
    await zk.mkdirp(client, holders)
    await zk.mkdirp(client, issued)
    await recordZookeeperLayout(client, options.name, options.layout)
  }
  try {
    await withTimeout(setUp(), Math.max(callTimeoutMs, options.connectTimeoutMs - (performance.now() - connecting)),
      `ZooKeeper at ${options.address} did not set up ${base} within leaf.snowflake.zk.connect-timeout-ms (${options.connectTimeoutMs} ms)`)
    answeredAt = performance.now()
  } catch (err) {
    closed = true
    await closeZookeeper(client)
    throw authRefusal(client, err, tree)
  }

  /** Our holder node of `workerId`, with its version, or undefined when the id is not ours. */
  async function ownHolder (session: Client, workerId: number, owner: string): Promise<number | undefined> {
    const node = await call(session, zk.getWithStat(session, `${holders}/${workerId}`))
    if (node === undefined) return undefined
    const mine = ownerOf(node.stat) === sessionIdOf(session)
    const data = JSON.parse(node.data?.toString('utf8') ?? '{}') as { owner?: unknown }
    return mine && data.owner === owner ? node.stat.version : undefined
  }

  /** Writes issued/<id> if `owner` still holds the id; false when it does not. */
  async function writeIssued (workerId: number, owner: string, next: (current: Issued) => Issued, thenRemove: boolean): Promise<boolean> {
    const session = await current()
    return serial(session, async () => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const holderVersion = await ownHolder(session, workerId, owner)
        if (holderVersion === undefined) return false
        const node = await call(session, zk.getWithStat(session, `${issued}/${workerId}`))
        const data = Buffer.from(JSON.stringify(next(parseIssued(node?.data))))
        const transaction = session.transaction().check(`${holders}/${workerId}`, holderVersion)
        if (node === undefined) transaction.create(`${issued}/${workerId}`, data, aclOf(session), CreateMode.PERSISTENT)
        else transaction.setData(`${issued}/${workerId}`, data, node.stat.version)
        if (thenRemove) transaction.remove(`${holders}/${workerId}`, holderVersion)
        else transaction.setData(`${holders}/${workerId}`, Buffer.from(JSON.stringify({ owner, at: Date.now() })), holderVersion)
        try {
          await call(session, zk.commit(transaction))
          return true
        } catch (err) {
          // The holder node is gone (the id is no longer ours) or issued/<id> changed meanwhile: look again.
          options.logger.debug({ err: (err as Error).message, workerId }, 'worker-id lease transaction failed: checked again')
        }
      }
      return false
    })
  }

  return {
    where: `zookeeper://${options.address}${base}`,
    expirySlackMs: EXPIRY_MARGIN_MS,
    ttlMs,
    connected: () => isConnected(client),
    async list (min, max): Promise<PoolSlot[]> {
      const session = await current()
      const held = new Set((await call(session, zk.getChildren(session, holders))).map(Number))
      const ids = new Set([...held, ...(await call(session, zk.getChildren(session, issued))).map(Number)])
      const inRange = [...ids].filter((id) => Number.isInteger(id) && id >= min && id <= max)
      const now = Date.now()
      return Promise.all(inRange.map(async (workerId): Promise<PoolSlot> => {
        // A live holder renews every heartbeat; its session ends at most one timeout after the last.
        if (held.has(workerId)) return { workerId, state: 'held', expiresInMs: Math.min(1000, ttlMs()) }
        const node = await call(session, zk.getWithStat(session, `${issued}/${workerId}`))
        const record = parseIssued(node?.data)
        if (node === undefined || record.released) return { workerId, state: 'free', expiresInMs: 0 }
        // Expired: ordered by when its last holder last wrote it, by ZooKeeper's clock.
        const mtime = Number(node.stat.mtime.readBigInt64BE(0))
        return { workerId, state: 'expired', expiresInMs: mtime - now }
      }))
    },
    async claim (workerId, owner, address): Promise<Claimed | undefined> {
      const session = await current()
      return serial(session, async () => {
        const data = JSON.stringify({ owner, address, at: Date.now() })
        try {
          await call(session, zk.create(session, `${holders}/${workerId}`, data, CreateMode.EPHEMERAL))
        } catch (err) {
          if (!isNodeExists(err)) throw err
          // A node of this very session is an earlier claim whose outcome was never learnt; no
          // claim is served while claiming, so it is taken over under the new token.
          const node = await call(session, zk.getWithStat(session, `${holders}/${workerId}`))
          if (node === undefined || ownerOf(node.stat) !== sessionIdOf(session)) return undefined
          await call(session, zk.setData(session, `${holders}/${workerId}`, data))
        }
        const record = parseIssued(await call(session, zk.getData(session, `${issued}/${workerId}`)).catch((err: unknown) => {
          if (isNoNode(err)) return undefined
          throw err
        }))
        return { issuedUntil: record.issuedUntil, by: record.by }
      })
    },
    renew (workerId, owner, issuedUntil) {
      return writeIssued(workerId, owner, (current) => ({ issuedUntil: Math.max(current.issuedUntil, issuedUntil), by: owner, released: false }), false)
    },
    async release (workerId, owner, issuedUntil, recordedBy) {
      await writeIssued(workerId, owner, (current) => issuedUntil === undefined
        ? { ...current, released: true }
        : { issuedUntil, by: recordedBy, released: true }, true)
    },
    async close () {
      closed = true
      await closeZookeeper(client)
    },
  }
}
