import t from 'tap'
import { parseJdbcUrl } from '../../src/config/jdbc-url.js'
import { mayStillRun } from '../../src/database/errors.js'
import { createStore } from '../../src/segment/stores/create-store.js'
import { createPostgresRunner, serverOf } from '../../src/database/postgres-pool.js'
import { createPostgresStore } from '../../src/segment/stores/postgres-store.js'
import { leafLayout } from '../../src/layout/layout.js'
import { createDbLeaseStore } from '../../src/snowflake/worker-id/db-lease/db-lease-store.js'
import { acquireDisposableWorkerId } from '../../src/snowflake/worker-id/disposable/disposable-source.js'
import { silentLogger } from '../helpers/logger.js'
import { freePort } from '../helpers/ports.js'
import { TEST_PG_HOST, TEST_PG_PORT, createTestPgDatabase } from '../helpers/postgres.js'
import { PgReplicaPair } from '../helpers/postgres-replica.js'
import { sleep } from '../helpers/time.js'

// What only the PostgreSQL store and its pool do (the cases every store shares are in
// stores.test.ts): unknown outcomes marked, unsent calls marked, the hand-over off without rights,
// the identity a promotion changes at once.

const POOL = { connectTimeoutMs: 1000, poolSize: 2, queryTimeoutMs: 300 }

t.test('a connection the server ends between two statements of a transaction fails the next one, not the process', async (t) => {
  // Fault scenario 32 caught it on a CI run: the postmaster killed while a connection was
  // checked out between statements; its FATAL arrived as an 'error' event nobody listened to,
  // and the server closed itself ("closing after an error").
  const db = await createTestPgDatabase()
  const runner = createPostgresRunner({ ...parseJdbcUrl(db.url, '', '') as { host: string, port: number, user: string, password: string, database: string }, ...POOL })
  t.teardown(async () => { await runner.close(); await db.drop() })
  const err = await runner.transaction(async (q) => {
    const pid = (await q('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
    await db.query('SELECT pg_terminate_backend($1)', [pid])
    await sleep(300) // its FATAL arrives while the connection is checked out and idle
    await q('SELECT 1')
  }).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof Error, `the statement after it fails: ${String(err)}`)
  t.same((await runner.query<{ n: number }>('SELECT 1 AS n')).rows, [{ n: 1 }], 'the next call on a fresh connection')
})

t.test('a query past the query timeout may still run: its error says so; the pool goes on', async (t) => {
  const db = await createTestPgDatabase()
  const runner = createPostgresRunner({ ...parseJdbcUrl(db.url, '', '') as { host: string, port: number, user: string, password: string, database: string }, ...POOL })
  t.teardown(async () => { await runner.close(); await db.drop() })
  // The server's own statement_timeout off for this one: the server would answer (a cancel) first.
  const err = await runner.query('SET statement_timeout = 0; SELECT pg_sleep(2)').then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof Error, 'it fails')
  t.equal(mayStillRun(err), true, 'no answer: it may still run')
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'may-still-run' }, cause: Error, message: /may still run on the server/ })
  const answered = await runner.query('SELECT 1/0').then(() => undefined, (e: unknown) => e)
  t.match(answered, { code: '22012' }, 'a server error is an answer')
  t.equal(mayStillRun(answered), false, 'it ran, and failed')
  t.same((await runner.query<{ n: number }>('SELECT 1 AS n')).rows, [{ n: 1 }], 'the next query on a fresh connection')
  t.match(await runner.identify(), { system: /^\d+$/, timeline: Number })
})

t.test('a server that refuses connections: the call was never sent', async (t) => {
  const port = await freePort()
  const runner = createPostgresRunner({ host: '127.0.0.1', port, user: 'leaf', password: 'leaf', database: 'leaf', ...POOL })
  t.teardown(() => runner.close())
  const err = await runner.query('SELECT 1').then(() => undefined, (e: unknown) => e)
  t.match(err, { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'ECONNREFUSED' } })
  t.equal(mayStillRun(err), false)
  await t.rejects(runner.identify(), { code: 'LEAF_STATEMENT_UNANSWERED', fate: { state: 'not-sent' }, cause: { code: 'ECONNREFUSED' } })
})

t.test('leaf_alloc_parked the user may not read: the hand-over is off, as without the table; updateTag of nothing reads the row', async (t) => {
  const db = await createTestPgDatabase()
  const store = createStore(parseJdbcUrl(`postgres://leaf:leaf@${TEST_PG_HOST}:${TEST_PG_PORT}/${db.name}`, '', ''), POOL)
  t.teardown(async () => { await store.close(); await db.drop() })
  t.same(await store.claimParked('order', 'A', 60_000), [], 'made on first use')
  // The owner takes its own rights away (it could grant them back).
  await db.query('REVOKE ALL ON leaf_alloc_parked FROM CURRENT_USER')
  t.equal(await store.claimParked('order', 'A', 60_000), undefined, 'no hand-over')
  t.equal(await store.park('order', 'A', [{ first: 1n, end: 2n }]), false, 'nothing parked, and nothing asked again')
  t.match(await store.updateTag('order', {}), { key: 'order', step: 2000 })
  t.equal(await store.updateTag('nope', { description: 'x' }), undefined)
})

