import { writeFileSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { readWorkerCache, writeWorkerCache } from '../../src/snowflake/worker-id/cache-file.js'
import { restartWindow, type WorkerLeaseOptions } from '../../src/snowflake/worker-id/zookeeper/heartbeat-lease-options.js'
import type { WorkerLease } from '../../src/snowflake/worker-id/worker-id-source.js'
import { acquireWorkerLease } from '../../src/snowflake/worker-id/zookeeper/zookeeper-source.js'
import { parseLayout } from '../../src/layout/layout-spec.js'
import { CreateMode, connectZookeeper, sessionIdOf } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { tempDir } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { createProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { TEST_ZK, TEST_ZK_HOST, TEST_ZK_PORT, inspector, uniqueName, zk, zookeeperProxy } from '../helpers/zookeeper.js'
import { LeaseRefused } from '../../src/errors.js'
import { sleep, until } from '../helpers/time.js'

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

/** A lease closed when test `t` ends (before the proxies its own teardowns close). */
async function lease (t: Test, o: WorkerLeaseOptions) {
  const l = await acquireWorkerLease(o)
  t.teardown(() => l.close())
  return l
}

const zkProxy = () => createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })

/**
 * A ZooKeeper address that resets every connection until `proxy.unblock()`. At teardown the
 * proxy lets clients through for a moment first: a client is only closed once it has
 * connected (zookeeper-client.ts), so one left retrying would keep the test process alive.
 */
async function unreachableZk (t: Test): Promise<TcpProxy> {
  const proxy = await zookeeperProxy(t)
  proxy.block()
  return proxy
}

function issuing (l: WorkerLease, ms = Date.now()): boolean {
  try {
    if (ms > l.issuableUntil) l.extend(ms)
    return true
  } catch {
    return false
  }
}

t.test('the cache file keeps Java Leaf\'s workerID line plus lastTimestamp', async (t) => {
  const dir = tempDir()
  writeWorkerCache(dir, { workerId: 12, lastTimestamp: 1234, address: '10.1.2.3:8080' })
  t.match(readFileSync(join(dir, 'workerID.properties'), 'utf8'), /^workerID = 12$/m)
  t.same(readWorkerCache(dir), { workerId: 12, lastTimestamp: 1234, address: '10.1.2.3:8080' })
  writeFileSync(join(dir, 'workerID.properties'), 'workerID=5\n') // as Java Leaf writes it
  t.same(readWorkerCache(dir), { workerId: 5, lastTimestamp: undefined, address: undefined })
  writeFileSync(join(dir, 'workerID.properties'), 'workerID=5\nlastTimestamp=\n')
  t.same(readWorkerCache(dir), { workerId: 5, lastTimestamp: undefined, address: undefined }, 'an empty value is no value, not 0')
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

  const again = await lease(t, o)
  t.equal(again.notBefore, (written?.lastTimestamp as number) + HEARTBEAT + 1, 'restart window: past the last millisecond the old life could issue (recorded time + heartbeat, included)')

  writeWorkerCache(o.cacheDir, { workerId: 9, lastTimestamp: Date.now() + 60_000 })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CLOCK_BEHIND' }, 'clock behind the cache: refused')
})

t.test('first start creates both nodes with worker id 0 and Leaf\'s JSON', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const before = Date.now()
  const l = await lease(t, o)
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
  const again = await lease(t, o)
  t.equal(again.workerId, 0)
  t.ok(again.notBefore >= stored + HEARTBEAT, 'notBefore is one heartbeat past the stored time')
  await second.close()
})

t.test('three instances on three ports get three distinct ids', async (t) => {
  const o = options()
  const ids = []
  for (const port of [1, 2, 3]) ids.push((await lease(t, { ...o, port })).workerId)
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
  t.equal((err as LeaseRefused).code, 'LEASE_CLOCK_BEHIND')
  t.match((err as Error).message, new RegExp(`stored ${future} .*now \\d+`))
})

