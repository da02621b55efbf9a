import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { LeafError } from '../errors.js'
import type { IdRange } from '../id-range.js'
import type { Id } from '../segment/segment-buffer.js'
import { INSTANCE_HEADER } from './instance-name.js'
import { joinRanges } from './join-ids.js'
import type { ObserveRequest } from './timing.js'

/** What both generators offer the routes. */
export interface IdSource {
  next (key: string): Id | Promise<Id>
  nextRanges (key: string, count: number): IdRange[] | Promise<IdRange[]>
}

export interface IdRouteOptions {
  mode: 'segment' | 'snowflake'
  /** Undefined when the mode is disabled: the route answers 503 MODE_DISABLED, never ID 0. */
  source: IdSource | undefined
  batchMax: number
  /** Sent as `Leaf-Instance` on every answer. */
  instance: () => string
  metrics: {
    issued (mode: string, key: string, count: number): void
    idError (mode: string, code: string): void
  }
  observe: ObserveRequest
}

export const MAX_KEY_LENGTH = 128

const TEXT = 'text/plain; charset=utf-8'
const JSON_TYPE = 'application/json; charset=utf-8'

interface IdRequest {
  Params: { key: string }
  Querystring: { count?: string | string[] }
}

/** Synchronous while the generator answers synchronously: no promise per request on the hot path. */
export function registerIdRoute (app: FastifyInstance, { mode, source, batchMax, instance, metrics, observe }: IdRouteOptions): void {
  const route = `/api/${mode}/get/:key`
  // The senders return nothing: a Reply is a thenable, and handing one back makes Fastify
  // (or a promise) wait on it.
  function sendOne (request: FastifyRequest<IdRequest>, reply: FastifyReply, key: string, id: Id): void {
    metrics.issued(mode, key, 1)
    if (wantsJson(request)) sendJson(reply, `{"id":"${id}"}`)
    else reply.type(TEXT).send(String(id))
  }

  function sendMany (request: FastifyRequest<IdRequest>, reply: FastifyReply, key: string, count: number, ranges: IdRange[]): void {
    metrics.issued(mode, key, count)
    if (wantsJson(request)) sendJson(reply, `{"ids":["${joinRanges(ranges, '","')}"]}`)
    // The last line ended too: `wc -l` counts the IDs.
    else reply.type(TEXT).send(joinRanges(ranges, '\n', true))
  }

  function handler (request: FastifyRequest<IdRequest>, reply: FastifyReply): void | Promise<void> {
    // First, so that error answers name the instance too; no hook on the hot path.
    reply.header(INSTANCE_HEADER, instance())
    const key = validKey(request.params.key)
    const rawCount = request.query.count
    const count = rawCount === undefined ? undefined : validCount(rawCount, batchMax)
    if (source === undefined) throw new LeafError('MODE_DISABLED', `${mode} mode is disabled on this instance.`)

    if (count === undefined) {
      const id = source.next(key)
      return id instanceof Promise ? id.then((v) => sendOne(request, reply, key, v)) : sendOne(request, reply, key, id)
    }
    const ranges = source.nextRanges(key, count)
    return ranges instanceof Promise ? ranges.then((r) => sendMany(request, reply, key, count, r)) : sendMany(request, reply, key, count, ranges)
  }

  function failed (request: FastifyRequest, started: number, err: unknown): never {
    const e = err as { code?: string, statusCode?: number }
    metrics.idError(mode, e.code ?? 'INTERNAL')
    observe(request.method, route, e.statusCode ?? 500, performance.now() - started)
    throw err
  }

  // Fastify would answer HEAD by running this GET handler and dropping the body: an ID issued
  // and lost. HEAD is refused instead, with no generator called.
  app.head(route, (_request, reply) => {
    reply.header('allow', 'GET')
    throw new LeafError('METHOD_NOT_ALLOWED')
  })
  // Timed here rather than by route hooks: no hook runner on the hot path.
  app.get<IdRequest>(route, { config: { timesItself: true }, exposeHeadRoute: false }, (request, reply) => {
    const started = performance.now()
    try {
      const result = handler(request, reply)
      if (result instanceof Promise) {
        return result.then(() => {
          observe(request.method, route, reply.statusCode, performance.now() - started)
        }, (err: unknown) => failed(request, started, err))
      }
      observe(request.method, route, reply.statusCode, performance.now() - started)
    } catch (err) {
      return failed(request, started, err)
    }
  })
}

/** Keys are 1 to 128 characters (code points, as MySQL's varchar(128) counts them). */
export function validKey (key: string | undefined): string {
  if (key === undefined || key.length === 0 || (key.length > MAX_KEY_LENGTH && codePoints(key) > MAX_KEY_LENGTH)) {
    throw new LeafError('INVALID_KEY')
  }
  return key
}

export function validCount (raw: string | string[], batchMax: number): number {
  if (typeof raw !== 'string' || !/^[0-9]{1,9}$/.test(raw)) throw invalidCount(batchMax)
  const n = Number(raw)
  if (n < 1 || n > batchMax) throw invalidCount(batchMax)
  return n
}

function invalidCount (batchMax: number): LeafError {
  return new LeafError('INVALID_COUNT', `count must be an integer from 1 to ${batchMax}.`)
}

function codePoints (s: string): number {
  return Array.from(s).length
}

function wantsJson (request: FastifyRequest): boolean {
  const accept = request.headers.accept
  return accept !== undefined && accept.includes('application/json')
}

// IDs are decimal digits: the JSON is built as text, with no serializer pass per ID.
function sendJson (reply: FastifyReply, body: string): void {
  reply.type(JSON_TYPE).send(body)
}
