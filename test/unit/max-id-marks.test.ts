import t from 'tap'
import { createMaxIdGuard, type Regression } from '../../src/segment/max-id-guard.js'
import { createSegmentGenerator, type Id, type SegmentGenerator } from '../../src/segment/segment-generator.js'
import { canLoseWrites, type TagRow } from '../../src/segment/store.js'
import { describeTopology } from '../../src/segment/stores/mysql-store.js'
import { describePgTopology } from '../../src/segment/stores/postgres-store.js'
import { checkReadiness } from '../../src/modes/readiness.js'
import { FakeStore } from '../helpers/fake-store.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'

// The max_id guard's refresh rules (src/segment/max-id-guard.ts): every instance that holds a
// mark sees a row below it, whatever answered; and where the store can lose committed
// allocations, the buffer serves only within the bound of the last refresh that reached the
// store. A fake clock drives the bound; the hand edit with real processes is fault scenario 30,
// the cut-off instance across a promotion scenario 31.

/** One instance over `store`: a generator and its guard on one fake monotonic clock. */
function instance (store: FakeStore, holdMs: number, clock: { now: number }) {
  const regressions: Regression[] = []
  const { logger, lines } = captureLogger()
  const monotonic = () => clock.now
  const guard = createMaxIdGuard({ store, logger, holdMs, monotonic, onRegression: (r) => regressions.push(r) })
  const generator = createSegmentGenerator({
    store, logger, guard, monotonic, waitTimeoutMs: 50, refreshIntervalMs: 3_600_000, retryMinMs: 1, retryMaxMs: 5, maxBufferedSegments: 2,
  })
  return { guard, generator, regressions, lines }
}

async function take (generator: SegmentGenerator, key: string, n: number): Promise<bigint[]> {
  const ids: bigint[] = []
  for (let i = 0; i < n; i++) ids.push(BigInt(await generator.next(key) as Id))
  return ids
}

t.test('a max_id lowered by hand below two instances\' marks: each sees it at its refresh, raises the row, holds; no ID twice', async (t) => {
  const clock = { now: 0 }
  const store = new FakeStore({ order: { step: 10 }, user: { step: 10 } })
  store.storeId = 'primary'
  const a = instance(store, 1000, clock)
  const b = instance(store, 1000, clock)
  await a.generator.init()
  await b.generator.init()
  const served = [...await take(a.generator, 'order', 12), ...await take(b.generator, 'order', 12)]
  await take(b.generator, 'user', 3)
  // UPDATE leaf_alloc SET max_id = 5 WHERE biz_tag = 'order': below what both served. The
  // store's identity did not change.
  const row = store.rows.get('order')
  if (row !== undefined) row.maxId = 5n
  await a.generator.refreshTags()
  await b.generator.refreshTags()
  t.match(a.regressions, [{ cause: 'max_id went back', key: 'order', tags: 1 }], 'A counted it')
  t.match(b.regressions, [{ cause: 'max_id went back', key: 'order', tags: 1 }], 'B counted it too: it allocated nothing')
  const max = served.reduce((x, y) => x > y ? x : y)
  t.ok((store.rows.get('order')?.maxId ?? 0n) > max, 'the row is above every ID served')
  t.ok(a.lines.some((l) => l.level === 50 && /segment store failover/.test(String(l.msg))), 'logged at error')
  // After the hold, both allocate above it.
  clock.now += 1001
  served.push(...await take(a.generator, 'order', 30), ...await take(b.generator, 'order', 30))
  t.equal(new Set(served).size, served.length, `no ID twice (${served.length} IDs)`)
  t.equal(a.regressions.length + b.regressions.length, 2, 'and no second regression at the next refresh')
  await a.generator.refreshTags()
  await b.generator.refreshTags()
  t.equal(a.regressions.length + b.regressions.length, 2)
  a.generator.close()
  b.generator.close()
})

