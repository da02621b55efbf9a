import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { request } from 'node:https'
import { connect as connectTcp } from 'node:net'
import { join } from 'node:path'
import { connect as connectTls } from 'node:tls'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { SERVER_JS, emptyConfigFile, startServer } from '../helpers/server-process.js'
import { FIXED_PAIRS, makeSelfSigned } from '../helpers/tls.js'

// server.tls.cert and server.tls.key: the built server speaks HTTPS with them, with the same
// limits as over HTTP; a missing, wrong or lone file refuses the start in one line.

const HEADERS_TIMEOUT_MS = 1000

/** A GET over HTTPS trusting `ca` (or Node's public roots alone when none is given). */
function httpsGet (url: string, ca?: string): Promise<{ status: number, body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ca, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

t.test('with server.tls.cert and server.tls.key (relative to the config file), the server listens and answers over HTTPS', async (t) => {
  const tls = makeSelfSigned()
  // Relative paths, read from the config file's folder, whatever the working folder.
  writeFileSync(join(tls.dir, 'leaf.properties'), 'server.tls.cert=cert.pem\nserver.tls.key=key.pem\n')
  const server = await startServer({
    cwd: tempDir(),
    args: ['--config', join(tls.dir, 'leaf.properties'), '--server.port=0', '--leaf.segment.enable=false', '--leaf.snowflake.enable=true', '--leaf.snowflake.worker.id=0', `--leaf.snowflake.cache.dir=${tempDir()}`,
      `--server.headers-timeout-ms=${HEADERS_TIMEOUT_MS}`],
  })
  t.teardown(() => server.stop())
  t.equal(server.url, `https://127.0.0.1:${server.port}`, 'the start line says https')

  const id = await httpsGet(`${server.url}/api/snowflake/get/x`, tls.pair.cert)
  t.equal(id.status, 200)
  t.match(id.body, /^\d+$/, 'a snowflake ID')
  t.same(await httpsGet(`${server.url}/healthz`, tls.pair.cert), { status: 200, body: '{"status":"ok"}' })
  await t.rejects(httpsGet(`${server.url}/healthz`), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }, 'a client that does not trust the certificate is refused: it is that one')

  // The limits hold over TLS too: headers that never end are answered 408 at the headers
  // timeout, and a connection that never starts its handshake is closed then too.
  const started = performance.now()
  const slow = connectTls({ host: '127.0.0.1', port: server.port, ca: tls.pair.cert, servername: 'localhost' })
  slow.setEncoding('utf8')
  slow.on('error', () => {})
  slow.on('secureConnect', () => slow.write('GET /healthz HTTP/1.1\r\nHost: leaf\r\nX-Slow: a'))
  const answer = await new Promise<string>((resolve) => {
    let received = ''
    slow.on('data', (chunk: string) => { received += chunk })
    slow.on('close', () => resolve(received))
  })
  t.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*"error":"REQUEST_TIMEOUT"/, 'unfinished headers over TLS: 408')
  t.ok(performance.now() - started >= HEADERS_TIMEOUT_MS - 50, 'not before the headers timeout')

  const silentStart = performance.now()
  const silent = connectTcp({ host: '127.0.0.1', port: server.port })
  silent.on('error', () => {})
  await new Promise((resolve) => silent.on('close', resolve))
  const silentMs = performance.now() - silentStart
  t.ok(silentMs >= HEADERS_TIMEOUT_MS - 50 && silentMs < HEADERS_TIMEOUT_MS + 10_000, `no handshake: closed at the headers timeout (after ${Math.round(silentMs)} ms)`)
})

/** Runs the server to its exit (it must refuse to start): its exit code and output lines. */
function runToExit (args: string[]): { status: number | null, lines: string[] } {
  const run = spawnSync(process.execPath, [SERVER_JS, '--server.host=127.0.0.1', '--server.port=0', '--config', emptyConfigFile(), ...args], {
    cwd: tempDir(), env: { PATH: process.env.PATH, LOG_LEVEL: 'info' }, encoding: 'utf8', timeout: 30_000,
  })
  return { status: run.status, lines: `${run.stdout}${run.stderr}`.split('\n').filter((l) => l !== '') }
}

t.test('a lone, missing, non-PEM or mismatched TLS file refuses the start in one line naming the key and the fix', async (t) => {
  const dir = tempDir()
  const file = (name: string, content: string) => { writeFileSync(join(dir, name), content); return join(dir, name) }
  const cert = file('cert.pem', FIXED_PAIRS[0].cert)
  const key = file('key.pem', FIXED_PAIRS[0].key)
  const cases: [string, string[], RegExp][] = [
    ['a certificate without its key', [`--server.tls.cert=${cert}`],
      /^leaf-ts: configuration error: server\.tls\.key: is not set, but server\.tls\.cert is: HTTPS needs both/],
    ['a key without its certificate', [`--server.tls.key=${key}`],
      /^leaf-ts: configuration error: server\.tls\.cert: is not set, but server\.tls\.key is/],
    ['a missing certificate file', [`--server.tls.cert=${join(dir, 'nowhere.pem')}`, `--server.tls.key=${key}`],
      /^leaf-ts: configuration error: server\.tls\.cert: cannot read .*nowhere\.pem \(ENOENT\): give a PEM file this process may read$/],
    ['a key that is not PEM', [`--server.tls.cert=${cert}`, `--server.tls.key=${file('key.der', 'not a key\n')}`],
      /^leaf-ts: configuration error: server\.tls\.key: .*key\.der holds no PEM private key \(no -----BEGIN \.\.\. line\): give one in PEM \(from DER: openssl pkey/],
    ['another certificate\'s key', [`--server.tls.cert=${cert}`, `--server.tls.key=${file('other-key.pem', FIXED_PAIRS[1].key)}`],
      /^leaf-ts: configuration error: server\.tls\.key: .*other-key\.pem is not the private key of server\.tls\.cert's certificate.*: give that certificate's own key/],
  ]
  for (const [what, args, line] of cases) {
    const run = runToExit(args)
    t.equal(run.status, 1, `${what}: exit 1`)
    t.equal(run.lines.length, 1, `${what}: one line (${run.lines.join(' | ')})`)
    t.match(run.lines[0], line, what)
  }
})
