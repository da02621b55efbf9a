import { join } from 'node:path'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { leafLayout } from '../../src/layout/layout.js'
import { createDbLeaseStore } from '../../src/snowflake/worker-id/db-lease/db-lease-store.js'
import { createZookeeperLeaseStore } from '../../src/snowflake/worker-id/zookeeper-lease/zookeeper-lease-store.js'
import { withTimeout } from '../../src/timers.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { TEST_MYSQL } from '../helpers/mysql.js'
import { createProxy } from '../helpers/tcp-proxy.js'
import { TEST_ZK_HOST, TEST_ZK_PORT } from '../helpers/zookeeper.js'
import { LeaseRefused } from '../../src/errors.js'
import { sleep } from '../helpers/time.js'

const LEAF = leafLayout(1288834974657)

// What a recyclable lease shows through the service: /api/snowflake/status, /cache, /readyz,
// the ID route and /metrics, in process on the embedded store; and the pools' refusals.

t.test('a db-lease instance shows its lease, and once it is lost answers WORKER_LEASE_LOST everywhere', async (t) => {
  const dir = tempDir('leaf-lease-views-')
  const app = await buildApp(testConfig({
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker-id.source': 'db-lease',
    'leaf.snowflake.worker-id.min': 7,
    'leaf.snowflake.worker-id.max': 9,
    'leaf.snowflake.cache.dir': join(dir, 'cache'),
    'leaf.jdbc.url': `sqlite:${join(dir, 'leaf.db')}`,
  }), { logger: silentLogger })
  t.teardown(() => app.close())

  const status = (await app.inject('/api/snowflake/status')).json()
  t.match(status, { workerId: 7, source: 'db-lease', issuing: true, lease: { range: [7, 9], pool: /^sqlite:.*leaf_worker_lease \(pool leaf\)$/ } })
  t.ok(Date.parse(status.lease.expiresAt) > Date.now(), 'the lease runs into the future')
  t.ok(status.lease.issuedUntil > Date.now(), 'issuedUntil is ahead of the clock: the window until the next possible fence')

  const page = (await app.inject('/cache')).body
  t.match(page, /badge ok">leased</)
  t.match(page, /ids 7–9/)
  t.match(page, /issued until<\/dt><dd>\d+ \(\d{4}-/)
  t.equal((await app.inject('/readyz')).statusCode, 200)
  t.match((await app.inject('/metrics')).body, /\nleaf_ready 1\n/)
  const id = (await app.inject('/api/snowflake/get/k'))
  t.equal(id.statusCode, 200)
  t.equal(Number((BigInt(id.body) >> 12n) & 1023n), 7, 'the ID carries the leased worker id')
  t.match((await app.inject('/metrics')).body, /leaf_snowflake_lease_claims_total\{result="claimed"\} 1\n/)

  await app.leaf.snowflake?.lease.close()
  const ready = await app.inject('/readyz')
  t.equal(ready.statusCode, 503)
  t.match(ready.json(), { modes: { snowflake: { ready: false, reason: /^no snowflake ID from the worker-id lease now: the lease is closed/ } } })
  t.match((await app.inject('/metrics')).body, /\nleaf_ready 0\n/, 'leaf_ready follows /readyz')
  const refused = await app.inject('/api/snowflake/get/k2')
  t.equal(refused.statusCode, 503)
  t.equal(refused.json().error, 'WORKER_LEASE_LOST')
  t.match((await app.inject('/cache')).body, /badge bad">lease lost</)
  t.match((await app.inject('/api/snowflake/status')).json(), { issuing: false, lease: { expiresAt: null } })
  t.match((await app.inject('/metrics')).body, /leaf_snowflake_lease_expiry_seconds 0\n/)
})

t.test('db-lease on a MySQL database that does not exist: the driver\'s error, nothing left open', async (t) => {
  const url = new URL(TEST_MYSQL)
  const err = await createDbLeaseStore({
    store: { kind: 'mysql', hosts: [{ host: url.hostname, port: Number(url.port) }], user: url.username, password: url.password, database: 'leaf_no_such_database' },
    pool: 'leaf',
    ttlMs: 3000,
    connectTimeoutMs: 1000,
    queryTimeoutMs: 1000,
    layout: LEAF,
  }).then(() => undefined, (e: unknown) => e)
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'ER_BAD_DB_ERROR' } })
})

