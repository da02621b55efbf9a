import fp from 'fastify-plugin'
import { checkReadiness } from '../modes/readiness.js'

/** `/healthz` (the process runs) and `/readyz` (every enabled mode can serve now). */
export const healthRoutes = fp(async (app) => {
  app.get('/healthz', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    const { ready, reason, modes } = await checkReadiness(app.leaf)
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready', ...(reason === undefined ? {} : { reason }), modes })
  })
}, { name: 'leaf-health', fastify: '5.x', dependencies: ['leaf-errors'] })
