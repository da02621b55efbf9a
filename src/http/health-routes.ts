import fp from 'fastify-plugin'
import { checkReadiness, readinessAnswer } from '../modes/readiness.js'

/** `/healthz` (the process runs) and `/readyz` (every enabled mode can serve now; `?mode=` one of them). */
export const healthRoutes = fp(async (app) => {
  app.get('/healthz', async () => ({ status: 'ok' }))

  const schema = { querystring: { type: 'object', properties: { mode: { type: 'string', enum: ['segment', 'snowflake'], description: 'segment or snowflake' } } } }
  app.get<{ Querystring: { mode?: 'segment' | 'snowflake' } }>('/readyz', { schema }, async (request, reply) => {
    const { status, body } = readinessAnswer(await checkReadiness(app.leaf), request.query.mode)
    return reply.code(status).send(body)
  })
}, { name: 'leaf-health', fastify: '5.x', dependencies: ['leaf-errors'] })