t.test('a worker id past 1023 refuses the start: recreating forever is the remedy, not deleting nodes', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const forever = `/snowflake/${o.name}/forever`
  await zk.mkdirp(zkc, forever)
  await Promise.all(Array.from({ length: 1024 }, (_, i) => zk.create(zkc, `${forever}/10.9.9.9:${i + 1}-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)))
  const err = await acquireWorkerLease(o).then(() => undefined, (e: Error) => e)
  t.match(err, { name: 'LeaseRefused', code: 'LEASE_ID_OUT_OF_RANGE', message: new RegExp(`worker id 1024 .*never goes back.*does not help.*recreate ${forever}`) })
  t.notMatch(err?.message, /remove the nodes/, 'no advice that cannot work')
})

t.test('a new instance whose clock is far from its live peers\' refuses to start', async (t) => {
  const o = options()
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const temporary = `/snowflake/${o.name}/temporary`
  await zk.mkdirp(zkc, temporary)
  const peerTime = Date.now() - 60_000
  await zk.create(zkc, `${temporary}/10.0.0.1:1`, JSON.stringify({ ip: '10.0.0.1', port: '1', timestamp: peerTime }), CreateMode.EPHEMERAL)
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CLOCK_DRIFT', message: /ms off the average of 1 live peers/ })
  t.same(await zkc.children(`/snowflake/${o.name}/forever`), [], 'nothing registered')
  const tolerant = await lease(t, { ...o, maxClockDriftMs: 120_000 })
  t.equal(tolerant.workerId, 0)
})

t.test('a second live instance on the same ip:port waits for the first\'s session, then refuses naming both', async (t) => {
  const o = options({ zkSessionTimeoutMs: 2000 })
  const first = await lease(t, o)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const temporary = `/snowflake/${o.name}/temporary/10.1.2.3:8080`
  const owner = (await zk.getOwned(zkc, temporary))?.owner
  const started = Date.now()
  const err = await acquireWorkerLease({ ...o, cacheDir: tempDir() }).then(() => undefined, (e: Error) => e)
  const waited = Date.now() - started
  t.ok(err instanceof LeaseRefused, 'refused')
  t.equal((err as LeaseRefused).code, 'LEASE_HELD_ELSEWHERE')
  t.match(err?.message, new RegExp(`another live instance holds ${temporary} \\(ZooKeeper session ${owner}.*this instance \\(session 0x[0-9a-f]{16}\\)`))
  t.ok(waited >= 2000, `waited out the session timeout first (${waited} ms)`)
  t.equal((await zk.getOwned(zkc, temporary))?.owner, owner, 'the first instance keeps its node')
  t.ok(issuing(first), 'and keeps issuing')
  t.same(await zkc.children(`/snowflake/${o.name}/forever`), ['10.1.2.3:8080-0000000000'], 'no second registration')
})

t.test('a node left by a dead session (a killed process) is taken once that session expires', async (t) => {
  const o = options({ zkSessionTimeoutMs: 2000 })
  const proxy = await zkProxy()
  t.teardown(() => proxy.close())
  // The "killed process": a session whose connection goes silent, so ZooKeeper expires it.
  const dead = await connectZookeeper(`127.0.0.1:${proxy.port}`, 2000, 5000)
  const temporary = `/snowflake/${o.name}/temporary/10.1.2.3:8080`
  await zk.mkdirp(dead, temporary.slice(0, temporary.lastIndexOf('/')))
  await zk.create(dead, temporary, '{"stale":true}', CreateMode.EPHEMERAL)
  const deadSession = sessionIdOf(dead)
  proxy.block()
  t.teardown(async () => { proxy.unblock(); await sleep(1500) }) // let the dead client end itself
  const started = Date.now()
  const l = await lease(t, o)
  t.ok(Date.now() - started >= 500, `waited for the old session to expire (${Date.now() - started} ms)`)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const node = await zk.getOwned(zkc, temporary)
  t.not(node?.owner, deadSession, 'the node is a new session\'s')
  t.match(JSON.parse(String(node?.data)), { ip: '10.1.2.3', port: '8080' })
  t.equal(l.workerId, 0)
})

t.test('port 0 is refused as a registration port', async (t) => {
  await t.rejects(acquireWorkerLease(options({ port: 0 })), { name: 'LeaseRefused', code: 'LEASE_NO_IDENTITY', message: /registration port is 0/ })
})

t.test('ZooKeeper unreachable at start: the cached worker id, only with the clock past it and the same ip:port', async (t) => {
  const proxy = await unreachableZk(t)
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 500 })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CACHE_UNUSABLE', message: /no cached worker id/ })
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: Date.now() + 60_000, address: '10.1.2.3:8080' })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CLOCK_BEHIND', message: /not past the cached lastTimestamp/ })
  const last = Date.now() - 1000
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: last, address: '10.9.9.9:8080' })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CACHE_UNUSABLE', message: /leased for 10\.9\.9\.9:8080, not for 10\.1\.2\.3:8080/ }, 'a former identity\'s id is not taken')
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: last })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CACHE_UNUSABLE', message: /leased for an unrecorded address/ }, 'nor one of unknown identity')
  writeWorkerCache(o.cacheDir, { workerId: 77, lastTimestamp: last, address: '10.1.2.3:8080' })
  const before = Date.now()
  const l = await lease(t, o)
  t.equal(l.workerId, 77)
  t.equal(l.notBefore, last + HEARTBEAT + 1, 'the first millisecond after every one the old life could issue')
  t.match(l.status(), { source: 'cache', zookeeperConnected: false, unavailable: undefined })
  const recorded = readWorkerCache(o.cacheDir)?.lastTimestamp as number
  t.ok(recorded >= before, `the start recorded its time in the cache before returning (${recorded - before} ms after the call)`)
  t.ok(l.issuableUntil <= recorded + HEARTBEAT, 'nothing issuable past the recorded time plus one heartbeat')
})

t.test('a start from the cache that ZooKeeper then contradicts stops issuing at once', async (t) => {
  for (const [what, prepare] of [
    ['ZooKeeper holds no node for this ip:port', async () => {}],
    ['ZooKeeper holds this ip:port under another worker id', async (name: string, zkc: Awaited<ReturnType<typeof inspector>>) => {
      await zk.mkdirp(zkc, `/snowflake/${name}/forever`)
      await zk.create(zkc, `/snowflake/${name}/forever/10.0.0.7:1-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
      await zk.create(zkc, `/snowflake/${name}/forever/10.1.2.3:8080-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
    }],
  ] as const) {
    const proxy = await unreachableZk(t)
    const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 300, heartbeatIntervalMs: 200 })
    const zkc = await inspector()
    t.teardown(() => zkc.close())
    await prepare(o.name, zkc)
    writeWorkerCache(o.cacheDir, { workerId: 0, lastTimestamp: Date.now() - 1000, address: '10.1.2.3:8080' })
    const l = await lease(t, o)
    t.ok(issuing(l), `${what}: issuing from the cache while ZooKeeper is away`)
    proxy.unblock()
    t.ok(await until(() => l.status().unavailable !== undefined, 5000), `${what}: the conflict is found`)
    t.equal(l.issuableUntil, -Infinity)
    t.throws(() => l.extend(Date.now()), { code: 'WORKER_ID_UNAVAILABLE' }, `${what}: no ID`)
    t.match(l.status().unavailable, /restart this instance/)
  }
})

t.test('a start from the cache under a tree that records another layout stops issuing once ZooKeeper is back', async (t) => {
  const proxy = await unreachableZk(t)
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 300, heartbeatIntervalMs: 200 })
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  await zk.mkdirp(zkc, `/snowflake/${o.name}/forever`)
  await zk.create(zkc, `/snowflake/${o.name}/forever/10.1.2.3:8080-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
  await zk.create(zkc, `/snowflake/${o.name}/layout`, 'time=40ms,worker=8,sequence=5,epoch=1767225600000', CreateMode.PERSISTENT)
  writeWorkerCache(o.cacheDir, { workerId: 0, lastTimestamp: Date.now() - 1000, address: '10.1.2.3:8080' })
  const l = await lease(t, o)
  t.ok(issuing(l), 'issuing from the cache while ZooKeeper is away')
  proxy.unblock()
  t.ok(await until(() => l.status().unavailable !== undefined, 5000), 'the other layout is found')
  t.throws(() => l.extend(Date.now()), { code: 'WORKER_ID_UNAVAILABLE' })
  t.match(l.status().unavailable, /records the ID layout "time=40ms,worker=8,sequence=5,epoch=1767225600000"/)
})

t.test('a start from the cache whose ephemeral node another live session holds: stopped until it goes, then resumed', async (t) => {
  const proxy = await unreachableZk(t)
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 300, heartbeatIntervalMs: 200 })
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  await zk.mkdirp(zkc, `/snowflake/${o.name}/forever`)
  await zk.create(zkc, `/snowflake/${o.name}/forever/10.1.2.3:8080-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
  const other = await connectZookeeper(TEST_ZK, 4000, 5000)
  const temporary = `/snowflake/${o.name}/temporary/10.1.2.3:8080`
  await zk.mkdirp(other, temporary.slice(0, temporary.lastIndexOf('/')))
  await zk.create(other, temporary, '{}', CreateMode.EPHEMERAL)
  writeWorkerCache(o.cacheDir, { workerId: 0, lastTimestamp: Date.now() - 1000, address: '10.1.2.3:8080' })
  const l = await lease(t, o)
  proxy.unblock()
  t.ok(await until(() => l.status().unavailable !== undefined, 5000), 'the other live holder is found')
  t.notOk(issuing(l), 'no ID while another session holds the node')
  await zk.close(other)
  t.ok(await until(() => l.status().unavailable === undefined, 5000), 'resumed once the node is free')
  t.ok(issuing(l))
  t.match(l.status(), { source: 'zookeeper', zookeeperConnected: true, foreverPath: `/snowflake/${o.name}/forever/10.1.2.3:8080-0000000000` })
  t.equal((await zk.getOwned(zkc, temporary)) !== undefined, true, 'the node is ours now')
})

t.test('a cache ahead of the clock refuses the start even when ZooKeeper is up and behind it', async (t) => {
  const o = options()
  const first = await acquireWorkerLease(o)
  await first.close()
  writeWorkerCache(o.cacheDir, { workerId: 0, lastTimestamp: Date.now() + 600_000, address: '10.1.2.3:8080' })
  await t.rejects(acquireWorkerLease(o), { name: 'LeaseRefused', code: 'LEASE_CLOCK_BEHIND', message: /the clock is behind the worker-id cache .*stored \d+/ })
})

t.test('ZooKeeper answering after the connect timeout does not crash the process', async (t) => {
  // node-zookeeper-client throws "Unknown code" from its socket handler when a client closed
  // before connecting gets the late answer: an uncaught exception would end this test file.
  for (const lateBy of [100, 1500, 4000]) {
    const proxy = await zkProxy()
    t.teardown(() => proxy.close())
    const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 500, zkSessionTimeoutMs: 20_000, heartbeatIntervalMs: 300 })
    writeWorkerCache(o.cacheDir, { workerId: 0, lastTimestamp: Date.now() - 1000, address: '10.1.2.3:8080' })
    const zkc = await inspector()
    t.teardown(() => zkc.close())
    await zk.mkdirp(zkc, `/snowflake/${o.name}/forever`)
    await zk.create(zkc, `/snowflake/${o.name}/forever/10.1.2.3:8080-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
    proxy.delayMs = o.zkConnectTimeoutMs + lateBy
    const l = await lease(t, o)
    t.equal(l.status().source, 'cache', `late by ${lateBy} ms: started from the cache`)
    t.ok(await until(() => l.status().zookeeperConnected, lateBy + 8000), `late by ${lateBy} ms: the same client connected when the answer came`)
    proxy.delayMs = 0
    t.ok(await until(() => l.status().source === 'zookeeper' && l.status().lastHeartbeat !== undefined, 5000), 'registered')
    t.ok(issuing(l))
  }
})

t.test('connections reset and restored within 200 ms, again and again: the lease lives and ends up connected', async (t) => {
  const proxy = await zkProxy()
  t.teardown(() => proxy.close())
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, zkConnectTimeoutMs: 500, heartbeatIntervalMs: 200 })
  const l = await lease(t, o)
  for (let i = 0; i < 10; i++) {
    proxy.block()
    await sleep(20 + (i * 17) % 180)
    proxy.unblock()
    await sleep(150)
  }
  t.ok(await until(() => l.status().zookeeperConnected, 8000), 'connected again')
  t.ok(issuing(l))
  t.equal(l.status().unavailable, undefined)
})

