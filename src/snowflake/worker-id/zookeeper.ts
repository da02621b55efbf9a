import type { Socket } from 'node:net'
import zookeeper, { type Client } from 'node-zookeeper-client'

// Promise wrappers over node-zookeeper-client's callbacks, and its traps handled in one
// place: a client retries its connection forever by itself, node data must be a Buffer,
// close() takes no callback, and close() on a client that has not connected yet crashes the
// process when the server's answer to the connect request arrives afterwards (the library
// parses it as a reply and throws "Unknown code" from its socket handler). So a client is
// closed only once it is connected (closeZookeeper).

export type { Client } from 'node-zookeeper-client'
export const { CreateMode } = zookeeper

/**
 * ZooKeeper expires a session some time after its timeout (its expiry runs once per tick):
 * waiting for another session's node to go allows this much beyond our session timeout.
 */
export const EXPIRY_MARGIN_MS = 2000

/** A client that keeps trying to connect, in the background, until it does or is closed. */
export function createZookeeper (connectString: string, sessionTimeoutMs: number): Client {
  const client = zookeeper.createClient(connectString, { sessionTimeout: sessionTimeoutMs, spinDelay: 500, retries: 1 })
  guardHandshake(client, sessionTimeoutMs)
  client.connect()
  return client
}

/** Clients closeZookeeper has closed: their handshake guard stops. */
const closing = new WeakSet<Client>()

/**
 * node-zookeeper-client times a connection attempt only until TCP connects: a handshake that is
 * never answered then waits forever, and the client with it. ZooKeeper 3.8.0 leaves exactly such
 * a connection open when a connect request comes while it is still starting (its close throws a
 * NullPointerException: "this.zkDb is null"), which a client retrying through a restart hits; a
 * proxy that accepts and stalls does the same. So while a client is not connected, the socket of
 * its attempt is ended every `timeoutMs` (the library's own connect timeout with one server), and
 * the library tries again as after any lost connection. The socket is the library's
 * `connectionManager.socket`, which its typings do not show; test/integration/zookeeper-handshake.test.ts
 * fails if that shape goes.
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
export async function connectZookeeper (connectString: string, sessionTimeoutMs: number, timeoutMs: number): Promise<Client> {
  const client = createZookeeper(connectString, sessionTimeoutMs)
  if (await waitConnected(client, timeoutMs)) return client
  closeZookeeper(client)
  throw new Error(`ZooKeeper at ${connectString} did not answer within ${timeoutMs} ms`)
}

/**
 * Ends a client's session: at once when it is connected (resolving when it says it is
 * disconnected, bounded), otherwise as soon as it connects (see the note at the top).
 */
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

export const zk = {
  mkdirp: (c: Client, path: string) => call<string>((cb) => c.mkdirp(path, cb)),
  getChildren: (c: Client, path: string) => call<string[]>((cb) => c.getChildren(path, cb)),
  getData: (c: Client, path: string) => call<Buffer | undefined>((cb) => c.getData(path, cb)),
  /** The node's data and the session that owns it (hex, as sessionIdOf), or undefined when there is none. */
  async getOwned (c: Client, path: string): Promise<{ data: Buffer | undefined, owner: string } | undefined> {
    const node = await zk.getWithStat(c, path)
    return node && { data: node.data, owner: ownerOf(node.stat) }
  },
  /** The node's data and stat, or undefined when there is none. */
  async getWithStat (c: Client, path: string): Promise<{ data: Buffer | undefined, stat: zookeeper.Stat } | undefined> {
    try {
      return await new Promise((resolve, reject) => c.getData(path, (err, data, stat) => err ? reject(err) : resolve({ data, stat })))
    } catch (err) {
      if (isNoNode(err)) return undefined
      throw err
    }
  },
  /** Runs a multi-operation transaction: all of its operations, or none. */
  commit: (t: zookeeper.Transaction) => call<unknown>((cb) => t.commit(cb)),
  setData: (c: Client, path: string, data: string) => call<unknown>((cb) => c.setData(path, Buffer.from(data), cb)),
  create: (c: Client, path: string, data: string, mode: number) => call<string>((cb) => c.create(path, Buffer.from(data), mode, cb)),
  remove: (c: Client, path: string) => call<void>((cb) => c.remove(path, (err) => cb(err, undefined))),
  /** Removes a node that may not exist. */
  async removeIfExists (c: Client, path: string): Promise<void> {
    try {
      await zk.remove(c, path)
    } catch (err) {
      if (!isNoNode(err)) throw err
    }
  },
  close: closeZookeeper,
}
