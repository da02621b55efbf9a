import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { createMaxIdGuard, type MaxIdGuard, type Regression } from '../../src/segment/max-id-guard.js'
import { createSegmentGenerator, type Id, type SegmentGenerator } from '../../src/segment/segment-generator.js'
import { Segment, SegmentBuffer } from '../../src/segment/segment-buffer.js'
import { readWarmState, writeWarmState } from '../../src/segment/warm-state.js'
import { checkReadiness } from '../../src/modes/readiness.js'
import { FakeStore } from '../helpers/fake-store.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { failureOf, type FakeClock, fakeTime, settled } from '../helpers/time.js'

// The max_id guard (src/segment/max-id-guard.ts) against an in-memory table whose rows can be
// put back, as a promoted replica that missed the last allocations puts them back. The real
// promotion, with MariaDB replication, is test/integration/replica-promotion.test.ts.

// Every timer (holds, backoffs, waits) and performance.now are fake: `time` moves them.
let time: FakeClock
t.beforeEach((t) => { time = fakeTime(t) })

/** One instance: a generator over `store` with a guard holding `holdMs`. */
function instance (store: FakeStore, holdMs: number, saved?: ReturnType<MaxIdGuard['state']>, handover?: { claimFrom: string | undefined, parkAs: string }) {
  const regressions: Regression[] = []
  const { logger, lines } = captureLogger()
  const guard = createMaxIdGuard({ store, logger, holdMs, monotonic: () => performance.now(), saved, onRegression: (r) => regressions.push(r) })
  const generator = createSegmentGenerator({
    store, logger, guard, waitTimeoutMs: 300, refreshIntervalMs: 60_000, retryMinMs: 5, retryMaxMs: 20, maxBufferedSegments: 2, handover,
  })
  return { guard, generator, regressions, lines }
}

async function take (generator: SegmentGenerator, key: string, n: number): Promise<bigint[]> {
  const ids: bigint[] = []
  for (let i = 0; i < n; i++) ids.push(BigInt(await settled(time, generator.next(key)) as Id))
  return ids
}

/** Waits (a second at most) for the preload of order to join the chain. */
async function twoSegments (generator: SegmentGenerator): Promise<void> {
  for (let i = 0; i < 1000 && generator.views().find((v) => v.key === 'order')?.segments.length !== 2; i++) await time.tickAsync(1)
}

/** The rows as they are now, to put back later (the replica that stopped applying). */
function snapshot (store: FakeStore): FakeStore['rows'] {
  return new Map([...store.rows].map(([k, r]) => [k, { ...r }]))
}

t.test('a range below what this instance served is never served: every tag is raised, allocations held, the buffer serves on', async (t) => {
  const store = new FakeStore({ order: { step: 10 }, user: { step: 10 } })
  store.storeId = 'primary'
  const a = instance(store, 800)
  await a.generator.init()
  const before = await take(a.generator, 'order', 10)
  await take(a.generator, 'user', 3)
  const lagged = snapshot(store)
  // Served past what the replica has: ranges [11, 21) and more of order.
  before.push(...await take(a.generator, 'order', 12))
  await time.tickAsync(10)
  store.rows = lagged
  const held = a.generator.views().find((v) => v.key === 'order')?.buffered ?? 0
  // The next load of order comes back below its mark: refused.
  const served = [...before]
  while (served.length < before.length + held) served.push(BigInt(await settled(time, a.generator.next('order')) as Id))
  t.equal(a.regressions.length, 1, 'one regression seen')
  t.match(a.regressions[0], { cause: 'max_id went back', key: 'order' })
  t.ok((a.regressions[0]?.gap ?? 0n) > 0n, 'the gap is told')
  t.match(store.raised, [{ key: 'order' }, { key: 'user' }].sort(() => 0), 'every tag with a mark is raised')
  t.ok((store.rows.get('order')?.maxId ?? 0n) >= (before.at(-1) as bigint) + 1n, 'order\'s max_id is above every ID served')
  t.ok(a.lines.some((l) => l.level === 50 && /segment store failover/.test(String(l.msg))), 'logged at error')
  // Held: a caller that needs a new range gets SEGMENTS_NOT_READY, with the reason in the log.
  const view = a.guard.view()
  t.ok(view.holdingMs > 300 && view.holdingMs <= 800, `held past the wait timeout (${view.holdingMs} ms left)`)
  t.match(await failureOf(time, Promise.resolve().then(() => a.generator.next('order'))), { code: 'SEGMENTS_NOT_READY' })
  await time.tickAsync(view.holdingMs + 20)
  const after = await take(a.generator, 'order', 25)
  const all = [...served, ...after]
  t.equal(new Set(all).size, all.length, `no ID twice (${all.length} IDs)`)
  t.ok((after[0] as bigint) > (served.at(-1) as bigint), 'after the hold: above everything served before')
  a.generator.close()
})

