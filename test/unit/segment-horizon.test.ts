import t from 'tap'
import { createSegmentGenerator, type Id, type SegmentGeneratorOptions } from '../../src/segment/segment-generator.js'
import { RateMeter } from '../../src/segment/rate-meter.js'
import { FakeStore } from '../helpers/fake-store.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { type FakeClock, fakeTime, outcome, settled } from '../helpers/time.js'

// The buffer horizon (leaf.segment.buffer-seconds), the segment cap, the give-back at a
// graceful stop and the end of the ID space, against an in-memory store and a monotonic
// clock the test moves; rates are sampled every 5 ms of fake time, of that clock.

function setup (store: FakeStore, options: Partial<SegmentGeneratorOptions> = {}) {
  const mono = { now: 1_000_000 }
  const generator = createSegmentGenerator({
    store,
    logger: silentLogger,
    monotonic: () => mono.now,
    waitTimeoutMs: 1000,
    refreshIntervalMs: 60_000,
    retryMinMs: 10,
    retryMaxMs: 40,
    rateSampleMs: 5,
    ...options,
  })
  t.teardown(() => generator.close())
  return { generator, mono }
}

async function takeN (next: () => Id | Promise<Id>, n: number): Promise<bigint[]> {
  const ids: bigint[] = []
  for (let i = 0; i < n; i++) ids.push(BigInt(await settled(time, next())))
  return ids
}

// Every timer (rate samples, loads' timeouts, backoffs, waits) is fake: `time` moves it.
let time: FakeClock
t.beforeEach((t) => { time = fakeTime(t) })

/** Moves the fake timers `ms`, running what falls due and the promise callbacks between. */
const settle = (ms = 15) => time.tickAsync(ms)

/** Two instances on one tag of step 10: a reserves [1, 11), then b [11, 21) (unless `reserve` is false). */
async function aThenB (aOptions: Partial<SegmentGeneratorOptions> = {}, bOptions: Partial<SegmentGeneratorOptions> = {}, reserve = true) {
  const store = new FakeStore({ order: { step: 10 } })
  const a = setup(store, aOptions).generator
  const b = setup(store, bOptions).generator
  await settled(time, a.init())
  await settled(time, b.init())
  if (reserve) {
    await settled(time, a.next('order'))
    await settled(time, b.next('order'))
  }
  return { store, a, b }
}

/** Moves the monotonic clock by `ms` and lets a rate sample see it. */
async function pass (mono: { now: number }, ms: number): Promise<void> {
  mono.now += ms
  await settle()
}

t.test('rate meter: a burst raises the rate at once, it decays over about a minute, the history keeps 15 minutes', async (t) => {
  const m = new RateMeter()
  m.sample(0, 0)
  m.sample(0, 1000)
  t.equal(m.rate, 0)
  t.equal(m.current(500, 1100), 5000, 'between samples, the rate since the last one (a burst) at once')
  m.sample(5000, 2000)
  t.equal(m.rate, 5000, '5,000 IDs in a second')
  m.sample(5000, 22_000)
  t.ok(m.rate < 5000 * 0.4 && m.rate > 5000 * 0.3, `20 s idle: down by e (${m.rate.toFixed(0)})`)
  m.sample(5000, 62_000)
  t.ok(m.rate < 5000 * 0.05, `a minute idle: under 5% (${m.rate.toFixed(0)})`)
  t.equal(m.average(60_000), 0, 'nothing in the last minute')
  t.ok(m.history().reduce((a, b) => a + b, 0) * 10 === 5000, 'the history holds the 5,000 IDs')
  t.equal(m.history().length, 90)
  m.sample(5000, 62_000 + 16 * 60_000)
  t.equal(m.history().reduce((a, b) => a + b, 0), 0, 'after 16 idle minutes the history is empty')
})

