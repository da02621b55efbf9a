import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { LeafError } from '../errors.js'
import { sendError } from './errors.js'

function digest (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

// RFC 7235: `credentials = auth-scheme 1*SP token68`, the scheme case-insensitive.
const BEARER = /^bearer +/i

/** The credentials of an `Authorization: Bearer ...` header, as sent; undefined for any other. */
function bearerCredentials (header: string | undefined): string | undefined {
  const scheme = header === undefined ? null : BEARER.exec(header)
  return scheme === null ? undefined : (header as string).slice(scheme[0].length)
}

/**
 * An onRequest hook that lets a request through only with `Authorization: Bearer <token>`.
 * Both sides are hashed first so the comparison takes the same time whatever the lengths.
 */
export function requireBearer (token: string): onRequestHookHandler {
  const expected = digest(token)
  return function checkBearer (request: FastifyRequest, reply: FastifyReply, done: () => void) {
    const given = bearerCredentials(request.headers.authorization)
    if (given !== undefined && timingSafeEqual(digest(given), expected)) return done()
    reply.header('www-authenticate', 'Bearer')
    sendError(reply, new LeafError('UNAUTHORIZED'))
  }
}