t.test('a peer that allocates nothing sees the store change at its refresh, and pushes its marks before the hold ends', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  store.storeId = 'primary'
  const a = instance(store, 400)
  const b = instance(store, 400)
  await a.generator.init()
  await b.generator.init()
  const served: bigint[] = []
  served.push(...await take(a.generator, 'order', 5))
  const lagged = snapshot(store)
  // B serves ranges the replica never gets.
  served.push(...await take(b.generator, 'order', 25))
  await time.tickAsync(10)
  store.rows = lagged
  store.storeId = 'replica'
  // A allocates first: another store answers. It holds; B's refresh then sees the change.
  const drainA = async () => { while (true) served.push(BigInt(await settled(time, a.generator.next('order')) as Id)) }
  await drainA().catch((err: unknown) => t.match(err, { code: 'SEGMENTS_NOT_READY' }, 'A: held once its buffer is out'))
  t.match(a.regressions, [{ cause: 'store changed', from: 'primary', to: 'replica' }])
  await b.generator.refreshTags()
  t.match(b.regressions, [{ cause: 'store changed', from: 'primary', to: 'replica' }], 'B saw it at its refresh')
  t.ok((store.rows.get('order')?.maxId ?? 0n) > (served.reduce((x, y) => x > y ? x : y)), 'the row is above everything A and B served')
  await time.tickAsync(450)
  served.push(...await take(a.generator, 'order', 15), ...await take(b.generator, 'order', 15))
  t.equal(new Set(served).size, served.length, `no ID twice across both (${served.length} IDs)`)
  a.generator.close()
  b.generator.close()
})

t.test('an allocation asked for before a regression is not served after it, even when it came back clean', async (t) => {
  const store = new FakeStore({ order: { step: 10 }, user: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 50, monotonic: () => performance.now() })
  const epoch = await guard.beforeAllocate()
  t.equal(await guard.admit('order', 1n, 11n, 'one', epoch), true, 'served: the first range')
  t.equal(await guard.admit('user', 1n, 11n, 'two', epoch), false, 'another store: refused')
  t.equal(await guard.admit('order', 11n, 21n, 'two', epoch), false, 'asked for before it: refused')
  await t.rejects(guard.beforeAllocate(), { name: 'AllocationHeld', code: 'ALLOCATION_HOLDING' }, 'held')
  await time.tickAsync(60)
  const next = await guard.beforeAllocate()
  t.equal(await guard.admit('order', 21n, 31n, 'two', next), true, 'after the hold, the new store serves')
  t.equal(await guard.admit('order', 25n, 35n, 'two', next), false, 'a range starting below the mark (31) is refused')
})

t.test('a raise that fails is retried before any allocation, which waits for it', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 0, monotonic: () => performance.now() })
  t.equal(await guard.admit('order', 1n, 11n, 'one', await guard.beforeAllocate()), true)
  store.failing = true
  t.equal(await guard.admit('order', 11n, 21n, 'two', 0), false)
  t.equal(guard.view().raisesOwed, 1, 'owed')
  await t.rejects(guard.beforeAllocate(), { name: 'AllocationHeld', code: 'ALLOCATION_RAISES_OWED', message: /1 tag\(s\) still to be raised/ })
  store.failing = false
  t.equal(await guard.beforeAllocate(), 1, 'raised, then free to allocate')
  t.equal(store.rows.get('order')?.maxId, 11n, 'max_id raised to the mark')
})

