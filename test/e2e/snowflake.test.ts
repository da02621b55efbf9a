import Database from 'better-sqlite3'
import t from 'tap'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { readWorkerCache, writeWorkerCache } from '../../src/snowflake/worker-id/cache-file.js'
import { createProxy } from '../helpers/tcp-proxy.js'
import { tempDir } from '../helpers/config.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'
import { get, pool, startServer, type ServerProcess } from '../helpers/server-process.js'
import { TEST_ZK, TEST_ZK_HOST, TEST_ZK_PORT, inspector, uniqueName, zk } from '../helpers/zookeeper.js'
import { CreateMode } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { textIds } from '../helpers/ids.js'

function snowflakeArgs (name: string, port: number, extra: string[] = []): string[] {
  return [
    '--server.port=0',
    '--leaf.segment.enable=false',
    '--leaf.snowflake.enable=true',
    `--leaf.name=${name}`,
    `--leaf.snowflake.zk.address=${TEST_ZK}`,
    '--leaf.snowflake.ip=127.0.0.1',
    `--leaf.snowflake.port=${port}`,
    '--leaf.snowflake.zk.session-timeout-ms=2000',
    ...extra,
  ]
}

t.test('three instances with ZooKeeper: distinct worker ids, no collision under concurrent load', async (t) => {
  const name = uniqueName()
  const cacheDirs = [tempDir(), tempDir(), tempDir()]
  const servers: ServerProcess[] = []
  for (const [i, dir] of cacheDirs.entries()) {
    servers.push(await startServer({ args: snowflakeArgs(name, 9001 + i, [`--leaf.snowflake.cache.dir=${dir}`]) }))
  }
  t.teardown(() => Promise.all(servers.map((s) => s.stop())))
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  t.same(await zkc.children(`/snowflake/${name}/forever`), ['127.0.0.1:9001-0000000000', '127.0.0.1:9002-0000000001', '127.0.0.1:9003-0000000002'])
  t.same(await zkc.children(`/snowflake/${name}/temporary`), ['127.0.0.1:9001', '127.0.0.1:9002', '127.0.0.1:9003'])

  const perServer = await Promise.all(servers.map((s) => pool(2100, 8, (i) => get(i % 21 === 0
    ? `${s.url}/api/snowflake/get/any-key?count=50`
    : `${s.url}/api/snowflake/get/any-key`))))
  const all: bigint[] = []
  for (const [i, answers] of perServer.entries()) {
    t.ok(answers.every((a) => a.status === 200), `instance ${i}: no failed request`)
    const ids = answers.flatMap((a) => textIds(a.body).map(BigInt))
    t.ok(ids.every((id) => decodeSnowflakeId(id).workerId === i), `instance ${i}: every ID carries worker id ${i}`)
    for (const a of answers) {
      const batch = textIds(a.body).map(BigInt)
      if (batch.some((id, j) => j > 0 && id <= (batch[j - 1] as bigint))) t.fail('a batch is not increasing')
    }
    all.push(...ids)
  }
  t.equal(all.length, 3 * (2000 + 100 * 50))
  t.equal(new Set(all).size, all.length, 'no duplicate across instances')
})

