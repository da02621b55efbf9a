import { spawnSync } from 'node:child_process'
import t from 'tap'
import { Registry } from 'prom-client'
import { buildApp } from '../../src/app.js'
import { HotCounter, HotHistogram } from '../../src/metrics/hot-metrics.js'
import { DROPPED_DEFAULT_METRICS } from '../../src/metrics/metrics.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

// The hot families' text, then the whole /metrics of a running app, against Prometheus's own
// parser and linter (promtool, which scripts/test-services.sh installs);
// test/unit/hot-metrics.test.ts holds the hot families to prom-client's.

t.test('promtool parses and lints the registry\'s text for the hot families', async (t) => {
  const registry = new Registry()
  const counter = new HotCounter('leaf_ids_issued_total', 'IDs handed out.')
  const histogram = new HotHistogram('http_request_duration_seconds', 'HTTP request duration.', [0.0005, 0.001, 0.5])
  registry.registerMetric(counter as never)
  registry.registerMetric(histogram as never)
  counter.child({ mode: 'segment', key: 'a "quoted"\\key\nwith a new line' }).value += 2
  counter.child({ mode: 'snowflake', key: 'b' }).value += 1
  const ok = histogram.child({ method: 'GET', route: '/api/segment/get/:key', status_code: 200 })
  for (const v of [0.0001, 0.0007, 0.3, 9]) ok.observe(v)
  histogram.child({ method: 'GET', route: 'not_found', status_code: 404 }).observe(0.002)
  const text = await registry.metrics()
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' })
  t.equal(lint.error, undefined, 'promtool runs (scripts/test-services.sh installs it)')
  t.equal(lint.status, 0, `promtool: ${lint.stdout}${lint.stderr}`)
  const samples = parseSamples(text)
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { key: 'a "quoted"\\key\nwith a new line' }), 2, 'label values escaped')
  t.equal(valueOf(samples, 'http_request_duration_seconds_bucket', { route: '/api/segment/get/:key', le: '0.001' }), 2)
  t.equal(valueOf(samples, 'http_request_duration_seconds_bucket', { route: '/api/segment/get/:key', le: '+Inf' }), 4)
  t.equal(valueOf(samples, 'http_request_duration_seconds_count', { route: 'not_found', status_code: '404' }), 1)
})

t.test('promtool passes the whole /metrics of a running app, both modes, after traffic: prom-client\'s default families included', async (t) => {
  const app = await buildApp(testConfig({
    'leaf.segment.enable': true,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.cache.dir': tempDir(),
    'leaf.admin.token': 'promtool-token',
  }), { logger: silentLogger })
  t.teardown(() => app.close())
  const auth = { authorization: 'Bearer promtool-token' }
  t.equal((await app.inject({ method: 'POST', url: '/api/segment/tags', headers: auth, payload: { key: '42', step: 1000 } })).statusCode, 201)
  for (const url of ['/api/segment/get/order?count=300', '/api/segment/get/42', '/api/snowflake/get/a?count=5', '/api/snowflake/get/b']) {
    t.equal((await app.inject(url)).statusCode, 200, url)
  }
  t.equal((await app.inject('/api/segment/get/nope')).statusCode, 404)
  t.equal((await app.inject('/no/such/route')).statusCode, 404)
  for (const url of ['/cache', '/api/cache']) t.equal((await app.inject({ url, headers: auth })).statusCode, 200, url)
  const text = (await app.inject('/metrics')).body
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' })
  t.equal(lint.error, undefined, 'promtool runs (scripts/test-services.sh installs it)')
  t.equal(lint.status, 0, `promtool: ${lint.stdout}${lint.stderr}`)
  t.equal(`${lint.stdout}${lint.stderr}`, '', 'not a single remark')

  const samples = parseSamples(text)
  const names = new Set(samples.map((s) => s.name))
  for (const name of DROPPED_DEFAULT_METRICS) t.notOk(names.has(name), `${name} dropped`)
  t.ok(names.has('process_cpu_user_seconds_total') && names.has('nodejs_heap_size_used_bytes'), 'the other defaults stay')
  t.ok(names.has('nodejs_active_requests') || names.has('nodejs_active_handles') || names.has('nodejs_active_resources'), 'the families by type stay')
  for (const name of ['leaf_ids_issued_total', 'leaf_segment_step', 'leaf_snowflake_worker_id', 'http_request_duration_seconds_count', 'leaf_segment_store_regressions_total']) {
    t.ok(names.has(name), `${name} is in the text promtool read`)
  }
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: '42' }), 1)

  // Label values the service chooses: snake_case (error and driver codes in their own upper case);
  // a tag or key is the caller's, a route its pattern, le a bound.
  const free = new Set(['key', 'route', 'le'])
  const odd = samples.filter((s) => !/^(process|nodejs)_/.test(s.name))
    .flatMap((s) => Object.entries(s.labels).filter(([k, v]) => !free.has(k) && !/^([a-z0-9_]+|[A-Z0-9_]+)$/.test(v)).map(([k, v]) => `${s.name}{${k}="${v}"}`))
  t.same(odd, [], 'every label value snake_case')
  t.same(samples.filter((s) => s.name === 'leaf_segment_store_regressions_total').map((s) => s.labels.cause).sort(), ['max_id_went_back', 'store_changed'])
})
