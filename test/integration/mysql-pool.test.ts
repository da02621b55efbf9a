import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import type { SegmentStore } from '../../src/segment/store.js'
import { createMysqlRunner } from '../../src/database/mysql-hosts.js'
import { compareServers, identityOf } from '../../src/database/server-identity.js'
import mysql from 'mysql2/promise'
import { createMysqlStore } from '../../src/segment/stores/mysql-store.js'
import { testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { TEST_MYSQL, TEST_MYSQL_HOST, TEST_MYSQL_PORT, createTestDatabase, type TestDatabase } from '../helpers/mysql.js'
import { createProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { batchLines } from '../helpers/ids.js'

// Connections that die without a FIN or RST (a NAT or firewall dropping its state, a host
// gone): the proxy's blackhole() keeps them open and passes nothing, while new connections work.

type Outcome<T> = { state: 'resolved', value: T } | { state: 'rejected', reason: unknown } | { state: 'pending' }

/** How `promise` stands after `ms`: a hang shows as a failed assertion, not as a stuck test. */
function within<T> (promise: Promise<T>, ms: number): Promise<Outcome<T>> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ state: 'pending' }), ms)
    promise.then(
      (value) => { clearTimeout(timer); resolve({ state: 'resolved', value }) },
      (reason: unknown) => { clearTimeout(timer); resolve({ state: 'rejected', reason }) })
  })
}

/**
 * A fresh database reached through a proxy. On teardown the proxy goes first, so that closing
 * the pool never waits on a silenced socket, then whatever `closers` holds, then the database.
 */
async function behindProxy (t: Test): Promise<{ db: TestDatabase, proxy: TcpProxy, url: string, closers: (() => Promise<unknown>)[] }> {
  const db = await createTestDatabase()
  const proxy = await createProxy(TEST_MYSQL_PORT, { targetHost: TEST_MYSQL_HOST })
  const closers: (() => Promise<unknown>)[] = []
  t.teardown(async () => {
    try {
      await proxy.close()
      for (const close of closers) await close()
    } finally {
      await db.drop()
    }
  })
  const url = new URL(db.url)
  url.port = String(proxy.port)
  // The shared server has no TLS: the default (prefer) would spend a connection learning it,
  // and these tests count connections.
  url.searchParams.set('useSSL', 'false')
  return { db, proxy, url: url.href, closers }
}

/** The service on that database with a pool of 2 and every other setting at its default. */
async function service (t: Test) {
  const { db, proxy, url, closers } = await behindProxy(t)
  await db.query("INSERT INTO leaf_alloc (biz_tag, step) VALUES ('silent', 10)")
  const config = testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': url, 'leaf.jdbc.pool-size': 2 })
  const app = await buildApp(config, { logger: silentLogger })
  closers.push(() => app.close())
  const store = app.leaf.segment?.store as SegmentStore
  t.equal((await app.inject('/api/segment/get/silent')).body, '1', 'first segment loaded')
  // Two calls at once: both pool connections are open.
  await Promise.all([store.ping(), store.ping()])
  t.equal(proxy.accepted, 2, 'the pool holds its 2 connections')
  return { app, store, proxy, config }
}

/** Asks for more IDs than are buffered, so that a segment load must go through the pool. */
async function batchNeedingLoads (t: Test, app: Awaited<ReturnType<typeof buildApp>>, waitTimeoutMs: number) {
  const started = performance.now()
  const answer = await within(app.inject('/api/segment/get/silent?count=25'), waitTimeoutMs * 3)
  const elapsed = Math.round(performance.now() - started)
  t.equal(answer.state, 'resolved', `answered (${elapsed} ms)`)
  if (answer.state !== 'resolved') return
  t.equal(answer.value.statusCode, 200, `IDs within the wait timeout of ${waitTimeoutMs} ms`, { body: answer.value.body })
  const ids = batchLines(answer.value.body)
  t.equal(new Set(ids).size, 25, '25 distinct IDs')
  t.ok(elapsed < waitTimeoutMs, `the load after the silenced ones landed within the wait (${elapsed} ms)`)
}

async function readiness (t: Test, app: Awaited<ReturnType<typeof buildApp>>) {
  const ready = await within(app.inject('/readyz'), 5000)
  t.equal(ready.state, 'resolved', '/readyz answered')
  if (ready.state !== 'resolved') return
  t.equal(ready.value.statusCode, 200)
  t.same(ready.value.json().modes.segment, { ready: true }, 'the readiness ping reached the database')
}

