import t from 'tap'
import { LeafError } from '../../src/errors.js'
import { createSegmentGenerator, type Id, type SegmentGeneratorOptions } from '../../src/segment/segment-generator.js'
import { MAX_STEP, adaptStep } from '../../src/segment/segment-loader.js'
import { TAG_LOOKUPS_PER_SECOND } from '../../src/segment/tag-lookup.js'
import { FakeStore } from '../helpers/fake-store.js'
import { silentLogger } from '../helpers/logger.js'
import { type FakeClock, fakeTime, outcome, settled } from '../helpers/time.js'

const MINUTE = 60_000

// Every timer (loads' timeouts, backoffs, waits) is fake: `time` moves it, in no real time.
let time: FakeClock
t.beforeEach((t) => { time = fakeTime(t) })

function setup (store: FakeStore, options: Partial<SegmentGeneratorOptions> = {}) {
  const clock = { now: 1_700_000_000_000 }
  const generator = createSegmentGenerator({
    store,
    logger: silentLogger,
    clock: () => clock.now,
    waitTimeoutMs: 1000,
    refreshIntervalMs: 60_000,
    retryMinMs: 10,
    retryMaxMs: 40,
    ...options,
  })
  return { generator, clock }
}

async function takeN (next: () => Id | Promise<Id>, n: number): Promise<bigint[]> {
  const ids: bigint[] = []
  for (let i = 0; i < n; i++) ids.push(BigInt(await next()))
  return ids
}

/** Lets the loads in flight land: the fake store answers in promise callbacks and timers. */
const settle = () => time.tickAsync(5)

t.test('hands out [max_id, max_id + step) of the first segment, in order', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  t.equal(await generator.init(), true)
  const ids = await takeN(() => generator.next('order'), 10)
  t.same(ids, [1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n])
  t.equal(typeof generator.next('order'), 'object', 'a promise once the first segment is used up')
})

t.test('preloads the next segment once more than 10% of the current is used, once', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator } = setup(store)
  await generator.init()
  await takeN(() => generator.next('order'), 10)
  t.equal(store.calls.length, 1, 'exactly 10% used: no preload yet')
  await takeN(() => generator.next('order'), 1)
  await takeN(() => generator.next('order'), 5)
  t.equal(store.calls.length, 2, 'one preload started, not one per ID')
  await settle()
  t.equal(generator.views()[0]?.nextReady, true)
  const rest = await takeN(() => generator.next('order'), 84 + 100)
  t.equal(rest.at(-1), 200n, 'the next segment follows after the switch')
})

t.test('step: DB step for two loads, then doubles within 15 min, keeps to 30, halves after', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator, clock } = setup(store)
  await generator.init()
  const drain = async () => {
    await takeN(() => generator.next('order'), generator.views()[0]?.step || 10)
    await settle()
  }
  await takeN(() => generator.next('order'), 10) // load 1 (init), preload = load 2
  await settle()
  t.same(store.calls.map((c) => c.step), [undefined, undefined])
  clock.now += MINUTE
  await drain() // uses load 2, preloads load 3: doubled
  t.equal(store.calls[2]?.step, 20)
  clock.now += 20 * MINUTE
  await drain()
  t.equal(store.calls[3]?.step, 20, '15 to 30 minutes: kept')
  clock.now += 31 * MINUTE
  await drain()
  t.equal(store.calls[4]?.step, 10, 'over 30 minutes: halved')
  clock.now += 31 * MINUTE
  await drain()
  t.equal(store.calls[5]?.step, 10, 'never below the table step')
})

t.test('adaptStep caps at MAX_STEP', async (t) => {
  t.equal(adaptStep(MAX_STEP / 2, 10, 0), MAX_STEP)
  t.equal(adaptStep(MAX_STEP / 2 + 1, 10, 0), MAX_STEP / 2 + 1, 'doubling would pass the cap: kept')
  t.equal(adaptStep(100, 10, 15 * MINUTE), 100)
  t.equal(adaptStep(100, 10, 30 * MINUTE), 50)
  t.equal(adaptStep(15, 10, 30 * MINUTE), 10)
})

