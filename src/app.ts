import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import type { Config } from './config/load-config.js'
import { registerDecodeRoutes } from './http/decode-routes.js'
import { frameworkErrors, registerErrorHandling } from './http/errors.js'
import { registerIdRoute } from './http/id-routes.js'
import type { Logger } from './logger.js'
import { startSegmentMode, type SegmentMode } from './modes/segment-mode.js'
import { startSnowflakeMode, type SnowflakeMode } from './modes/snowflake-mode.js'

export interface AppOptions {
  logger: FastifyBaseLogger & Logger
  /** Wall clock for the generators; tests inject one. */
  clock?: () => number
}

declare module 'fastify' {
  interface FastifyInstance {
    leaf: {
      config: Config
      segment: SegmentMode | undefined
      snowflake: SnowflakeMode | undefined
    }
  }
}

/**
 * Builds the service from a config object: the enabled modes, their routes, and their
 * clean-up on close. Listening is the caller's business (server.ts).
 */
export async function buildApp (config: Config, { logger, clock }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: logger,
    // One line per request at debug level only (below): an ID service at tens of thousands
    // of requests a second does not write a line for each by default.
    logController: new LogController({ disableRequestLogging: true }),
    frameworkErrors,
    routerOptions: {
      // Keys of any length must reach validation (400 INVALID_KEY), not fall through to a 404.
      maxParamLength: 16 * 1024,
    },
  })
  registerErrorHandling(app)
  if (logger.level === 'debug' || logger.level === 'trace') {
    app.addHook('onResponse', async (request, reply) => {
      request.log.debug({ method: request.method, route: request.routeOptions.url, status: reply.statusCode, ms: reply.elapsedTime }, 'request')
    })
  }

  const leaf: FastifyInstance['leaf'] = { config, segment: undefined, snowflake: undefined }
  app.decorate('leaf', leaf)
  app.addHook('onClose', async () => {
    await Promise.all([leaf.segment?.close(), leaf.snowflake?.close()])
  })
  try {
    if (config.segment.enabled) leaf.segment = await startSegmentMode(config, logger, { clock })
    if (config.snowflake.enabled) leaf.snowflake = await startSnowflakeMode(config, logger, { clock })
  } catch (err) {
    await app.close()
    throw err
  }

  registerIdRoute(app, { mode: 'segment', source: leaf.segment?.generator, batchMax: config.batchMax })
  registerIdRoute(app, { mode: 'snowflake', source: leaf.snowflake?.generator, batchMax: config.batchMax })
  registerDecodeRoutes(app, config.snowflake.twepoch)
  return app
}
