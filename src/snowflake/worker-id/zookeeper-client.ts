import type { Socket } from 'node:net'
import zookeeper, { type ACL, type Client } from 'node-zookeeper-client'
import { LeaseRefused } from '../../errors.js'

// Promise wrappers over node-zookeeper-client, and its traps in one place. The worst: close()
// before the client connected crashes the process when the connect answer arrives ("Unknown
// code" from its socket handler), so closeZookeeper waits for the connection (docs/reliability.md).

export type { Client } from 'node-zookeeper-client'
export const { CreateMode } = zookeeper

/** ZooKeeper expires sessions once per tick, so another session's node may outlive its timeout by this. */
export const EXPIRY_MARGIN_MS = 2000

/** Java Leaf's ACL, and ours without leaf.snowflake.zk.auth: anyone may do anything. */
const OPEN_ACL: ACL[] = [new zookeeper.ACL(zookeeper.Permission.ALL, new zookeeper.Id('world', 'anyone'))]

/**
 * With leaf.snowflake.zk.auth: every right to the authenticated identity alone. The `auth` scheme,
 * not a `digest` the client computes, because the server hashes with its own configurable
 * algorithm (DigestAuthenticationProvider.digestAlg). Unauthenticated, it fails with INVALID_ACL.
 */
const CREATOR_ACL: ACL[] = [new zookeeper.ACL(zookeeper.Permission.ALL, new zookeeper.Id('auth', ''))]

interface Identity {
  /** The user of `digest:user:password`, or undefined without authentication. */
  user: string | undefined
  acl: ACL[]
  authFailed: boolean
}

const identities = new WeakMap<Client, Identity>()

/** A client that keeps trying to connect until it does or is closed; with `auth`, its nodes are its identity's alone. */
export function createZookeeper (connectString: string, sessionTimeoutMs: number, auth: string): Client {
  const client = zookeeper.createClient(connectString, { sessionTimeout: sessionTimeoutMs, spinDelay: 500, retries: 1 })
  guardHandshake(client, sessionTimeoutMs)
  const identity: Identity = { user: undefined, acl: OPEN_ACL, authFailed: false }
  if (auth !== '') {
    const scheme = auth.slice(0, auth.indexOf(':'))
    const credentials = auth.slice(scheme.length + 1)
    identity.user = credentials.slice(0, Math.max(0, credentials.indexOf(':')))
    identity.acl = CREATOR_ACL
    // Before connect(), so it is sent on every reconnect too: ZooKeeper forgets it with the connection.
    client.addAuthInfo(scheme, Buffer.from(credentials))
    authFirst(client)
    client.once('authenticationFailed', () => { identity.authFailed = true })
  }
  identities.set(client, identity)
  client.connect()
  return client
}

export function aclOf (client: Client): ACL[] {
  return identities.get(client)?.acl ?? OPEN_ACL
}

/** The opcode of an authentication packet in ZooKeeper's protocol (ZooDefs.OpCode.auth). */
const AUTH_OPCODE = 100

interface Packet { request: { header: { type: number } | null } }
interface ConnectionInternals { onSocketConnected: () => void, packetQueue?: { queue: Packet[] } }

/**
 * node-zookeeper-client queues auth packets behind the waiting requests, which then run
 * unauthenticated (NO_AUTH) on a reconnect; this moves them to the front, as the Java client
 * sends them. Untyped internals: test/integration/zookeeper-auth.test.ts fails if they change.
 */
function authFirst (client: Client): void {
  const manager = (client as unknown as { connectionManager?: ConnectionInternals }).connectionManager
  const onSocketConnected = manager?.onSocketConnected
  if (manager === undefined || typeof onSocketConnected !== 'function') return
  manager.onSocketConnected = function (this: ConnectionInternals) {
    onSocketConnected.call(this)
    const packets = this.packetQueue
    if (!Array.isArray(packets?.queue)) return
    const auth = packets.queue.filter((packet) => packet.request.header?.type === AUTH_OPCODE)
    packets.queue = [...auth, ...packets.queue.filter((packet) => !auth.includes(packet))]
  }
}

const closing = new WeakSet<Client>()