t.test('an allocation that lands while the refresh\'s read is in flight is no regression: the rows are compared with the marks from before the read', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 1000, monotonic: () => performance.now() })
  t.equal(await guard.admit('order', 1n, 11n, 'one', await guard.beforeAllocate()), true)
  const before = await guard.marksBeforeRead()
  // The SELECT reads max_id = 11; meanwhile this instance allocates [11, 21): its mark is 21.
  const rows: TagRow[] = [{ key: 'order', maxId: 11n }]
  t.equal(await guard.admit('order', 11n, 21n, 'one', await guard.beforeAllocate()), true)
  await guard.checkRows(rows, before)
  t.equal(guard.view().regressions, 0, 'none: 11 is not below the mark before the read')
  // Compared with the mark after it (21), it would have been one; the next refresh reads 21.
  await guard.checkRows([{ key: 'order', maxId: 10n }], await guard.marksBeforeRead())
  t.match(guard.view(), { regressions: 1, last: { cause: 'max_id went back', key: 'order', gap: 11n } }, 'a row below the mark is one')
})

t.test('a stop\'s give-back while the refresh\'s read is in flight is no regression: the mark it lowers to is what was served', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 1000, monotonic: () => performance.now() })
  t.equal(await guard.admit('order', 1n, 11n, 'one', await guard.beforeAllocate()), true)
  const before = await guard.marksBeforeRead()
  // Served 1..3; the give-back puts max_id back to 4 and the read sees it.
  guard.released('order', 4n)
  await guard.checkRows([{ key: 'order', maxId: 4n }], before)
  t.equal(guard.view().regressions, 0)
})

t.test('rows read while marks are still being pushed are not compared: the next refresh does', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 0, monotonic: () => performance.now() })
  t.equal(await guard.admit('order', 1n, 11n, 'one', await guard.beforeAllocate()), true)
  store.failing = true
  t.equal(await guard.admit('order', 11n, 21n, 'two', 0), false, 'a failover whose raise fails: owed')
  const before = await guard.marksBeforeRead()
  t.equal(before.busy, true)
  await guard.checkRows([{ key: 'order', maxId: 1n }], before)
  t.equal(guard.view().regressions, 1, 'not counted again')
})

t.test('where the store can lose writes, the buffer serves only within the bound of the last refresh that reached it', async (t) => {
  const clock = { now: 0 }
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const a = instance(store, 1000, clock)
  a.guard.boundServing(1000)
  await t.rejects(Promise.resolve().then(() => a.generator.next('order')), { code: 'NOT_READY' }, 'no tag list yet')
  await a.generator.init()
  const served = await take(a.generator, 'order', 5)
  clock.now = 900
  served.push(...await take(a.generator, 'order', 5))
  const mode = { store, generator: a.generator, guard: a.guard, close: async () => {} }
  t.match(await checkReadiness({ segment: mode, snowflake: undefined }), { ready: true })
  // The store stops answering: no refresh confirms it any more.
  store.failing = true
  await t.rejects(a.generator.refreshTags())
  clock.now = 1001
  t.throws(() => a.generator.next('order'), { code: 'STORE_UNCONFIRMED' }, 'past the bound: refused at once, though IDs are buffered')
  t.throws(() => a.generator.nextRanges('order', 3), { code: 'STORE_UNCONFIRMED' }, 'batches too')
  t.match(await checkReadiness({ segment: mode, snowflake: undefined }), {
    ready: false, modes: { segment: { reason: /^the segment store not confirmed for 1 s, past the bound of 1 s .*STORE_UNCONFIRMED.*; database unreachable/ } },
  })
  t.match(a.guard.view(), { unconfirmed: { boundMs: 1000, sinceMs: 1001 } })
  // The same store answers again: the buffer serves on, from where it stopped.
  store.failing = false
  await a.generator.refreshTags()
  served.push(...await take(a.generator, 'order', 5))
  t.same(served, Array.from({ length: 15 }, (_, i) => BigInt(i + 1)), 'the buffer, in order, nothing lost')
  t.equal(a.regressions.length, 0)
  a.generator.close()
})

