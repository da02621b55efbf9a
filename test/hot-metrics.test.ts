import t from 'tap'
import { Registry } from 'prom-client'
import { HotCounter, HotHistogram } from '../src/metrics/hot-metrics.js'
import { parseSamples, valueOf } from './helpers/prometheus.js'

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