/**
 * node-zookeeper-client times an attempt only until TCP connects, so an unanswered handshake
 * (ZooKeeper 3.8.0 still starting: "this.zkDb is null"; a stalling proxy) waits forever. Ends
 * the attempt's socket every `timeoutMs` while not connected (docs/snowflake-mode.md). Untyped
 * internals: test/integration/zookeeper-handshake.test.ts fails if they change.
 */
function guardHandshake (client: Client, timeoutMs: number): void {
  let timer: NodeJS.Timeout | undefined
  let ended = false
  const arm = () => {
    clearTimeout(timer)
    timer = setTimeout(() => {
      if (ended || closing.has(client) || isConnected(client)) return
      ;(client as unknown as { connectionManager?: { socket?: Socket } }).connectionManager?.socket?.destroy()
      arm()
    }, timeoutMs)
    timer.unref()
  }
  client.on('state', (state: zookeeper.State) => {
    if (state === zookeeper.State.SYNC_CONNECTED || state === zookeeper.State.CONNECTED_READ_ONLY) {
      clearTimeout(timer)
    } else if (state === zookeeper.State.EXPIRED || state === zookeeper.State.AUTH_FAILED) {
      // The library stops trying by itself.
      ended = true
      clearTimeout(timer)
    } else if (state === zookeeper.State.DISCONNECTED) {
      arm()
    }
  })
  arm()
}

export function isConnected (client: Client): boolean {
  const state = client.getState()
  return state === zookeeper.State.SYNC_CONNECTED || state === zookeeper.State.CONNECTED_READ_ONLY
}

/** An expired session or a refused login: the library has stopped trying, the client never connects again. */
export function hasEnded (client: Client): boolean {
  const state = client.getState()
  return state === zookeeper.State.EXPIRED || state === zookeeper.State.AUTH_FAILED
}

/** Resolves true once `client` is connected, false after `timeoutMs` (the client keeps trying). */
export function waitConnected (client: Client, timeoutMs: number): Promise<boolean> {
  if (isConnected(client)) return Promise.resolve(true)
  return new Promise((resolve) => {
    const onConnected = () => { clearTimeout(timer); resolve(true) }
    const timer = setTimeout(() => { client.removeListener('connected', onConnected); resolve(false) }, timeoutMs)
    client.once('connected', onConnected)
  })
}

/** Connects, or rejects after `timeoutMs`; a client that connects later is closed then. */
export async function connectZookeeper (connectString: string, sessionTimeoutMs: number, timeoutMs: number, auth = ''): Promise<Client> {
  const client = createZookeeper(connectString, sessionTimeoutMs, auth)
  if (await waitConnected(client, timeoutMs)) return client
  closeZookeeper(client)
  throw new Error(`ZooKeeper at ${connectString} did not answer within ${timeoutMs} ms`)
}

/** Ends a client's session: at once when connected, otherwise as soon as it connects (see the top). */
export function closeZookeeper (client: Client, timeoutMs = 2000): Promise<void> {
  if (!isConnected(client)) {
    client.once('connected', () => { closing.add(client); client.close() })
    return Promise.resolve()
  }
  closing.add(client)
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, timeoutMs)
    client.once('disconnected', () => { clearTimeout(timer); resolve() })
    client.close()
  })
}

/** The session's id as hex, as ZooKeeper's own tools print it (0x...). */
export function sessionIdOf (client: Client): string {
  return `0x${client.getSessionId().toString('hex')}`
}

/** The session that owns an ephemeral node, in sessionIdOf's form ('0x0000000000000000' for a persistent one). */
export function ownerOf (stat: zookeeper.Stat): string {
  return `0x${stat.ephemeralOwner.toString('hex')}`
}

// Its Exception inherits from Error (with getCode()), though its typings do not say so.
function call<T> (fn: (cb: (err: unknown, result: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, result) => err ? reject(err) : resolve(result)))
}

function hasCode (err: unknown, code: number): boolean {
  return (err as { getCode?: () => number }).getCode?.() === code
}

export function isNoNode (err: unknown): boolean {
  return hasCode(err, zookeeper.Exception.NO_NODE)
}