t.test('a failover seen after the bound: the buffer held is dropped, never served; the next IDs come from the new store above every mark', async (t) => {
  const clock = { now: 0 }
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const a = instance(store, 1000, clock)
  a.guard.boundServing(1000)
  await a.generator.init()
  const served = await take(a.generator, 'order', 5)
  // Cut off past the bound while the primary is promoted away; a peer allocates after its hold.
  store.failing = true
  clock.now = 5000
  t.throws(() => a.generator.next('order'), { code: 'STORE_UNCONFIRMED' })
  store.failing = false
  store.storeId = 'replica'
  const row = store.rows.get('order')
  if (row !== undefined) row.maxId = 1n // the replica lost this instance's range
  const peer = await store.allocate('order') // a peer that held past its hold: [1, 101)
  await a.generator.refreshTags()
  t.match(a.regressions, [{ cause: 'store changed', from: 'primary', to: 'replica' }])
  t.ok(a.lines.some((l) => l.level === 50 && /after the serving bound/.test(String(l.msg))), 'logged: the buffer is dropped')
  t.equal(a.generator.view('order')?.buffered, 0, 'nothing buffered any more')
  clock.now += 1001
  await a.generator.refreshTags()
  const after = await take(a.generator, 'order', 5)
  t.ok((after[0] as bigint) >= (peer?.maxId ?? 0n), `above the peer's range (first ${after[0]})`)
  t.same(served, [1n, 2n, 3n, 4n, 5n])
  a.generator.close()
})

t.test('a failover seen within the bound keeps the buffer: the marks were pushed before any peer\'s hold could end', async (t) => {
  const clock = { now: 0 }
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const a = instance(store, 1000, clock)
  a.guard.boundServing(1000)
  await a.generator.init()
  await take(a.generator, 'order', 5)
  clock.now = 600
  store.storeId = 'replica'
  await a.generator.refreshTags()
  t.match(a.regressions, [{ cause: 'store changed' }])
  t.same(await take(a.generator, 'order', 2), [6n, 7n], 'the buffer serves on')
  clock.now = 1500
  t.same(await take(a.generator, 'order', 1), [8n], 'confirmed by that refresh (sent at 600): the bound runs from it')
  a.generator.close()
})

t.test('without a bound (single server, Galera, semi-synchronous) the buffer serves through any outage', async (t) => {
  const clock = { now: 0 }
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const a = instance(store, 1000, clock)
  await a.generator.init()
  await take(a.generator, 'order', 5)
  store.failing = true
  clock.now = 3_600_000
  t.same(await take(a.generator, 'order', 2), [6n, 7n])
  t.equal(a.guard.servingUntil, Infinity)
  t.equal(a.guard.view().unconfirmed, undefined)
  a.generator.close()
})

t.test('which replication bounds serving: asynchronous (MySQL/MariaDB binary log alone, PostgreSQL async standbys); not a single server, Galera, semi-synchronous or synchronous standbys', async (t) => {
  const mysql = (variables: Record<string, string>, status: Record<string, string> = {}) => canLoseWrites(describeTopology(new Map(Object.entries(variables)), new Map(Object.entries(status))))
  t.equal(mysql({ log_bin: 'ON' }, { slaves_connected: '1' }), true, 'binary log, a replica')
  t.equal(mysql({ log_bin: 'ON' }, { slaves_connected: '0' }), true, 'binary log, no replica connected now: one may be attached')
  t.equal(mysql({ log_bin: 'OFF' }), false, 'a single server')
  t.equal(mysql({ wsrep_on: 'ON', log_bin: 'ON' }, { wsrep_cluster_size: '3' }), false, 'Galera')
  t.equal(mysql({ log_bin: 'ON', rpl_semi_sync_master_enabled: 'ON', rpl_semi_sync_master_wait_point: 'AFTER_SYNC' }), false, 'semi-synchronous')
  t.equal(mysql({ log_bin: 'ON', rpl_semi_sync_master_enabled: 'ON', rpl_semi_sync_master_wait_point: 'AFTER_COMMIT' }), false, 'semi-synchronous, AFTER_COMMIT')
  t.equal(canLoseWrites(describePgTopology(1, '')), true, 'PostgreSQL, an asynchronous standby')
  t.equal(canLoseWrites(describePgTopology(1, 'standby1')), false, 'PostgreSQL, a synchronous standby')
  t.equal(canLoseWrites(describePgTopology(0, '')), false, 'PostgreSQL alone')
})
