import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify'
import fp from 'fastify-plugin'
import { ERRORS, LeafError, isLeafError, type ErrorCode } from '../errors.js'
import { createLogThrottle } from '../log-throttle.js'
import type { Logger } from '../logger.js'

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'BAD_REQUEST',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  413: 'PAYLOAD_TOO_LARGE',
  431: 'HEADERS_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
}

/** 5xx codes that are the operator's choice or the drain, not failures: debug, never error. */
const QUIET_CODES = new Set<ErrorCode>(['MODE_DISABLED', 'SHUTTING_DOWN'])

/** How the not-found handler is timed (it has no route, so no route hooks). */
export interface NotFoundTiming {
  start: (request: FastifyRequest, reply: FastifyReply, done: () => void) => void
  done: (request: FastifyRequest, reply: FastifyReply) => void
}

/** Seconds for `Retry-After`, per retryable 503 code; a code not here gets none. */
export type RetryAfter = Partial<Record<ErrorCode, number>>

export interface RetrySettings {
  /** leaf.segment.wait-timeout-ms */
  waitTimeoutMs: number
  /** leaf.jdbc.query-timeout-ms */
  queryTimeoutMs: number
  /** leaf.snowflake.heartbeat-interval-ms */
  heartbeatIntervalMs: number
}

/**
 * Each retryable 503 is told to come back after the setting that bounds what it waits on
 * (docs/operations.md#errors). MODE_DISABLED and ID_SPACE_EXHAUSTED get none: no retry helps.
 */
export function retryAfterSeconds ({ waitTimeoutMs, queryTimeoutMs, heartbeatIntervalMs }: RetrySettings): RetryAfter {
  const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000))
  const load = seconds(waitTimeoutMs)
  const lease = seconds(heartbeatIntervalMs)
  return {
    NOT_READY: 1,
    SHUTTING_DOWN: 1,
    SEGMENTS_NOT_READY: load,
    STORE_SPLIT: load,
    STORE_NOT_MOVED: load,
    STORE_UNCONFIRMED: load,
    STORE_UNAVAILABLE: seconds(queryTimeoutMs),
    CLOCK_BACKWARDS: 1,
    SEQUENCE_EXHAUSTED: 1,
    WORKER_ID_UNAVAILABLE: lease,
    WORKER_LEASE_LOST: lease,
    SNOWFLAKE_NOT_READY: lease,
  }
}

function send (reply: FastifyReply, err: LeafError, retryAfter: RetryAfter = {}): FastifyReply {
  const seconds = retryAfter[err.code]
  if (seconds !== undefined) reply.header('retry-after', seconds)
  return reply.code(err.statusCode).type('application/json; charset=utf-8').send({ error: err.code, message: err.message, ...err.fields })
}

export interface ErrorsOptions {
  logger: Logger
  notFound: NotFoundTiming
  retryAfter: RetryAfter
}

/**
 * The one error handler, the not-found handler, and the drain: every error answers
 * `{"error":"<CODE>","message":...}`, with no stack and no driver message.
 */
export const errorsPlugin = fp<ErrorsOptions>(async (app, { logger, notFound, retryAfter }) => {
  // A database that is down fails every request alike: one line per code per 30 s, not per request.
  const throttle = createLogThrottle(logger)
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (isLeafError(err)) {
      if (err.statusCode >= 500) {
        const fields = { error: err.code, method: request.method, url: truncate(request.url) }
        if (QUIET_CODES.has(err.code)) logger.debug(fields, err.message)
        else throttle.error(err.code, err.cause, err.message, fields)
      }
      return send(reply, err, retryAfter)
    }
    const status = err.statusCode ?? 500
    const code = CODE_BY_STATUS[status]
    if (status < 500 && code !== undefined) return send(reply, new LeafError(code, frameworkMessage(err, request, code)))
    throttle.error(`INTERNAL ${request.routeOptions.url ?? ''}`, err, 'request failed', { error: 'INTERNAL', method: request.method, url: truncate(request.url) })
    return send(reply, new LeafError('INTERNAL'))
  })

  app.setNotFoundHandler({ preHandler: notFound.start }, (request, reply) => {
    send(reply, new LeafError('NOT_FOUND', `No route ${request.method} ${truncate(request.url)}.`))
    notFound.done(request, reply)
  })

  // The drain: Fastify's own 503 (return503OnClosing) would answer in its shape, past this
  // handler. Fastify marks the answers of a closing server `Connection: close` itself. A
  // boolean in a wrapper, not an onRequest hook: the ID routes run no hooks.
  let draining = false
  app.addHook('preClose', (done) => {
    draining = true
    done()
  })
  app.addHook('onRoute', (route) => {
    const handler = route.handler
    route.handler = function drainable (request, reply) {
      if (draining) throw new LeafError('SHUTTING_DOWN')
      return handler.call(this, request, reply)
    }
  })
}, { name: 'leaf-errors', fastify: '5.x' })

/** Fastify's own 4xx (the body parser's), in words that say what to send instead. */
function frameworkMessage (err: FastifyError, request: FastifyRequest, code: ErrorCode): string {
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': {
      const type = request.headers['content-type']
      return type === undefined ? ERRORS[code].message : `The request body is ${truncate(type)}; it must be JSON: send Content-Type: application/json.`
    }
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return 'The request body is not valid JSON.'
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return 'The request body is empty: send a JSON object, or no Content-Type.'
    default:
      return ERRORS[code].message
  }
}

