import fp from 'fastify-plugin'
import type { Metrics } from '../metrics/metrics.js'

/** `/metrics`: Prometheus's text format, gauges computed at scrape time. */
export const metricsRoutes = fp<{ metrics: Metrics }>(async (app, { metrics }) => {
  app.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.scrape()
  })
}, { name: 'leaf-metrics', fastify: '5.x', dependencies: ['leaf-errors'] })