t.test('closing the store after its connections died resolves: a shutdown during an outage exits cleanly', async (t) => {
  const { proxy, url } = await behindProxy(t)
  const u = new URL(url)
  const store = createMysqlStore({
    hosts: [{ host: u.hostname, port: Number(u.port) }],
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: u.pathname.slice(1),
    connectTimeoutMs: 1000,
    poolSize: 2,
    queryTimeoutMs: 1000,
  })
  await Promise.all([store.ping(), store.ping()])
  // The server side of both pool connections goes away, and the store closes before the
  // driver has noticed.
  await proxy.close()
  t.equal((await within(store.close(), 3000)).state, 'resolved')
})

t.test('pool connections that went silent while idle: the next load lands within the wait timeout; /readyz pings through', async (t) => {
  const { app, proxy, config } = await service(t)
  t.equal(proxy.blackhole(), 2, 'both pool connections silenced')
  await batchNeedingLoads(t, app, config.segment.waitTimeoutMs)
  await readiness(t, app)
})

t.test('a pool filled by queries hung on silent connections: the next load lands within the wait timeout; /readyz pings through', async (t) => {
  const { app, store, proxy, config } = await service(t)
  t.equal(proxy.blackhole(), 2, 'both pool connections silenced')
  const hung = [within(store.getAllRows(), 5000), within(store.getAllRows(), 5000)]
  await batchNeedingLoads(t, app, config.segment.waitTimeoutMs)
  for (const call of hung) {
    t.match(await call, { state: 'rejected', reason: { code: 'LEAF_STATEMENT_UNANSWERED', cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' } } }, 'the hung call failed at the query timeout')
  }
  await readiness(t, app)
})

t.test('waiting for a pool connection is bounded; a connection that comes after the caller gave up goes back to the pool', async (t) => {
  const { db, proxy, closers } = await behindProxy(t)
  const server = new URL(TEST_MYSQL)
  const store = createMysqlStore({
    hosts: [{ host: '127.0.0.1', port: proxy.port }],
    user: decodeURIComponent(server.username),
    password: decodeURIComponent(server.password),
    database: db.name,
    connectTimeoutMs: 2000,
    poolSize: 1,
    queryTimeoutMs: 1000,
    acquireTimeoutMs: 300,
  })
  closers.push(() => store.close())
  await store.ping()
  t.equal(proxy.blackhole(), 1)
  const hung = store.ping() // holds the pool's only connection
  const started = performance.now()
  const waiter = await within(store.ping(), 3000)
  const waited = Math.round(performance.now() - started)
  t.match(waiter, { state: 'rejected', reason: { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'LEAF_NO_CONNECTION_FREE' }, message: 'no MySQL connection free within 300 ms' } }, 'the waiter gave up')
  t.ok(waited >= 290 && waited < 900, `at the acquire timeout (${waited} ms)`)
  t.match(await within(hung, 3000), { state: 'rejected', reason: { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'ended', how: 'killed' }, cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' } } }, 'the hung query failed at the query timeout, its thread killed')
  // The dead connection was destroyed; the pool then opened a new one for the waiter that had
  // given up. Leaked, it would leave this pool of 1 with nothing to give.
  t.match(await within(store.ping(), 3000), { state: 'resolved' }, 'the pool still serves')
  t.equal(proxy.accepted, 3, 'one connection to kill the hung one\'s thread, one new pool connection, reused')
  t.match(await within(store.allocate('order'), 3000), { state: 'resolved', value: { maxId: 2001n } })
})

/** A runner through a MySQL-aware proxy, with a table `t` to insert into. */
async function heldRunner (t: Test, queryTimeoutMs: number) {
  const db = await createTestDatabase()
  const proxy = await createProxy(TEST_MYSQL_PORT, { targetHost: TEST_MYSQL_HOST, protocol: 'mysql' })
  const server = new URL(TEST_MYSQL)
  const runner = createMysqlRunner({
    hosts: [{ host: '127.0.0.1', port: proxy.port }],
    user: decodeURIComponent(server.username),
    password: decodeURIComponent(server.password),
    database: db.name,
    connectTimeoutMs: 2000,
    poolSize: 1,
    queryTimeoutMs,
  })
  t.teardown(async () => {
    await runner.close()
    await proxy.close()
    await db.drop()
  })
  await db.query('CREATE TABLE t (id INT PRIMARY KEY)')
  const count = async () => Number((await db.query<{ n: number }[]>('SELECT COUNT(*) AS n FROM t'))[0]?.n)
  return { runner, proxy, count }
}

t.test('a statement held past the query timeout: its server thread is killed, and it never runs', async (t) => {
  const { runner, proxy, count } = await heldRunner(t, 300)
  const held = proxy.holdStatements({ match: /^INSERT INTO t/, holdMs: 1500 })
  const err = await runner.run('INSERT INTO t VALUES (1)').then(() => undefined, (e: unknown) => e)
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'ended', how: 'killed' }, cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' }, message: /its server thread \d+ was killed: the statement ran before, or never will/ })
  t.equal(held.length, 1, 'the proxy held it')
  await held[0]?.delivered
  t.ok(held[0]?.clientGoneFirst, 'delivered after the runner had given up on it')
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(await count(), 0, 'delivered to a killed thread: it did not run')
  t.same(await runner.run('SELECT 1 AS one'), [{ one: 1 }], 'the runner serves on')
})

t.test('a statement held past the query timeout whose kill cannot get through: the error says it may still run, and it does', async (t) => {
  const { runner, proxy, count } = await heldRunner(t, 300)
  const held = proxy.holdStatements({ match: /^INSERT INTO t/, holdMs: 1000 })
  proxy.holdStatements({ match: /^KILL/, holdMs: 3000 })
  const err = await runner.run('INSERT INTO t VALUES (1)').then(() => undefined, (e: unknown) => e)
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'may-still-run' }, cause: { code: 'PROTOCOL_SEQUENCE_TIMEOUT' }, message: /it may still run on the server: its thread \d+ could not be killed/ })
  await held[0]?.delivered
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(await count(), 1, 'it ran, late: what every statement of Leaf-TS is written to survive')
})