/**
 * What a route's JSON schema says about a field beyond JSON Schema's own words: `errorCode`
 * (Ajv is told of the keyword in app.ts) is the code its failures answer with, `description`
 * what it must be, as a message reads it ("step must be <description>").
 */
export interface FieldSchema {
  errorCode?: ErrorCode
  description?: string
  properties?: Record<string, FieldSchema>
}

/** Ajv's error with `verbose`: the value and the schema that refused it. */
interface VerboseError extends FastifySchemaValidationError {
  data?: unknown
  parentSchema?: FieldSchema
}

/** For Fastify's `schemaErrorFormatter` option: a schema failure as a LeafError naming the field and the value. */
export function schemaErrorFormatter (errors: FastifySchemaValidationError[], part: string): Error {
  const e = errors[0] as VerboseError | undefined
  const schema = e?.parentSchema ?? {}
  const fallback: ErrorCode = part === 'body' ? 'INVALID_BODY' : 'BAD_REQUEST'
  const error = (field: FieldSchema, name: string, message: string) => {
    const code = field.errorCode ?? fallback
    return new LeafError(code, message, code === 'INVALID_FIELD' ? { fields: { field: name } } : undefined)
  }
  if (e === undefined) return new LeafError(fallback)
  if (e.keyword === 'additionalProperties') {
    const name = String(e.params.additionalProperty)
    return error(schema, name, `Unknown field ${show(name)}: the fields are ${Object.keys(schema.properties ?? {}).join(', ')}.`)
  }
  if (e.keyword === 'required') {
    const name = String(e.params.missingProperty)
    const field = schema.properties?.[name] ?? {}
    return error(field, name, `${name} is missing: give ${field.description ?? 'it'}.`)
  }
  if (e.instancePath === '') return error(schema, part, `The ${part === 'body' ? 'request body' : part} must be ${schema.description ?? 'valid'}.`)
  const name = e.instancePath.slice(1).replace(/~1/g, '/').replace(/~0/g, '~')
  if (Array.isArray(e.data)) return error(schema, name, `${name} is given more than once: give one.`)
  if (e.data === '') return error(schema, name, `${name} is empty: give ${schema.description ?? 'a value'}.`)
  return error(schema, name, `${name} must be ${schema.description ?? 'valid'}; got ${show(e.data)}.`)
}

/** A value as JSON, cut to a length a message can hold. */
export function show (value: unknown): string {
  if (typeof value !== 'string') return truncate(JSON.stringify(value) ?? String(value), 40)
  const length = Array.from(value).length
  return length > 40 ? `${JSON.stringify(Array.from(value).slice(0, 40).join(''))}... (${length} characters)` : JSON.stringify(value)
}

/** For Fastify's `frameworkErrors` option: a malformed URL answers in the same shape. */
export function frameworkErrors (err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status = err.statusCode ?? 400
  send(reply, new LeafError(CODE_BY_STATUS[status] ?? 'BAD_REQUEST', status === 400 ? 'The URL is malformed.' : undefined))
}

/** Node's errors for a request that never reaches a route; any other of its parser's (HPE_) is 400 BAD_REQUEST. */
const CLIENT_ERRORS: Record<string, ErrorCode> = {
  HPE_HEADER_OVERFLOW: 'HEADERS_TOO_LARGE',
  ERR_HTTP_REQUEST_TIMEOUT: 'REQUEST_TIMEOUT',
}

/** Requests that never reach a route are answered on the socket in the same JSON shape; a TLS error just closes. */
export function clientErrorHandler (err: NodeJS.ErrnoException, socket: Duplex): void {
  const code = err.code ?? ''
  const answer = CLIENT_ERRORS[code] ?? (code.startsWith('HPE_') ? 'BAD_REQUEST' : undefined)
  if (answer === undefined || !socket.writable) {
    socket.destroy()
    return
  }
  writeRaw(socket, new LeafError(answer))
}

/** CONNECT requests bypass the router (Node emits them apart): no such route. */
export function answerConnect (_request: IncomingMessage, socket: Duplex): void {
  writeRaw(socket, new LeafError('NOT_FOUND', 'CONNECT is not supported.'))
  // Node has let go of the socket: read (and drop) what the client still sends while it lingers.
  socket.resume()
}

/**
 * Apache httpd's lingering close: closed at once with bytes unread, the kernel's reset can lose
 * the answer; waiting for the client would let one that never closes hold the connection.
 */
const LINGER_MS = 2_000

function writeRaw (socket: Duplex, err: LeafError): void {
  const body = JSON.stringify({ error: err.code, message: err.message })
  socket.end(`HTTP/1.1 ${err.statusCode} ${STATUS_CODES[err.statusCode] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
  const linger = setTimeout(() => socket.destroy(), LINGER_MS).unref()
  socket.once('close', () => clearTimeout(linger))
}

function truncate (s: string, max = 200): string {
  return s.length > max ? `${s.slice(0, max)}...` : s
}