t.test('a stop keeps what was served as the mark: the next life allocates from what it gave back without a false alarm', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const a = instance(store, 1000)
  await a.generator.init()
  await take(a.generator, 'order', 5)
  const { giveBacks } = await settled(time, a.generator.shutdown(1000))
  t.match(giveBacks, [{ key: 'order', returned: 95n }])
  const state = a.guard.state()
  t.same(state, { store: 'primary', marks: { order: '6' } }, 'the mark follows max_id back')
  const next = instance(store, 1000, state)
  await next.generator.init()
  t.same(await take(next.generator, 'order', 2), [6n, 7n], 'the returned IDs serve at once')
  t.equal(next.regressions.length, 0)
  next.generator.close()
})

t.test('a mark is what was served or held, not what was received: a successor\'s legal give-back from inside a parked range raises no false alarm', async (t) => {
  // Fault scenario 17 (rolling restarts) caught this with marks that were the highest range
  // end received: Y's mark stayed at the start of a range Y gave back untouched, and X's next
  // life, taking its parked range just below it, legally returned max_id below that mark.
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const served: bigint[] = []
  const y = instance(store, 1000)
  await y.generator.init()
  served.push(...await take(y.generator, 'order', 1)) // Y holds [1, 101)
  const x1 = instance(store, 1000, undefined, { claimFrom: undefined, parkAs: 'x1' })
  await x1.generator.init()
  served.push(...await take(x1.generator, 'order', 1)) // X holds [101, 201)
  served.push(...await take(y.generator, 'order', 20)) // Y preloads [201, 301), untouched
  await twoSegments(y.generator)
  t.match((await settled(time, x1.generator.shutdown(1000))).giveBacks, [{ parked: 99n }], 'X parks [102, 201): Y reserved since')
  t.match((await settled(time, y.generator.shutdown(1000))).giveBacks, [{ returned: 100n }], 'Y returns [201, 301) untouched')
  t.equal(store.rows.get('order')?.maxId, 201n)
  const yState = y.guard.state()
  t.same(yState.marks, { order: '22' }, 'Y\'s mark: what it served (1 to 21), not the 201 it received')
  // X's next life takes [102, 201) and allocates [201, 301) right after it: one contiguous
  // run, which its stop returns from inside the parked range.
  const x2 = instance(store, 1000, x1.guard.state(), { claimFrom: 'x1', parkAs: 'x2' })
  await x2.generator.init()
  served.push(...await take(x2.generator, 'order', 20))
  await twoSegments(x2.generator)
  t.match((await settled(time, x2.generator.shutdown(1000))).giveBacks, [{ returned: 179n }])
  t.equal(store.rows.get('order')?.maxId, 122n, 'max_id back below where Y\'s untouched range began')
  t.same(x2.guard.state().marks, { order: '122' }, 'X\'s mark: what its two lives served')
  const y2 = instance(store, 1000, yState)
  await y2.generator.init()
  served.push(...await take(y2.generator, 'order', 5))
  t.same(served.slice(-5), [122n, 123n, 124n, 125n, 126n], 'Y\'s next life serves from there at once')
  t.equal(y2.regressions.length, 0, 'no false alarm')
  t.equal(new Set(served).size, served.length, `no ID twice (${served.length} IDs)`)
  y2.generator.close()
})

t.test('servedEnd: the highest ID handed out + 1, through a batch that crosses segments; the end of a used-up segment while the next is untouched', async (t) => {
  const buf = new SegmentBuffer('order')
  t.equal(buf.servedEnd, 0n, 'none handed out')
  buf.firstLoaded(new Segment(11n, 10))
  buf.appendLoaded(new Segment(31n, 10), 10, 0)
  t.equal(buf.servedEnd, 0n, 'held, none handed out')
  buf.currentSegment.takeRange(10)
  t.equal(buf.servedEnd, 11n, 'the first segment used up')
  buf.switchSegment()
  t.equal(buf.servedEnd, 11n, 'switched to [21, 31), untouched')
  buf.currentSegment.takeRange(4)
  t.equal(buf.servedEnd, 25n)
})

