import t, { type Test } from 'tap'
import { parseJdbcUrl } from '../../src/config/jdbc-url.js'
import type { SegmentStore } from '../../src/segment/store.js'
import { createStore } from '../../src/segment/stores/create-store.js'
import { captureLogger } from '../helpers/logger.js'
import { TEST_MYSQL_HOST, TEST_MYSQL_PORT, createTestDatabase } from '../helpers/mysql.js'
import { TEST_PG_HOST, TEST_PG_PORT, createTestPgDatabase } from '../helpers/postgres.js'

// TLS preferred (the default) against the shared servers, which have none: a fresh store's
// first calls, made all at once, start on the TLS pool; the first to learn that the server
// has no TLS swaps it for a plain-text one, and every other call, whether its pool was ended
// under it or it failed the same way, goes on in the new pool. The swap is told once, at warn.

const CALLS = 8
// Long enough that a call left waiting on the pool that was swapped (until its connect
// timeout) shows as slow, not as a pass.
const CONNECT_TIMEOUT_MS = 10_000

const engines = [
  { name: 'MariaDB', server: `${TEST_MYSQL_HOST}:${TEST_MYSQL_PORT}`, create: createTestDatabase },
  { name: 'PostgreSQL', server: `${TEST_PG_HOST}:${TEST_PG_PORT}`, create: createTestPgDatabase },
]

for (const engine of engines) {
  // A pool of 2: six calls wait in the TLS pool's queue; of 8: each opens its own TLS connection.
  for (const poolSize of [2, CALLS]) {
    t.test(`${engine.name}, pool of ${poolSize}: ${CALLS} calls at once on a fresh store all succeed in plain text, the fallback told once`, async (t: Test) => {
      const db = await engine.create()
      const config = parseJdbcUrl(db.url, '', '')
      t.match(config, { tls: { mode: 'prefer', modeFrom: 'default' } }, 'the default mode is prefer')
      const { logger, lines } = captureLogger()
      const store: SegmentStore = createStore(config, { connectTimeoutMs: CONNECT_TIMEOUT_MS, poolSize, queryTimeoutMs: 5000, logger })
      t.teardown(async () => { await store.close(); await db.drop() })

      const started = performance.now()
      const outcomes = await Promise.allSettled(Array.from({ length: CALLS }, () => store.ping()))
      const elapsed = performance.now() - started
      const failed = outcomes.flatMap((o) => o.status === 'rejected' ? [String(o.reason)] : [])
      t.same(failed, [], `all ${CALLS} succeed`)
      t.ok(elapsed < CONNECT_TIMEOUT_MS / 2, `none waited out its connect timeout (${Math.round(elapsed)} ms)`)
      t.match(store.tlsSession?.(), { cipher: null }, 'the session is plain text')

      await Promise.all(Array.from({ length: CALLS }, () => store.ping()))
      const warnings = lines.filter((l) => l.level === 40)
      t.equal(warnings.length, 1, 'one warning, after two rounds of calls')
      const { level, time, pid, hostname, msg, ...fields } = warnings[0] ?? {}
      t.same(fields, { server: engine.server, tls: 'prefer (default)' }, 'it names the server and the mode, nothing else (never the password)')
      t.match(msg, /TLS is preferred.*offers none.*the password and the IDs cross the network readable.*once the server has TLS/, 'why it matters, and the fix')
    })
  }
}
