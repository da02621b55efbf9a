import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { LeafError } from '../errors.js'

/** An empty token is not set. */
export interface AdminTokens {
  admin: string
  /** leaf.admin.view-token: opens the views, never tag management. */
  view: string
}

export type Access = 'view' | 'manage'

const REALM = 'leaf-ts'

/**
 * One challenge per header line, as browsers read them; they prompt for Basic only.
 * charset="UTF-8" (RFC 7617 2.1): a password beyond ASCII comes as UTF-8, not Latin-1.
 */
export const CHALLENGES = [`Basic realm="${REALM}", charset="UTF-8"`, `Bearer realm="${REALM}"`]
/** After a token that does not match: RFC 6750's `invalid_token`; Basic again, so a browser asks again. */
export const INVALID_TOKEN_CHALLENGES = [`Basic realm="${REALM}", charset="UTF-8"`, `Bearer realm="${REALM}", error="invalid_token"`]

function digest (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}

// RFC 7235: `credentials = auth-scheme 1*SP token68`, the scheme case-insensitive.
const SCHEME = /^(basic|bearer) +/i
// RFC 7617's token68 as browsers and curl send it: standard base64, padded.
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/
const UTF8 = new TextDecoder('utf-8', { fatal: true })

/** A Bearer token, or the password of Basic credentials (the user name is not looked at). */
export function presentedSecret (header: string | undefined): string | undefined {
  const scheme = header === undefined ? null : SCHEME.exec(header)
  if (scheme === null) return undefined
  const credentials = (header as string).slice(scheme[0].length)
  return scheme[1]?.toLowerCase() === 'bearer' ? credentials : basicPassword(credentials)
}

function basicPassword (token68: string): string | undefined {
  // Buffer.from skips what is not base64, so the text is checked first.
  if (token68.length % 4 !== 0 || !BASE64.test(token68)) return undefined
  let pair: string
  try {
    pair = UTF8.decode(Buffer.from(token68, 'base64'))
  } catch {
    return undefined
  }
  // RFC 7617: the user-id holds no colon; the password is everything after the first one.
  const colon = pair.indexOf(':')
  return colon === -1 ? undefined : pair.slice(colon + 1)
}

/**
 * Both sides are hashed first, so the comparisons take the same time whatever the lengths, and
 * both are made whichever matches. No token is 401 UNAUTHORIZED, one that cannot be read too
 * (saying what to send), one that matches neither 401 INVALID_TOKEN: all three challenge again,
 * so that a browser asks for the password again (RFC 6750 has invalid_token a 401). The view
 * token on tag management is 403 FORBIDDEN: another login would not help.
 */
export function requireToken (tokens: AdminTokens, access: Access): onRequestHookHandler {
  const admin = tokens.admin === '' ? undefined : digest(tokens.admin)
  const view = tokens.view === '' ? undefined : digest(tokens.view)
  if (admin === undefined && (view === undefined || access === 'manage')) throw new Error(`no token can give ${access} access`)
  return function checkToken (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
    const header = request.headers.authorization
    const secret = presentedSecret(header)
    if (secret === undefined || secret === '') {
      reply.header('www-authenticate', CHALLENGES)
      return done(header === undefined ? new LeafError('UNAUTHORIZED') : new LeafError('UNAUTHORIZED', UNREADABLE))
    }
    const given = digest(secret)
    const isAdmin = admin !== undefined && timingSafeEqual(given, admin)
    const isView = view !== undefined && timingSafeEqual(given, view)
    if (isAdmin || (isView && access === 'view')) return done()
    if (isView) return done(new LeafError('FORBIDDEN'))
    reply.header('www-authenticate', INVALID_TOKEN_CHALLENGES)
    done(new LeafError('INVALID_TOKEN'))
  }
}

// The header itself is never echoed: without a scheme, it may be the token.
const UNREADABLE = 'The Authorization header cannot be read: send "Bearer <token>", or Basic with any user name and the token as the password (curl -u any:<token>).'

/** Names the keys, never a token. */
export function describeGuards (tokens: AdminTokens): string {
  const views = '/cache, /db and the /api views'
  if (tokens.admin === '' && tokens.view === '') return `leaf.admin.token and leaf.admin.view-token are not set: ${views} are open, tag management is off`
  if (tokens.view === '') return `leaf.admin.token is set: ${views} need it, tag management is on`
  if (tokens.admin === '') return `leaf.admin.view-token is set, leaf.admin.token is not: ${views} need the view token, tag management is off`
  return `leaf.admin.token and leaf.admin.view-token are set: ${views} need either, tag management is on for leaf.admin.token alone`
}
