import type { FastifyInstance } from 'fastify'
import { checkReadiness } from '../modes/readiness.js'

/** `/healthz` (the process runs) and `/readyz` (every enabled mode can serve now). */
export function registerHealthRoutes (app: FastifyInstance): void {
  app.get('/healthz', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    const { ready, reason, modes } = await checkReadiness(app.leaf)
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready', ...(reason === undefined ? {} : { reason }), modes })
  })
}
