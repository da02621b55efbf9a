import t from 'tap'
import { buildApp } from '../../src/app.js'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { readWorkerCache } from '../../src/snowflake/worker-id/cache-file.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'

// The clock stepping back at run time, through the HTTP route, with buildApp's injected clock.

t.test('the clock steps back at run time: 503 CLOCK_BACKWARDS, counted, and the heartbeat does not write the earlier time', async (t) => {
  const cacheDir = tempDir()
  let now = Date.now()
  const app = await buildApp(testConfig({
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker.id': 5,
    'leaf.snowflake.cache.dir': cacheDir,
    'leaf.snowflake.heartbeat-interval-ms': 100,
  }), { logger: silentLogger, clock: () => now })
  t.teardown(() => app.close())
  const start = now

  const first = await app.inject('/api/snowflake/get/k')
  t.equal(first.statusCode, 200)
  const decoded = decodeSnowflakeId(BigInt(first.body))
  t.same({ timestamp: decoded.timestamp, workerId: decoded.workerId }, { timestamp: start, workerId: 5 }, 'the injected clock\'s millisecond, the configured worker id')
  t.ok(decoded.sequence >= 0 && decoded.sequence < 100, `a new millisecond's sequence starts below 100, as Leaf's (${decoded.sequence})`)

  now = start + 50
  t.equal((await app.inject('/api/snowflake/get/k')).statusCode, 200)
  await new Promise((resolve) => setTimeout(resolve, 250)) // a few heartbeats at start + 50
  t.equal(readWorkerCache(cacheDir)?.lastTimestamp, start + 50, 'heartbeats record the injected clock')

  now = start - 1000
  const back = await app.inject('/api/snowflake/get/k')
  t.equal(back.statusCode, 503)
  t.same(back.json(), { error: 'CLOCK_BACKWARDS', message: 'The clock is 1050 ms behind the last ID issued; no ID until it catches up.' })
  t.equal((await app.inject('/api/snowflake/get/k?count=10')).statusCode, 503, 'batches too')
  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^leaf_snowflake_clock_backwards_total 2$/m, 'each refusal counted')
  t.match(metrics, /^leaf_id_errors_total\{mode="snowflake",code="CLOCK_BACKWARDS"\} 2$/m)

  await new Promise((resolve) => setTimeout(resolve, 250)) // heartbeats with the clock behind
  t.equal(readWorkerCache(cacheDir)?.lastTimestamp, start + 50, 'no heartbeat wrote the earlier time')

  now = start + 51
  const again = await app.inject('/api/snowflake/get/k')
  t.equal(again.statusCode, 200, 'served again once the clock is past the last ID')
  t.equal(decodeSnowflakeId(BigInt(again.body)).timestamp, start + 51)
})
