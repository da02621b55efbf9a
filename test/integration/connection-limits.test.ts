import { Agent, request } from 'node:http'
import { connect, type AddressInfo, type Server, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { bindPort } from '../../src/http/bound-server.js'
import { testConfig } from '../helpers/config.js'
import { captureLogger } from '../helpers/logger.js'
import { until } from '../helpers/time.js'

// Connections that cannot hold the server hostage (server.* keys, http/bound-server.ts): a
// client sending its headers a byte at a time is answered 408 and closed at the headers
// timeout, and a connection past server.max-connections is closed unanswered. Both paths that
// make the server are run: the bound one (server.ts) and the app's own (tests, no bound server).

const HEADERS_TIMEOUT_MS = 1500
/** Slow-headers connections at once: a few hundred, as a small flood. */
const SLOW_CONNECTIONS = 300
/** Margin for a loaded machine on every upper bound below; the bounds test closing, not speed. */
const SLACK_MS = 5000

interface Started { port: number, server: Server, logs: Record<string, unknown>[] }

type Path = (t: Test, values: Record<string, string | number | boolean>) => Promise<Started>

const PATHS: Record<string, Path> = {
  'the bound server (server.ts)': async (t, values) => {
    const config = testConfig(values)
    const { logger, lines } = captureLogger()
    const bound = await bindPort(config.server)
    const app = await buildApp(config, { logger, server: bound })
    t.teardown(() => app.close())
    await app.ready()
    return { port: (bound.server.address() as AddressInfo).port, server: bound.server, logs: lines }
  },
  'the app\'s own server (no bound server)': async (t, values) => {
    const { logger, lines } = captureLogger()
    const app = await buildApp(testConfig(values), { logger })
    t.teardown(() => app.close())
    await app.listen({ host: '127.0.0.1', port: 0 })
    return { port: (app.server.address() as AddressInfo).port, server: app.server, logs: lines }
  },
}

const openConnections = (server: Server) => new Promise<number>((resolve, reject) => server.getConnections((err, n) => err ? reject(err) : resolve(n)))

/** A GET on `agent`: its status and how long it took. */
function timedGet (agent: Agent, port: number, path: string): Promise<{ status: number, ms: number }> {
  const start = performance.now()
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - start }))
    })
    req.on('error', reject)
    req.end()
  })
}

interface SlowClient { socket: Socket, startedAt: number, received: string, answeredAt?: number, closedAt?: number }

/**
 * A client that sends a request's headers one byte per tick and never ends them. Its socket
 * keeps its side open after the server's FIN (allowHalfOpen) and keeps writing, as an attacker
 * would: so it sees 'close' only once the server has let go of the connection (a reset).
 */
function slowClient (port: number): SlowClient {
  const client: SlowClient = { socket: connect({ host: '127.0.0.1', port, allowHalfOpen: true }), startedAt: performance.now(), received: '' }
  client.socket.setEncoding('utf8')
  client.socket.on('data', (chunk: string) => {
    client.received += chunk
    client.answeredAt ??= performance.now()
  })
  client.socket.on('error', () => {})
  client.socket.on('close', () => { client.closedAt = performance.now() })
  return client
}

const SLOW_HEAD = 'GET /api/segment/get/order HTTP/1.1\r\nHost: leaf\r\nX-Slow: '

