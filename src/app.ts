import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyServerFactoryHandler } from 'fastify'
import { adminRoutes } from './http/admin-routes.js'
import { describeGuards } from './http/auth.js'
import { createServiceServer, type BoundServer } from './http/bound-server.js'
import { decodeRoutes } from './http/decode-routes.js'
import { answerConnect, clientErrorHandler, errorsPlugin, frameworkErrors, retryAfterSeconds, schemaErrorFormatter } from './http/errors.js'
import { healthRoutes } from './http/health-routes.js'
import { idRoutes } from './http/id-routes.js'
import { instanceNamer } from './http/instance-name.js'
import { metricsRoutes } from './http/metrics-routes.js'
import { createObserver, timeRoutes } from './http/timing.js'
import { createLogThrottle } from './log-throttle.js'
import type { Logger } from './logger.js'
import { createMetrics, type Metrics } from './metrics/metrics.js'
import { countCoreEvents } from './metrics/core-events.js'
import { startSegmentMode, type SegmentMode } from './modes/segment-mode.js'
import { startSnowflakeMode, type SnowflakeMode } from './modes/snowflake-mode.js'
import type { ResolvedConfig } from './config/resolve-config.js'

export interface AppOptions {
  logger: FastifyBaseLogger & Logger
  /** Wall clock for the generators; tests inject one. */
  clock?: () => number
  /** The socket server.ts bound first; without one (tests), the app makes its own alike. */
  server?: BoundServer
}

declare module 'fastify' {
  interface FastifyInstance {
    leaf: {
      config: ResolvedConfig
      metrics: Metrics
      segment: SegmentMode | undefined
      snowflake: SnowflakeMode | undefined
    }
  }
}

/** The service from a resolved config: the enabled modes, their routes, metrics and views. Listening is server.ts's. */
export async function buildApp (config: ResolvedConfig, { logger, clock, server: bound }: AppOptions): Promise<FastifyInstance> {
  const debug = logger.level === 'debug' || logger.level === 'trace'
  let handler: FastifyServerFactoryHandler | undefined
  const app = Fastify({
    // Fastify's own server has no request timeout or connection bound.
    serverFactory: (h: FastifyServerFactoryHandler) => {
      if (bound === undefined) return createServiceServer(config.server, h)
      handler = h
      return bound.server
    },
    // No logger inside Fastify: its per-request child logger costs more than the rest of an ID request.
    logger: false,
    frameworkErrors,
    clientErrorHandler,
    // A closing server's requests reach the routes, and the drain's 503 SHUTTING_DOWN the one
    // error handler (errorsPlugin), not Fastify's own body.
    return503OnClosing: false,
    schemaErrorFormatter,
    ajv: {
      customOptions: {
        // A value of the wrong type is refused, never converted ("10" is no step); an unknown
        // field is refused, not dropped; the error keeps the value, for the message to name.
        coerceTypes: false,
        removeAdditional: false,
        verbose: true,
        // maxId is a decimal string or a JSON number.
        allowUnionTypes: true,
        keywords: ['errorCode'],
      },
    },
    routerOptions: {
      // Keys of any length must reach validation (400 INVALID_KEY), not fall through to a 404.
      maxParamLength: 16 * 1024,
    },
  })
  app.server.on('connect', answerConnect)
  const dropped = createLogThrottle(logger)
  app.server.on('drop', (peer?: { remoteAddress?: string }) => {
    dropped.warn('server.max-connections', undefined, `connection refused: server.max-connections (${config.server.maxConnections}) are open; raise it if these are clients, not a flood`,
      { remoteAddress: peer?.remoteAddress })
  })
  // Otherwise keep-alive connections would hold the server open after close until clients hang up.
  let drain: NodeJS.Timeout | undefined
  app.addHook('preClose', (done) => {
    drain = setInterval(() => app.server.closeIdleConnections(), 50)
    done()
  })
  if (bound !== undefined) app.addHook('onReady', async () => { if (handler !== undefined) bound.serve(handler) })

  const metrics = createMetrics({ maxTagSeries: config.metrics.maxTagSeries })
  const stopCounting = countCoreEvents(metrics)
  const observe = createObserver(metrics, logger, debug)
  const { segment: { waitTimeoutMs, queryTimeoutMs }, snowflake: { heartbeatIntervalMs } } = config
  app.register(errorsPlugin, { logger, notFound: timeRoutes(app, observe), retryAfter: retryAfterSeconds({ waitTimeoutMs, queryTimeoutMs, heartbeatIntervalMs }) })
  // Bodies are JSON (tag management) or nothing: any other type is 415, not a string to parse.
  app.removeContentTypeParser('text/plain')

  const leaf: FastifyInstance['leaf'] = { config, metrics, segment: undefined, snowflake: undefined }
  app.decorate('leaf', leaf)
  // A start that failed (a mode refused) has served nothing: its stop must not replace the
  // warm-start file of the last instance that did.
  let started = false
  app.addHook('onClose', async () => {
    // Fastify closes only a server it listened on: this one, it waits for as it would its own.
    if (bound !== undefined) await new Promise((resolve) => bound.server.close(resolve))
    clearInterval(drain)
    try {
      await Promise.all([leaf.segment?.close({ saveState: started }), leaf.snowflake?.close()])
    } finally {
      stopCounting()
    }
  })
  try {
    if (config.segment.enabled) {
      leaf.segment = await startSegmentMode(config, logger, { clock })
    }
    if (config.snowflake.enabled) {
      leaf.snowflake = await startSnowflakeMode(config, logger, { clock })
    }
  } catch (err) {
    bound?.server.closeAllConnections()
    await app.close()
    throw err
  }
  if (leaf.segment === undefined && leaf.snowflake === undefined) {
    logger.warn({ keys: ['leaf.segment.enable', 'leaf.snowflake.enable'], env: ['LEAF_SEGMENT_ENABLE', 'LEAF_SNOWFLAKE_ENABLE'] },
      'no mode enabled: every ID route answers 503 MODE_DISABLED and /readyz 503; set leaf.segment.enable=true and/or leaf.snowflake.enable=true')
  }
  metrics.watch(leaf)

  const instance = instanceNamer(config.instanceName, config.server.port, () => app.server.address())
  app.register(idRoutes, { segment: leaf.segment?.generator, snowflake: leaf.snowflake?.generator, batchMax: config.batchMax, instance, metrics, observe })
  app.register(decodeRoutes, { layout: config.snowflake.layout, context: { twepoch: config.snowflake.twepoch, vestaVersion: config.snowflake.vesta.version, vestaGenMethod: config.snowflake.vesta.genMethod }, clock })
  app.register(healthRoutes)
  app.register(metricsRoutes, { metrics })
  const tokens = { admin: config.adminToken, view: config.adminViewToken }
  app.register(adminRoutes, { tokens, logger })
  try {
    await app.after()
  } catch (err) {
    await app.close()
    throw err
  }
  logger.info(describeGuards(tokens))
  started = true
  return app
}
