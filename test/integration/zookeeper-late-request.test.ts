import t from 'tap'
import { leafLayout } from '../../src/layout/layout.js'
import { ownerOf, sessionIdOf } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { createZookeeperLeaseStore } from '../../src/snowflake/worker-id/zookeeper-lease/zookeeper-lease-store.js'
import { silentLogger } from '../helpers/logger.js'
import { createProxy } from '../helpers/tcp-proxy.js'
import { TEST_ZK, TEST_ZK_HOST, TEST_ZK_PORT, inspector, uniqueName, zk } from '../helpers/zookeeper.js'
import { sleep, until } from '../helpers/time.js'

// The edge of the zookeeper-lease argument (docs/worker-ids.md) we were least sure of: a
// holder's renewal, a transaction that rewrites issued/<id>, is held in the network past its
// session's expiry and delivered after another instance has claimed the id and recorded more.
// Landed, it would lower the new holder's issuedUntil. ZooKeeper must not run it.

const LEAF = leafLayout(1288834974657)

t.test('zookeeper-lease: a renewal held past its session\'s expiry, delivered after the next holder recorded more, changes nothing', async (t) => {
  const name = uniqueName()
  const base = `/snowflake/${name}/lease`
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST, protocol: 'zookeeper' })
  const zkc = await inspector()
  const p1 = await createZookeeperLeaseStore({ address: `127.0.0.1:${proxy.port}`, name, ttlMs: 2000, connectTimeoutMs: 5000, logger: silentLogger, layout: LEAF })
  const p2 = await createZookeeperLeaseStore({ address: TEST_ZK, name, ttlMs: 4000, connectTimeoutMs: 5000, logger: silentLogger, layout: LEAF })
  t.teardown(async () => {
    await p1.close()
    await p2.close()
    await proxy.close()
    await zkc.close()
  })
  t.ok(await p1.claim(0, 'c1', 'a:1'))
  t.ok(await p1.renew(0, 'c1', 1000))
  const held = proxy.holdStatements({ match: /^multi$/, holdMs: 8000 })
  // Its reads pass; its transaction is held, and with it everything the session sends after (pings).
  const renewal = p1.renew(0, 'c1', 2000).then((ok) => ok, () => 'no answer')
  t.ok(await until(async () => held.length === 1, 3000), 'the renewal\'s transaction is held')
  t.ok(await until(async () => (await zkc.children(`${base}/holders`)).length === 0, 10_000), 'the session expired: its holder node is gone')
  t.ok(await p2.claim(0, 'c2', 'a:2'), 'the next holder claims the id')
  t.ok(await p2.renew(0, 'c2', 99_999), 'and records more')
  await held[0]?.delivered
  await sleep(500)
  t.ok(held[0]?.serverGoneFirst, 'ZooKeeper had closed the expired session\'s connection: the held bytes reached nothing')
  t.match(await zkc.data(`${base}/issued/0`), { issuedUntil: 99_999, by: 'c2' }, 'issued/0 is the new holder\'s')
  const node = await zk.getWithStat(zkc, `${base}/holders/0`)
  t.match(JSON.parse(String(node?.data)), { owner: 'c2' })
  t.not(node === undefined ? undefined : ownerOf(node.stat), sessionIdOf(zkc), 'an ephemeral node of the new holder\'s session')
  t.not(await renewal, true, 'the late renewal was never confirmed to its holder')
  t.equal(await p1.renew(0, 'c1', 3000), false, 'and its holder cannot renew any more')
})

t.test('zookeeper-lease: a renewal held within its session\'s timeout lands late, in order, and only raises the record', async (t) => {
  const name = uniqueName()
  const base = `/snowflake/${name}/lease`
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST, protocol: 'zookeeper' })
  const zkc = await inspector()
  const p1 = await createZookeeperLeaseStore({ address: `127.0.0.1:${proxy.port}`, name, ttlMs: 6000, connectTimeoutMs: 5000, logger: silentLogger, layout: LEAF })
  t.teardown(async () => {
    await p1.close()
    await proxy.close()
    await zkc.close()
  })
  t.ok(await p1.claim(0, 'c1', 'a:1'))
  t.ok(await p1.renew(0, 'c1', 1000))
  // Longer than two of the pool's call timeouts (TTL / 3 each: the transaction, then the read of its retry), shorter than the session.
  const held = proxy.holdStatements({ match: /^multi$/, holdMs: 4500 })
  const renewal = await p1.renew(0, 'c1', 2000).then((ok) => ok, () => 'no answer')
  t.equal(renewal, 'no answer', 'the caller gave up on it')
  t.match(await zkc.data(`${base}/issued/0`), { issuedUntil: 1000 })
  await held[0]?.delivered
  t.notOk(held[0]?.serverGoneFirst, 'the session was alive when it was delivered')
  t.ok(await until(async () => (await zkc.data(`${base}/issued/0`)).issuedUntil === 2000, 3000), 'it ran, raising issuedUntil: never lower')
  t.same(await zkc.children(`${base}/holders`), ['0'], 'the session still holds the id')
})
