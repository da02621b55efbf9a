import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { BACKOFF_MAX_MS, BACKOFF_MIN_MS, createMysqlRunner, hostFailed } from '../../src/database/mysql-hosts.js'
import { createHostFence } from '../../src/segment/host-fence.js'
import { createMysqlStore } from '../../src/segment/stores/mysql-store.js'
import { PrivateMariaDb } from '../fault/services.js'
import { tempDir } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { createTestDatabase, TEST_MYSQL } from '../helpers/mysql.js'
import { freePort } from '../helpers/ports.js'
import { createProxy } from '../helpers/tcp-proxy.js'

// The hosts of leaf.jdbc.url (src/database/mysql-hosts.ts), against real servers: the
// suite's MariaDB behind proxies that can refuse or hold, and a private MariaDB that says it
// is read-only.

const server = new URL(TEST_MYSQL)
const credentials = { user: decodeURIComponent(server.username), password: decodeURIComponent(server.password) }

/** Two proxies to the suite's MariaDB, host 1 and host 2 of a runner, and a test database. */
async function twoHosts (t: Test, queryTimeoutMs = 1000) {
  const db = await createTestDatabase()
  const first = await createProxy(Number(server.port || 3306), { targetHost: server.hostname, protocol: 'mysql' })
  const second = await createProxy(Number(server.port || 3306), { targetHost: server.hostname, protocol: 'mysql' })
  const { logger, lines } = captureLogger()
  const runner = createMysqlRunner({
    hosts: [{ host: '127.0.0.1', port: first.port }, { host: '127.0.0.1', port: second.port }],
    ...credentials,
    database: db.name,
    connectTimeoutMs: 1000,
    poolSize: 2,
    queryTimeoutMs,
    logger,
  })
  t.teardown(async () => {
    await runner.close()
    await first.close()
    await second.close()
    await db.drop()
  })
  await db.query('CREATE TABLE t (id INT PRIMARY KEY)')
  return { db, first, second, runner, lines }
}

t.test('the first host that answers is used, and kept; one that refuses connections is skipped at once, the statement sent to the next', async (t) => {
  const { first, second, runner, lines } = await twoHosts(t)
  t.same(await runner.run('SELECT 1 AS one'), [{ one: 1 }])
  t.equal(first.accepted, 1, 'host 1 in use')
  t.equal(second.accepted, 0, 'host 2 untouched')
  first.block()
  // A new connection is needed: the pool's one is cut by block().
  await runner.run('INSERT INTO t VALUES (1)').then(() => undefined, () => undefined)
  const done = await runner.run('INSERT INTO t VALUES (2)')
  t.ok(done !== undefined, 'the insert ran on host 2')
  t.ok(second.accepted >= 1, 'host 2 took over')
  t.ok(lines.some((l) => l.msg === 'MySQL host failed: moving to the next host of leaf.jdbc.url'), 'the move is logged')
  first.unblock()
  const before = first.accepted
  for (let i = 0; i < 5; i++) await runner.run('SELECT 1')
  t.equal(first.accepted, before, 'sticky: host 1 back is not used again while host 2 works')
})

t.test('a statement that timed out on a host is not repeated on another (it may have run); the next statement goes to the next host', async (t) => {
  const { db, first, second, runner } = await twoHosts(t, 300)
  await runner.run('SELECT 1')
  first.holdStatements({ match: /^INSERT INTO t VALUES \(7\)/, holdMs: 1500 })
  // Its kill is held too: the statement may still run, and the caller is told so.
  first.holdStatements({ match: /^KILL/, holdMs: 1500 })
  const err = await runner.run('INSERT INTO t VALUES (7)').then(() => undefined, (e: unknown) => e)
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'may-still-run' }, cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' } })
  t.equal(second.accepted, 0, 'not repeated on host 2')
  await runner.run('INSERT INTO t VALUES (8)')
  t.ok(second.accepted >= 1, 'the next statement went to host 2')
  await new Promise((resolve) => setTimeout(resolve, 1600))
  const rows = await db.query<{ id: number }[]>('SELECT id FROM t ORDER BY id')
  t.same(rows.map((r) => r.id), [7, 8], 'the held insert ran late, once; the next ran once')
})

