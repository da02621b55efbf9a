import type { FastifyInstance } from 'fastify'
import { checkReadiness, readinessAnswer } from '../modes/readiness.js'

/** `/healthz` (the process runs) and `/readyz` (every enabled mode can serve now; `?mode=` one of them). */
export function registerHealthRoutes (app: FastifyInstance): void {
  app.get('/healthz', async () => ({ status: 'ok' }))

  app.get<{ Querystring: { mode?: string } }>('/readyz', async (request, reply) => {
    const { status, body } = readinessAnswer(await checkReadiness(app.leaf), request.query.mode)
    return reply.code(status).send(body)
  })
}
