import t from 'tap'
import { createSegmentGenerator, type Id } from '../../src/segment/segment-generator.js'
import { nextSegment, viewJson, type NextSegmentInput } from '../../src/segment/segment-views.js'
import { FakeStore } from '../helpers/fake-store.js'
import { silentLogger } from '../helpers/logger.js'
import { type FakeClock, fakeTime, settled } from '../helpers/time.js'

// What the views say of a tag: where its next segment stands (the /cache badge) and its one
// horizon, first on fakes of a buffer, then on a generator over an in-memory store, its timers
// and monotonic clock fake.

let time: FakeClock
t.beforeEach((t) => { time = fakeTime(t) })

function setup (store: FakeStore, bufferSeconds = 0) {
  const mono = { now: 1_000_000 }
  const generator = createSegmentGenerator({
    store,
    logger: silentLogger,
    monotonic: () => mono.now,
    waitTimeoutMs: 1000,
    refreshIntervalMs: 60_000,
    retryMinMs: 1000,
    retryMaxMs: 4000,
    rateSampleMs: 5,
    bufferSeconds,
  })
  t.teardown(() => generator.close())
  return { generator, mono }
}

async function take (next: () => Id | Promise<Id>, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await settled(time, next())
}

t.test('nextSegment on fakes: each state, and late only past the threshold with the last load failed', async (t) => {
  const fake = (more: Partial<NextSegmentInput> = {}, current: Partial<NextSegmentInput['currentSegment']> = {}): NextSegmentInput => ({
    serving: true,
    nextReady: false,
    loading: undefined,
    backoffMs: 0,
    ...more,
    currentSegment: { pos: 5, idle: 995, preloadAfter: 100, ...current },
  })
  t.equal(nextSegment(fake({ serving: false })), 'not_loaded')
  t.equal(nextSegment(fake({ nextReady: true })), 'ready')
  t.equal(nextSegment(fake({}, { pos: 1000, idle: 0 })), 'used_up')
  t.equal(nextSegment(fake({ loading: Promise.resolve() }, { pos: 1000, idle: 0 })), 'used_up', 'used up while a load is in flight: callers wait')
  t.equal(nextSegment(fake({ loading: Promise.resolve() }, { pos: 101, idle: 899 })), 'loading')
  t.equal(nextSegment(fake()), 'not_due', 'the issue\'s tag: 5 IDs of 1,000 used, the threshold at 100')
  t.equal(nextSegment(fake({}, { pos: 100, idle: 900 })), 'not_due', 'at the threshold: the load starts past it')
  t.equal(nextSegment(fake({ backoffMs: 2000 }, { pos: 50, idle: 950 })), 'not_due', 'a failed load before the threshold is not late yet')
  t.equal(nextSegment(fake({}, { preloadAfter: Infinity, pos: 900, idle: 100 })), 'not_due', 'no further load wanted (the cap, the tag gone)')
  t.equal(nextSegment(fake({}, { pos: 101, idle: 899 })), 'due', 'past the threshold, the last load fine: the next take starts it')
  t.equal(nextSegment(fake({ backoffMs: 2000 }, { pos: 101, idle: 899 })), 'late', 'past the threshold, backing off after a failure')
})

t.test('a generator\'s tag: not loaded, not due after 5 IDs, loading, ready, late while its loads fail, used up', async (t) => {
  const store = new FakeStore({ order: { step: 1000 }, fresh: { step: 1000 } })
  const { generator, mono } = setup(store)
  await settled(time, generator.init())
  const next = () => generator.next('order')
  const view = (key = 'order') => generator.view(key, { history: false })
  t.match(view('fresh'), { next: 'not_loaded', bufferSeconds: undefined, step: 0, segments: [] }, 'a tag never asked for')
  await take(next, 5)
  t.equal(view()?.next, 'not_due', '5 IDs of 1,000: no next segment, and none needed')
  t.equal(view()?.nextReady, false)
  store.delayMs = 50
  await take(next, 100)
  t.equal(view()?.next, 'loading', 'past 10%: the preload is in flight')
  await time.tickAsync(60)
  t.equal(view()?.next, 'ready')
  store.delayMs = 0
  store.failing = true
  await take(next, 895 + 101) // the rest of [1, 1001), then past 10% of [1001, 2001): its preload fails
  await time.tickAsync(1)
  t.match(view(), { next: 'late', failedLoads: 1 }, 'the preload failed: late, retrying after its backoff')
  await take(next, 899)
  t.equal(view()?.next, 'used_up', 'every ID of the segment handed out, none after it')
  store.failing = false
  mono.now += 5000 // past the backoff
  await take(next, 1)
  await time.tickAsync(1)
  t.match(view(), { next: 'not_due', segments: [{ value: 2002n }] }, 'loaded again once the store answers, one ID of it taken')
})

t.test('the one horizon: the buffered IDs over the rate the buffer horizon plans with, in the view and in /api/cache\'s entry', async (t) => {
  const store = new FakeStore({ order: { step: 10_000 } })
  const { generator, mono } = setup(store, 60)
  await settled(time, generator.init())
  const next = () => generator.next('order')
  await take(next, 1)
  for (let i = 0; i < 10; i++) {
    await take(next, 50) // 500 IDs/s
    mono.now += 100
    await time.tickAsync(6)
  }
  const v = generator.view('order', { history: false })
  if (v === undefined) throw new Error('no view')
  t.ok(v.idsPerSecond > 400, `the rate now: ${v.idsPerSecond}`)
  t.equal(v.bufferSeconds, v.buffered / v.idsPerSecond, 'buffered over the rate now, the rate the horizon plans with')
  const json = viewJson(v)
  t.match(json, { key: 'order', bufferedIds: v.buffered, idsPerSecond: Math.round(v.idsPerSecond * 100) / 100, nextSegment: v.next })
  t.equal(json.bufferSeconds, Math.round((v.bufferSeconds as number) * 100) / 100)
  t.notOk('rate' in json || 'ratePerMinute' in json || 'buffered' in json, 'no field without its unit')
  mono.now += 10 * 60_000
  await time.tickAsync(6)
  const quiet = generator.view('order', { history: false })
  t.match(quiet, { bufferSeconds: undefined }, 'idle after ten quiet minutes: no seconds figure')
  t.equal(viewJson(quiet as NonNullable<typeof quiet>).bufferSeconds, null)
})
