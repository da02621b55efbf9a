import Fastify from 'fastify'
import t from 'tap'
import { describeGuards, presentedSecret, requireToken, type Access, type AdminTokens } from '../../src/http/auth.js'
import { errorsPlugin } from '../../src/http/errors.js'
import { silentLogger } from '../helpers/logger.js'

const TOKEN = 'Tok-en.0123~+/='
const VIEW = 'view-only-4567'
const CHALLENGES = ['Basic realm="leaf-ts", charset="UTF-8"', 'Bearer realm="leaf-ts"']
const INVALID_TOKEN_CHALLENGES = ['Basic realm="leaf-ts", charset="UTF-8"', 'Bearer realm="leaf-ts", error="invalid_token"']
const MISSING = { error: 'UNAUTHORIZED', message: 'This route needs a token: Authorization: Bearer <token>, or Basic with the token as the password.' }
const UNREADABLE = { error: 'UNAUTHORIZED', message: 'The Authorization header cannot be read: send "Bearer <token>", or Basic with any user name and the token as the password (curl -u any:<token>).' }
const WRONG = { error: 'INVALID_TOKEN', message: 'The token given does not match leaf.admin.token or leaf.admin.view-token: check it (sent as Bearer <token>, or as Basic\'s password).' }

const basic = (pair: string) => `Basic ${Buffer.from(pair, 'utf8').toString('base64')}`

async function guarded (tokens: AdminTokens = { admin: TOKEN, view: '' }, access: Access = 'view') {
  const app = Fastify()
  await app.register(errorsPlugin, { logger: silentLogger, notFound: { start: (_request, _reply, done) => done(), done: () => {} }, retryAfter: {} })
  app.get('/guarded', { onRequest: [requireToken(tokens, access)] }, async () => 'in')
  t.teardown(() => app.close())
  await app.ready()
  return app
}

t.test('Bearer: the auth scheme is case-insensitive (RFC 7235), the token is not', async (t) => {
  const app = await guarded()
  const status = async (authorization: string) => (await app.inject({ url: '/guarded', headers: { authorization } })).statusCode
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    t.equal(await status(`${scheme} ${TOKEN}`), 200, `${scheme} <token>`)
  }
  t.equal(await status(`Bearer   ${TOKEN}`), 200, 'one or more spaces after the scheme (1*SP)')
  for (const authorization of [TOKEN.toLowerCase(), TOKEN.toUpperCase(), `${TOKEN}x`, TOKEN.slice(0, -1)].map((v) => `Bearer ${v}`)) {
    const res = await app.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 401, JSON.stringify(authorization))
    t.same(res.json(), WRONG, 'a token that does not match: told apart from none')
    t.same(res.headers['www-authenticate'], INVALID_TOKEN_CHALLENGES, 'both challenges; the Bearer one names invalid_token (RFC 6750 3.1)')
  }
  for (const authorization of [TOKEN, `Bearer${TOKEN}`, `Basic ${TOKEN}`, `Bearers ${TOKEN}`, 'Bearer', 'Bearer ', '']) {
    const res = await app.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 401, JSON.stringify(authorization))
    t.same(res.json(), UNREADABLE, 'says what to send, and never echoes the header')
    t.same(res.headers['www-authenticate'], CHALLENGES, 'both challenges, one header line each')
  }
  const none = await app.inject({ url: '/guarded' })
  t.equal(none.statusCode, 401, 'no header')
  t.same(none.json(), MISSING)
  t.same(none.headers['www-authenticate'], CHALLENGES)
})

t.test('Basic: the token as the password, any user name, the scheme in any case', async (t) => {
  const app = await guarded()
  const status = async (authorization: string) => (await app.inject({ url: '/guarded', headers: { authorization } })).statusCode
  for (const authorization of [basic(`admin:${TOKEN}`), basic(`:${TOKEN}`), basic(`anyone at all:${TOKEN}`), `basic ${basic(`x:${TOKEN}`).slice(6)}`, `BASIC  ${basic(`x:${TOKEN}`).slice(6)}`]) {
    t.equal(await status(authorization), 200, authorization)
  }
  const withColons = await guarded({ admin: 'a:b:c', view: '' })
  t.equal((await withColons.inject({ url: '/guarded', headers: { authorization: basic('user:a:b:c') } })).statusCode, 200, 'the password is all after the first colon')
  const unicode = await guarded({ admin: 'pässwörd-令牌', view: '' })
  t.equal((await unicode.inject({ url: '/guarded', headers: { authorization: basic('u:pässwörd-令牌') } })).statusCode, 200, 'a password beyond ASCII, in UTF-8 as charset="UTF-8" asks')

  const wrong = [basic(`${TOKEN}:x`), basic(`admin:${TOKEN}x`), basic(`admin:${TOKEN.toLowerCase()}`), basic('admin:'), basic(TOKEN)]
  for (const authorization of wrong) {
    const res = await app.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 401, `${authorization}: the token must be the password`)
    t.equal(res.headers['www-authenticate']?.[0], CHALLENGES[0], 'Basic first: the browser asks again')
  }
})

