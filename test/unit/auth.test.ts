import Fastify from 'fastify'
import t from 'tap'
import { requireBearer } from '../../src/http/auth.js'

const TOKEN = 'Tok-en.0123~+/='

async function guarded () {
  const app = Fastify()
  app.get('/guarded', { onRequest: [requireBearer(TOKEN)] }, async () => 'in')
  t.teardown(() => app.close())
  await app.ready()
  return app
}

t.test('the auth scheme is case-insensitive (RFC 7235), the token is not', async (t) => {
  const app = await guarded()
  const status = async (authorization: string) => (await app.inject({ url: '/guarded', headers: { authorization } })).statusCode
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    t.equal(await status(`${scheme} ${TOKEN}`), 200, `${scheme} <token>`)
  }
  t.equal(await status(`Bearer   ${TOKEN}`), 200, 'one or more spaces after the scheme (1*SP)')
  const refused = [TOKEN.toLowerCase(), TOKEN.toUpperCase(), `${TOKEN}x`, TOKEN.slice(0, -1)].map((v) => `Bearer ${v}`)
  refused.push(TOKEN, `Bearer${TOKEN}`, `Basic ${TOKEN}`, `Bearers ${TOKEN}`, 'Bearer', 'Bearer ', '')
  for (const authorization of refused) {
    const res = await app.inject({ url: '/guarded', headers: { authorization } })
    t.equal(res.statusCode, 401, JSON.stringify(authorization))
    t.equal(res.headers['www-authenticate'], 'Bearer')
  }
  t.equal((await app.inject({ url: '/guarded' })).statusCode, 401, 'no header')
})