t.test('1,000 concurrent callers on a step of 10 all get unique IDs by waiting for loads', async (t) => {
  const store = new FakeStore({ tiny: { step: 10 } })
  const { generator } = setup(store, { waitTimeoutMs: 3000 })
  await generator.init()
  store.delayMs = 2
  const all = await outcome(time, Promise.allSettled(Array.from({ length: 1000 }, () => generator.next('tiny'))), 3000)
  t.equal(all.state, 'resolved', `every caller answered (${all.afterMs} ms)`)
  const results = all.state === 'resolved' ? all.value : []
  const ids = results.flatMap((r) => r.status === 'fulfilled' ? [BigInt(r.value)] : [])
  t.equal(ids.length, 1000, 'no caller failed')
  t.equal(new Set(ids).size, 1000, 'no duplicate')
})

t.test('a batch crosses segments and stays increasing', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  await generator.init()
  const ids = (await generator.nextBatch('order', 35)).map(BigInt)
  t.equal(ids.length, 35)
  t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)), 'strictly increasing')
  t.same([ids[0], ids.at(-1)], [1n, 35n])
})

t.test('a batch the current segment holds is answered at once, and preloads like single IDs', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator } = setup(store)
  await generator.init()
  t.same((await generator.nextBatch('order', 10)).map(Number), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'the first batch waits for the first load')
  t.equal(store.calls.length, 1, 'exactly 10% used: no preload yet')
  const held = generator.nextBatch('order', 80)
  t.ok(Array.isArray(held), 'an array, not a promise')
  t.same([(held as Id[])[0], (held as Id[]).at(-1)].map(Number), [11, 90])
  t.equal(store.calls.length, 2, 'the preload started')
  t.same((generator.nextBatch('order', 10) as Id[]).map(Number), [91, 92, 93, 94, 95, 96, 97, 98, 99, 100], 'to the segment\'s last ID')
  await settle()
  t.same((await generator.nextBatch('order', 2)).map(Number), [101, 102], 'then the preloaded segment')
  await t.rejects(Promise.resolve().then(() => generator.nextBatch('missing', 5)), { code: 'KEY_NOT_FOUND' }, 'looked up, and not there')
  t.throws(() => generator.nextBatch('missing', 5), { code: 'KEY_NOT_FOUND' }, 'within a second of its lookup: at once')
})

t.test('nextRanges: one range per segment the batch comes from', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  await generator.init()
  t.strictSame(await generator.nextRanges('order', 4), [{ first: 1, count: 4 }], 'the first waits for the first load')
  t.strictSame(generator.nextRanges('order', 3), [{ first: 5, count: 3 }], 'then synchronous')
  t.strictSame(await generator.nextRanges('order', 15), [{ first: 8, count: 3 }, { first: 11, count: 10 }, { first: 21, count: 2 }], 'across three segments')
})

t.test('a batch from a segment reaching past 2^53 is exact bigints', async (t) => {
  const start = 2n ** 53n - 3n
  const store = new FakeStore({ big: { step: 6, maxId: start } })
  const { generator } = setup(store)
  await generator.init()
  const ids = await generator.nextBatch('big', 6)
  t.strictSame(ids, Array.from({ length: 6 }, (_, i) => start + BigInt(i)))
})

t.test('DB down: buffered IDs keep flowing, then SEGMENTS_NOT_READY in time, then recovery', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator } = setup(store, { waitTimeoutMs: 200 })
  await generator.init()
  await generator.next('order')
  store.failing = true
  const buffered = await takeN(() => generator.next('order'), 99)
  t.equal(buffered.at(-1), 100n, 'the whole current segment is served while the store fails')
  const waited = await outcome(time, Promise.resolve().then(() => generator.next('order')), 1000)
  t.match(waited, { state: 'rejected', reason: { code: 'SEGMENTS_NOT_READY' } })
  t.equal(waited.afterMs, 200, 'answered at the wait timeout (200 ms)')
  store.failing = false
  const after = BigInt(await settled(time, generator.next('order')))
  t.ok(after > 100n, 'recovers by itself once the store answers')
})

