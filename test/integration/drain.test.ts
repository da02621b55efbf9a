import type { Server } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { setImmediate as tick } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { bindPort } from '../../src/http/bound-server.js'
import { testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'

// A graceful close with keep-alive connections open: a request that arrives on one while the
// server drains is answered 503 SHUTTING_DOWN in the documented shape, through the one error
// handler, with Connection: close, not Fastify's own {"error":"Service Unavailable"}.

interface Answer { status: number, headers: Record<string, string>, body: string }

/** Reads one HTTP/1.1 answer with a Content-Length off the socket, leaving the connection open. */
function readAnswer (socket: Socket): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let text = ''
    const onData = (chunk: Buffer) => {
      text += chunk.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end === -1) return
      const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n')
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
      const length = Number(headers['content-length'])
      if (text.length < end + 4 + length) return
      socket.off('data', onData)
      socket.off('error', reject)
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: Buffer.from(text.slice(end + 4, end + 4 + length), 'latin1').toString('utf8') })
    }
    socket.on('data', onData)
    socket.once('error', reject)
  })
}

async function keepAlive (port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1')
  await new Promise((resolve) => socket.once('connect', resolve))
  return socket
}

const request = (path: string) => `GET ${path} HTTP/1.1\r\nHost: leaf\r\nConnection: keep-alive\r\n`

async function drainWith (t: Test, app: FastifyInstance, server: Server) {
  // The server's ends of the connections: what they have read, the parser has.
  const accepted: Socket[] = []
  server.on('connection', (socket: Socket) => accepted.push(socket))
  const port = (server.address() as AddressInfo).port
  const id = await keepAlive(port)
  const view = await keepAlive(port)
  t.teardown(() => { id.destroy(); view.destroy() })
  id.write(`${request('/api/segment/get/order')}\r\n`)
  const first = await readAnswer(id)
  t.equal(first.status, 200, 'an ID on the keep-alive connection')
  t.equal(first.body, '1')
  t.not(first.headers.connection, 'close', 'kept alive before the close')

  // A request begun (its headers not all sent) keeps each connection busy, so the close waits
  // for it rather than closing the connection as idle.
  id.write(request('/api/segment/get/order'))
  view.write(request('/api/snowflake/layout'))
  const sent = id.bytesWritten + view.bytesWritten
  while (accepted.reduce((n, s) => n + s.bytesRead, 0) < sent) await tick()
  const closed = app.close()
  // The server stops listening after the preClose hooks, the drain's among them.
  while (app.server.listening) await tick()
  const idEnded = new Promise((resolve) => id.once('end', resolve))
  id.write('\r\n')
  view.write('\r\n')
  for (const [socket, what] of [[id, 'the ID route'], [view, 'a route with hooks']] as const) {
    const answer = await readAnswer(socket)
    t.equal(answer.status, 503, `${what}: 503 during the drain`)
    t.match(answer.headers['content-type'], /^application\/json/)
    t.same(JSON.parse(answer.body), { error: 'SHUTTING_DOWN', message: 'This instance is shutting down: send the request to another one (this connection is closed).' }, `${what}: the documented shape`)
    t.equal(answer.headers.connection, 'close', `${what}: Connection: close`)
    t.equal(answer.headers['retry-after'], '1', `${what}: Retry-After`)
  }
  await idEnded
  t.pass('the server closed the connection after the answer')
  await closed
}

t.test('a keep-alive request during the drain: 503 SHUTTING_DOWN in the documented shape, Connection: close (Fastify listening)', async (t) => {
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true }), { logger: silentLogger })
  await app.listen({ host: '127.0.0.1', port: 0 })
  await drainWith(t, app, app.server)
})

t.test('the same on the socket server.ts binds first', async (t) => {
  const config = testConfig({ 'leaf.segment.enable': true })
  const bound = await bindPort(config.server)
  const app = await buildApp(config, { logger: silentLogger, server: bound })
  await app.ready()
  await drainWith(t, app, bound.server)
})
