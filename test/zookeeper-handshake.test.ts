import { connect, createServer, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { closeZookeeper, createZookeeper, waitConnected } from '../src/snowflake/worker-id/zookeeper.js'
import { TEST_ZK_HOST, TEST_ZK_PORT } from './helpers/zookeeper.js'

// A server that accepts a connection and never answers it, as ZooKeeper 3.8.0 does with a connect
// request that comes while it starts (src/snowflake/worker-id/zookeeper.ts): the first
// `stalled` connections are held silent, the later ones are passed on to the test ZooKeeper.
async function stallingFront (t: Test, stalled: number) {
  const held: Socket[] = []
  const closedByClient: number[] = []
  const open = new Set<Socket>()
  const server = createServer((socket) => {
    open.add(socket)
    socket.on('close', () => open.delete(socket))
    if (held.length < stalled) {
      const at = performance.now()
      held.push(socket)
      socket.resume() // read (and drop) the connect request, so its end is seen
      socket.on('error', () => {})
      socket.on('close', () => closedByClient.push(performance.now() - at))
      return
    }
    const upstream = connect(TEST_ZK_PORT, TEST_ZK_HOST)
    socket.pipe(upstream).pipe(socket)
    socket.on('error', () => upstream.destroy())
    upstream.on('error', () => socket.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of open) s.destroy()
    server.close(() => resolve())
  }))
  const { port } = server.address() as { port: number }
  return { address: `127.0.0.1:${port}`, held, closedByClient }
}

t.test('a handshake that is never answered is ended after the session timeout and tried again, until one is answered', async (t) => {
  const front = await stallingFront(t, 2)
  const started = performance.now()
  const client = createZookeeper(front.address, 1000)
  t.teardown(() => closeZookeeper(client))
  t.ok(await waitConnected(client, 10_000), 'connected through the third connection')
  const tookMs = performance.now() - started
  t.equal(front.held.length, 2, 'two connections were held silent')
  t.equal(front.closedByClient.length, 2, 'the client ended both itself')
  // The guard runs from the attempt's start (a retry waits up to 500 ms before it connects).
  for (const ms of front.closedByClient) t.ok(ms > 400 && ms < 2500, `ended ${Math.round(ms)} ms after it was accepted (timeout 1000 ms)`)
  t.ok(tookMs >= 1000, `connected after ${Math.round(tookMs)} ms, not before the first timeout`)
})