t.test('a caller waiting while the store fails gets the ID once it comes back', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator } = setup(store, { waitTimeoutMs: 2000 })
  await generator.init()
  await takeN(() => generator.next('order'), 1) // the first segment, [1, 101)
  store.failing = true // before the preload of the second, past 10% of the first
  await takeN(() => generator.next('order'), 99)
  const pending = Promise.resolve(generator.next('order'))
  setTimeout(() => { store.failing = false }, 100)
  const got = await outcome(time, pending, 2000)
  t.match(got, { state: 'resolved', value: 101 })
  t.ok(got.afterMs >= 100 && got.afterMs <= 100 + 40, `answered at the first load after the store came back (${got.afterMs} ms; backoff at most 40 ms)`)
})

t.test('a store that hangs past the load timeout counts as failed; its late answer is never used', async (t) => {
  const store = new FakeStore({ order: { step: 5 } })
  const { generator } = setup(store, { waitTimeoutMs: 500, loadTimeoutMs: 50 })
  await generator.init()
  await takeN(() => generator.next('order'), 5)
  await settle() // the preload of [6, 11) landed
  store.delayMs = 150
  await takeN(() => generator.next('order'), 5) // its preload now hangs
  t.match(await outcome(time, Promise.resolve().then(() => generator.next('order')), 1000), { state: 'rejected', reason: { code: 'SEGMENTS_NOT_READY' } })
  store.delayMs = 0
  await time.tickAsync(200) // the late answers land and are dropped
  const ids = await takeN(() => generator.next('order'), 10)
  const maxInStore = store.rows.get('order')?.maxId as bigint
  t.ok(ids.every((id) => id > 10n && id < maxInStore), 'only ranges the store reserved for us, after the old ones')
  t.equal(new Set(ids).size, 10)
})

t.test('unknown keys: NOT_READY before the tags are loaded, KEY_NOT_FOUND after', async (t) => {
  const store = new FakeStore({ order: { step: 5 } })
  store.failing = true
  const { generator } = setup(store, { refreshIntervalMs: 20 })
  t.teardown(() => generator.close())
  t.equal(await generator.init(), false)
  t.throws(() => generator.next('order'), { code: 'NOT_READY' })
  store.failing = false
  await time.tickAsync(100) // the background retry loads them
  t.equal(generator.initialized, true)
  await t.rejects(Promise.resolve().then(() => generator.next('nope')), new LeafError('KEY_NOT_FOUND',
    'Tag "nope" is not in the leaf_alloc table: insert a row into leaf_alloc (biz_tag, max_id, step) or POST /api/segment/tags; the next request serves it.'))
  t.equal(BigInt(await generator.next('order')), 1n)
})

/** The error `fn` throws or rejects with; undefined when it answers. */
async function errorOf (fn: () => unknown): Promise<{ code?: string, message: string } | undefined> {
  try {
    await fn()
    return undefined
  } catch (err) {
    return err as { code?: string, message: string }
  }
}

/** The store's getTag calls, counted. */
function countLookups (store: FakeStore): { keys: string[] } {
  const seen = { keys: [] as string[] }
  const getTag = store.getTag.bind(store)
  store.getTag = (key) => {
    seen.keys.push(key)
    return getTag(key)
  }
  return seen
}

t.test('a tag inserted after the last refresh is looked up and served on its first request', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const lookups = countLookups(store)
  const { generator } = setup(store)
  await generator.init()
  store.add('fresh', 10, 500n)
  const ids = await Promise.all([generator.next('fresh'), generator.next('fresh'), generator.nextBatch('fresh', 3)])
  t.same(ids.flat().map(Number), [500, 501, 502, 503, 504], 'served at once, in order')
  t.same(lookups.keys, ['fresh'], 'concurrent requests shared one lookup')
  t.equal(generator.has('fresh'), true)
  t.equal(BigInt(await generator.next('fresh')), 505n, 'and then from its buffer, with no lookup')
  t.equal(lookups.keys.length, 1)
})

