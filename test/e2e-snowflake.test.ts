import t from 'tap'
import { decodeSnowflakeId } from '../src/snowflake/snowflake-generator.js'
import { readWorkerCache } from '../src/snowflake/worker-id/cache-file.js'
import { tempDir } from './helpers/config.js'
import { get, pool, startServer, type ServerProcess } from './helpers/server-process.js'
import { TEST_ZK, inspector, uniqueName } from './helpers/zookeeper.js'

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
    const ids = answers.flatMap((a) => a.body.split('\n').map(BigInt))
    t.ok(ids.every((id) => decodeSnowflakeId(id).workerId === i), `instance ${i}: every ID carries worker id ${i}`)
    for (const a of answers) {
      const batch = a.body.split('\n').map(BigInt)
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

  const second = await startServer({ args })
  t.teardown(() => second.stop())
  const after = BigInt((await get(`${second.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(after).workerId, 0, 'same worker id')
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

t.test('ZooKeeper down at start: the cached worker id is used; no cache refuses the start', async (t) => {
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

  const refused = await startServer({ args: [...snowflakeArgs(name, 9301, [`--leaf.snowflake.cache.dir=${tempDir()}`]), ...down] }).then(() => undefined, (e: Error) => e)
  t.match(refused?.message, /exited with 1 before listening[\s\S]*start refused: ZooKeeper unreachable .* no cached worker id/)
})