t.test('malformed Basic credentials are a 401 in the JSON shape, never a 500', async (t) => {
  const app = await guarded()
  const latin1 = `Basic ${Buffer.from(`u:${TOKEN}\xff`, 'latin1').toString('base64')}`
  const malformed = [
    'Basic', 'Basic ', 'Basic !!!!', 'Basic ====', 'Basic =', `Basic ${basic(`u:${TOKEN}`).slice(6, -1)}`,
    `Basic ${basic(`u:${TOKEN}`).slice(6)}!`, `Basic ${basic(`u:${TOKEN}`).slice(6).replace(/=+$/, '')}`,
    `Basic ${Buffer.from(`u:${TOKEN}`).toString('base64url')}-_`, basic('no colon at all'), basic(''), latin1,
    `Basic ${basic(`u:${TOKEN}`).slice(6)} trailing`, `Basic ${'A'.repeat(8000)}`,
  ]
  for (const authorization of malformed) {
    const res = await app.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 401, JSON.stringify(authorization.slice(0, 60)))
    t.same(res.json(), UNREADABLE)
    t.same(res.headers['www-authenticate'], CHALLENGES)
    t.equal(presentedSecret(authorization), undefined, 'no secret read from it')
  }
})

t.test('the view token opens a view, is 403 FORBIDDEN on management; the admin token opens both', async (t) => {
  const tokens = { admin: TOKEN, view: VIEW }
  const view = await guarded(tokens, 'view')
  const manage = await guarded(tokens, 'manage')
  const status = async (app: typeof view, authorization: string) => (await app.inject({ url: '/guarded', headers: { authorization } })).statusCode
  for (const authorization of [`Bearer ${TOKEN}`, basic(`a:${TOKEN}`)]) {
    t.equal(await status(view, authorization), 200, `admin token, view: ${authorization}`)
    t.equal(await status(manage, authorization), 200, `admin token, management: ${authorization}`)
  }
  for (const authorization of [`Bearer ${VIEW}`, basic(`a:${VIEW}`)]) {
    t.equal(await status(view, authorization), 200, `view token, view: ${authorization}`)
    const res = await manage.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 403, `view token, management: ${authorization}`)
    t.same(res.json(), { error: 'FORBIDDEN', message: 'The view token opens the views only: tag management needs leaf.admin.token.' })
    t.equal(res.headers['www-authenticate'], undefined, 'no challenge: another login would not help a browser that has one')
  }
  const wrong = await manage.inject({ url: '/guarded', headers: { authorization: `Bearer ${VIEW}x` } })
  t.equal(wrong.statusCode, 401, 'a wrong token on management is 401, not 403')
  t.same(wrong.json(), WRONG)

  const viewOnly = await guarded({ admin: '', view: VIEW }, 'view')
  t.equal(await status(viewOnly, basic(`a:${VIEW}`)), 200, 'the view token alone guards the views')
  t.equal(await status(viewOnly, 'Bearer '), 401)
  t.throws(() => requireToken({ admin: '', view: VIEW }, 'manage'), /no token can give manage access/, 'management without the admin token is never guarded by the view token')
  t.throws(() => requireToken({ admin: '', view: '' }, 'view'), /no token can give view access/)
})

t.test('the start line says which guards are on, naming keys and never a token', async (t) => {
  t.equal(describeGuards({ admin: '', view: '' }), 'leaf.admin.token and leaf.admin.view-token are not set: /cache, /db and the /api views are open, tag management is off')
  t.equal(describeGuards({ admin: TOKEN, view: '' }), 'leaf.admin.token is set: /cache, /db and the /api views need it, tag management is on')
  t.equal(describeGuards({ admin: '', view: VIEW }), 'leaf.admin.view-token is set, leaf.admin.token is not: /cache, /db and the /api views need the view token, tag management is off')
  t.equal(describeGuards({ admin: TOKEN, view: VIEW }), 'leaf.admin.token and leaf.admin.view-token are set: /cache, /db and the /api views need either, tag management is on for leaf.admin.token alone')
})