t.test('horizon: a burst grows the chain to the buffered seconds, one load at a time, within the cap', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  store.delayMs = 1
  const { generator, mono } = setup(store, { bufferSeconds: 10, maxBufferedSegments: 6 })
  await settled(time, generator.init())
  await takeN(() => generator.next('order'), 1)
  // A burst: 100 IDs per 25 ms, 4,000 IDs/s, so a horizon of 40,000 IDs.
  for (let round = 0; round < 20; round++) {
    await takeN(() => generator.next('order'), 100)
    mono.now += 25
    await settle(3)
  }
  const view = generator.views()[0]
  t.equal(view?.idsPerSecond, 4000, 'the burst\'s rate')
  t.equal(store.maxAllocating, 1, 'never two loads of a tag at once')
  t.ok((view?.buffered ?? 0) >= 40_000, `the chain grew to hold 10 s of it: ${view?.buffered} IDs in ${view?.segments.length} segments`)
  t.ok((view?.segments.length ?? 99) <= 6, 'within the cap')
  const before = store.calls.length
  await takeN(() => generator.next('order'), 100)
  await settle()
  t.equal(store.calls.length, before, 'the horizon held: no further load')
  const held = view?.segments ?? []
  for (let i = 1; i < held.length; i++) t.ok((held[i]?.value ?? 0n) >= (held[i - 1]?.max ?? 0n), 'each segment above the one before')
  const steps = store.calls.map((c) => c.step)
  t.same(steps.slice(0, 3), [undefined, undefined, 200], 'Leaf\'s step rule: the table step twice, then doubling')

  // Quiet for two minutes: the rate decays, and a slow trickle loads as Leaf would.
  await pass(mono, 60_000)
  await pass(mono, 60_000)
  const quiet = generator.views()[0]
  t.ok((quiet?.idsPerSecond ?? Infinity) < 200, `the rate decayed (${quiet?.idsPerSecond.toFixed(0)} IDs/s)`)
  const loads = store.calls.length
  await takeN(() => generator.next('order'), 10)
  await settle()
  t.equal(store.calls.length, loads, 'IDs left for minutes at the quiet rate: no load')
})

t.test('horizon: the cap bounds the chain however far the horizon reaches', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator, mono } = setup(store, { bufferSeconds: 3600, maxBufferedSegments: 4 })
  await settled(time, generator.init())
  for (let round = 0; round < 20; round++) {
    await takeN(() => generator.next('order'), 100)
    mono.now += 25
    await settle(3)
  }
  t.equal(generator.views()[0]?.segments.length, 4, 'four segments held, not one more')
  t.equal(store.maxAllocating, 1)
})

t.test('horizon: at a steady rate the chain is refilled to the buffered seconds as it is used', async (t) => {
  const store = new FakeStore({ order: { step: 50 } })
  const { generator, mono } = setup(store, { bufferSeconds: 2, maxBufferedSegments: 8 })
  await settled(time, generator.init())
  // 500 IDs/s for 6 s, in steps of 100 ms: the horizon is 1,000 IDs.
  let last = 0n
  for (let i = 0; i < 60; i++) {
    const ids = await takeN(() => generator.next('order'), 50)
    t.ok((ids[0] as bigint) > last, 'increasing across the chain')
    last = ids.at(-1) as bigint
    await pass(mono, 100)
  }
  const view = generator.views()[0]
  t.ok((view?.buffered ?? 0) >= 1000 * 0.9, `~2 s of 500 IDs/s held: ${view?.buffered}`)
  t.ok((view?.bufferSeconds ?? 0) >= 1.8, `bufferSeconds ${view?.bufferSeconds?.toFixed(2)}`)
  t.equal(store.maxAllocating <= 1, true)
})