t.test('zookeeper-lease with ZooKeeper silent at start: refused within the connect timeout, naming the address', async (t) => {
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })
  // An unconnected client is only closed once it connects (zookeeper-client.ts): let it, at the end.
  t.teardown(async () => {
    proxy.unblock()
    await new Promise((resolve) => setTimeout(resolve, 1500))
    await proxy.close()
  })
  proxy.block()
  const started = performance.now()
  const err = await createZookeeperLeaseStore({
    address: `127.0.0.1:${proxy.port}`,
    name: `lease-views-${process.pid}`,
    ttlMs: 3000,
    connectTimeoutMs: 300,
    logger: silentLogger,
    layout: LEAF,
  }).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused)
  t.equal((err as LeaseRefused).code, 'LEASE_STORE_UNAVAILABLE')
  t.match((err as Error).message, new RegExp(`ZooKeeper at 127\\.0\\.0\\.1:${proxy.port} did not answer within 300 ms`))
  const tookMs = performance.now() - started
  t.ok(tookMs >= 290 && tookMs < 300 + 500, `refused at the connect timeout (300 ms), not much later (${Math.round(tookMs)} ms; 500 ms of scheduling slack)`)
})

t.test('zookeeper-lease: a set-up call answered slowly at start takes what is left of the connect timeout, not the renewal\'s per-call bound', async (t) => {
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST, protocol: 'zookeeper' })
  t.teardown(() => proxy.close())
  // TTL 2000 ms: one renewal call may take 667 ms. The first create of the tree's set-up is held 1200 ms.
  const held = proxy.holdStatements({ match: /^create$/, holdMs: 1200 })
  const pool = await createZookeeperLeaseStore({
    address: `127.0.0.1:${proxy.port}`,
    name: `lease-slow-setup-${process.pid}-${Date.now()}`,
    ttlMs: 2000,
    connectTimeoutMs: 5000,
    logger: silentLogger,
    layout: LEAF,
  })
  t.teardown(() => pool.close())
  t.equal(held.length, 1, 'the set-up\'s first create was held')
  t.ok(held[0]?.deliveredAt !== undefined && held[0].deliveredAt - held[0].heldAt >= 1150, 'for longer than a renewal call may take')
  t.ok(await pool.claim(1, 'owner-a', '10.0.0.1:1'), 'and the pool then leases')
})

t.test('zookeeper-lease: a connection gone silent is replaced by a new session after one session timeout', async (t) => {
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })
  t.teardown(() => proxy.close())
  const pool = await createZookeeperLeaseStore({
    address: `127.0.0.1:${proxy.port}`,
    name: `lease-silent-${process.pid}-${Date.now()}`,
    ttlMs: 2000,
    connectTimeoutMs: 2000,
    logger: silentLogger,
    layout: LEAF,
  })
  t.teardown(() => pool.close())
  const ttl = pool.ttlMs()
  t.ok(await pool.claim(3, 'owner-a', '10.0.0.1:1'), 'claimed')
  t.equal(await pool.renew(3, 'owner-a', 1), true)

  t.equal(proxy.blackhole(), 1, 'the one connection goes silent')
  const silent = await Promise.race([pool.renew(3, 'owner-a', 2), sleep(500).then(() => 'no answer')])
  t.equal(silent, 'no answer', 'the library keeps the silent connection: no answer, no error')
  await sleep(ttl + 100)
  // Silent for a whole session timeout: a probe goes unanswered too, and a new session starts.
  await t.rejects(withTimeout(pool.renew(3, 'owner-a', 3), 5000, 'no answer'), /went silent: reconnecting with a new session/)
  for (let i = 0; !(pool.connected?.() ?? false) && i < 50; i++) await sleep(100)
  t.equal(pool.connected?.(), true, 'the new session is connected, on a new connection')
  // The holder node belongs to the old session.
  t.equal(await withTimeout(pool.renew(3, 'owner-a', 3), 5000, 'the new session did not answer'), false, 'no longer ours')
  // Once ZooKeeper expires the old session, the id is free to claim again.
  let claimed = await pool.claim(3, 'owner-b', '10.0.0.1:1')
  for (let i = 0; claimed === undefined && i < 40; i++) {
    await sleep(200)
    claimed = await pool.claim(3, 'owner-b', '10.0.0.1:1')
  }
  t.same(claimed, { issuedUntil: 1, by: 'owner-a' }, 'the old holder\'s last confirmed issuedUntil came with it')
})