t.test('every host down: the call fails with the last host\'s error, and each host rests a bounded backoff', async (t) => {
  const dead = [await freePort(), await freePort()]
  const runner = createMysqlRunner({
    hosts: dead.map((port) => ({ host: '127.0.0.1', port })), ...credentials, database: 'leaf', connectTimeoutMs: 500, poolSize: 1, queryTimeoutMs: 500,
  })
  t.teardown(() => runner.close())
  await t.rejects(runner.run('SELECT 1'), { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'ECONNREFUSED' } })
  // Resting hosts are still tried, one per call (the one whose rest ends first): a call never
  // waits for a backoff, and never hangs.
  const started = performance.now()
  for (let i = 0; i < 10; i++) await t.rejects(runner.run('SELECT 1'), { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'ECONNREFUSED' } })
  t.ok(performance.now() - started < BACKOFF_MAX_MS, 'ten calls fail fast')
})

t.test('a read-only server is never written through, even by a user read_only does not bind; the next host is', async (t) => {
  const replica = new PrivateMariaDb(join(tempDir('leaf-hosts-'), 'mariadb'), await freePort())
  await replica.init()
  t.teardown(() => replica.stop('SIGKILL'))
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  // The same database on the private server, for the suite's user, as a replica would have it.
  await replica.query(`CREATE DATABASE \`${db.name}\``)
  await replica.query(`CREATE TABLE \`${db.name}\`.leaf_alloc LIKE leaf.leaf_alloc`)
  await replica.query(`GRANT ALL PRIVILEGES ON \`${db.name}\`.* TO 'leaf'@'%'`)
  await replica.query('SET GLOBAL read_only = 1')
  const store = createMysqlStore({
    hosts: [{ host: '127.0.0.1', port: replica.port }, { host: server.hostname, port: Number(server.port || 3306) }],
    user: 'leaf',
    password: 'leaf',
    database: db.name,
    connectTimeoutMs: 1000,
    poolSize: 1,
    queryTimeoutMs: 1000,
  })
  t.teardown(() => store.close())
  t.match(await store.createTag({ key: 'listed', step: 10, maxId: 1n, description: null }), { key: 'listed' }, 'written through the next host')
  t.same(await db.query("SELECT biz_tag FROM leaf_alloc WHERE biz_tag = 'listed'"), [{ biz_tag: 'listed' }], 'on the writable server')
  t.same(await replica.query(`SELECT biz_tag FROM \`${db.name}\`.leaf_alloc WHERE biz_tag = 'listed'`), [], 'not on the read-only one')
  // root has SUPER, which read_only lets write: refused all the same, before anything is sent.
  const asRoot = createMysqlStore({ hosts: [{ host: '127.0.0.1', port: replica.port }], user: 'root', password: '', database: 'leaf', connectTimeoutMs: 1000, poolSize: 1, queryTimeoutMs: 1000 })
  t.teardown(() => asRoot.close())
  await t.rejects(asRoot.createTag({ key: 'written', step: 10, maxId: 1n, description: null }), { code: 'LEAF_SERVER_READ_ONLY', message: /is read-only \(@@read_only = 1\): nothing is written through it/ })
  t.same(await replica.query("SELECT biz_tag FROM leaf_alloc WHERE biz_tag = 'written'"), [], 'the write never reached it')
  await replica.query('SET GLOBAL read_only = 0')
  t.match(await asRoot.createTag({ key: 'written', step: 10, maxId: 1n, description: null }), { key: 'written' }, 'writable again (a promotion): used')
  // A pooled connection's server turns read-only: the next look at the store's identity (each
  // tag refresh) reads it afresh and refuses it, as a new connection would.
  t.match(await asRoot.identity(), /^server_id \d+$/)
  await replica.query('SET GLOBAL read_only = 1')
  await t.rejects(asRoot.identity(), { code: 'LEAF_SERVER_READ_ONLY', message: /is read-only/ }, 'a store turned read-only under a pooled connection is seen')
  await replica.query('SET GLOBAL read_only = 0')
})