t.test('an unknown tag is looked up at most once a second', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const lookups = countLookups(store)
  const { generator } = setup(store)
  await generator.init()
  await t.rejects(Promise.resolve().then(() => generator.next('later')), { code: 'KEY_NOT_FOUND' })
  store.add('later', 5, 70n)
  t.throws(() => generator.next('later'), { code: 'KEY_NOT_FOUND', message: /looked up less than a second ago: insert a row into leaf_alloc/ }, 'at once, with no query')
  t.equal(lookups.keys.length, 1)
  await time.tickAsync(999)
  t.throws(() => generator.next('later'), { code: 'KEY_NOT_FOUND' }, 'still within the second')
  await time.tickAsync(1)
  t.equal(BigInt(await generator.next('later')), 70n, 'a second later: looked up again, and served')
  t.same(lookups.keys, ['later', 'later'])
})

t.test('unknown tags: at most TAG_LOOKUPS_PER_SECOND lookups a second across tags, and a bounded memory', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const lookups = countLookups(store)
  const { generator } = setup(store)
  await generator.init()
  const answers = []
  for (let i = 0; i < 1000; i++) answers.push(await errorOf(() => generator.next(`unknown-${i}`)))
  t.equal(lookups.keys.length, TAG_LOOKUPS_PER_SECOND, 'the burst, then none')
  t.ok(answers.every((a) => a?.code === 'KEY_NOT_FOUND'), 'every one KEY_NOT_FOUND')
  t.match(answers[999]?.message, /not looked up now \(unknown tags are looked up at most 20 a second\)/)
  await time.tickAsync(500)
  for (let i = 1000; i < 2000; i++) await errorOf(() => generator.next(`unknown-${i}`))
  t.equal(lookups.keys.length, TAG_LOOKUPS_PER_SECOND * 1.5, 'half a second refills half the rate')
  await time.tickAsync(10_000)
  store.add('unknown-5', 5, 9n)
  t.equal(BigInt(await generator.next('unknown-5')), 9n, 'a key refused before serves once its row is there')
})

t.test('an unknown tag is found by its exact key only', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  // As MySQL's case-insensitive collation answers.
  store.getTag = async (key) => key.toLowerCase() === 'orders' ? { key: 'orders', maxId: 1n, step: 5, description: null, updateTime: new Date() } : undefined
  const { generator } = setup(store)
  await generator.init()
  await t.rejects(Promise.resolve().then(() => generator.next('Orders')), { code: 'KEY_NOT_FOUND' })
  t.equal(generator.has('Orders'), false)
})

t.test('a lookup the store does not answer: STORE_UNAVAILABLE within the wait timeout', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const { generator } = setup(store, { waitTimeoutMs: 1000 })
  await generator.init()
  store.delayMs = 5000
  store.add('slow', 5)
  const answer = await outcome(time, Promise.resolve().then(() => generator.next('slow')), 1500)
  t.match(answer, { state: 'rejected', afterMs: 1000, reason: { code: 'STORE_UNAVAILABLE', message: /its lookup in the database failed or was not answered in time/ } })
  store.delayMs = 0
  store.failing = true
  await time.tickAsync(5000)
  await t.rejects(Promise.resolve().then(() => generator.next('slow')), { code: 'STORE_UNAVAILABLE' })
})

t.test('tags added and removed in the store are picked up by a refresh', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const { generator } = setup(store)
  await generator.init()
  store.add('b', 5, 100n)
  store.rows.delete('a')
  await generator.refreshTags()
  t.equal(BigInt(await generator.next('b')), 100n)
  await t.rejects(Promise.resolve().then(() => generator.next('a')), { code: 'KEY_NOT_FOUND' })
})

