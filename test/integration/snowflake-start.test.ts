import t from 'tap'
import { startSnowflakeMode } from '../../src/modes/snowflake-mode.js'
import { checkReadiness } from '../../src/modes/readiness.js'
import { nodeData } from '../../src/snowflake/worker-id/zookeeper/zookeeper-registration.js'
import { CreateMode } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { until } from '../helpers/time.js'
import { inspector, uniqueName, zk, zookeeperProxy } from '../helpers/zookeeper.js'

// Snowflake mode started without ZooKeeper (modes/snowflake-mode.ts): it answers
// SNOWFLAKE_NOT_READY, retries by the source's own acquire, and serves or stays refused.

const PORT = 9800

function config (zkAddress: string, name: string) {
  return testConfig({
    'leaf.snowflake.enable': true,
    'leaf.name': name,
    'leaf.snowflake.zk.address': zkAddress,
    'leaf.snowflake.ip': '127.0.0.1',
    'leaf.snowflake.port': PORT,
    'leaf.snowflake.zk.connect-timeout-ms': 300,
    'leaf.snowflake.zk.session-timeout-ms': 2000,
    'leaf.snowflake.cache.dir': tempDir(),
  })
}

t.test('ZooKeeper away at start: SNOWFLAKE_NOT_READY, then one registration once it answers', async (t) => {
  const proxy = await zookeeperProxy(t)
  proxy.block()
  const name = uniqueName()
  const mode = await startSnowflakeMode(config(`127.0.0.1:${proxy.port}`, name), silentLogger, { retryMinMs: 100, retryMaxMs: 200 })
  t.teardown(() => mode.close())
  t.match(mode.notReady(), /holds no worker id yet: ZooKeeper could not be reached and the worker-id cache cannot stand in/)
  t.throws(() => mode.generator.next('k'), { code: 'SNOWFLAKE_NOT_READY', statusCode: 503 })
  t.match(mode.lease.status(), { workerId: -1, source: 'zookeeper', unavailable: /holds no worker id yet/ })
  t.match(await checkReadiness({ segment: undefined, snowflake: mode }), { ready: false, modes: { snowflake: { ready: false, reason: /^SNOWFLAKE_NOT_READY: / } } })
  t.ok(await until(() => /\d+ attempt/.test(mode.notReady() ?? '') && !/\(1 attempt/.test(mode.notReady() ?? ''), 5000), 'retried')

  proxy.unblock()
  t.ok(await until(() => mode.notReady() === undefined, 15_000), 'serves once ZooKeeper answers')
  const id = await mode.generator.next('k')
  t.equal(decodeSnowflakeId(id).workerId, 0)
  t.equal(mode.lease.workerId, 0)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  t.same(await zkc.children(`/snowflake/${name}/forever`), [`127.0.0.1:${PORT}-0000000000`], 'one node, however many attempts')
  t.same(await zkc.children(`/snowflake/${name}/temporary`), [`127.0.0.1:${PORT}`])
  await mode.close()
  t.same(await zkc.children(`/snowflake/${name}/temporary`), [], 'close releases it')
})

t.test('a background attempt refused for a clock behind ZooKeeper\'s node: no more retries, the refusal named', async (t) => {
  const name = uniqueName()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  await zk.mkdirp(zkc, `/snowflake/${name}/forever`)
  await zk.create(zkc, `/snowflake/${name}/forever/127.0.0.1:${PORT}-`, nodeData('127.0.0.1', PORT, Date.now() + 600_000), CreateMode.PERSISTENT_SEQUENTIAL)
  const proxy = await zookeeperProxy(t)
  proxy.block()
  const mode = await startSnowflakeMode(config(`127.0.0.1:${proxy.port}`, name), silentLogger, { retryMinMs: 100, retryMaxMs: 200 })
  t.teardown(() => mode.close())
  t.match(mode.notReady(), /holds no worker id yet/)
  proxy.unblock()
  t.ok(await until(() => /did not start/.test(mode.notReady() ?? ''), 15_000))
  t.match(mode.notReady(), /^snowflake mode did not start: the worker id was refused \(LEASE_CLOCK_BEHIND\); it is not retried: fix the cause named in the log and restart$/)
  const accepted = proxy.accepted
  await new Promise((resolve) => setTimeout(resolve, 600))
  t.equal(proxy.accepted, accepted, 'no attempt after the refusal')
  t.throws(() => mode.generator.next('k'), { code: 'SNOWFLAKE_NOT_READY', message: /LEASE_CLOCK_BEHIND/ })
})

t.test('a refusal that needs an operator still refuses the start', async (t) => {
  const proxy = await zookeeperProxy(t)
  proxy.block()
  const refused = testConfig({
    'leaf.snowflake.enable': true,
    'leaf.snowflake.zk.address': `127.0.0.1:${proxy.port}`,
    'leaf.snowflake.ip': '127.0.0.1',
    'server.port': 0,
  })
  await t.rejects(startSnowflakeMode(refused, silentLogger), { code: 'LEASE_NO_IDENTITY' })
})
