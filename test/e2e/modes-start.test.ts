import { join } from 'node:path'
import t, { type Test } from 'tap'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { PrivateZooKeeper } from '../fault/services.js'
import { tempDir } from '../helpers/config.js'
import { freePort } from '../helpers/ports.js'
import { get, startServer, type ServerProcess } from '../helpers/server-process.js'
import { withSqlite } from '../helpers/sqlite.js'
import { until } from '../helpers/time.js'
import { uniqueName } from '../helpers/zookeeper.js'

// One mode failing does not take the other down: ZooKeeper unreachable at start (no cache
// file) leaves segment mode serving, snowflake answering SNOWFLAKE_NOT_READY and retrying.

function bothModes (zkAddress: string, store: string): string[] {
  return [
    '--server.port=0',
    '--leaf.segment.enable=true',
    `--leaf.jdbc.url=sqlite:${store}`,
    '--leaf.snowflake.enable=true',
    `--leaf.name=${uniqueName()}`,
    `--leaf.snowflake.zk.address=${zkAddress}`,
    '--leaf.snowflake.ip=127.0.0.1',
    '--leaf.snowflake.port=9700',
    '--leaf.snowflake.zk.connect-timeout-ms=300',
    '--leaf.snowflake.zk.session-timeout-ms=2000',
    `--leaf.snowflake.cache.dir=${tempDir()}`,
  ]
}

interface Readyz { status: string, reason?: string, modes: Record<string, { ready: boolean, reason?: string }> }

/** Segment serves a tag inserted after the start, on its first request; snowflake is 503 with the reason. */
async function checkSegmentServesSnowflakeWaits (t: Test, server: ServerProcess, store: string): Promise<void> {
  withSqlite(store, (db) => db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, ?, ?)').run('late', 100, 10))
  const segment = await get(`${server.url}/api/segment/get/late`)
  t.equal(segment.status, 200, 'segment serves a tag inserted after the start, on its first request')
  t.equal(segment.body, '100')

  const snowflake = await get(`${server.url}/api/snowflake/get/k`)
  t.equal(snowflake.status, 503)
  const error = JSON.parse(snowflake.body) as { error: string, message: string }
  t.equal(error.error, 'SNOWFLAKE_NOT_READY')
  t.match(error.message, /holds no worker id yet: ZooKeeper could not be reached and the worker-id cache cannot stand in \(LEASE_CACHE_UNUSABLE\); retrying in the background/)
  t.match(error.message, /Segment mode is not affected/)

  const ready = await get(`${server.url}/readyz`)
  t.equal(ready.status, 503, 'not ready as a whole: a balancer sends it no snowflake traffic')
  const body = JSON.parse(ready.body) as Readyz
  t.equal(body.modes.segment?.ready, true)
  t.equal(body.modes.snowflake?.ready, false)
  t.match(body.modes.snowflake?.reason, /^SNOWFLAKE_NOT_READY: snowflake mode holds no worker id yet/)
  t.equal((await get(`${server.url}/readyz?mode=segment`)).status, 200, 'segment alone is ready')
  t.equal((await get(`${server.url}/readyz?mode=snowflake`)).status, 503)
}

t.test('ZooKeeper on a closed port: segment serves, snowflake 503 SNOWFLAKE_NOT_READY, /readyz names snowflake', async (t) => {
  const closed = await freePort()
  const store = join(tempDir(), 'leaf.db')
  const server = await startServer({ args: bothModes(`127.0.0.1:${closed}`, store) })
  t.teardown(() => server.stop())
  await checkSegmentServesSnowflakeWaits(t, server, store)
  // The attempts go on in the background, with a backoff.
  t.ok(await until(() => server.output.some((l) => l.includes('still no worker id; retrying in the background')), 10_000), 'retried in the background')
  t.equal((await get(`${server.url}/api/snowflake/get/k`)).status, 503, 'still 503')
  t.equal(await server.stop('SIGTERM'), 0, 'a graceful stop while retrying')
})

t.test('ZooKeeper comes up after the start: snowflake serves once it registers', async (t) => {
  const port = await freePort()
  const store = join(tempDir(), 'leaf.db')
  const server = await startServer({ args: bothModes(`127.0.0.1:${port}`, store) })
  t.teardown(() => server.stop())
  await checkSegmentServesSnowflakeWaits(t, server, store)

  const zookeeper = new PrivateZooKeeper(tempDir('leaf-zk-late-'), port)
  t.teardown(() => zookeeper.stop())
  await zookeeper.start()
  const upAt = Date.now()
  t.ok(await until(async () => (await get(`${server.url}/api/snowflake/get/k`)).status === 200, 45_000, 200),
    'snowflake serves after ZooKeeper is up')
  t.comment(`snowflake served ${Date.now() - upAt} ms after ZooKeeper served`)
  const id = BigInt((await get(`${server.url}/api/snowflake/get/k`)).body)
  t.equal(decodeSnowflakeId(id).workerId, 0, 'the worker id ZooKeeper gave: the first node of a new tree')
  t.equal((await get(`${server.url}/readyz`)).status, 200, 'ready as a whole')
  t.ok(server.output.some((l) => l.includes('worker id held after a start without one; serving')))
  t.equal((await get(`${server.url}/api/segment/get/late`)).body, '101', 'segment served throughout')
  t.equal(await server.stop('SIGTERM'), 0)
})