t.test('a tag deleted between refreshes answers KEY_NOT_FOUND on its next load', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const { generator } = setup(store)
  await generator.init()
  store.rows.delete('a')
  await t.rejects(Promise.resolve().then(() => generator.next('a')), { code: 'KEY_NOT_FOUND' })
  t.equal(generator.has('a'), false)
})

t.test('IDs are exact past 2^53', async (t) => {
  const start = 2n ** 53n - 3n
  const store = new FakeStore({ big: { step: 5, maxId: start } })
  const { generator } = setup(store)
  await generator.init()
  const ids = await takeN(() => generator.next('big'), 10)
  t.same(ids, Array.from({ length: 10 }, (_, i) => start + BigInt(i)))
  t.equal(typeof (await generator.nextBatch('big', 1))[0], 'bigint', 'beyond 2^53 as bigint')
})

t.test('views report Leaf\'s fields', async (t) => {
  const store = new FakeStore({ order: { step: 10, maxId: 1000n } })
  const { generator, clock } = setup(store)
  await generator.init()
  await takeN(() => generator.next('order'), 1)
  t.match(generator.views(), [{ key: 'order', initOk: true, nextReady: false, pos: 0, value0: 1001n, max0: 1010n, step0: 10, step: 10, minStep: 10 }])
  await takeN(() => generator.next('order'), 2)
  await settle()
  const [view] = generator.views()
  t.same(view && {
    key: view.key,
    initOk: view.initOk,
    nextReady: view.nextReady,
    pos: view.pos,
    value0: view.value0,
    max0: view.max0,
    step0: view.step0,
    value1: view.value1,
    max1: view.max1,
    step1: view.step1,
    step: view.step,
    minStep: view.minStep,
    updateTimestamp: view.updateTimestamp,
  }, {
    key: 'order',
    initOk: true,
    nextReady: true,
    pos: 0,
    value0: 1003n,
    max0: 1010n,
    step0: 10,
    value1: 1010n,
    max1: 1020n,
    step1: 10,
    step: 10,
    minStep: 10,
    updateTimestamp: clock.now,
  }, 'Leaf\'s SegmentBufferView fields, for the first two segments')
  t.same(view?.segments, [{ value: 1003n, max: 1010n, step: 10 }, { value: 1010n, max: 1020n, step: 10 }], 'and every segment held')
  t.equal(view?.buffered, 17)
})

t.test('a caller that gets nothing fails at the wait timeout, however many loads others used up', async (t) => {
  const store = new FakeStore({ tiny: { step: 10 } })
  const { generator } = setup(store, { waitTimeoutMs: 300 })
  await generator.init()
  store.delayMs = 100
  const all = await outcome(time, Promise.allSettled(Array.from({ length: 300 }, () => Promise.resolve().then(() => generator.next('tiny')))), 2000)
  t.equal(all.state, 'resolved')
  t.ok(all.afterMs <= 300 + 100, `every caller answered within the timeout plus one load (${all.afterMs} ms)`)
  const results = all.state === 'resolved' ? all.value : []
  t.ok(results.some((r) => r.status === 'rejected' && (r.reason as LeafError).code === 'SEGMENTS_NOT_READY'), 'the unlucky ones got SEGMENTS_NOT_READY')
  const ids = results.flatMap((r) => r.status === 'fulfilled' ? [BigInt(r.value)] : [])
  t.equal(new Set(ids).size, ids.length, 'no duplicate among the lucky ones')
})

t.test('a table step of 0 fails the load instead of looping', async (t) => {
  const store = new FakeStore({ zero: { step: 0 } })
  const { generator } = setup(store, { waitTimeoutMs: 200 })
  await generator.init()
  const zero = await outcome(time, Promise.resolve().then(() => generator.next('zero')), 1000)
  t.match(zero, { state: 'rejected', reason: { code: 'SEGMENTS_NOT_READY' } })
  t.equal(zero.afterMs, 200, 'answered at the wait timeout')
  t.ok(store.calls.length < 20, `loads were backed off (${store.calls.length})`)
})

