import type { Logger } from '../../../logger.js'
import type { Layout } from '../../layout.js'
import { recordZookeeperLayout } from '../layout-record.js'
import { withTimeout } from '../../../timers.js'
import type { Claimed, LeaseStore, PoolSlot } from '../lease-store.js'
import {
  CreateMode, EXPIRY_MARGIN_MS, aclOf, authRefusal, closeZookeeper, createZookeeper, isConnected, isNoNode, isNodeExists, ownerOf, sessionIdOf, waitConnected, zk,
  type Client,
} from '../zookeeper-client.js'
import { LeaseRefused } from '../../../errors.js'

// The zookeeper-lease pool, under /snowflake/<leaf.name>/lease:
// - holders/<id>: an ephemeral node per leased id. Creating it is the claim; ZooKeeper deletes
//   it when the holder's session expires, judged by ZooKeeper's clock: the lease's TTL is the
//   session timeout.
// - issued/<id>: a persistent node per id ever leased, with the last millisecond its holders
//   may have issued. Only the holder writes it, in a transaction that also checks that its
//   holder node exists: a holder whose session expired can write nothing any more.
//
// Why that check is enough: a holder node goes only when its own session removes it or dies.
// A session that died commits nothing. And this process runs its operations on one session one
// after another (serial() below), so a release can never slip between a renewal's read of its
// holder node and that renewal's commit; ZooKeeper runs one session's requests in the order
// sent. (The versions read are passed on, but node-zookeeper-client turns a version of 0 into
// "any version", and a recreated node starts again at 0: they prove nothing alone.)

export interface ZookeeperLeaseStoreOptions {
  address: string
  name: string
  /** The session timeout asked for; ZooKeeper may grant another within its bounds. */
  ttlMs: number
  connectTimeoutMs: number
  /** leaf.snowflake.zk.auth, `digest:user:password`; empty or absent: none (zookeeper-client.ts). */
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
  /** The tail of each client's chain of operations (serial()). */
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
   * One ZooKeeper call, bounded: it fails when the connection is down or silent. A node this
   * identity may not use fails as the refusal naming leaf.snowflake.zk.auth (LeaseRefused), so
   * that a start stops at once: an id whose issued/<id> it cannot read is never taken.
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

  /** Runs `fn` on `session` once every earlier operation on `session` has settled. */
  function serial<T> (session: Client, fn: () => Promise<T>): Promise<T> {
    const run = (tails.get(session) ?? Promise.resolve()).then(fn, fn)
    tails.set(session, run.catch(() => {}))
    return run
  }

  /**
   * The client to use now, refusing at once while it is not connected (requests would queue
   * without a bound). node-zookeeper-client keeps a connection that went silent (a path that
   * died without a FIN or RST) forever: it pings, never reconnects, and never hears that its
   * session expired. So a connected client with no answer for a whole session timeout is
   * probed, and replaced by a new session if the probe goes unanswered too; its own session
   * has expired by then, or soon will, along with its holder node.
   */
  async function current (): Promise<Client> {
    const session = client
    // (A client whose authentication ZooKeeper refused never connects again: that refusal.)
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
  // The tree's set-up holds no lease yet, so nothing needs fencing: it may take what is left
  // of the connect timeout (a loaded ZooKeeper or host answers a first call slowly), not the
  // renewal's per-call bound.
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
          // A node of this very session is one of its earlier claims whose outcome this process
          // never learnt (a create answered too late, a hand-back that failed): the lease serves
          // no claim while it claims, and this session's operations run in order, so nothing
          // else uses that node. It is taken over under the new claim's token.
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
