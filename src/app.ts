import Fastify, { LogController, type FastifyInstance, type FastifyBaseLogger } from 'fastify'
import type { Config } from './config/load-config.js'
import type { Logger } from './logger.js'
import { frameworkErrors, registerErrorHandling } from './http/errors.js'
import { registerIdRoute } from './http/id-routes.js'
import { createSegmentGenerator, type SegmentGenerator } from './segment/segment-generator.js'
import { createStore, describeStore } from './segment/stores/create-store.js'
import type { SegmentStore } from './segment/store.js'

export interface AppOptions {
  logger: FastifyBaseLogger & Logger
  /** Wall clock for the generators; tests inject one. */
  clock?: () => number
}

declare module 'fastify' {
  interface FastifyInstance {
    leaf: {
      config: Config
      segment: { store: SegmentStore, generator: SegmentGenerator } | undefined
    }
  }
}

/**
 * Builds the service from a config object: the generators of the enabled modes, their
 * routes, and their clean-up on close. Listening is the caller's business (server.ts).
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

  let segment: FastifyInstance['leaf']['segment']
  if (config.segment.enabled) {
    const store = createStore(config.segment.store, config.segment)
    const generator = createSegmentGenerator({
      store,
      logger,
      clock,
      waitTimeoutMs: config.segment.waitTimeoutMs,
      refreshIntervalMs: config.segment.refreshIntervalMs,
    })
    segment = { store, generator }
    app.addHook('onClose', async () => {
      generator.close()
      await store.close()
    })
    const ok = await generator.init()
    logger.info({ store: describeStore(config.segment.store), ready: ok }, 'segment mode enabled')
  }
  app.decorate('leaf', { config, segment })

  registerIdRoute(app, { mode: 'segment', source: segment?.generator, batchMax: config.batchMax })
  registerIdRoute(app, { mode: 'snowflake', source: undefined, batchMax: config.batchMax })
  return app
}
