import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { createUndiciTransport } from '../../client/src/transport.js'

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