t.test('a pause longer than the session timeout stops issuing until our session is seen holding the node again', async (t) => {
  let offset = 0
  const o = options({ heartbeatIntervalMs: 200, zkSessionTimeoutMs: 2000, clock: () => Date.now() + offset })
  const l = await lease(t, o)
  t.ok(issuing(l, o.clock()), 'issuing')
  offset = 5000 // the wall clock moves on 5 s while nothing ran: a pause, as after SIGSTOP or a long GC
  t.notOk(issuing(l, o.clock()), 'no ID right after the pause, before any check')
  t.match(l.status().unavailable, /nothing recorded for \d+ ms, longer than the ZooKeeper session timeout/)
  t.ok(await until(() => l.status().unavailable === undefined, 3000), 'resumed once the ephemeral node is seen to be ours')
  t.ok(issuing(l, o.clock()))
})

t.test('restartWindow: one heartbeat past the cache file; without it, past time recorded ahead of the clock and past now plus that', async (t) => {
  const o = { heartbeatIntervalMs: 3000, aheadMs: 999 }
  t.equal(restartWindow(undefined, false, { heartbeatIntervalMs: 3000 }, 50_000), 0, 'nothing recorded, nothing ahead: no window')
  t.equal(restartWindow(10_000, true, o, 50_000), 13_001, 'the cache file holds what was recorded ahead: one heartbeat past it')
  t.equal(restartWindow(10_000, false, { heartbeatIntervalMs: 3000 }, 50_000), 13_001, 'nothing is recorded ahead of the clock: ZooKeeper\'s time is enough')
  t.equal(restartWindow(49_000, false, o, 50_000), 49_000 + 3000 + 1 + 999, 'ZooKeeper current: past its time, a heartbeat, and what the cache file may have held beyond it')
  t.equal(restartWindow(10_000, false, o, 50_000), 50_000 + 999 + 1, 'ZooKeeper stale (it was away): past now plus what the old life may have issued ahead of its clock')
  t.equal(restartWindow(undefined, false, o, 50_000), 51_000, 'no record at all')
})

