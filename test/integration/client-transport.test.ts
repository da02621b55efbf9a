import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { createLeafClient } from '../../client/src/client.js'
import type { LeafClientError } from '../../client/src/errors.js'
import { createUndiciTransport } from '../../client/src/transport.js'
import { freePort } from '../helpers/ports.js'

// The undici transport against a local HTTP server that answers as a broken server or proxy
// would: each failure becomes the LeafClientError the failover acts on.

t.test('each kind of answer becomes its error code', async (t) => {
  const paths: string[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    paths.push(req.url ?? '')
    const key = decodeURIComponent(/\/get\/([^?]*)/.exec(req.url ?? '')?.[1] ?? '')
    const answers: Record<string, () => void> = {
      ok: () => res.end('5\n6\n7\n'),
      named: () => res.writeHead(200, { 'leaf-instance': 'leaf-3:8080' }).end('8\n9\n'),
      html: () => res.end('<html>hello</html>'),
      proxy: () => res.writeHead(502).end('Bad Gateway'),
      reset: () => req.socket.destroy(),
      hang: () => {},
      held: () => res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"ANY_CODE_AT_ALL","message":"Held after a store failover until 2025-01-01T00:00:03.000Z."}'),
    }
    const answer = answers[key] ?? (() => res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"SEGMENTS_NOT_READY"}'))
    answer()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const transport = createUndiciTransport({ servers: [url, 'http://127.0.0.1:1'] })
  t.teardown(() => transport.close())

  t.same(await transport.fetchIds(url, 'segment', 'ok', 3, 1000), { ranges: [{ first: 5n, last: 7n }], instance: undefined }, 'no Leaf-Instance header: no name')
  t.same(await transport.fetchIds(url, 'segment', 'named', 2, 1000), { ranges: [{ first: 8n, last: 9n }], instance: 'leaf-3:8080' }, 'the instance named in Leaf-Instance')
  t.equal(paths[0], '/api/segment/get/ok?count=3')
  await t.rejects(transport.fetchIds(url, 'snowflake', 'html', 3, 1000), { code: 'BAD_RESPONSE', status: 200, server: url, retryable: true })
  await t.rejects(transport.fetchIds(url, 'segment', 'proxy', 3, 1000), { code: 'BAD_RESPONSE', status: 502, retryable: true })
  await t.rejects(transport.fetchIds(url, 'segment', 'x', 3, 1000), { code: 'SEGMENTS_NOT_READY', status: 503, message: /SEGMENTS_NOT_READY/, retryable: true }, 'a body without a message')
  await t.rejects(transport.fetchIds(url, 'segment', 'held', 3, 1000), { code: 'ANY_CODE_AT_ALL', status: 503, message: /Held after a store failover until 2025-01-01T00:00:03\.000Z\./, retryable: true }, 'any 503 code and its message, as the server wrote them')
  await t.rejects(transport.fetchIds(url, 'segment', 'hang', 3, 50), { code: 'TIMEOUT', status: 0, server: url })
  await t.rejects(transport.fetchIds(url, 'segment', 'reset', 3, 1000), { code: 'NETWORK', status: 0, server: url })
  await t.rejects(transport.fetchIds('http://127.0.0.1:1', 'segment', 'ok', 3, 1000), { code: 'NETWORK', server: 'http://127.0.0.1:1' }, 'connection refused')
  await t.rejects(transport.fetchIds('http://other:1', 'segment', 'ok', 3, 1000), { code: 'NETWORK' }, 'a server the transport was not made for')
  t.equal(await transport.fetchIds(url, 'segment', 'a/b c', 1, 1000).catch((e: { code: string }) => e.code), 'SEGMENTS_NOT_READY')
  t.equal(paths.at(-1), '/api/segment/get/a%2Fb%20c?count=1', 'the key is percent-encoded')
})

/** A port bound and closed again: connections to it are refused. */
async function closedServer (): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`
}

/** A server answering `count` consecutive IDs, as Leaf's batch route does. */
async function idServer (t: Test): Promise<string> {
  let next = 1
  const server = createServer((req, res) => {
    const count = Number(new URL(req.url ?? '', 'http://x').searchParams.get('count'))
    res.setHeader('content-type', 'text/plain')
    res.end(Array.from({ length: count }, () => next++).join('\n'))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** Generous: the refusals take a few ms and the pause 100 ms; the budget is 10 s. */
const FAIL_FAST_BOUND_MS = 2000

t.test('every server refuses the connection: UNREACHABLE with the counts, long before timeoutMs', async (t) => {
  const servers = [await closedServer(), await closedServer(), await closedServer()]
  for (const prefetch of [true, false]) {
    const leaf = createLeafClient({ servers, prefetch, timeoutMs: 10_000 })
    t.teardown(() => leaf.close())
    const started = performance.now()
    const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
    const elapsed = performance.now() - started
    t.match(err, { name: 'LeafClientError', code: 'UNREACHABLE', status: 0, attempts: 6, retryable: true }, `prefetch ${prefetch}`)
    t.match(err.message, new RegExp(`^3 servers refused the connection \\(6 attempts in \\d+ ms\\): ${servers.join(', ')}; `), `prefetch ${prefetch}: names the servers and the counts`)
    t.ok(elapsed < FAIL_FAST_BOUND_MS, `prefetch ${prefetch}: answered in ${elapsed.toFixed(0)} ms of a 10,000 ms budget`)
    t.equal(leaf.stats().requests, 6, `prefetch ${prefetch}: two rounds of three`)
  }
})

t.test('one server refuses, the other answers: the call is served', async (t) => {
  const servers = [await closedServer(), await idServer(t)]
  for (const prefetch of [true, false]) {
    const leaf = createLeafClient({ servers, prefetch, timeoutMs: 10_000 })
    t.teardown(() => leaf.close())
    const ids = [await leaf.nextId('segment', 'k'), await leaf.nextId('segment', 'k')]
    t.ok(ids.every((id) => id >= 1n), `prefetch ${prefetch}: IDs (${ids.join(', ')})`)
    const [closed, live] = leaf.stats().servers
    t.ok((closed?.failures ?? 0) >= 1 && closed?.ids === 0, `prefetch ${prefetch}: the closed port was asked and refused (${closed?.failures} failures)`)
    t.ok((live?.ids ?? 0) >= 2, `prefetch ${prefetch}: the live one answered`)
  }
})

t.test('one server refuses, the other accepts and never answers: no fail fast, the usual failover within timeoutMs', async (t) => {
  const sockets = new Set<Socket>()
  const silent = createTcpServer((socket) => { sockets.add(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close() })
  const servers = [await closedServer(), `http://127.0.0.1:${(silent.address() as AddressInfo).port}`]
  const leaf = createLeafClient({ servers, prefetch: false, timeoutMs: 600, requestTimeoutMs: 200 })
  t.teardown(() => leaf.close())
  const started = performance.now()
  const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
  const elapsed = performance.now() - started
  t.not(err.code, 'UNREACHABLE', `a slow server is not a refusal (${err.code}: ${err.message})`)
  const silentFailures = leaf.stats().servers[1]?.failures ?? 0
  t.ok(silentFailures >= 2, `the silent server was given its requestTimeoutMs again (${silentFailures} times)`)
  t.ok(elapsed >= 200 * silentFailures, `the call went on within its budget, past any fail fast (${elapsed.toFixed(0)} ms of 600)`)
})
