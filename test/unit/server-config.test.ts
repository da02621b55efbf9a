import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import type { Server } from 'node:http'
import { join } from 'node:path'
import t from 'tap'
import { ConfigError, loadConfig } from '../../src/config/load-config.js'
import { createServiceServer } from '../../src/http/bound-server.js'
import { FIXED_PAIRS } from '../helpers/tls.js'

// The server.* keys (docs/configuration.md, Connections and TLS: HTTP): their defaults, the
// rules between them, the TLS files, and what the server object gets (no socket is opened).

function folderWith (files: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-server-config-'))
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content)
  return dir
}

const load = (argv: string[], cwd = folderWith()) => loadConfig({ cwd, argv }).config.server

t.test('the defaults bound every connection; no TLS', async (t) => {
  t.same(load([]), {
    host: '0.0.0.0', port: 8080, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 72_000, idleTimeoutMs: 0, maxConnections: 8192, tls: undefined,
  })
})

t.test('a request timeout below the headers timeout is refused, as Node refuses it; 0 turns either off', async (t) => {
  const err = t.throws(() => load(['--server.headers-timeout-ms=20000', '--server.request-timeout-ms=15000'])) as ConfigError
  t.equal(err.key, 'server.request-timeout-ms')
  t.match(err.message, /15000 is less than server\.headers-timeout-ms \(20000\)/)
  t.match(load(['--server.headers-timeout-ms=20000', '--server.request-timeout-ms=0']), { headersTimeoutMs: 20_000, requestTimeoutMs: 0 })
  t.match(load(['--server.headers-timeout-ms=0']), { headersTimeoutMs: 0, requestTimeoutMs: 30_000 })
  t.throws(() => load(['--server.keep-alive-timeout-ms=0']), { key: 'server.keep-alive-timeout-ms', message: /out of range/ })
})

t.test('server.tls.cert and server.tls.key: read from the config file\'s folder, whatever the working folder', async (t) => {
  const pair = FIXED_PAIRS[0]
  const dir = folderWith({ 'cert.pem': pair.cert, 'key.pem': pair.key, 'leaf.properties': 'server.tls.cert=cert.pem\nserver.tls.key=key.pem\n' })
  t.same(load(['--config', join(dir, 'leaf.properties')]).tls, pair)
})

t.test('a lone, unreadable, non-PEM or mismatched TLS file is refused naming its key', async (t) => {
  const dir = folderWith({ 'cert.pem': FIXED_PAIRS[0].cert, 'key.pem': FIXED_PAIRS[0].key, 'other-key.pem': FIXED_PAIRS[1].key, 'cert.der': 'not PEM', 'key-as-cert.pem': FIXED_PAIRS[0].key })
  const cases: [string[], string, RegExp][] = [
    [['--server.tls.cert=cert.pem'], 'server.tls.key', /is not set, but server\.tls\.cert is: HTTPS needs both/],
    [['--server.tls.key=key.pem'], 'server.tls.cert', /is not set, but server\.tls\.key is/],
    [['--server.tls.cert=missing.pem', '--server.tls.key=key.pem'], 'server.tls.cert', /cannot read .*missing\.pem \(ENOENT\)/],
    [['--server.tls.cert=cert.der', '--server.tls.key=key.pem'], 'server.tls.cert', /cert\.der holds no PEM certificate .*openssl x509 -inform DER/],
    [['--server.tls.cert=key-as-cert.pem', '--server.tls.key=key.pem'], 'server.tls.cert', /holds no PEM certificate/],
    [['--server.tls.cert=cert.pem', '--server.tls.key=other-key.pem'], 'server.tls.key', /other-key\.pem is not the private key of server\.tls\.cert's certificate/],
  ]
  for (const [argv, key, problem] of cases) {
    // Relative to the install folder when no config file is read: here, `dir`.
    const err = t.throws(() => loadConfig({ cwd: folderWith(), installDir: dir, argv })) as ConfigError
    t.ok(err instanceof ConfigError, argv.join(' '))
    t.equal(err.key, key, argv.join(' '))
    t.match(err.message, problem, argv.join(' '))
  }
})

t.test('the server gets every setting, and checks its timeouts ten times per the shortest, at most once a second', async (t) => {
  const settings = { ...load([]), headersTimeoutMs: 1500, requestTimeoutMs: 4000, keepAliveTimeoutMs: 65_000, idleTimeoutMs: 20_000, maxConnections: 100 }
  const server = createServiceServer(settings, () => {})
  t.match(server, { headersTimeout: 1500, requestTimeout: 4000, keepAliveTimeout: 65_000, timeout: 0, maxConnections: 100, connectionsCheckingInterval: 150, requireHostHeader: false })
  // (Node 20 has the option and the property; its types do not name the property.)
  const checkingInterval = (s: Server) => (s as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval
  t.equal(checkingInterval(createServiceServer(load([]), () => {})), 1000, 'the defaults: every second')
  t.equal(checkingInterval(createServiceServer({ ...settings, headersTimeoutMs: 0, requestTimeoutMs: 0 }, () => {})), 1000, 'no timeout to check')
  t.ok('setSecureContext' in createServiceServer({ ...settings, tls: FIXED_PAIRS[0] }, () => {}), 'with TLS: an HTTPS server')
  t.notOk('setSecureContext' in server, 'without: plain HTTP')
  t.equal(server.timeout, 0, 'no socket timeout: an answer not read is closed by a check on a timer (bound-server.ts), not by a timer re-armed at every read and write')
})