t.test('bufferSeconds 0 is Leaf\'s double buffer: one segment ahead, loaded past 10% of the current', async (t) => {
  const store = new FakeStore({ order: { step: 100 } })
  const { generator, mono } = setup(store, { bufferSeconds: 0, maxBufferedSegments: 8 })
  await settled(time, generator.init())
  await takeN(() => generator.next('order'), 11)
  await settle()
  t.equal(store.calls.length, 2, 'the preload past 10%')
  mono.now += 10
  await takeN(() => generator.next('order'), 80)
  await settle()
  t.equal(store.calls.length, 2, 'never a second segment ahead')
  t.equal(generator.views()[0]?.segments.length, 2)
})

t.test('a load that lands after its timeout is never inserted: IDs keep increasing', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store, { loadTimeoutMs: 50, bufferSeconds: 0 })
  await settled(time, generator.init())
  const first = await takeN(() => generator.next('order'), 2)
  store.delayMs = 120 // the preload outlives its timeout, then reserves [11, 21) for nobody
  await takeN(() => generator.next('order'), 1)
  await settle(70)
  store.delayMs = 0
  const rest = await takeN(() => generator.next('order'), 20)
  await settle(100) // the late answer lands
  const more = await takeN(() => generator.next('order'), 10)
  const all = [...first, 3n, ...rest, ...more]
  for (let i = 1; i < all.length; i++) t.ok((all[i] as bigint) > (all[i - 1] as bigint), `increasing at ${i}`)
  t.equal(new Set(all).size, all.length)
})

t.test('give-back: the unused end of the chain returns with one compare-and-set on max_id', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  await settled(time, generator.init())
  await takeN(() => generator.next('order'), 4) // [1, 11) and the preload [11, 21)
  await settle()
  const { giveBacks } = await settled(time, generator.shutdown(1000))
  t.same(store.givenBack, [{ key: 'order', end: 21n, firstUnused: 5n, ok: true }], 'from the first unused ID of the contiguous run')
  t.same(giveBacks, [{ key: 'order', returned: 16n, parked: 0n, unused: 16n }])
  t.equal(store.rows.get('order')?.maxId, 5n)
  await t.rejects(Promise.resolve().then(() => generator.next('order')), { code: 'SHUTTING_DOWN' }, 'nothing is served once stopping')
  const after = setup(store).generator
  await settled(time, after.init())
  t.equal(await after.next('order'), 5, 'the next instance starts exactly there')
})

t.test('give-back: another instance reserved since, so nothing is returned', async (t) => {
  const { store, a, b } = await aThenB()
  const { giveBacks } = await settled(time, a.shutdown(1000))
  t.match(giveBacks, [{ key: 'order', returned: 0n, parked: 0n, unused: 9n, reason: /another instance reserved a segment since; no warm-start file/ }])
  t.equal(store.rows.get('order')?.maxId, 21n, 'max_id untouched')
  t.equal(await b.next('order'), 12, 'b serves on')
})

t.test('give-back: segments before another instance\'s reservation stay lost, the tail after it returns', async (t) => {
  const { store, a } = await aThenB()
  await takeN(() => a.next('order'), 1) // a, past 10%: preloads [21, 31)
  await settle()
  const { giveBacks } = await settled(time, a.shutdown(1000))
  t.same(store.givenBack, [{ key: 'order', end: 31n, firstUnused: 21n, ok: true }])
  t.match(giveBacks, [{ key: 'order', returned: 10n, parked: 0n, unused: 18n, reason: /no warm-start file/ }], 'the 8 IDs below b\'s segment are lost without an identity')
})

