import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import t from 'tap'
import { Registry } from 'prom-client'
import { HotCounter, HotHistogram } from '../../src/metrics/hot-metrics.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

t.test('hot counter and histogram expose what prom-client\'s would', async (t) => {
  const registry = new Registry()
  const counter = new HotCounter('x_total', 'A counter.')
  const histogram = new HotHistogram('y_seconds', 'A histogram.', [0.1, 1])
  registry.registerMetric(counter as never)
  registry.registerMetric(histogram as never)
  const a = counter.child({ mode: 'segment', key: 'a"b' })
  a.value += 3
  a.value++
  const h = histogram.child({ route: '/r' })
  for (const v of [0.05, 0.1, 0.5, 1, 7]) h.observe(v)
  const text = await registry.metrics()
  t.match(text, '# TYPE x_total counter')
  t.match(text, '# TYPE y_seconds histogram')
  const samples = parseSamples(text)
  t.equal(valueOf(samples, 'x_total', { key: 'a"b' }), 4)
  t.equal(valueOf(samples, 'y_seconds_bucket', { le: '0.1' }), 2, 'a bound is inclusive (le)')
  t.equal(valueOf(samples, 'y_seconds_bucket', { le: '1' }), 4)
  t.equal(valueOf(samples, 'y_seconds_bucket', { le: '+Inf' }), 5)
  t.equal(valueOf(samples, 'y_seconds_count', { route: '/r' }), 5)
  t.equal(valueOf(samples, 'y_seconds_sum', { route: '/r' }), 8.65)
})

// hot-metrics.ts implements the part of prom-client's metric interface that its Registry reads
// (name, help, type, get()), which prom-client does not document: checked against major 15.
t.test('prom-client is the major version hot-metrics.ts was checked against', async (t) => {
  const require = createRequire(import.meta.url)
  const installed = (require('prom-client/package.json') as { version: string }).version
  const declared = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { dependencies: Record<string, string> }).dependencies['prom-client']
  t.match(installed, /^15\./, 'a new major may read metrics differently: check hot-metrics.ts against it, then change this test')
  t.match(declared, /^[~^]15\.\d+\.\d+$/, 'package.json allows no other major')
})
