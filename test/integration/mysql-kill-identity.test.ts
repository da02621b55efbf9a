import { join } from 'node:path'
import t, { type Test } from 'tap'
import { createMysqlRunner } from '../../src/database/mysql-hosts.js'
import { PrivateMariaDb } from '../fault/services.js'
import { tempDir } from '../helpers/config.js'
import { TEST_MYSQL_HOST, TEST_MYSQL_PORT } from '../helpers/mysql.js'
import { freePort } from '../helpers/ports.js'
import { createProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { sleep } from '../helpers/time.js'

// The kill of a statement without an answer goes only to the server process that ran its
// thread (database/mysql-pool.ts): a thread id means nothing on another server, or on the
// same one after a restart. A private MariaDB beside the suite's plays the other server, then
// restarts under a held statement.

const other = new PrivateMariaDb(join(tempDir('leaf-kill-identity-'), 'mariadb'), await freePort())
await other.init()
const firstStart = Date.now()
t.teardown(() => other.stop('SIGKILL'))

/**
 * A runner of one connection through `proxy`, connected; then one statement held (as long as
 * `holdMs`), whose outcome is returned, and the kills the proxy saw.
 */
async function heldStatement (t: Test, proxy: TcpProxy, queryTimeoutMs: number, holdMs: number) {
  const runner = createMysqlRunner({ hosts: [{ host: '127.0.0.1', port: proxy.port }], user: 'leaf', password: 'leaf', database: 'leaf', connectTimeoutMs: 2000, poolSize: 1, queryTimeoutMs })
  t.teardown(async () => {
    await runner.close()
    await proxy.close()
  })
  t.same(await runner.run('SELECT 1 AS one'), [{ one: 1 }], 'connected')
  const held = proxy.holdStatements({ match: /^SELECT SLEEP/, holdMs })
  const kills = proxy.holdStatements({ match: /^KILL/, holdMs: 1 })
  const outcome = runner.run('SELECT SLEEP(0) AS held').then(() => undefined, (e: unknown) => e)
  await sleep(100)
  t.equal(held.length, 1, 'the statement is held')
  return { outcome, kills }
}

t.test('a kill whose connection reaches another server is not sent: the error says the statement may still run', async (t) => {
  const proxy = await createProxy(TEST_MYSQL_PORT, { targetHost: TEST_MYSQL_HOST, protocol: 'mysql' })
  const { outcome, kills } = await heldStatement(t, proxy, 500, 2000)
  // From now on the proxy's new connections (the kill's) reach the private MariaDB.
  proxy.retarget(other.port)
  const err = await outcome
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'may-still-run' }, message: new RegExp(`the kill reached another server \\(.*:${other.port} started at \\d+, not .*:${TEST_MYSQL_PORT} started at \\d+\\)`) })
  t.equal(kills.length, 0, 'no KILL sent')
})

t.test('a kill after the server restarted is not sent: the thread ended with the old process, and the statement is settled', async (t) => {
  // Thread ids well past those a fresh server gives its first connections.
  for (let i = 0; i < 30; i++) await other.ping()
  // Starts are read in whole seconds, and two reads of one may straddle a second; a start within
  // a second of the last reads as the same start (and, with ids below the thread's, as another
  // server: no kill, may still run). The restart below comes well past that.
  await sleep(Math.max(0, firstStart + 3000 - Date.now()))
  const proxy = await createProxy(other.port, { protocol: 'mysql' })
  const { outcome, kills } = await heldStatement(t, proxy, 8000, 30_000)
  // The server dies and comes back; the proxy passes its end on only after the statement's
  // timeout, so the kill is tried against the new process.
  proxy.delayMs = 20_000
  await other.stop('SIGKILL')
  await other.start()
  proxy.delayMs = 0
  const err = await outcome
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'ended', how: 'restarted' }, cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' }, message: /its server restarted since, ending thread \d+: the statement ran before, or never will/ })
  t.equal(kills.length, 0, 'no KILL sent: its thread id may name another client\'s connection now')
})
