import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { LeafError } from '../errors.js'
import type { IdRange } from '../id-range.js'
import type { Id } from '../segment/segment-buffer.js'
import { idContentType, LEAF_TS_TYPE, TEXT_TYPE } from './id-content-type.js'
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
/** Bytes of a POST body on an ID route, which is never read: Java clients send none. */
export const POST_BODY_LIMIT = 16 * 1024

interface IdRequest {
  Params: { key: string }
  Querystring: { count?: string | string[] }
}

/**
 * `GET` and `POST /api/<mode>/get/:key`. Synchronous while the generator answers
 * synchronously: no promise per request on the hot path.
 *
 * The answer's form: the bare digits, in the content type the Accept header picks (as
 * leaf-server answers; id-content-type.ts); a batch (`count`, Leaf-TS's own) one ID per line
 * in text/plain; with `Accept: application/vnd.leaf-ts+json`, Leaf-TS's JSON objects instead.
 */
export function registerIdRoute (app: FastifyInstance, { mode, source, batchMax, instance, metrics, observe }: IdRouteOptions): void {
  const route = `/api/${mode}/get/:key`
  // The senders return nothing: a Reply is a thenable, and handing one back makes Fastify
  // (or a promise) wait on it.
  function sendOne (request: FastifyRequest<IdRequest>, reply: FastifyReply, key: string, id: Id): void {
    metrics.issued(mode, key, 1)
    const type = idContentType(request.headers.accept)
    // Fastify sends a string without a content type as text/plain; charset=utf-8 (its
    // documented default), without parsing one set here.
    if (type === TEXT_TYPE) reply.send(String(id))
    else if (type === LEAF_TS_TYPE) reply.type(LEAF_TS_TYPE).send(`{"id":"${id}"}`)
    else reply.type(type).send(String(id))
  }

  function sendMany (request: FastifyRequest<IdRequest>, reply: FastifyReply, key: string, count: number, ranges: IdRange[]): void {
    metrics.issued(mode, key, count)
    // IDs are decimal digits: the JSON is built as text, with no serializer pass per ID.
    if (idContentType(request.headers.accept) === LEAF_TS_TYPE) reply.type(LEAF_TS_TYPE).send(`{"ids":["${joinRanges(ranges, '","')}"]}`)
    // The last line ended too: `wc -l` counts the IDs.
    else reply.type(TEXT_TYPE).send(joinRanges(ranges, '\n', true))
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

  // Timed here rather than by route hooks: no hook runner on the hot path.
  function timed (request: FastifyRequest<IdRequest>, reply: FastifyReply): Promise<void> | undefined {
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
  }

  // Fastify would answer HEAD by running the GET handler and dropping the body: an ID issued
  // and lost. HEAD is refused instead, with no generator called.
  app.head(route, (_request, reply) => {
    reply.header('allow', 'GET, POST')
    throw new LeafError('METHOD_NOT_ALLOWED')
  })
  app.get<IdRequest>(route, { config: { timesItself: true }, exposeHeadRoute: false }, timed)
  // leaf-server's mapping takes any method, and a body is not read: a POST is served as a GET
  // is, whatever it carries. Its own context, so that only it takes every content type.
  app.register(async (context) => {
    context.removeAllContentTypeParsers()
    context.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => { done(null) })
    // The body is read (Fastify's parser) and dropped: a small bound, 413 past it, no ID used.
    context.post<IdRequest>(route, { config: { timesItself: true }, bodyLimit: POST_BODY_LIMIT }, timed)
  })
}

/**
 * Keys are 1 to 128 characters (code points, as MySQL's varchar(128) counts them), without
 * U+0000: PostgreSQL refuses the byte in text (22021), so no store may take it.
 */
export function validKey (key: string | undefined): string {
  if (key === undefined || key.length === 0 || (key.length > MAX_KEY_LENGTH && codePoints(key) > MAX_KEY_LENGTH)) {
    throw new LeafError('INVALID_KEY')
  }
  if (key.includes('\u0000')) throw new LeafError('INVALID_KEY', 'The key holds a NUL character (U+0000), which PostgreSQL cannot store: no store takes one.')
  return key
}

export function validCount (raw: string | string[], batchMax: number): number {
  if (typeof raw !== 'string') throw new LeafError('INVALID_COUNT', `count is given ${raw.length} times: give it once, an integer from 1 to ${batchMax}.`)
  if (!/^[0-9]{1,9}$/.test(raw)) throw invalidCount(raw, batchMax)
  const n = Number(raw)
  if (n < 1 || n > batchMax) throw invalidCount(raw, batchMax)
  return n
}

/** The value echoed, shortened and JSON-quoted, so that it cannot be mistaken for the message. */
function invalidCount (raw: string, batchMax: number): LeafError {
  const shown = raw.length > 20 ? `${raw.slice(0, 20)}...` : raw
  return new LeafError('INVALID_COUNT', `count ${JSON.stringify(shown)} is not an integer from 1 to ${batchMax}.`)
}

function codePoints (s: string): number {
  return Array.from(s).length
}

interface IdRoutesOptions extends Omit<IdRouteOptions, 'mode' | 'source'> {
  segment: IdSource | undefined
  snowflake: IdSource | undefined
}

/** The ID routes of both modes, as the `leaf-ids` plugin; a disabled mode answers 503 MODE_DISABLED. */
export const idRoutes = fp<IdRoutesOptions>(async (app, { segment, snowflake, ...common }) => {
  registerIdRoute(app, { mode: 'segment', source: segment, ...common })
  registerIdRoute(app, { mode: 'snowflake', source: snowflake, ...common })
}, { name: 'leaf-ids', fastify: '5.x', dependencies: ['leaf-errors'] })