for (const [name, start] of Object.entries(PATHS)) {
  t.test(`${name}: ${SLOW_CONNECTIONS} slow-headers connections are answered 408 and closed at server.headers-timeout-ms, while a keep-alive client is served throughout`, async (t) => {
    const { port, server } = await start(t, {
      'leaf.segment.enable': true,
      'server.headers-timeout-ms': HEADERS_TIMEOUT_MS,
      'server.request-timeout-ms': 2 * HEADERS_TIMEOUT_MS,
    })
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    t.teardown(() => agent.destroy())
    t.equal((await timedGet(agent, port, '/api/segment/get/order')).status, 200, 'the normal client\'s connection is open before the flood')

    const slow = Array.from({ length: SLOW_CONNECTIONS }, () => slowClient(port))
    t.teardown(() => { for (const c of slow) c.socket.destroy() })
    let sent = 0
    const drip = setInterval(() => {
      const byte = sent < SLOW_HEAD.length ? SLOW_HEAD.charAt(sent) : 'a'
      sent++
      for (const c of slow) if (c.closedAt === undefined && !c.socket.destroyed) c.socket.write(byte)
    }, 100)
    t.teardown(() => clearInterval(drip))

    // The normal client asks on, one request after another, until every slow one is closed.
    const answers: { status: number, ms: number }[] = []
    const giveUpAt = performance.now() + HEADERS_TIMEOUT_MS + SLACK_MS + 2_000
    while (slow.some((c) => c.closedAt === undefined) && performance.now() < giveUpAt) {
      answers.push(await timedGet(agent, port, '/api/segment/get/order'))
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    clearInterval(drip)

    const open = slow.filter((c) => c.closedAt === undefined)
    t.equal(open.length, 0, `every slow connection is closed by the server (${open.length} still open after ${HEADERS_TIMEOUT_MS + SLACK_MS + 2_000} ms)`)
    const wrong = slow.filter((c) => !/^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*\r\n\r\n\{"error":"REQUEST_TIMEOUT","message":"[^"]+"\}$/.test(c.received))
    t.equal(wrong.length, 0, `each is answered 408 REQUEST_TIMEOUT in the JSON shape (first other answer: ${JSON.stringify(wrong[0]?.received.slice(0, 80))})`)
    const answeredAfter = slow.map((c) => (c.answeredAt ?? Infinity) - c.startedAt)
    t.ok(Math.min(...answeredAfter) >= HEADERS_TIMEOUT_MS - 50, `none before the headers timeout (earliest after ${Math.round(Math.min(...answeredAfter))} ms)`)
    t.ok(Math.max(...answeredAfter) <= HEADERS_TIMEOUT_MS + SLACK_MS, `each soon after it (latest after ${Math.round(Math.max(...answeredAfter))} ms)`)
    t.equal(await openConnections(server), 1, 'the server holds the normal client\'s connection alone')

    t.ok(answers.length >= 10, `the normal client was answered meanwhile (${answers.length} requests)`)
    t.same(answers.filter((a) => a.status !== 200), [], 'each with its ID')
    const slowest = Math.max(...answers.map((a) => a.ms))
    t.ok(slowest < HEADERS_TIMEOUT_MS, `each well within the headers timeout the slow ones got (slowest ${Math.round(slowest)} ms)`)
    // Now, not at teardown: a server that failed to close them would hold its close for them.
    for (const c of slow) c.socket.destroy()
  })

  t.test(`${name}: a connection past server.max-connections is closed unanswered, while those under it are served`, async (t) => {
    const max = 5
    const { port, logs } = await start(t, { 'leaf.segment.enable': true, 'server.max-connections': max })
    const held = await Promise.all(Array.from({ length: max }, () => rawConnection(port)))
    t.teardown(() => { for (const c of held) c.socket.destroy() })
    for (const c of held) t.equal((await c.get('/healthz')).status, 200, 'under the bound: served')

    const over = await rawConnection(port)
    const refused = await Promise.race([over.closed, new Promise<'open'>((resolve) => setTimeout(() => resolve('open'), SLACK_MS))])
    t.equal(refused, '', `connection ${max + 1} is closed, with no byte of an answer`)
    t.match(logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('connection refused')),
      { level: 40, msg: `connection refused: server.max-connections (${max}) are open; raise it if these are clients, not a flood` }, 'and a warning says why')

    for (const c of held) t.equal((await c.get('/api/segment/get/order')).status, 200, 'the held connections are still served')
    held.pop()?.socket.end()
    // Node counts a connection until its close: retry until the freed place is seen.
    let next: Answer | undefined
    for (let i = 0; i < 50 && next === undefined; i++) {
      const c = await rawConnection(port)
      held.push(c)
      next = await c.get('/healthz').catch(() => undefined)
    }
    t.equal(next?.status, 200, 'a place freed is taken by the next connection')
    for (const c of [...held, over]) c.socket.destroy()
  })

  t.test(`${name}: a client that stops reading its answer is closed at server.idle-timeout-ms, an idle keep-alive one at server.keep-alive-timeout-ms`, async (t) => {
    const idleMs = 500
    const keepAliveMs = 2000
    const { port, server } = await start(t, {
      'server.idle-timeout-ms': idleMs, 'server.keep-alive-timeout-ms': keepAliveMs, 'leaf.snowflake.enable': true, 'leaf.batch.max': 1_000_000,
    })
    const closedAfter = async (c: Awaited<ReturnType<typeof rawConnection>>, from: number) => ({ received: await c.closed, ms: performance.now() - from })

    // A million IDs (19 MB): more than the kernel's buffers take, so most of it waits in the
    // server while the client reads nothing.
    const reader = await rawConnection(port)
    reader.socket.pause()
    reader.socket.write('GET /api/snowflake/get/stalled?count=1000000 HTTP/1.1\r\nHost: leaf\r\n\r\n')
    const asked = performance.now()
    t.ok(await until(async () => await openConnections(server) === 0, idleMs + SLACK_MS + 10_000), 'the connection was closed while its answer sat unread')
    const ms = performance.now() - asked
    t.ok(ms >= idleMs - 50, `not before the idle timeout (after ${Math.round(ms)} ms, answer generation included)`)
    reader.socket.destroy()

    const kept = await rawConnection(port)
    const answer = await kept.get('/healthz')
    const answeredAt = performance.now()
    t.equal(answer.status, 200)
    t.match(answer.head, /\r\nKeep-Alive: timeout=2\r\n/i, 'the answer announces the keep-alive timeout')
    const idle = await closedAfter(kept, answeredAt)
    // Node waits 1 s past the timeout it announces (Keep-Alive: timeout=), so that clients close first.
    t.ok(idle.ms >= keepAliveMs - 50 && idle.ms < keepAliveMs + 1000 + SLACK_MS, `kept alive, then closed at the keep-alive timeout (after ${Math.round(idle.ms)} ms)`)
  })
}

interface Answer { status: number, head: string, body: string }

/** A connection of our own for keep-alive GETs; `closed` resolves with what it received unasked. */
async function rawConnection (port: number): Promise<{ socket: Socket, get (path: string): Promise<Answer>, closed: Promise<string> }> {
  const socket = connect({ host: '127.0.0.1', port })
  socket.setEncoding('utf8')
  socket.on('error', () => {})
  let buffer = ''
  let waiting: { resolve: (a: Answer) => void, reject: (e: Error) => void } | undefined
  socket.on('data', (chunk: string) => {
    buffer += chunk
    const head = buffer.indexOf('\r\n\r\n')
    const length = Number(/content-length: (\d+)/i.exec(buffer)?.[1] ?? NaN)
    if (waiting === undefined || head === -1 || buffer.length < head + 4 + length) return
    const answer = { status: Number(buffer.slice(9, 12)), head: buffer.slice(0, head + 2), body: buffer.slice(head + 4, head + 4 + length) }
    buffer = buffer.slice(head + 4 + length)
    waiting.resolve(answer)
    waiting = undefined
  })
  const closed = new Promise<string>((resolve) => socket.on('close', () => {
    waiting?.reject(new Error('closed'))
    resolve(buffer)
  }))
  await Promise.race([new Promise((resolve) => socket.once('connect', resolve)), closed])
  return {
    socket,
    closed,
    get (path) {
      if (socket.destroyed) return Promise.reject(new Error('closed'))
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject }
        socket.write(`GET ${path} HTTP/1.1\r\nHost: leaf\r\n\r\n`)
      })
    },
  }
}