t.test('ranges taken over from the last stop count in the mark: a store that went back below them is caught', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  store.storeId = 'primary'
  const x1 = instance(store, 1000, undefined, { claimFrom: undefined, parkAs: 'x1' })
  await x1.generator.init()
  await take(x1.generator, 'order', 1)
  store.rows.get('order')!.maxId = 301n // a peer reserved since: the stop parks [2, 101)
  t.match((await settled(time, x1.generator.shutdown(1000))).giveBacks, [{ parked: 99n }])
  const x2 = instance(store, 300, x1.guard.state(), { claimFrom: 'x1', parkAs: 'x2' })
  await x2.generator.init()
  t.equal(await x2.generator.next('order'), 2, 'the parked range serves')
  t.same(x2.guard.state().marks, { order: '101' }, 'and counts in the mark')
  store.rows.get('order')!.maxId = 51n // the same store identity, but max_id went back into it
  const served = [2n]
  while (x2.regressions.length === 0 && served.length < 200) {
    await settled(time, Promise.resolve().then(() => x2.generator.next('order'))).then((id) => served.push(BigInt(id)), () => time.tickAsync(5))
  }
  t.match(x2.regressions, [{ cause: 'max_id went back', gap: 50n }], 'the range [51, 151) is refused')
  t.ok(served.every((id, i) => id === BigInt(i) + 2n), `what was served came from the parked range alone, in order (${served.length} IDs)`)
  x2.generator.close()
})

t.test('a saved state from another store: the first refresh holds and raises, before anything is allocated', async (t) => {
  const store = new FakeStore({ order: { step: 10, maxId: 1n } })
  store.storeId = 'restored'
  const a = instance(store, 600, { store: 'primary', marks: { order: '5001', gone: 'x' } })
  await a.generator.init()
  t.match(a.regressions, [{ cause: 'store changed', from: 'primary', to: 'restored' }])
  t.equal(store.rows.get('order')?.maxId, 5001n, 'raised to the saved mark')
  t.match(await failureOf(time, Promise.resolve().then(() => a.generator.next('order'))), { code: 'SEGMENTS_NOT_READY' })
  await time.tickAsync(a.guard.view().holdingMs + 20)
  t.equal(await a.generator.next('order'), 5001, 'after the hold: above the mark')
  a.generator.close()
})

t.test('a stop during the hold: the next life holds as long, and pushes its marks again before it allocates', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  let wall = 1_700_000_000_000
  const first = createMaxIdGuard({ store, logger: silentLogger, holdMs: 5000, monotonic: () => performance.now(), clock: () => wall })
  t.equal(await first.admit('order', 1n, 11n, 'one', await first.beforeAllocate()), true)
  t.equal(await first.admit('order', 11n, 21n, 'two', 0), false, 'a failover')
  const state = first.state()
  t.match(state, { store: 'two', marks: { order: '11' } })
  t.ok((state.heldUntil ?? 0) > wall + 4000, 'the hold\'s end is kept')
  store.rows.set('order', { ...(store.rows.get('order') as NonNullable<ReturnType<typeof store.rows.get>>), maxId: 1n })
  wall += 1000
  const next = createMaxIdGuard({ store, logger: silentLogger, holdMs: 5000, monotonic: () => performance.now(), clock: () => wall, saved: state })
  await t.rejects(next.beforeAllocate(), { name: 'AllocationHeld', code: 'ALLOCATION_HOLDING', message: /held for \d+ ms more/ }, 'still held in the next life')
  t.ok(next.view().holdingMs > 3000 && next.view().holdingMs <= 4000, `for what was left (${next.view().holdingMs} ms)`)
  t.equal(store.rows.get('order')?.maxId, 11n, 'its marks pushed again')
  wall += 10_000
  const later = createMaxIdGuard({ store, logger: silentLogger, holdMs: 5000, monotonic: () => performance.now(), clock: () => wall, saved: state })
  t.equal(await later.beforeAllocate(), 0, 'a hold that ended while stopped: free once the marks are pushed')
})

