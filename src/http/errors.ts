import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ERRORS, LeafError, isLeafError, type ErrorCode } from '../errors.js'
import { createLogThrottle } from '../log-throttle.js'
import type { Logger } from '../logger.js'

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'BAD_REQUEST',
  401: 'UNAUTHORIZED',
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

/**
 * One place turns every failure into `{"error": CODE, "message": "..."}` with the status of
 * the errors table; nothing else (no stack, no driver message) reaches the client.
 */
export function registerErrorHandling (app: FastifyInstance, logger: Logger, notFound: NotFoundTiming): void {
  // A database that is down fails every request alike: one line per error code (and per
  // route for bugs) per 30 s, with how many were not logged, rather than one per request.
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

/**
 * Requests Node's parser rejects (malformed, or a header block over its limit) never reach a
 * route: answer them on the socket in the same JSON shape, then close it.
 */
export function clientErrorHandler (err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy()
    return
  }
  writeRaw(socket, new LeafError(err.code === 'HPE_HEADER_OVERFLOW' ? 'HEADERS_TOO_LARGE' : 'BAD_REQUEST'))
}

/** CONNECT requests bypass the router (Node emits them apart): no such route. */
export function answerConnect (_request: IncomingMessage, socket: Duplex): void {
  writeRaw(socket, new LeafError('NOT_FOUND', 'CONNECT is not supported.'))
}

function writeRaw (socket: Duplex, err: LeafError): void {
  const body = JSON.stringify({ error: err.code, message: err.message })
  socket.end(`HTTP/1.1 ${err.statusCode} ${STATUS_CODES[err.statusCode] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
}

function truncate (s: string): string {
  return s.length > 200 ? `${s.slice(0, 200)}...` : s
}
