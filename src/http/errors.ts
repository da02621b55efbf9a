import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
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

/** How the not-found handler is timed (it has no route, so no route hooks). */
export interface NotFoundTiming {
  start: (request: FastifyRequest, reply: FastifyReply, done: () => void) => void
  done: (request: FastifyRequest, reply: FastifyReply) => void
}

export function sendError (reply: FastifyReply, err: LeafError): FastifyReply {
  return reply.code(err.statusCode).type('application/json; charset=utf-8').send({ error: err.code, message: err.message })
}

/** No stack and no driver message ever reaches the client. */
export function registerErrorHandling (app: FastifyInstance, logger: Logger, notFound: NotFoundTiming): void {
  // A database that is down fails every request alike: one line per code per 30 s, not per request.
  const throttle = createLogThrottle(logger)
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (isLeafError(err)) {
      if (err.statusCode >= 500) {
        throttle.error(err.code, err.cause, err.message, { error: err.code, method: request.method, url: truncate(request.url) })
      }
      return sendError(reply, err)
    }
    const status = err.statusCode ?? 500
    const code = CODE_BY_STATUS[status]
    if (status < 500 && code !== undefined) {
      return sendError(reply, new LeafError(code, err.validation ? err.message : ERRORS[code].message))
    }
    throttle.error(`INTERNAL ${request.routeOptions.url ?? ''}`, err, 'request failed', { error: 'INTERNAL', method: request.method, url: truncate(request.url) })
    return sendError(reply, new LeafError('INTERNAL'))
  })

  app.setNotFoundHandler({ preHandler: notFound.start }, (request, reply) => {
    sendError(reply, new LeafError('NOT_FOUND', `No route ${request.method} ${truncate(request.url)}.`))
    notFound.done(request, reply)
  })
}

/** For Fastify's `frameworkErrors` option: a malformed URL answers in the same shape. */
export function frameworkErrors (err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status = err.statusCode ?? 400
  sendError(reply, new LeafError(CODE_BY_STATUS[status] ?? 'BAD_REQUEST', status === 400 ? 'The URL is malformed.' : undefined))
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

function truncate (s: string): string {
  return s.length > 200 ? `${s.slice(0, 200)}...` : s
}