t.test('SIGKILL: the ephemeral node goes with the session; a restart keeps the worker id', async (t) => {
  const name = uniqueName()
  const cacheDir = tempDir()
  const args = snowflakeArgs(name, 9100, [`--leaf.snowflake.cache.dir=${cacheDir}`])
  const first = await startServer({ args })
  const before = BigInt((await get(`${first.url}/api/snowflake/get/k`)).body)
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const temporary = `/snowflake/${name}/temporary`
  t.same(await zkc.children(temporary), ['127.0.0.1:9100'])
  await first.stop('SIGKILL')
  const killedAt = Date.now()
  while ((await zkc.children(temporary)).length > 0 && Date.now() - killedAt < 10_000) await new Promise((resolve) => setTimeout(resolve, 100))
  t.same(await zkc.children(temporary), [], `ephemeral node gone after the session timeout (${Date.now() - killedAt} ms)`)

  const recorded = readWorkerCache(cacheDir)?.lastTimestamp as number
  const second = await startServer({ args })
  t.teardown(() => second.stop())
  const after = BigInt((await get(`${second.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(after).workerId, 0, 'same worker id')
  t.ok(decodeSnowflakeId(after).timestamp >= recorded + 3000,
    `the first ID of the second life is at or after the cached lastTimestamp plus the heartbeat interval (${decodeSnowflakeId(after).timestamp - recorded} ms after it)`)
  t.ok(after > before, 'IDs of the second life come after the first life\'s')
  t.same(await zkc.children(temporary), ['127.0.0.1:9100'], 'ephemeral node back')
})

t.test('SIGTERM removes the ephemeral node at once and exits 0', async (t) => {
  const name = uniqueName()
  const server = await startServer({ args: snowflakeArgs(name, 9200, [`--leaf.snowflake.cache.dir=${tempDir()}`]) })
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  t.equal(await server.stop('SIGTERM'), 0)
  t.same(await zkc.children(`/snowflake/${name}/temporary`), [], 'gone before the process exited')
})

t.test('ZooKeeper down at start: the cached worker id is used; without a cache, 503 SNOWFLAKE_NOT_READY', async (t) => {
  const name = uniqueName()
  const cacheDir = tempDir()
  const up = await startServer({ args: snowflakeArgs(name, 9300, [`--leaf.snowflake.cache.dir=${cacheDir}`]) })
  await up.stop()
  t.equal(readWorkerCache(cacheDir)?.workerId, 0)
  const down = ['--leaf.snowflake.zk.address=127.0.0.1:1', '--leaf.snowflake.zk.connect-timeout-ms=500']
  const fromCache = await startServer({ args: [...snowflakeArgs(name, 9300, [`--leaf.snowflake.cache.dir=${cacheDir}`]), ...down] })
  t.teardown(() => fromCache.stop())
  const id = BigInt((await get(`${fromCache.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(id).workerId, 0)
  t.ok(fromCache.output.some((l) => l.includes('using the cached worker id')))

  const waiting = await startServer({ args: [...snowflakeArgs(name, 9301, [`--leaf.snowflake.cache.dir=${tempDir()}`]), ...down] })
  t.teardown(() => waiting.stop())
  const answer = await get(`${waiting.url}/api/snowflake/get/k`)
  t.equal(answer.status, 503)
  t.match(JSON.parse(answer.body), { error: 'SNOWFLAKE_NOT_READY', message: /ZooKeeper could not be reached and the worker-id cache cannot stand in/ })
  t.ok(waiting.output.some((l) => /ZooKeeper unreachable \(.*\) and no cached worker id/.test(l)), 'the log names the cause')
})

t.test('two live processes registering as one ip:port: the second waits for the first\'s session, then refuses naming both', async (t) => {
  const name = uniqueName()
  const args = (dir: string) => snowflakeArgs(name, 9400, [`--leaf.snowflake.cache.dir=${dir}`])
  const first = await startServer({ args: args(tempDir()) })
  t.teardown(() => first.stop())
  const refused = await startServer({ args: args(tempDir()) }).then(() => undefined, (e: Error) => e)
  t.match(refused?.message, /exited with 1 before listening[\s\S]*start refused: another live instance holds \/snowflake\/leaf-test-\w+\/temporary\/127\.0\.0\.1:9400 \(ZooKeeper session 0x[0-9a-f]+.*this instance \(session 0x[0-9a-f]+\)/)
  const id = BigInt((await get(`${first.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(id).workerId, 0, 'the first keeps serving with its worker id')
})

t.test('a restart whose cache is newer than ZooKeeper\'s node (heartbeats while ZooKeeper was away) waits past the cache', async (t) => {
  const name = uniqueName()
  const cacheDir = tempDir()
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })
  t.teardown(() => proxy.close())
  const args = [...snowflakeArgs(name, 9500, [`--leaf.snowflake.cache.dir=${cacheDir}`, '--leaf.snowflake.heartbeat-interval-ms=200']),
    `--leaf.snowflake.zk.address=127.0.0.1:${proxy.port}`]
  const first = await startServer({ args })
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  const node = `/snowflake/${name}/forever/127.0.0.1:9500-0000000000`
  proxy.block()
  await new Promise((resolve) => setTimeout(resolve, 1500))
  let last = 0n
  for (let i = 0; i < 50; i++) last = BigInt((await get(`${first.url}/api/snowflake/get/k`)).body)
  await first.stop('SIGKILL')
  const zkTime = (await zkc.data(node)).timestamp as number
  const cached = readWorkerCache(cacheDir)?.lastTimestamp as number
  t.ok(cached > zkTime + 1000, `the cache is ahead of ZooKeeper's node (${cached - zkTime} ms)`)
  proxy.unblock()
  const second = await startServer({ args })
  t.teardown(() => second.stop())
  const first2 = BigInt((await get(`${second.url}/api/snowflake/get/k`)).body)
  t.ok(decodeSnowflakeId(first2).timestamp >= cached + 200, 'the second life starts past the cache\'s time plus one heartbeat')
  t.ok(first2 > last, 'after every ID of the first life')
})

t.test('a start from the cache that ZooKeeper contradicts: 503 WORKER_ID_UNAVAILABLE and /readyz 503, no ID', async (t) => {
  const name = uniqueName()
  const cacheDir = tempDir()
  const proxy = await createProxy(TEST_ZK_PORT, { targetHost: TEST_ZK_HOST })
  t.teardown(() => proxy.close())
  proxy.block()
  // This ip:port's worker id in ZooKeeper is 1; the cache says 0.
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  await zk.mkdirp(zkc, `/snowflake/${name}/forever`)
  await zk.create(zkc, `/snowflake/${name}/forever/127.0.0.9:1-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
  await zk.create(zkc, `/snowflake/${name}/forever/127.0.0.1:9600-`, '{}', CreateMode.PERSISTENT_SEQUENTIAL)
  writeWorkerCache(cacheDir, { workerId: 0, lastTimestamp: Date.now() - 5000, address: '127.0.0.1:9600' })
  const server = await startServer({
    args: [...snowflakeArgs(name, 9600, [`--leaf.snowflake.cache.dir=${cacheDir}`, '--leaf.snowflake.heartbeat-interval-ms=200', '--leaf.snowflake.zk.connect-timeout-ms=300']),
      `--leaf.snowflake.zk.address=127.0.0.1:${proxy.port}`],
  })
  t.teardown(() => server.stop())
  t.equal((await get(`${server.url}/api/snowflake/get/k`)).status, 200, 'served from the cache while ZooKeeper is away')
  proxy.unblock()
  let answer = await get(`${server.url}/api/snowflake/get/k`)
  const until = Date.now() + 8000
  while (answer.status === 200 && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    answer = await get(`${server.url}/api/snowflake/get/k`)
  }
  t.equal(answer.status, 503)
  t.equal(JSON.parse(answer.body).error, 'WORKER_ID_UNAVAILABLE')
  t.equal((await get(`${server.url}/api/snowflake/get/k?count=5`)).status, 503, 'batches too')
  const ready = await get(`${server.url}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { modes: { snowflake: { ready: false, reason: /another instance may hold this worker id/ } } })
  t.ok(server.output.some((l) => l.includes('snowflake issuing stopped')), 'logged')
})

t.test('a Java Leaf cache file (no lastTimestamp) with ZooKeeper down: not used, snowflake waits for ZooKeeper', async (t) => {
  const cacheDir = tempDir()
  writeFileSync(join(cacheDir, 'workerID.properties'), '#Leaf\nworkerID=3\n')
  const down = ['--leaf.snowflake.zk.address=127.0.0.1:1', '--leaf.snowflake.zk.connect-timeout-ms=500']
  const waiting = await startServer({ args: [...snowflakeArgs(uniqueName(), 9700, [`--leaf.snowflake.cache.dir=${cacheDir}`]), ...down] })
  t.teardown(() => waiting.stop())
  t.match(JSON.parse((await get(`${waiting.url}/api/snowflake/get/k`)).body), { error: 'SNOWFLAKE_NOT_READY' })
  t.ok(waiting.output.some((l) => /ZooKeeper unreachable .* holds no lastTimestamp/.test(l)), 'the log names the cause')
})

t.test('db-lease on SQLite: the status shows the lease, /metrics its three metrics, and SIGTERM releases the row', async (t) => {
  const dir = tempDir()
  const dbPath = join(dir, 'leaf.db')
  const name = uniqueName()
  const args = [
    '--server.port=0',
    '--leaf.segment.enable=false',
    '--leaf.snowflake.enable=true',
    `--leaf.name=${name}`,
    '--leaf.snowflake.worker-id.source=db-lease',
    `--leaf.jdbc.url=sqlite:${dbPath}`,
    `--leaf.snowflake.cache.dir=${dir}`,
    '--leaf.snowflake.ip=127.0.0.1',
    '--leaf.snowflake.port=9800',
    '--leaf.snowflake.worker-id.min=5',
    '--leaf.snowflake.worker-id.max=6',
    '--leaf.snowflake.lease.ttl-ms=3000',
    '--leaf.snowflake.heartbeat-interval-ms=500',
  ]
  const server = await startServer({ args })
  t.teardown(() => server.stop())
  const first = BigInt((await get(`${server.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(first).workerId, 5, 'the lowest id of the range')

  const status = JSON.parse((await get(`${server.url}/api/snowflake/status`)).body)
  t.match(status, {
    workerId: 5,
    source: 'db-lease',
    issuing: true,
    unavailable: null,
    lease: { pool: `sqlite:${dbPath} leaf_worker_lease (pool ${name})`, range: [5, 6], expiresAt: String, issuedUntil: Number },
  })
  t.ok(Date.parse(status.lease.expiresAt) > Date.now(), 'the lease runs on')
  t.ok(status.lease.issuedUntil >= decodeSnowflakeId(first).timestamp, 'issuedUntil covers the IDs given')
  t.equal((await get(`${server.url}/readyz`)).status, 200)

  const samples = parseSamples((await get(`${server.url}/metrics`)).body)
  t.equal(valueOf(samples, 'leaf_snowflake_lease_claims_total', { result: 'claimed' }), 1)
  t.equal(valueOf(samples, 'leaf_snowflake_lease_lost_total'), 0)
  const expiry = valueOf(samples, 'leaf_snowflake_lease_expiry_seconds')
  t.ok(expiry !== undefined && expiry > 0 && expiry <= 3, `seconds left on the lease: ${expiry}`)

  let last = first
  for (let i = 0; i < 20; i++) last = BigInt((await get(`${server.url}/api/snowflake/get/k`)).body)
  t.equal(await server.stop('SIGTERM'), 0)
  const db = new Database(dbPath, { readonly: true })
  const row = db.prepare('SELECT owner, issued_until FROM leaf_worker_lease WHERE pool = ? AND worker_id = 5').get(name) as { owner: string | null, issued_until: number }
  db.close()
  t.equal(row.owner, null, 'the row was released (owner NULL)')
  t.ok(row.issued_until >= decodeSnowflakeId(last).timestamp, 'with a millisecond at or after the last ID')
  t.ok(server.output.some((l) => l.includes('worker-id lease released')), 'logged')

  const again = await startServer({ args })
  t.teardown(() => again.stop())
  const next = BigInt((await get(`${again.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(next).workerId, 5, 'the next start leases the cached id again')
  t.ok(next > last, 'after every ID of the first')
})
