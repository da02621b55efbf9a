import t from 'tap'
import { closeZookeeper, createZookeeper, waitConnected } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { zookeeperProxy } from '../helpers/zookeeper.js'

// The proxy holds the first two connections silent, as ZooKeeper 3.8.0 does with a connect
// request that comes while it starts (src/snowflake/worker-id/zookeeper-client.ts), and passes the
// later ones on to the test ZooKeeper.
t.test('a handshake that is never answered is ended after the session timeout and tried again, until one is answered', async (t) => {
  const proxy = await zookeeperProxy(t)
  proxy.stall(2)
  const started = performance.now()
  const client = createZookeeper(`127.0.0.1:${proxy.port}`, 1000, '')
  t.teardown(() => closeZookeeper(client))
  t.ok(await waitConnected(client, 10_000), 'connected through the third connection')
  const tookMs = performance.now() - started
  t.equal(proxy.accepted, 3, 'two connections held silent, the third passed on')
  t.equal(proxy.stalledEndedAfterMs.length, 2, 'the client ended both held connections itself')
  // The guard runs from the attempt's start (a retry waits up to 500 ms before it connects).
  // So a held connection lives between the timeout less that wait (500 ms) and the timeout
  // (1000 ms), plus 500 ms of scheduling slack.
  for (const ms of proxy.stalledEndedAfterMs) t.ok(ms > 450 && ms < 1000 + 500, `ended ${Math.round(ms)} ms after it was accepted (timeout 1000 ms)`)
  t.ok(tookMs >= 1000, `connected after ${Math.round(tookMs)} ms, not before the first timeout`)
})
