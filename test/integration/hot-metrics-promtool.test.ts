import { spawnSync } from 'node:child_process'
import t from 'tap'
import { Registry } from 'prom-client'
import { HotCounter, HotHistogram } from '../../src/metrics/hot-metrics.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

// The hot families' text against Prometheus's own parser and linter (promtool, which
// scripts/test-services.sh installs); test/unit/hot-metrics.test.ts holds them to prom-client's.

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