t.test('a tag added while a refresh reads the table is not dropped by that refresh', async (t) => {
  const store = new FakeStore({ a: { step: 5 } })
  const { generator } = setup(store)
  await generator.init()
  store.delayMs = 50
  const refresh = generator.refreshTags()
  await time.tickAsync(1) // the read is in flight, the rows it answers with already read
  store.add('new', 5)
  generator.addTag('new')
  await time.tickAsync(50)
  await refresh
  t.equal(generator.has('new'), true)
  t.equal(generator.has('a'), true)
})

const HOUR = 60 * MINUTE

/**
 * Steps the wall clock back by an hour, as an NTP step would: both the generator's injected
 * clock and Date.now, which the code may read directly. Timers and performance.now, being
 * monotonic, do not move.
 */
function stepWallClockBack (clock: { now: number }): void {
  time.setSystemTime(Date.now() - HOUR)
  clock.now -= HOUR
}

t.test('wall clock stepped back an hour while a caller waits on a failing store: SEGMENTS_NOT_READY at the wait timeout', async (t) => {
  const store = new FakeStore({ order: { step: 5 } })
  const { generator, clock } = setup(store, { waitTimeoutMs: 300 })
  await generator.init()
  store.failing = true
  setTimeout(() => stepWallClockBack(clock), 50) // during a backoff between failed loads
  const waited = await outcome(time, Promise.resolve().then(() => generator.next('order')), 2000)
  t.match(waited, { state: 'rejected', reason: { code: 'SEGMENTS_NOT_READY' } })
  t.equal(waited.afterMs, 300, 'answered at the wait timeout')
})

t.test('wall clock stepped back an hour while a caller waits: it gets its ID once the store answers', async (t) => {
  const store = new FakeStore({ order: { step: 5 } })
  const { generator, clock } = setup(store, { waitTimeoutMs: 1000 })
  await generator.init()
  store.failing = true
  setTimeout(() => stepWallClockBack(clock), 50)
  setTimeout(() => { store.failing = false }, 100)
  t.match(await outcome(time, Promise.resolve().then(() => generator.next('order')), 2000), { state: 'resolved', value: 1 })
})

t.test('wall clock stepped back an hour during a failed preload\'s backoff: the next preload still starts', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const monotonic = { now: 1000 }
  const { generator, clock } = setup(store, { monotonic: () => monotonic.now })
  await generator.init()
  await takeN(() => generator.next('order'), 1)
  store.failing = true
  await takeN(() => generator.next('order'), 11) // past 10%: the preload starts and fails
  await settle()
  t.equal(store.calls.length, 2, 'the preload was tried')
  stepWallClockBack(clock)
  store.failing = false
  monotonic.now += 100 // past the backoff (10 to 40 ms here)
  await takeN(() => generator.next('order'), 1)
  t.equal(store.calls.length, 3, 'the preload started again')
  await settle()
  t.equal(generator.views()[0]?.nextReady, true, 'and landed')
})

t.test('a table step changed once the step adapts (a PATCH) is reserved at the next load; the adaptation starts again from it', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  await generator.init()
  await takeN(() => generator.next('order'), 25) // loads of 10, 10, 20, and the preload of 40
  await settle()
  t.same(store.calls.map((c) => c.step), [undefined, undefined, 20, 40])
  const row = store.rows.get('order') as { maxId: bigint, step: number }
  row.step = 500
  const before = row.maxId
  t.equal((await takeN(() => generator.next('order'), 15 + 40 + 1)).at(-1), 81n, 'what was buffered, then the next load')
  t.equal(row.maxId - before, 500n, 'that load reserved the new step')
  t.match(generator.views()[0], { step: 500, minStep: 500 })
  await takeN(() => generator.next('order'), 50) // past 10% of the new segment
  t.equal(store.calls.at(-1)?.step, 1000, 'the next load doubles from it')
})