t.test('what says the host failed, not the statement: connection errors, timeouts, read-only and not-ready answers', async (t) => {
  for (const err of [{ code: 'ECONNREFUSED' }, { code: 'PROTOCOL_SEQUENCE_TIMEOUT' }, { code: 'ER_SERVER_SHUTDOWN' }, { code: 'ER_OPTION_PREVENTS_STATEMENT', errno: 1290 }, { code: 'ER_UNKNOWN_COM_ERROR', errno: 1047 }, { code: 'X', fatal: true }]) {
    t.equal(hostFailed(err), true, JSON.stringify(err))
  }
  for (const err of [{ errno: 1062, code: 'ER_DUP_ENTRY' }, { errno: 1213, code: 'ER_LOCK_DEADLOCK' }, { code: 'ER_ACCESS_DENIED_ERROR', errno: 1045 }, new Error('no MySQL connection free within 300 ms')]) {
    t.equal(hostFailed(err), false, JSON.stringify(err))
  }
})

t.test('with a gate: a store left is refused before anything is sent, a move reads every host first, a start begins at the host last used', async (t) => {
  const other = new PrivateMariaDb(join(tempDir('leaf-hosts-'), 'mariadb'), await freePort())
  await other.init()
  t.teardown(() => other.stop('SIGKILL'))
  // Another server_id than the suite's MariaDB: two stores, as an old primary and its promoted replica.
  await other.query('SET GLOBAL server_id = 77')
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await other.query(`CREATE DATABASE \`${db.name}\``)
  await other.query(`CREATE TABLE \`${db.name}\`.t (id INT PRIMARY KEY)`)
  await other.query(`GRANT ALL PRIVILEGES ON \`${db.name}\`.* TO 'leaf'@'%'`)
  await db.query('CREATE TABLE t (id INT PRIMARY KEY)')
  const first = await createProxy(Number(server.port || 3306), { targetHost: server.hostname, protocol: 'mysql' })
  t.teardown(() => first.close())
  const hosts = [{ host: '127.0.0.1', port: first.port }, { host: '127.0.0.1', port: other.port }]
  const options = { hosts, user: 'leaf', password: 'leaf', database: db.name, connectTimeoutMs: 1000, poolSize: 1, queryTimeoutMs: 1000 }

  const census = createMysqlRunner(options)
  t.teardown(() => census.close())
  const states = await census.hosts()
  t.match(states, [{ host: `127.0.0.1:${first.port}`, state: 'writable', store: /^server_id \d+$/ }, { host: `127.0.0.1:${other.port}`, state: 'writable', store: 'server_id 77' }])
  const suiteStore = states[0]?.store as string
  t.not(suiteStore, 'server_id 77')
  await other.query('SET GLOBAL read_only = 1')
  first.block()
  const blocked = await census.hosts()
  t.match(blocked, [{ state: 'unknown', error: /ECONNRESET|ECONNREFUSED|PROTOCOL_CONNECTION_LOST|closed/ }, { state: 'read-only', store: 'server_id 77' }], 'a host that does not answer is unknown; a read-only one is read')
  first.unblock()
  await other.query('SET GLOBAL read_only = 0')

  // The suite's server is a store this instance left: nothing goes to it, the next host is used, after a census.
  const moves: string[] = []
  const left = createMysqlRunner({ ...options, gate: { refuses: (s) => s === suiteStore, beforeMove: async (to) => { moves.push(to) } } })
  t.teardown(() => left.close())
  await left.run('INSERT INTO t VALUES (1)')
  t.same(await db.query('SELECT id FROM t'), [], 'nothing written on the store left')
  t.same(await other.query(`SELECT id FROM \`${db.name}\`.t`), [{ id: 1 }], 'written on the next host')
  t.same(moves, [`127.0.0.1:${other.port}`], 'the move was checked first')
  t.equal(left.hostInUse(), `127.0.0.1:${other.port}`)

  // A move the gate refuses (two hosts writable): the statement fails, and is sent nowhere.
  const split = Object.assign(new Error('split'), { code: 'STORE_SPLIT' })
  const refused = createMysqlRunner({ ...options, gate: { refuses: (s) => s === suiteStore, beforeMove: async () => { throw split } } })
  t.teardown(() => refused.close())
  await t.rejects(refused.run('INSERT INTO t VALUES (2)'), split)
  t.equal(refused.hostInUse(), `127.0.0.1:${first.port}`, 'the host in use (the warm-start file\'s, /cache\'s) is not one the gate refused')
  t.same(await other.query(`SELECT id FROM \`${db.name}\`.t ORDER BY id`), [{ id: 1 }], 'not sent to the other host either')

  // A blip on the host in use while the move away from it is refused: once the host answers
  // again, statements go back to it (the refused host rests, as a failed one would).
  const stuck = createMysqlRunner({ ...options, startAt: `127.0.0.1:${first.port}`, gate: { refuses: () => false, beforeMove: async () => { throw split } } })
  t.teardown(() => stuck.close())
  await stuck.run('SELECT 1')
  first.block()
  await t.rejects(stuck.run('SELECT 1'))
  first.unblock()
  await sleep(BACKOFF_MIN_MS * 3)
  await stuck.run('INSERT INTO t VALUES (4)')
  t.equal(stuck.hostInUse(), `127.0.0.1:${first.port}`, 'back on the host in use after its blip')
  t.same(await db.query('SELECT id FROM t'), [{ id: 4 }], 'written there, not on the host whose move was refused')

  // The move the gate let through, to a host that then refused the statement (a store left):
  // the list is still on the host in use, and going back to it after its blip needs no gate.
  const backToFirst = createMysqlRunner({
    ...options,
    startAt: `127.0.0.1:${first.port}`,
    gate: { refuses: (s) => s === 'server_id 77', beforeMove: async (to) => { if (to === `127.0.0.1:${first.port}`) throw split } },
  })
  t.teardown(() => backToFirst.close())
  await backToFirst.run('SELECT 1')
  first.block()
  await t.rejects(backToFirst.run('SELECT 1'))
  await t.rejects(backToFirst.run('SELECT 1'), 'the other host refuses: a store left')
  first.unblock()
  await sleep(BACKOFF_MIN_MS * 3)
  await backToFirst.run('INSERT INTO t VALUES (5)')
  t.equal(backToFirst.hostInUse(), `127.0.0.1:${first.port}`, 'back on the host in use, no move asked for')
  t.same(await db.query('SELECT id FROM t ORDER BY id'), [{ id: 4 }, { id: 5 }])

  // A start at the host the last life used: the first host is not touched.
  const accepted = first.accepted
  const resumed = createMysqlRunner({ ...options, startAt: `127.0.0.1:${other.port}`, gate: { refuses: () => false, beforeMove: async (to) => { moves.push(to) } } })
  t.teardown(() => resumed.close())
  await resumed.run('INSERT INTO t VALUES (3)')
  t.equal(first.accepted, accepted, 'host 1 untouched')
  t.same(await other.query(`SELECT id FROM \`${db.name}\`.t ORDER BY id`), [{ id: 1 }, { id: 3 }])
  t.equal(moves.length, 1, 'no move, no census')

  // The replication form writes through its source alone, whatever the list says.
  const source = createMysqlRunner({ ...options, replication: true, startAt: `127.0.0.1:${other.port}` })
  t.teardown(() => source.close())
  t.equal(source.hostInUse(), `127.0.0.1:${first.port}`)
  first.block()
  await t.rejects(source.run('INSERT INTO t VALUES (4)'))
  first.unblock()
  t.same(await other.query(`SELECT id FROM \`${db.name}\`.t ORDER BY id`), [{ id: 1 }, { id: 3 }], 'never written through a replica')

  // With the segment mode's fence: a blip of the primary sends a statement to the replica (which
  // refuses it), and the next goes back to the primary, a store this life wrote through.
  await other.query('SET GLOBAL read_only = 1')
  const runner = createMysqlRunner({ ...options, gate: { refuses: (s) => fence.refuses(s), beforeMove: (to, from) => fence.beforeMove(to, from) } })
  const fence = createHostFence({ logger: silentLogger, census: () => runner.hosts() })
  t.teardown(() => runner.close())
  await fence.check()
  await runner.run('INSERT INTO t VALUES (10)')
  fence.allocated()
  first.block()
  await t.rejects(runner.run('INSERT INTO t VALUES (11)'), 'the primary cut, the replica refuses')
  first.unblock()
  await new Promise((resolve) => setTimeout(resolve, 250))
  await runner.run('INSERT INTO t VALUES (12)')
  t.same(await db.query('SELECT id FROM t WHERE id >= 10 ORDER BY id'), [{ id: 10 }, { id: 12 }], 'back on the primary')
  t.equal(fence.view().split, undefined)
  await other.query('SET GLOBAL read_only = 0')
})