t.test('a kill is sent only to the server process the statement ran on: two reads of one MariaDB match; a later start, an older one or another port does not', async (t) => {
  const server = new URL(TEST_MYSQL)
  const read = async () => {
    const conn = await mysql.createConnection({ host: TEST_MYSQL_HOST, port: TEST_MYSQL_PORT, user: decodeURIComponent(server.username), password: decodeURIComponent(server.password), multipleStatements: true })
    try {
      const [results] = await conn.query("SELECT @@hostname AS host, @@port AS port, UNIX_TIMESTAMP() AS now, CONNECTION_ID() AS id; SHOW GLOBAL STATUS LIKE 'Uptime'") as unknown as [unknown[]]
      return identityOf(results)
    } finally {
      await conn.end()
    }
  }
  const first = await read()
  await new Promise((resolve) => setTimeout(resolve, 1200))
  const second = await read()
  t.ok(first !== undefined && second !== undefined, 'the server said who it is')
  if (first === undefined || second === undefined) return
  t.equal(first.port, TEST_MYSQL_PORT)
  t.ok(Math.abs(second.started - first.started) <= 1, `one start, read twice 1.2 s apart (${first.started}, ${second.started})`)
  t.ok(second.connectionId > first.connectionId, 'connection ids grow')
  const thread = first.connectionId
  t.equal(compareServers(first, second, thread), 'same', 'one process: the kill is sent')
  t.equal(compareServers(first, { ...second, connectionId: thread - 1 }, thread), 'other', 'the same start but ids below the thread: not that process')
  t.equal(compareServers(first, { ...second, started: first.started + 60, connectionId: 1 }, thread), 'restarted', 'a later start whose ids are below the thread: the process it lived in is gone')
  t.equal(compareServers(first, { ...second, started: first.started + 60, connectionId: thread + 5 }, thread), 'unclear', 'a later start with ids past the thread: nothing known, no kill')
  t.equal(compareServers(first, { ...second, started: first.started - 60 }, thread), 'other', 'an older start: another server')
  t.equal(compareServers(first, { ...second, port: second.port + 1 }, thread), 'other', 'another port: another server')
  t.equal(compareServers(first, { ...second, host: `${second.host}-2` }, thread), 'other', 'another host (a balancer sent the kill elsewhere)')
  t.equal(identityOf([[{ host: 'h', port: 1, now: 5, id: 2 }], []]), undefined, 'no Uptime: unknown')
})

t.test('a statement queued behind a connection\'s first round trip that never answers: bounded by the query timeout, never sent, no kill', async (t) => {
  const { runner, proxy, count } = await heldRunner(t, 300)
  const setup = proxy.holdStatements({ match: /^SET time_zone/, holdMs: 1500 })
  const kills = proxy.holdStatements({ match: /^KILL/, holdMs: 100 })
  const started = performance.now()
  const err = await runner.run('INSERT INTO t VALUES (1)').then(() => undefined, (e: unknown) => e)
  const took = performance.now() - started
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, message: /never sent: its connection's first round trip got no answer/ })
  t.ok(took < 1000, `failed within the query timeout and a margin (${Math.round(took)} ms)`)
  t.equal(setup.length, 1, 'the connection\'s first round trip was held')
  t.equal(kills.length, 0, 'no KILL sent')
  await setup[0]?.delivered
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(await count(), 0, 'the INSERT never ran')
  t.same(await runner.run('SELECT 1 AS one'), [{ one: 1 }], 'the runner serves on')
})