t.test('give-back: a used-up chain returns nothing; a store that does not answer in the budget returns nothing', async (t) => {
  const store = new FakeStore({ order: { step: 20 } })
  const { generator } = setup(store, { bufferSeconds: 0 })
  await settled(time, generator.init())
  await takeN(() => generator.next('order'), 1)
  store.failing = true // the preload fails: the chain is the one used-up segment
  await takeN(() => generator.next('order'), 19)
  await settle()
  const { giveBacks } = await settled(time, generator.shutdown(1000))
  t.match(giveBacks, [{ returned: 0n, unused: 0n }])
  t.same(store.givenBack, [], 'no statement for nothing')

  const slow = new FakeStore({ order: { step: 10 } })
  const g = setup(slow).generator
  await settled(time, g.init())
  await settled(time, g.next('order'))
  slow.delayMs = 500
  const stopping = await outcome(time, g.shutdown(100), 1000)
  t.equal(stopping.afterMs, 100, 'at the end of the budget')
  const result = stopping.state === 'resolved' ? stopping.value : { giveBacks: [] }
  t.match(result.giveBacks, [{ returned: 0n, reason: /no answer in time/ }])
})

t.test('hand-over: what the compare-and-set cannot return is parked under this life\'s id, and the next life takes it first', async (t) => {
  const { store, a, b } = await aThenB({ handover: { claimFrom: undefined, parkAs: 'A1' } }, { handover: { claimFrom: undefined, parkAs: 'B1' } }, false)
  t.equal(await a.next('order'), 1) // a: [1, 11)
  t.equal(await b.next('order'), 11) // b: [11, 21): a's compare-and-set will fail
  const stopped = await settled(time, a.shutdown(1000))
  t.same(stopped.giveBacks, [{ key: 'order', returned: 0n, parked: 9n, unused: 9n, reason: 'another instance reserved a segment since' }])
  t.same(store.parked, [{ key: 'order', owner: 'A1', first: 2n, end: 11n }])

  const a2 = setup(store, { handover: { claimFrom: 'A1', parkAs: 'A2' } }).generator
  await settled(time, a2.init())
  const ids = await takeN(() => a2.next('order'), 12)
  t.same(ids, [2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n, 21n, 22n, 23n], 'the parked IDs first (above every ID a issued), then a new segment')
  t.same(store.parked, [], 'taken, once')
  t.same(store.claims.map((c) => c.owner), ['A1'], 'one claim, by the life after the one that parked (a first life has nothing to claim)')
  store.parked.push({ key: 'order', owner: 'A1', first: 5000n, end: 5005n })
  const other = setup(store, { handover: { claimFrom: 'C1', parkAs: 'C2' } }).generator
  await settled(time, other.init())
  t.ok(BigInt(await other.next('order')) < 5000n, 'another id takes nothing A1 parked')
  t.equal(store.parked.length, 1, 'and leaves it')
  const again = setup(store, { handover: { claimFrom: 'A1', parkAs: 'A3' } }).generator
  await settled(time, again.init())
  await settled(time, again.next('order'))
  t.equal(store.parked.length, 0, 'a copy of A1\'s file claims once more: what was parked under A1 since, taken once')
})

t.test('hand-over: after a compare-and-set of the tail, the segments below a gap are parked', async (t) => {
  const { store, a } = await aThenB({ handover: { claimFrom: undefined, parkAs: 'A1' } }, { handover: { claimFrom: undefined, parkAs: 'B1' } })
  await takeN(() => a.next('order'), 1) // a preloads [21, 31)
  await settle()
  const { giveBacks } = await settled(time, a.shutdown(1000))
  t.same(giveBacks, [{ key: 'order', returned: 10n, parked: 8n, unused: 18n }], 'nothing lost')
  t.same(store.parked, [{ key: 'order', owner: 'A1', first: 3n, end: 11n }])
  t.equal(store.rows.get('order')?.maxId, 21n)
})