t.test('tables that cannot be created: the hand-over off, db-lease and disposable refused naming the script; another layout refused', async (t) => {
  const db = await createTestPgDatabase()
  const store = parseJdbcUrl(db.url, '', '')
  const segments = createStore(store, POOL)
  t.teardown(async () => { await segments.close(); await db.drop() })
  // A domain of the table's name: the table is missing (42P01), and CREATE TABLE fails on its row type's name.
  for (const name of ['leaf_alloc_parked', 'leaf_worker_lease', 'worker_node']) await db.query(`CREATE DOMAIN ${name} AS int`)
  t.equal(await segments.claimParked('order', 'A', 60_000), undefined, 'no hand-over')
  const lease = { store, pool: 'p', ttlMs: 3000, connectTimeoutMs: 1000, queryTimeoutMs: 1000 }
  await t.rejects(createDbLeaseStore({ ...lease, layout: leafLayout(1288834974657) }), { name: 'LeaseRefused', code: 'LEASE_TABLE_MISSING', message: /leaf_worker_lease \(pool p\): the table does not exist and cannot be created .*: run sql\/leaf_worker_lease\.postgres\.sql$/ })
  await t.rejects(acquireDisposableWorkerId({ store, hostName: 'h', port: '1', type: 2, min: 0, max: 1023, connectTimeoutMs: 1000, queryTimeoutMs: 1000, logger: silentLogger }),
    { name: 'LeaseRefused', code: 'LEASE_TABLE_MISSING', message: /WORKER_NODE: the table does not exist and cannot be created .*: run sql\/worker_node\.postgres\.sql$/ })
  await db.query('DROP DOMAIN leaf_worker_lease')
  const pool = await createDbLeaseStore({ ...lease, layout: leafLayout(1288834974657) })
  await pool.close()
  await t.rejects(createDbLeaseStore({ ...lease, layout: leafLayout(0) }), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH' }, 'another layout: refused, its pool closed')
})

t.test('serverOf: the timeline is the current WAL file\'s first 8 hex digits; a standby (no WAL position) or a row without the columns says nothing', async (t) => {
  t.same(serverOf({ leaf_system: '7716421364701226098', leaf_wal: '0000001A0000000000000003' }), { system: '7716421364701226098', timeline: 26 })
  t.equal(serverOf({ leaf_system: '7716421364701226098', leaf_wal: null }), null)
  t.equal(serverOf({ leaf_system: '7716421364701226098', leaf_wal: 'garbage' }), null)
  t.equal(serverOf({ biz_tag: 'order' } as never), null)
  t.equal(serverOf(undefined), null)
})

t.test('the identity is the timeline the server writes on now: a promotion behind one address is seen at once, before its checkpoint', async (t) => {
  const pair = await PgReplicaPair.create()
  const leaf = { user: 'leaf', password: 'leaf', database: 'leaf', ...POOL, queryTimeoutMs: 2000 }
  const store = createPostgresStore({ host: '127.0.0.1', port: pair.vip.port, ...leaf })
  const standby = createPostgresStore({ host: '127.0.0.1', port: pair.replica.port, ...leaf })
  t.teardown(async () => { await store.close(); await standby.close(); await pair.close() })
  // Dirty buffers for the end-of-recovery checkpoint to write: it takes minutes, paced.
  await pair.primary.query('CREATE TABLE ballast (id int, pad text)')
  await pair.primary.query('INSERT INTO ballast SELECT g, md5(g::text) FROM generate_series(1, 40000) g')
  await pair.primary.addTag('promoted', 100)
  await pair.caughtUp()
  const [{ system }] = await pair.primary.query<{ system: string }>('SELECT system_identifier::text AS system FROM pg_control_system()') as [{ system: string }]
  const before = `postgres system ${system} timeline 1`
  t.equal(await store.identity(), before, 'identity(): the cluster and the timeline')
  t.match(await store.allocate('promoted'), { maxId: 101n, store: before }, 'an allocation names the server and timeline that made it')
  await t.rejects(standby.identity(), { code: 'LEAF_SERVER_READ_ONLY' }, 'a standby: refused, nothing is written through it')

  pair.lag()
  t.match(await store.allocate('promoted'), { maxId: 201n, store: before }, 'an allocation the replica never receives')
  pair.primary.kill()
  await pair.promote()
  pair.moveVip()
  const after = `postgres system ${system} timeline 2`
  t.match(await store.allocate('promoted'), { maxId: 201n, store: after }, 'the promoted server lost one allocation; its identity is another')
  t.equal(await store.identity(), after, 'identity() at once as well')
  t.same(await pair.replica.timelines(), { now: 2, checkpoint: 1 }, 'while the last checkpoint is still on the old timeline: the window this closes')
})
