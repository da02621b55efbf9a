import { createServer, type AddressInfo } from 'node:net'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { bindPort } from '../../src/http/bound-server.js'
import { testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'

// The port first (server.ts): the socket is bound before the app is built, answers 503 while
// the modes start, and the app takes it over once ready.

const portOf = (server: { address (): AddressInfo | string | null }) => (server.address() as AddressInfo).port
/** The server.* settings of a test config, at `host` and `port`. */
const at = (host: string, port: number) => ({ ...testConfig().server, host, port })

t.test('a port in use is refused in one line naming server.port and the address', async (t) => {
  const other = createServer()
  await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve))
  t.teardown(() => other.close())
  const port = portOf(other)
  await t.rejects(bindPort(at('127.0.0.1', port)), {
    name: 'StartRefused',
    code: 'PORT_IN_USE',
    cause: { code: 'EADDRINUSE' },
    message: `server.port ${port}: 127.0.0.1:${port} is already in use (EADDRINUSE): stop the process listening there, or set server.port (SERVER_PORT, --server.port) to a free port`,
  })
})

t.test('a host that is not this machine\'s is refused naming server.host', async (t) => {
  await t.rejects(bindPort(at('192.0.2.1', 0)), { name: 'StartRefused', code: 'HOST_NOT_LOCAL', message: /^server\.host 192\.0\.2\.1: not an address of this machine \(EADDRNOTAVAIL\): set server\.host/ })
})

t.test('until the app serves, every route answers 503 NOT_READY but /healthz; then the app answers, and its close closes the socket', async (t) => {
  const bound = await bindPort(at('127.0.0.1', 0))
  const url = `http://127.0.0.1:${portOf(bound.server)}`
  const starting = await fetch(`${url}/api/segment/get/order`)
  t.equal(starting.status, 503)
  t.same(await starting.json(), { error: 'NOT_READY', message: 'The server is starting.' })
  const ready = await fetch(`${url}/readyz`)
  t.equal(ready.status, 503)
  t.match(await ready.json(), { status: 'not ready', reason: /^starting/ })
  t.equal((await fetch(`${url}/healthz`)).status, 200)

  const app = await buildApp(testConfig({ 'leaf.segment.enable': true }), { logger: silentLogger, server: bound })
  t.equal((await fetch(`${url}/api/segment/get/order`)).status, 503, 'built, not ready yet: still the starting answer')
  await app.ready()
  const served = await fetch(`${url}/api/segment/get/order`)
  t.equal(served.status, 200)
  t.equal(await served.text(), '1')
  t.equal((await app.inject('/api/segment/get/order')).body, '2', 'inject() works on the same app')
  await app.close()
  t.equal(bound.server.listening, false, 'the socket is closed with the app')
})