t.test('give-back: a compare-and-set with no answer may have committed, so its run is neither returned nor parked (lost)', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  // The UPDATE commits, then the answer is lost (a query timeout, a connection reset).
  const giveBack = store.giveBack.bind(store)
  store.giveBack = async (key, end, firstUnused) => { await giveBack(key, end, firstUnused); throw new Error('PROTOCOL_CONNECTION_LOST') }
  const a = setup(store, { handover: { claimFrom: undefined, parkAs: 'A1' } }).generator
  await settled(time, a.init())
  await takeN(() => a.next('order'), 10) // [1, 11) used, the preload [11, 21) held
  await settle()
  const { giveBacks } = await settled(time, a.shutdown(1000))
  t.match(giveBacks, [{ returned: 0n, parked: 0n, unused: 10n, reason: /outcome is unknown/ }])
  t.same(store.parked, [], 'nothing parked')
  const b = setup(store, { handover: { claimFrom: 'A1', parkAs: 'A2' } }).generator
  await settled(time, b.init())
  const ids = await takeN(() => b.next('order'), 10)
  t.same(ids, [11n, 12n, 13n, 14n, 15n, 16n, 17n, 18n, 19n, 20n], 'the committed give-back: served once, from max_id')
})

t.test('give-back: a tag whose load is still out when the wait ends is parked, not returned: the load could reserve right after the compare-and-set', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  // A clock that stands still: the stop's wait ends by its timer while its deadline has not
  // passed by this clock (a timer that fires a little early does the same).
  const now = 0
  const { generator } = setup(store, { handover: { claimFrom: undefined, parkAs: 'A1' }, monotonic: () => now })
  await settled(time, generator.init())
  t.equal(await generator.next('order'), 1)
  let land: (() => void) | undefined
  const allocate = store.allocate.bind(store)
  store.allocate = async (...args) => { await new Promise<void>((resolve) => { land = resolve }); return allocate(...args) }
  t.equal(await generator.next('order'), 2) // preloads: the load waits
  t.equal(await generator.next('order'), 3)
  await settle(5)
  t.type(land, 'function', 'the preload is out')
  const { giveBacks } = await settled(time, generator.shutdown(50))
  t.same(giveBacks, [{ key: 'order', returned: 0n, parked: 7n, unused: 7n, reason: 'a load was still out' }])
  t.same(store.givenBack, [], 'no compare-and-set sent')
  land?.()
  await settle()
  t.equal(store.rows.get('order')?.maxId, 21n, 'the late load reserved [11, 21), for nobody')
})

t.test('a first load that lands after shutdown began does not turn serving back on', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  store.delayMs = 30
  const { generator } = setup(store, { handover: { claimFrom: undefined, parkAs: 'A1' } })
  await settled(time, generator.init())
  const waiting = Promise.resolve().then(() => generator.next('order')).catch((e: unknown) => e)
  await settle(5) // the first load is in flight
  const stopping = generator.shutdown(1000)
  t.match(await settled(time, waiting), { code: 'SHUTTING_DOWN' }, 'the waiting caller is refused')
  await settle(40) // the load lands during the give-back
  await t.rejects(Promise.resolve().then(() => generator.next('order')), { code: 'SHUTTING_DOWN' }, 'and nothing is served from it')
  const { giveBacks } = await settled(time, stopping)
  t.match(giveBacks, [{ key: 'order', returned: 10n }], 'its whole segment given back')
})

t.test('a tag added after the stop loads nothing: a warm start of it is refused', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store)
  await settled(time, generator.init())
  await settled(time, generator.shutdown(1000))
  store.add('late', 10)
  generator.addTag('late')
  await settled(time, generator.warm(['late']))
  t.same(store.calls, [], 'no allocation')
  t.match(generator.view('late'), { initOk: false, segments: [] })
  await t.rejects(Promise.resolve().then(() => generator.next('late')), { code: 'SHUTTING_DOWN' })
})

t.test('parked rows that are not a range of IDs are dropped, not served', async (t) => {
  const store = new FakeStore({ order: { step: 10 } })
  store.parked.push({ key: 'order', owner: 'A1', first: 50n, end: 50n }, { key: 'order', owner: 'A1', first: 60n, end: 55n }, { key: 'order', owner: 'A1', first: 1n, end: 2n ** 60n })
  const { generator } = setup(store, { handover: { claimFrom: 'A1', parkAs: 'A2' } })
  await settled(time, generator.init())
  t.equal(await settled(time, generator.next('order')), 1, 'a new segment from max_id')
  t.equal(store.parked.length, 0, 'the rows were taken (and dropped)')
})

