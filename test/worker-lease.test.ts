import { writeFileSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { readWorkerCache, writeWorkerCache } from '../src/snowflake/worker-id/cache-file.js'
import { LeaseRefused, acquireWorkerLease, type WorkerLeaseOptions } from '../src/snowflake/worker-id/worker-lease.js'
import { CreateMode } from '../src/snowflake/worker-id/zookeeper.js'
import { tempDir } from './helpers/config.js'
import { silentLogger } from './helpers/logger.js'
import { createProxy } from './helpers/tcp-proxy.js'
import { TEST_ZK, inspector, uniqueName, zk } from './helpers/zookeeper.js'

const HEARTBEAT = 3000

function options (overrides: Partial<WorkerLeaseOptions> = {}): WorkerLeaseOptions {
  return {
    name: uniqueName(),
    zkAddress: TEST_ZK,
    ip: '10.1.2.3',
    port: 8080,
    staticWorkerId: 0,
    cacheDir: tempDir('leaf-cache-'),
    heartbeatIntervalMs: HEARTBEAT,
    maxClockDriftMs: 5000,
    zkConnectTimeoutMs: 3000,
    zkSessionTimeoutMs: 4000,
    clock: Date.now,
    logger: silentLogger,
    ...overrides,
  }
}

async function lease (o: WorkerLeaseOptions) {
  const l = await acquireWorkerLease(o)
  t.teardown(() => l.close())
  return l
}

t.test('the cache file keeps Java Leaf\'s workerID line plus lastTimestamp', async (t) => {
  const dir = tempDir()
  writeWorkerCache(dir, { workerId: 12, lastTimestamp: 1234 })
  t.match(readFileSync(join(dir, 'workerID.properties'), 'utf8'), /^workerID = 12$/m)
  t.same(readWorkerCache(dir), { workerId: 12, lastTimestamp: 1234 })
  writeFileSync(join(dir, 'workerID.properties'), 'workerID=5\n') // as Java Leaf writes it
  t.same(readWorkerCache(dir), { workerId: 5, lastTimestamp: undefined })
  writeFileSync(join(dir, 'workerID.properties'), 'workerID=5\nlastTimestamp=\n')
  t.same(readWorkerCache(dir), { workerId: 5, lastTimestamp: undefined }, 'an empty value is no value, not 0')
  writeFileSync(join(dir, 'workerID.properties'), 'workerID=\n')
  t.equal(readWorkerCache(dir), undefined)
  t.equal(readWorkerCache(tempDir()), undefined)
})

t.test('without ZooKeeper: the configured worker id, guarded by the cache', async (t) => {
  const o = options({ zkAddress: '', staticWorkerId: 9 })
  const first = await acquireWorkerLease(o)
  t.equal(first.workerId, 9)
  t.equal(first.notBefore, 0, 'no restart window on a first start')
  t.match(first.status(), { source: 'static', zookeeperConnected: false })
  await first.close()
  const written = readWorkerCache(o.cacheDir)
  t.equal(written?.workerId, 9)

  const again = await lease(o)
  t.equal(again.notBefore, (written?.lastTimestamp as number) + HEARTBEAT, 'restart window from the cached time')

  writeWorkerCache(o.cacheDir, { workerId: 9, lastTimestamp: Date.now() + 60_000 })
  await t.rejects(acquireWorkerLease(o), LeaseRefused, 'clock behind the cache: refused')
})

t.test('first start creates both nodes with worker id 0 and Leaf\'s JSON', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const before = Date.now()
  const l = await lease(o)
  t.equal(l.workerId, 0)
  const forever = `/snowflake/${o.name}/forever`
  t.same(await zkc.children(forever), ['10.1.2.3:8080-0000000000'])
  const data = await zkc.data(`${forever}/10.1.2.3:8080-0000000000`)
  t.same(Object.keys(data).sort(), ['ip', 'port', 'timestamp'])
  t.match(data, { ip: '10.1.2.3', port: '8080' })
  t.ok((data.timestamp as number) >= before)
  t.match(await zkc.data(`/snowflake/${o.name}/temporary/10.1.2.3:8080`), { ip: '10.1.2.3', port: '8080' })
  t.match(l.status(), { source: 'zookeeper', zookeeperConnected: true, foreverPath: `${forever}/10.1.2.3:8080-0000000000`, temporaryPath: `/snowflake/${o.name}/temporary/10.1.2.3:8080` })
  t.equal(readWorkerCache(o.cacheDir)?.workerId, 0, 'cache written')
})

