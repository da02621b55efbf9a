import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type { Config } from './config/load-config.js'
import { registerAdminRoutes } from './http/admin-routes.js'
import { registerDecodeRoutes } from './http/decode-routes.js'
import { frameworkErrors, registerErrorHandling } from './http/errors.js'
import { registerHealthRoutes } from './http/health-routes.js'
import { registerIdRoute } from './http/id-routes.js'
import type { Logger } from './logger.js'
import { createMetrics, type Metrics } from './metrics/metrics.js'
import { startSegmentMode, type SegmentMode } from './modes/segment-mode.js'
import { startSnowflakeMode, type SnowflakeMode } from './modes/snowflake-mode.js'

export interface AppOptions {
  logger: FastifyBaseLogger & Logger
  /** Wall clock for the generators; tests inject one. */
  clock?: () => number
}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request reached its route, for the duration histogram. */
    startedAt: number
  }
  interface FastifyInstance {
    leaf: {
      config: Config
      metrics: Metrics
      segment: SegmentMode | undefined
      snowflake: SnowflakeMode | undefined
    }
  }
}

/** Route label for requests that matched no route: raw URLs never become label values. */
const UNMATCHED_ROUTE = 'not_found'

/**
 * Builds the service from a config object: the enabled modes, their routes, metrics and
 * views, and their clean-up on close. Listening is the caller's business (server.ts).
 */
export async function buildApp (config: Config, { logger, clock }: AppOptions): Promise<FastifyInstance> {
  const debug = logger.level === 'debug' || logger.level === 'trace'
  const app = Fastify({
    // No logger inside Fastify: with one, it builds a child logger and response listeners for
    // every request, which cost more than the rest of an ID request's JavaScript. The service
    // logs through its own pino instance, handed to whatever logs.
    logger: false,
    frameworkErrors,
    routerOptions: {
      // Keys of any length must reach validation (400 INVALID_KEY), not fall through to a 404.
      maxParamLength: 16 * 1024,
    },
  })
  const metrics = createMetrics()
  // Each route times itself (onRequest to onSend) with its pattern in a closure:
  // request.routeOptions builds a new object on every read.
  app.decorateRequest('startedAt', 0)
  const start = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    request.startedAt = performance.now()
    done()
  }
  const record = (request: FastifyRequest, reply: FastifyReply, route: string) => {
    const ms = performance.now() - request.startedAt
    metrics.request(request.method, route, reply.statusCode, ms / 1000)
    // One line per request at debug level only: an ID service at tens of thousands of
    // requests a second does not write a line for each by default.
    if (debug) logger.debug({ method: request.method, route, status: reply.statusCode, ms }, 'request')
  }
  const timed = (route: string) => (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
    record(request, reply, route)
    done(null, payload)
  }
  registerErrorHandling(app, logger, { start, done: (request, reply) => record(request, reply, UNMATCHED_ROUTE) })
  // Bodies are JSON (tag management) or nothing: any other type is 415, not a string to parse.
  app.removeContentTypeParser('text/plain')
  app.addHook('onRoute', (route) => {
    route.onRequest = [start, ...[route.onRequest ?? []].flat()]
    route.onSend = [...[route.onSend ?? []].flat(), timed(route.url)]
  })

  const leaf: FastifyInstance['leaf'] = { config, metrics, segment: undefined, snowflake: undefined }
  app.decorate('leaf', leaf)
  app.addHook('onClose', async () => {
    await Promise.all([leaf.segment?.close(), leaf.snowflake?.close()])
  })
  try {
    if (config.segment.enabled) leaf.segment = await startSegmentMode(config, logger, { clock, onLoad: metrics.segmentLoad })
    if (config.snowflake.enabled) leaf.snowflake = await startSnowflakeMode(config, logger, { clock, onClockBackwards: metrics.clockBackwards })
  } catch (err) {
    await app.close()
    throw err
  }
  metrics.watch(leaf)

  registerIdRoute(app, { mode: 'segment', source: leaf.segment?.generator, batchMax: config.batchMax, metrics })
  registerIdRoute(app, { mode: 'snowflake', source: leaf.snowflake?.generator, batchMax: config.batchMax, metrics })
  registerDecodeRoutes(app, config.snowflake.twepoch)
  registerHealthRoutes(app)
  app.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.registry.metrics()
  })
  registerAdminRoutes(app, config.adminToken, logger)
  if (config.adminToken === '') logger.info('leaf.admin.token is not set: /cache, /db and /api views are open, tag management is off')
  return app
}