t.test('the warm-start file keeps the guard\'s state; a malformed one is left out, the rest of the file read', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-guard-state-'))
  const file = join(dir, 'state.json')
  const guard = { store: 'server_id 1', marks: { order: '123456789012345678' }, heldUntil: 1_700_000_000_000 }
  writeWarmState(file, { owner: 'me', tags: ['order'], guard })
  t.same(readWarmState(file), { owner: 'me', tags: ['order'], guard }, 'written and read back whole')
  writeWarmState(file, { owner: 'me', tags: [] })
  t.same(readWarmState(file), { owner: 'me', tags: [] }, 'a file without one (an older version\'s)')
  for (const bad of [{ marks: { order: '-1' } }, { marks: { order: 12 } }, { marks: {}, store: 3 }, { marks: {}, heldUntil: 'soon' }, 'x']) {
    writeFileSync(file, JSON.stringify({ version: 1, savedAt: '', owner: 'me', tags: ['a'], guard: bad }))
    t.same(readWarmState(file), { owner: 'me', tags: ['a'] }, `left out: ${JSON.stringify(bad)}`)
  }
})

t.test('/readyz says a failover holds allocations: ready while the buffer serves, not once a tag has none left', async (t) => {
  const store = new FakeStore({ order: { step: 5 } })
  store.storeId = 'primary'
  const a = instance(store, 5000)
  await a.generator.init()
  await take(a.generator, 'order', 2)
  const mode = { store, generator: a.generator, guard: a.guard, close: async () => {} }
  t.same(await checkReadiness({ segment: mode, snowflake: undefined }), { ready: true, modes: { segment: { ready: true } } })
  store.storeId = 'replica'
  await a.generator.refreshTags()
  t.match(await checkReadiness({ segment: mode, snowflake: undefined }), {
    ready: true,
    modes: { segment: { ready: true, reason: /^store failover \(store changed, now replica\): new allocations held for \d+ s more, until \d{4}-\S+Z; serving buffered IDs$/ } },
  })
  // What it holds is served; then nothing, during the hold.
  // The cause is named: the database answered, a failover hold refuses the loads.
  t.match(await failureOf(time, (async () => { while (true) await settled(time, a.generator.next('order')) })()), { code: 'SEGMENTS_NOT_READY', message: /held after a store failover \(store changed\) until \d{4}-\S+Z/ })
  t.match(await checkReadiness({ segment: mode, snowflake: undefined }), {
    ready: false,
    modes: { segment: { ready: false, reason: /held for \d+ s more, until \S+, and 1 tag\(s\) have no buffered IDs left: order$/ } },
  })
  store.failing = true
  const owedGuard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 0, monotonic: () => performance.now() })
  t.equal(await owedGuard.admit('order', 1n, 6n, 'replica', 0), true)
  t.equal(await owedGuard.admit('order', 6n, 11n, 'other', 0), false)
  t.match(await checkReadiness({ segment: { ...mode, guard: owedGuard }, snowflake: undefined }), {
    modes: { segment: { reason: /^store failover \(store changed at "order", now other\): 1 tag\(s\) still to be raised above the IDs served, new allocations held/ } },
  })
  a.generator.close()
})

t.test('a second failover while the first one\'s raises are under way: they are sent again, to the new store', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: 0, monotonic: () => performance.now() })
  t.equal(await guard.admit('order', 1n, 11n, 'one', await guard.beforeAllocate()), true)
  store.delayMs = 50
  const first = guard.admit('order', 11n, 21n, 'two', 0)
  await time.tickAsync(10)
  const second = guard.admit('order', 11n, 21n, 'three', 1)
  t.same(await settled(time, Promise.all([first, second])), [false, false])
  t.equal(store.raised.length, 2, 'raised once per failover')
  t.equal(guard.view().raisesOwed, 0)
  t.equal(guard.parkedUsable(), false, 'and no parked range is taken after a failover')
})

t.test('a give-back whose answer was lost moves the mark back too: the next life is not held for it', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const a = instance(store, 1000)
  await a.generator.init()
  await take(a.generator, 'order', 5)
  store.failing = true
  const { giveBacks } = await settled(time, a.generator.shutdown(1000))
  t.match(giveBacks, [{ key: 'order', returned: 0n, reason: /outcome is unknown/ }])
  t.same(a.guard.state().marks, { order: '6' }, 'no ID from 6 on was served')
})