t.test('restart on the same ip:port keeps the worker id and waits out the restart window', async (t) => {
  const o = options()
  const first = await acquireWorkerLease(o)
  const second = await acquireWorkerLease({ ...o, port: 8081 })
  t.equal(second.workerId, 1)
  await first.close()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  t.same(await zkc.children(`/snowflake/${o.name}/temporary`), ['10.1.2.3:8081'], 'closing removed the ephemeral node at once')
  const stored = (await zkc.data(`/snowflake/${o.name}/forever/10.1.2.3:8080-0000000000`)).timestamp as number
  const again = await lease(o)
  t.equal(again.workerId, 0)
  t.ok(again.notBefore >= stored + HEARTBEAT, 'notBefore is one heartbeat past the stored time')
  await second.close()
})

t.test('three instances on three ports get three distinct ids', async (t) => {
  const o = options()
  const ids = []
  for (const port of [1, 2, 3]) ids.push((await lease({ ...o, port })).workerId)
  t.same(ids, [0, 1, 2])
})

t.test('a stored timestamp ahead of the clock refuses the start, naming both times', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const forever = `/snowflake/${o.name}/forever`
  await zk.mkdirp(zkc, forever)
  const future = Date.now() + 3_600_000
  await zk.create(zkc, `${forever}/10.1.2.3:8080-`, JSON.stringify({ ip: '10.1.2.3', port: '8080', timestamp: future }), CreateMode.PERSISTENT_SEQUENTIAL)
  const err = await acquireWorkerLease(o).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused)
  t.match((err as Error).message, new RegExp(`stored ${future} .*now \\d+`))
})

t.test('a worker id past 1023 refuses the start and names the path to clean', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const forever = `/snowflake/${o.name}/forever`
  await zk.mkdirp(zkc, forever)
  await Promise.all(Array.from({ length: 1024 }, (_, i) => zk.create(zkc, `${forever}/10.9.9.9:${i + 1}-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)))
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', message: new RegExp(`worker id 1024 .* under ${forever}`) })
})

t.test('a new instance whose clock is far from its live peers\' refuses to start', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const temporary = `/snowflake/${o.name}/temporary`
  await zk.mkdirp(zkc, temporary)
  const peerTime = Date.now() - 60_000
  await zk.create(zkc, `${temporary}/10.0.0.1:1`, JSON.stringify({ ip: '10.0.0.1', port: '1', timestamp: peerTime }), CreateMode.EPHEMERAL)
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', message: /ms off the average of 1 live peers/ })
  t.same(await zkc.children(`/snowflake/${o.name}/forever`), [], 'nothing registered')
  const tolerant = await lease({ ...o, maxClockDriftMs: 120_000 })
  t.equal(tolerant.workerId, 0)
})

t.test('a stale ephemeral node (a killed process) is replaced', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const temporary = `/snowflake/${o.name}/temporary/10.1.2.3:8080`
  await zk.mkdirp(zkc, temporary.slice(0, temporary.lastIndexOf('/')))
  await zk.create(zkc, temporary, '{"stale":true}', CreateMode.EPHEMERAL)
  await lease(o)
  t.match(await zkc.data(temporary), { ip: '10.1.2.3', port: '8080' })
})

t.test('ZooKeeper unreachable at start: the cached worker id, only with the clock past it', async (t) => {
  const o = options({ zkAddress: '127.0.0.1:1', zkConnectTimeoutMs: 500 })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', message: /no cached worker id/ })
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: Date.now() + 60_000 })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', message: /not past the cached lastTimestamp/ })
  const last = Date.now() - 1000
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: last })
  const l = await lease(o)
  t.equal(l.workerId, 77)
  t.equal(l.notBefore, last + HEARTBEAT)
  t.match(l.status(), { source: 'cache', zookeeperConnected: false })
})

t.test('ZooKeeper cut off: the lease keeps serving and keeps the cache current; connected again after', async (t) => {
  const proxy = await createProxy(Number(TEST_ZK.split(':')[1]))
  t.teardown(() => proxy.close())
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, heartbeatIntervalMs: 200, zkSessionTimeoutMs: 6000 })
  const changes: boolean[] = []
  const l = await lease(o)
  l.onConnectionChange = (connected) => changes.push(connected)
  proxy.block()
  const cutAt = Date.now()
  await new Promise((resolve) => setTimeout(resolve, 1200))
  t.equal(l.status().zookeeperConnected, false)
  const cached = readWorkerCache(o.cacheDir)?.lastTimestamp as number
  t.ok(cached > cutAt + 500, `the cache kept being written while ZooKeeper was away (${cached - cutAt} ms after the cut)`)
  proxy.unblock()
  const until = Date.now() + 8000
  while (!l.status().zookeeperConnected && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(l.status().zookeeperConnected, true, 'reconnected')
  t.same(changes, [false, true])
})
