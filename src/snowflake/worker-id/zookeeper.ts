import zookeeper, { type Client } from 'node-zookeeper-client'

// Promise wrappers over node-zookeeper-client's callbacks, and its traps handled in one
// place: connect() retries forever (bounded here), node data must be a Buffer, close()
// takes no callback.

export type { Client } from 'node-zookeeper-client'
export const { CreateMode } = zookeeper

/** Connects, or rejects after `timeoutMs` (and closes the client so it stops retrying). */
export function connectZookeeper (connectString: string, sessionTimeoutMs: number, timeoutMs: number): Promise<Client> {
  const client = zookeeper.createClient(connectString, { sessionTimeout: sessionTimeoutMs, spinDelay: 500, retries: 1 })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.close()
      reject(new Error(`ZooKeeper at ${connectString} did not answer within ${timeoutMs} ms`))
    }, timeoutMs)
    client.once('connected', () => {
      clearTimeout(timer)
      resolve(client)
    })
    client.connect()
  })
}

// Its Exception inherits from Error (with getCode()), though its typings do not say so.
function call<T> (fn: (cb: (err: unknown, result: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((err, result) => err ? reject(err) : resolve(result)))
}

export function isNoNode (err: unknown): boolean {
  return (err as { getCode?: () => number }).getCode?.() === zookeeper.Exception.NO_NODE
}

export const zk = {
  mkdirp: (c: Client, path: string) => call<string>((cb) => c.mkdirp(path, cb)),
  getChildren: (c: Client, path: string) => call<string[]>((cb) => c.getChildren(path, cb)),
  getData: (c: Client, path: string) => call<Buffer | undefined>((cb) => c.getData(path, cb)),
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
  /** Closes the session and waits (bounded) until the client says it is disconnected. */
  close (c: Client, timeoutMs = 2000): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs)
      c.once('disconnected', () => { clearTimeout(timer); resolve() })
      c.close()
    })
  },
}
