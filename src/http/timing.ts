import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from '../logger.js'
import type { Metrics } from '../metrics/metrics.js'

/** Route label for requests that matched no route: raw URLs never become label values. */
export const UNMATCHED_ROUTE = 'not_found'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route records its own duration (the ID routes: no hook runs on their hot path). */
    timesItself?: boolean
  }
}

/** Records one request in the duration histogram, and logs it at debug level. */
export type ObserveRequest = (method: string, route: string, status: number, ms: number) => void

export function createObserver (metrics: Metrics, logger: Logger, debug: boolean): ObserveRequest {
  return (method, route, status, ms) => {
    metrics.request(method, route, status, ms / 1000)
    // One line per request at debug level only: an ID service at tens of thousands of
    // requests a second does not write a line for each by default.
    if (debug) logger.debug({ method, route, status, ms }, 'request')
  }
}

/**
 * Times every route from onRequest to onSend, with the route pattern in a closure
 * (request.routeOptions builds a new object on every read), except the routes that time
 * themselves. Returns the timing of the not-found handler, which has no route hooks.
 */
export function timeRoutes (app: FastifyInstance, observe: ObserveRequest) {
  // Start times live beside the requests, not on them: a request decoration would make
  // Fastify copy one more property onto every request, the ID routes' included.
  const startedAt = new WeakMap<FastifyRequest, number>()
  const start = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
    startedAt.set(request, performance.now())
    done()
  }
  const finish = (request: FastifyRequest, reply: FastifyReply, route: string) => {
    const now = performance.now()
    observe(request.method, route, reply.statusCode, now - (startedAt.get(request) ?? now))
  }

  app.addHook('onRoute', (route) => {
    if (route.config?.timesItself === true) return
    const url = route.url
    route.onRequest = [start, ...[route.onRequest ?? []].flat()]
    route.onSend = [...[route.onSend ?? []].flat(), (request, reply, payload, done) => {
      finish(request, reply, url)
      done(null, payload)
    }]
  })
  return { start, done: (request: FastifyRequest, reply: FastifyReply) => finish(request, reply, UNMATCHED_ROUTE) }
}