t.test('a seconds layout: a restart that lost its cache file starts after the second the old life was issuing in', async (t) => {
  const layout = parseLayout('time=32s,worker=10,sequence=21,epoch=1700000000000', { twepoch: 0, vestaVersion: 0, vestaGenMethod: 0, now: Date.now() })
  let offset = 0
  const o = options({ layout, aheadMs: layout.unitMs - 1, clock: () => Date.now() + offset })
  const first = await acquireWorkerLease(o)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const stored = (await zkc.data(`/snowflake/${o.name}/forever/10.1.2.3:8080-0000000000`)).timestamp as number
  // 3.2 s on, before the next beat reaches ZooKeeper: the generator begins a second past what is
  // recorded and records that second's last millisecond, in the cache file first.
  offset = 3200
  const end = Math.floor(o.clock() / 1000) * 1000 + 999
  t.ok(end > stored + HEARTBEAT, 'the second ends past what ZooKeeper\'s time allows')
  first.extend(end)
  t.equal(readWorkerCache(o.cacheDir)?.lastTimestamp, end, 'recorded in the cache file')
  await first.close()
  t.equal((await zkc.data(`/snowflake/${o.name}/forever/10.1.2.3:8080-0000000000`)).timestamp, stored, 'ZooKeeper never heard of it')
  const again = await lease(t, { ...o, cacheDir: tempDir('leaf-cache-') })
  t.equal(again.workerId, 0)
  t.ok(again.notBefore > end, `notBefore ${again.notBefore} is past the old life's last second (${end})`)
})

t.test('a pause is judged by the clock, not by time recorded ahead of it', async (t) => {
  let offset = 0
  const o = options({ heartbeatIntervalMs: 200, zkSessionTimeoutMs: 2000, aheadMs: 20_000, clock: () => Date.now() + offset })
  const l = await lease(t, o)
  l.extend(o.clock() + 15_000) // borrowed far ahead
  t.ok(issuing(l, o.clock()), 'issuing')
  offset = 5000 // a pause longer than the session timeout, though less than the time recorded ahead
  t.notOk(issuing(l, o.clock() + 16_000), 'no ID right after the pause')
  t.match(l.status().unavailable, /nothing recorded for \d+ ms, longer than the ZooKeeper session timeout/)
  t.ok(await until(() => l.status().unavailable === undefined, 3000), 'resumed once the ephemeral node is seen to be ours')
})

t.test('ZooKeeper cut off: the lease keeps serving and keeps the cache current; connected again after', async (t) => {
  const proxy = await zkProxy()
  t.teardown(() => proxy.close())
  const o = options({ zkAddress: `127.0.0.1:${proxy.port}`, heartbeatIntervalMs: 200, zkSessionTimeoutMs: 6000 })
  const changes: boolean[] = []
  const l = await lease(t, o)
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