t.test('shutdown names the tags that served in the last minute, for the warm start', async (t) => {
  const store = new FakeStore({ hot: { step: 10 }, cold: { step: 10 }, never: { step: 10 } })
  const { generator, mono } = setup(store)
  await settled(time, generator.init())
  await settled(time, generator.next('cold'))
  await pass(mono, 1000)
  await pass(mono, 90_000)
  await settled(time, generator.next('hot'))
  await pass(mono, 1000)
  const { warmTags } = await settled(time, generator.shutdown(1000))
  t.same(warmTags, ['hot'])
})

t.test('warm(): the listed tags load their first segment before it resolves; unknown ones are skipped', async (t) => {
  const store = new FakeStore({ hot: { step: 10 }, other: { step: 10 } })
  store.delayMs = 20
  const { generator } = setup(store)
  await settled(time, generator.init())
  const warming = generator.warm(['hot', 'gone'])
  t.equal(generator.warming, true)
  await settled(time, warming)
  t.equal(generator.warming, false)
  t.same(store.calls.map((c) => c.key), ['hot'])
  const loads = store.calls.length
  t.equal(generator.next('hot'), 1, 'served at once, synchronously')
  t.equal(store.calls.length, loads, 'without touching the store')
})

t.test('the end of the ID space: ID_SPACE_EXHAUSTED at once, naming the tag, once the buffered IDs are used', async (t) => {
  const max = 2n ** 63n - 1n
  const store = new FakeStore({ last: { step: 10, maxId: max - 15n } })
  const { generator } = setup(store, { waitTimeoutMs: 5000 })
  await settled(time, generator.init())
  const ids = await takeN(() => generator.next('last'), 10) // the one segment that fits
  t.equal(ids.at(-1), max - 6n)
  const last = await outcome(time, Promise.resolve().then(() => generator.next('last')), 6000)
  t.match(last, { state: 'rejected', reason: { code: 'ID_SPACE_EXHAUSTED', message: /"last"/ } })
  t.equal(last.afterMs, 0, 'at once, not after the 5 s wait')
  t.same(generator.endedTags(), ['last'])
  t.equal(store.rows.get('last')?.maxId, max - 5n, 'max_id never wrapped')
})

t.test('a store that keeps failing is logged once per 30 s, with the count at recovery; no stack for a driver error', async (t) => {
  const { logger, lines } = captureLogger()
  const store = new FakeStore({ order: { step: 10 } })
  const { generator } = setup(store, { logger, waitTimeoutMs: 200, monotonic: () => performance.now() })
  await settled(time, generator.init())
  store.failing = true
  store.failure = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:3306'), { code: 'ECONNREFUSED' })
  t.match(await outcome(time, Promise.resolve().then(() => generator.next('order')), 1000), { state: 'rejected', afterMs: 200, reason: { code: 'SEGMENTS_NOT_READY' } })
  const failures = lines.filter((l) => l.msg === 'segment load failed: serving buffered IDs, retrying loads')
  t.equal(failures.length, 1, `one line for the ${generator.views()[0]?.failedLoads} failed loads of the wait`)
  t.match(failures[0], { key: 'order', code: 'ECONNREFUSED' })
  t.notMatch(JSON.stringify(failures[0]), /\bat \S+ \(/, 'no stack')
  store.failing = false
  await settled(time, generator.next('order'))
  const back = lines.find((l) => l.msg === 'database reachable again: segment loads succeed')
  t.ok(((back?.failedLoadsNotLogged as number | undefined) ?? 0) >= 2, `the held-back failures counted: ${back?.failedLoadsNotLogged}`)
})
