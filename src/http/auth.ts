import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { LeafError } from '../errors.js'
import { sendError } from './errors.js'

function digest (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

/**
 * An onRequest hook that lets a request through only with `Authorization: Bearer <token>`.
 * Both sides are hashed first so the comparison takes the same time whatever the lengths.
 */
export function requireBearer (token: string): onRequestHookHandler {
  const expected = digest(token)
  return function checkBearer (request: FastifyRequest, reply: FastifyReply, done: () => void) {
    const header = request.headers.authorization
    const given = header?.startsWith('Bearer ') ? header.slice('Bearer '.length) : undefined
    if (given !== undefined && timingSafeEqual(digest(given), expected)) return done()
    reply.header('www-authenticate', 'Bearer')
    sendError(reply, new LeafError('UNAUTHORIZED'))
  }
}
