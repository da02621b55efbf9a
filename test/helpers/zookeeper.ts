import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import { connectZookeeper, zk, type Client } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { createProxy, type TcpProxy } from './tcp-proxy.js'

/** The ZooKeeper the tests use: the one scripts/test-services.sh starts, or LEAF_TEST_ZK_ADDRESS (`host:port`). */
export const TEST_ZK = process.env.LEAF_TEST_ZK_ADDRESS || '127.0.0.1:2181'
export const TEST_ZK_HOST = TEST_ZK.slice(0, TEST_ZK.lastIndexOf(':')).replace(/^\[|\]$/g, '')
export const TEST_ZK_PORT = Number(TEST_ZK.slice(TEST_ZK.lastIndexOf(':') + 1))

/** A leaf.name of its own, so each test has its own /snowflake/<name> tree. */
export function uniqueName (): string {
  return `leaf-test-${randomBytes(4).toString('hex')}`
}

export async function inspector (): Promise<Client & { data (path: string): Promise<Record<string, unknown>>, children (path: string): Promise<string[]> }> {
  const client = await connectZookeeper(TEST_ZK, 10_000, 5000)
  return Object.assign(client, {
    async data (path: string) {
      return JSON.parse(String(await zk.getData(client, path))) as Record<string, unknown>
    },
    async children (path: string) {
      try {
        return (await zk.getChildren(client, path)).sort()
      } catch {
        return []
      }
    },
  })
}

export { zk }

/**
 * A TCP proxy in front of the test ZooKeeper, for cutting a client off (`block()`) without a FIN
 * or RST. Its teardown lets the cut-off clients reach ZooKeeper again before it closes, so they
 * can end themselves (src/snowflake/worker-id/zookeeper-client.ts says why they must).
 */
export async function zookeeperProxy (t: Test): Promise<TcpProxy> {
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })
  t.teardown(async () => {
    proxy.unblock()
    await new Promise((resolve) => setTimeout(resolve, 1500))
    await proxy.close()
  })
  return proxy
}