export function isNodeExists (err: unknown): boolean {
  return hasCode(err, zookeeper.Exception.NODE_EXISTS)
}

/** ZooKeeper refused the authentication (AUTH_FAILED): the client has stopped for good. */
export function authFailedRefusal (): LeaseRefused {
  return new LeaseRefused('LEASE_AUTH_REFUSED', 'ZooKeeper refused the authentication of leaf.snowflake.zk.auth (AUTH_FAILED): ' +
    'give it as digest:user:password, to a ZooKeeper server that accepts the digest scheme')
}

/** NO_AUTH or AUTH_FAILED as a one-line refusal naming leaf.snowflake.zk.auth (and the user, never the password); any other error as is. */
export function authRefusal (client: Client, err: unknown, tree: string): unknown {
  const identity = identities.get(client)
  // A client whose authentication failed has stopped: its later calls fail as a lost connection.
  if (identity?.authFailed === true || hasCode(err, zookeeper.Exception.AUTH_FAILED)) return authFailedRefusal()
  if (!hasCode(err, zookeeper.Exception.NO_AUTH)) return err
  const user = identity?.user
  return new LeaseRefused('LEASE_AUTH_REFUSED', user === undefined
    ? `ZooKeeper refused access to ${tree} (NO_AUTH): its nodes are readable only by the identity that created them, and leaf.snowflake.zk.auth is not set: ` +
      'set leaf.snowflake.zk.auth (or leaf.snowflake.zk.auth-file) to the digest:user:password of the instances that created them'
    : `ZooKeeper refused access to ${tree} (NO_AUTH) to user "${user}" of leaf.snowflake.zk.auth: its nodes belong to another identity (another user, or another password): ` +
      'set leaf.snowflake.zk.auth to the digest:user:password of the instances that created them, or give this fleet a leaf.name of its own')
}

export const zk = {
  /**
   * mkdirp with the client's ACL, except `/snowflake`, which stays open: every leaf.name's tree,
   * Java Leaf's included, is under it, so no one fleet's identity may lock the others out.
   */
  async mkdirp (client: Client, path: string): Promise<string> {
    let at = ''
    for (const part of path.split('/').slice(1)) {
      const acl = at === '' ? OPEN_ACL : aclOf(client)
      at += `/${part}`
      try {
        await call<string>((cb) => client.create(at, acl, CreateMode.PERSISTENT, cb))
      } catch (err) {
        if (!isNodeExists(err)) throw err
      }
    }
    return at
  },
  getChildren: (client: Client, path: string) => call<string[]>((cb) => client.getChildren(path, cb)),
  getData: (client: Client, path: string) => call<Buffer | undefined>((cb) => client.getData(path, cb)),
  /** The node's data and the session that owns it (hex, as sessionIdOf), or undefined when there is none. */
  async getOwned (client: Client, path: string): Promise<{ data: Buffer | undefined, owner: string } | undefined> {
    const node = await zk.getWithStat(client, path)
    return node && { data: node.data, owner: ownerOf(node.stat) }
  },
  /** The node's data and stat, or undefined when there is none. */
  async getWithStat (client: Client, path: string): Promise<{ data: Buffer | undefined, stat: zookeeper.Stat } | undefined> {
    try {
      return await new Promise((resolve, reject) => client.getData(path, (err, data, stat) => err ? reject(err) : resolve({ data, stat })))
    } catch (err) {
      if (isNoNode(err)) return undefined
      throw err
    }
  },
  commit: (transaction: zookeeper.Transaction) => call<unknown>((cb) => transaction.commit(cb)),
  setData: (client: Client, path: string, data: string) => call<unknown>((cb) => client.setData(path, Buffer.from(data), cb)),
  create: (client: Client, path: string, data: string, mode: number) => call<string>((cb) => client.create(path, Buffer.from(data), aclOf(client), mode, cb)),
  remove: (client: Client, path: string) => call<void>((cb) => client.remove(path, (err) => cb(err, undefined))),
  async removeIfExists (client: Client, path: string): Promise<void> {
    try {
      await zk.remove(client, path)
    } catch (err) {
      if (!isNoNode(err)) throw err
    }
  },
  close: closeZookeeper,
}
