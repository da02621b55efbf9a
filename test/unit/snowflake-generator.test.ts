import t from 'tap'
import { LeafError } from '../../src/errors.js'
import { expandRanges } from '../../src/id-range.js'
import { createSnowflakeGenerator, type SnowflakeGeneratorOptions } from '../../src/snowflake/snowflake-generator.js'
import { DEFAULT_TWEPOCH, MAX_WORKER_ID, SEQUENCE_MASK, decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { channels } from '../../src/channels.js'
import { listen } from '../helpers/channels.js'

const T0 = 1_790_000_000_000

/** A clock tests move by hand; `sleep` moves it too, so waits cost no real time. */
function fakeTime (start = T0) {
  const time = { now: start, slept: [] as number[] }
  return {
    time,
    clock: () => time.now,
    sleep: async (ms: number) => { time.slept.push(ms); time.now += ms },
  }
}

function generator (overrides: Partial<SnowflakeGeneratorOptions> = {}) {
  const f = fakeTime()
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 42, ...overrides })
  return { gen, ...f }
}

t.test('layout: (timestamp - twepoch) << 22 | workerId << 12 | sequence, and decode round-trips', async (t) => {
  const { gen } = generator()
  const id = gen.next() as bigint
  t.equal(id, (BigInt(T0 - DEFAULT_TWEPOCH) << 22n) | (7n << 12n) | 42n)
  t.same(decodeSnowflakeId(id), { timestamp: T0, workerId: 7, sequence: 42 })
  t.same(gen.decode(gen.next() as bigint), { timestamp: T0, workerId: 7, sequence: 43 })
  const custom = createSnowflakeGenerator({ workerId: MAX_WORKER_ID, twepoch: 0, clock: () => 5, random: () => 0 })
  t.same(custom.decode(custom.next() as bigint), { timestamp: 5, workerId: 1023, sequence: 0 })
})

t.test('a new millisecond starts its sequence at a random value below 100', async (t) => {
  const seen: number[] = []
  const f = fakeTime()
  const gen = createSnowflakeGenerator({ workerId: 1, clock: f.clock, random: (n) => { seen.push(n); return 99 } })
  t.equal(gen.decode(gen.next() as bigint).sequence, 99)
  f.time.now++
  t.equal(gen.decode(gen.next() as bigint).sequence, 99)
  t.same(seen, [100, 100])
  const real = createSnowflakeGenerator({ workerId: 1, clock: f.clock })
  for (let i = 0; i < 50; i++) {
    f.time.now++
    const seq = real.decode(real.next() as bigint).sequence
    t.ok(seq >= 0 && seq < 100, `sequence ${seq} in [0, 100)`)
  }
})

t.test('the sequence wraps: waits for the next millisecond, IDs stay increasing', async (t) => {
  let calls = 0
  const time = { now: T0 }
  // The clock moves on one millisecond after 5,000 reads.
  const gen = createSnowflakeGenerator({ workerId: 3, clock: () => (++calls % 5000 === 0 ? ++time.now : time.now), random: () => 0 })
  const ids = gen.nextBatch('k', 4097) as bigint[]
  t.equal(ids.length, 4097)
  t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)), 'strictly increasing')
  t.same(gen.decode(ids[4095] as bigint), { timestamp: T0, workerId: 3, sequence: 4095 })
  t.same(gen.decode(ids[4096] as bigint), { timestamp: T0 + 1, workerId: 3, sequence: 0 })
})

t.test('clock behind by up to 5 ms: waits twice the offset, then serves', async (t) => {
  const { gen, time } = generator()
  gen.next()
  time.now -= 3
  const id = await gen.next()
  t.same(time.slept, [6])
  t.same(gen.decode(id), { timestamp: T0 + 3, workerId: 7, sequence: 42 })
})

t.test('clock still behind after the wait: CLOCK_BACKWARDS', async (t) => {
  const { gen, time } = generator({ sleep: async () => {} }) // sleeping does not move this clock
  gen.next()
  time.now -= 2
  await t.rejects(Promise.resolve(gen.next()), new LeafError('CLOCK_BACKWARDS', 'The clock is 2 ms behind the last ID issued; no ID until it catches up.'))
})

t.test('clock behind by more than 5 ms: CLOCK_BACKWARDS at once, and reported', async (t) => {
  const offsets: number[] = []
  listen(t, channels.clockBackwards, (m) => offsets.push(m.aheadMs))
  const { gen, time } = generator()
  gen.next()
  time.now -= 6
  await t.rejects(Promise.resolve(gen.next()), { code: 'CLOCK_BACKWARDS' })
  t.same(time.slept, [], 'no wait')
  t.same(offsets, [6])
  time.now += 6
  t.type(gen.next(), 'bigint', 'serves again once the clock is back')
})

t.test('restart window: no ID for a millisecond before notBefore; callers wait', async (t) => {
  const { gen, time } = generator({ notBefore: T0 + 2500 })
  const id = await gen.next()
  t.same(time.slept, [2500])
  t.equal(gen.decode(id).timestamp, T0 + 2500)
  const batch = await generator({ notBefore: T0 + 10 }).gen.nextBatch('k', 3)
  t.equal(batch.length, 3)
})

t.test('restart window: a timer that fires a millisecond early is waited out again', async (t) => {
  const f = fakeTime()
  // libuv's clock and Date.now() tick apart: a timer's millisecond can end before the wall clock's.
  const early = async (ms: number) => { f.time.slept.push(ms); f.time.now += Math.max(ms - 1, 1) }
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: early, random: () => 42, notBefore: T0 + 300 })
  const id = await gen.next()
  t.same(f.time.slept, [300, 1], 'slept again for the missing millisecond')
  t.equal(gen.decode(id).timestamp, T0 + 300)
})

t.test('restart window: a clock that never gets there is refused with how far it is behind', async (t) => {
  const f = fakeTime()
  const stuck = async (ms: number) => { f.time.slept.push(ms) }
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: stuck, notBefore: T0 + 40 })
  await t.rejects(Promise.resolve(gen.next()), { code: 'CLOCK_BACKWARDS', message: /The clock is 40 ms behind/ })
  t.same(f.time.slept, [40, 40, 40], 'a bounded number of waits')
})

t.test('restart window: a clock that reaches the window between two reads is served, not reported as backwards', async (t) => {
  const reads = [T0 + 99, T0 + 100] // the first read is a millisecond short, the next is there
  let i = 0
  const reported: number[] = []
  const gen = createSnowflakeGenerator({ workerId: 7, clock: () => reads[Math.min(i++, reads.length - 1)] as number, random: () => 0, notBefore: T0 + 100 })
  listen(t, channels.clockBackwards, (m) => reported.push(m.aheadMs))
  i = 0 // the constructor read the clock once
  t.equal(gen.decode(await gen.next()).timestamp, T0 + 100)
  t.same(reported, [], 'no clock-backwards report')
})

t.test('restart window: the wait is capped, whatever the clock does meanwhile', async (t) => {
  const far = generator({ notBefore: T0 + 600_000, maxRestartWaitMs: 3000 })
  await t.rejects(Promise.resolve(far.gen.next()), { code: 'CLOCK_BACKWARDS', message: /600000 ms behind/ }, 'a window past the cap: refused at once')
  t.same(far.time.slept, [], 'without sleeping')
  const f = fakeTime()
  // Each sleep ends with the clock stepped back by as much again: the window keeps receding.
  const receding = async (ms: number) => { f.time.slept.push(ms); f.time.now -= ms }
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: receding, notBefore: T0 + 2000, maxRestartWaitMs: 3000 })
  await t.rejects(Promise.resolve(gen.next()), { code: 'CLOCK_BACKWARDS' })
  t.ok(f.time.slept.reduce((a, b) => a + b, 0) <= 3002, `slept ${f.time.slept.join(' + ')} ms in all: within the cap`)
})

t.test('guard: nothing is issued past issuableUntil without extending it first; a refusal stops issuing at once', async (t) => {
  const extended: number[] = []
  const guard = {
    issuableUntil: T0 + 1,
    refuse: false,
    extend (ms: number) {
      if (guard.refuse) throw new LeafError('WORKER_ID_UNAVAILABLE')
      extended.push(ms)
      guard.issuableUntil = ms + 3000
    },
  }
  const { gen, time } = generator({ guard })
  gen.next()
  time.now = T0 + 1
  gen.next()
  t.same(extended, [], 'within the recorded time: no extension')
  time.now = T0 + 2
  t.equal(gen.decode(gen.next() as bigint).timestamp, T0 + 2)
  t.same(extended, [T0 + 2], 'the first millisecond past it was recorded before its ID')
  time.now = T0 + 3003
  gen.nextBatch('k', 10)
  t.same(extended, [T0 + 2, T0 + 3003], 'batches too')
  guard.refuse = true
  guard.issuableUntil = -Infinity
  t.throws(() => gen.next(), { code: 'WORKER_ID_UNAVAILABLE' }, 'same millisecond, but the lease is gone: no ID')
  time.now++
  t.throws(() => gen.nextRanges('k', 5), { code: 'WORKER_ID_UNAVAILABLE' })
})

t.test('guard: the millisecond reached by spinning past a full sequence is recorded too', async (t) => {
  const extended: number[] = []
  const guard = { issuableUntil: T0, extend (ms: number) { extended.push(ms); guard.issuableUntil = ms } }
  const f = fakeTime()
  let reads = 0
  // The clock moves to the next millisecond only after a few reads while the sequence is full.
  const clock = () => (++reads > 4096 + 3 ? T0 + 1 : T0)
  const gen = createSnowflakeGenerator({ workerId: 7, clock, sleep: f.sleep, random: () => 0, guard })
  reads = 0
  const ids = gen.nextBatch('k', 4097) as bigint[]
  t.equal(gen.decode(ids[4096] as bigint).timestamp, T0 + 1)
  t.same(extended, [T0 + 1])
})

t.test('a clock giving fractions of a millisecond is refused, not folded into the worker bits', async (t) => {
  const gen = createSnowflakeGenerator({ workerId: 0, clock: () => T0 + 0.5 })
  t.throws(() => gen.next(), RangeError)
})

t.test('worker ids outside [0, 1023] are refused', async (t) => {
  t.throws(() => createSnowflakeGenerator({ workerId: 1024 }), RangeError)
  t.throws(() => createSnowflakeGenerator({ workerId: -1 }), RangeError)
})

t.test('a real clock: 100,000 IDs, all unique and increasing', async (t) => {
  const gen = createSnowflakeGenerator({ workerId: 5 })
  const ids = await gen.nextBatch('k', 100_000)
  t.equal(ids.length, 100_000, 'as many as asked for')
  t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)), 'each above the last, so none twice')
})

t.test('nextRanges: one range per millisecond, its sequence running up by one', async (t) => {
  let reads = 0
  // 3 IDs per millisecond: the clock moves on every third read.
  const gen = createSnowflakeGenerator({ workerId: 7, clock: () => T0 + Math.floor(reads++ / 3), random: () => 10 })
  reads = 0
  const ranges = gen.nextRanges('k', 7) as { first: bigint, count: number }[]
  t.strictSame(ranges.map((r) => [gen.decode(r.first), r.count]), [
    [{ timestamp: T0, workerId: 7, sequence: 10 }, 3],
    [{ timestamp: T0 + 1, workerId: 7, sequence: 10 }, 3],
    [{ timestamp: T0 + 2, workerId: 7, sequence: 10 }, 1],
  ])
  const wrapped = generator({ random: () => SEQUENCE_MASK - 1 })
  const across = wrapped.gen.nextRanges('k', 2) as { first: bigint, count: number }[]
  t.equal(across.length, 1, 'the last two sequence numbers of a millisecond: one range')
  const behind = generator({ notBefore: T0 + 5 })
  const waited = await behind.gen.nextRanges('k', 3)
  t.strictSame(waited.map((r) => r.count), [1, 2], 'a range closes at a wait: other requests may take IDs meanwhile')
  t.same(expandRanges(waited).map((id) => behind.gen.decode(id as bigint).sequence), [42, 43, 44])
})

t.test('a clock stepping back while the sequence waits for the next millisecond: CLOCK_BACKWARDS, no spin', async (t) => {
  const time = { now: T0 }
  let reads = 0
  // After 4,200 reads the clock steps back 50 ms (an NTP correction during the wait).
  const gen = createSnowflakeGenerator({ workerId: 1, clock: () => (++reads > 4200 ? T0 - 50 : time.now), random: () => 0, sleep: async () => {} })
  const ids = gen.nextBatch('k', 4096) as bigint[]
  t.equal(ids.length, 4096, 'the whole millisecond')
  await t.rejects(Promise.resolve().then(() => gen.nextBatch('k', 200)), { code: 'CLOCK_BACKWARDS' })
})

t.test('a twepoch in the future or over 2^41 ms ago refuses to start', async (t) => {
  t.throws(() => createSnowflakeGenerator({ workerId: 1, twepoch: Date.now() + 60_000 }), { name: 'StartRefused', code: 'LAYOUT_OUT_OF_TIME' })
  t.throws(() => createSnowflakeGenerator({ workerId: 1, twepoch: 0, clock: () => 2 ** 41 }), { name: 'StartRefused', code: 'LAYOUT_OUT_OF_TIME' })
})

t.test('guard check: asked once per new millisecond, before its first ID; a throw stops issuing until it passes again', async (t) => {
  const checked: number[] = []
  let refuse = false
  const guard = {
    issuableUntil: Infinity,
    extend () {},
    check (ms: number) {
      if (refuse) throw new LeafError('WORKER_LEASE_LOST')
      checked.push(ms)
    },
  }
  const { gen, time } = generator({ guard })
  gen.next()
  gen.next()
  gen.nextBatch('k', 10)
  t.same(checked, [T0], 'one check for the 12 IDs of one millisecond')
  time.now++
  gen.next()
  time.now += 5
  t.equal((gen.nextRanges('k', 3) as unknown[]).length, 1)
  t.same(checked, [T0, T0 + 1, T0 + 6])

  refuse = true
  t.equal(gen.decode(gen.next() as bigint).timestamp, T0 + 6, 'the millisecond already admitted goes on')
  time.now++
  t.throws(() => gen.next(), { code: 'WORKER_LEASE_LOST' }, 'a new millisecond is refused')
  t.throws(() => gen.nextBatch('k', 5), { code: 'WORKER_LEASE_LOST' })
  t.throws(() => gen.nextRanges('k', 5), { code: 'WORKER_LEASE_LOST' }, 'every time it is asked')
  t.same(checked, [T0, T0 + 1, T0 + 6], 'nothing admitted meanwhile')
  refuse = false
  const id = gen.next() as bigint
  t.same(gen.decode(id), { timestamp: T0 + 7, workerId: 7, sequence: 42 }, 'issuing again once the check passes')
  t.same(checked.at(-1), T0 + 7)

  // A full sequence spins into the next millisecond: that one is checked too.
  const spun: number[] = []
  let reads = 0
  const full = createSnowflakeGenerator({ workerId: 7, clock: () => (++reads > 4096 + 3 ? T0 + 1 : T0), random: () => 0, guard: { issuableUntil: Infinity, extend () {}, check: (ms) => { spun.push(ms) } } })
  reads = 0
  t.equal((full.nextBatch('k', 4097) as bigint[]).length, 4097)
  t.same(spun, [T0, T0 + 1])
})

t.test('rebind: later IDs carry the new worker id, none before its notBefore, none in a millisecond the old id used', async (t) => {
  const { gen, time } = generator()
  const before = gen.next() as bigint
  t.equal(gen.workerId, 7)
  gen.rebind(9, T0 + 50)
  t.equal(gen.workerId, 9)
  // (This clock moves only by hand: a rebound generator would spin for the next millisecond.)
  time.now++
  const moved = await gen.next()
  t.same(gen.decode(moved), { timestamp: T0 + 50, workerId: 9, sequence: 42 }, 'waited for notBefore')
  t.same(time.slept, [49])
  t.ok(moved > before)

  time.now = T0 + 60
  gen.rebind(10, T0)
  t.same(gen.decode(gen.next() as bigint), { timestamp: T0 + 60, workerId: 10, sequence: 42 }, 'a notBefore already passed: at once')
  gen.rebind(11, T0 + 500)
  gen.rebind(12, T0 + 100)
  time.now++
  const later = await gen.next()
  t.same(gen.decode(later), { timestamp: T0 + 500, workerId: 12, sequence: 42 }, 'notBefore never goes back')

  t.throws(() => gen.rebind(1024, 0), RangeError)
  t.throws(() => gen.rebind(-1, 0), RangeError)
  t.equal(gen.workerId, 12, 'a refused rebind changes nothing')

  // Rebound within a millisecond the old id already issued in: the next ID waits for the next one.
  let reads = 0
  let moving = false
  const clock = () => (moving && ++reads > 3 ? T0 + 1 : T0)
  const same = createSnowflakeGenerator({ workerId: 1, clock, random: () => 0 })
  t.same(same.decode(same.next() as bigint), { timestamp: T0, workerId: 1, sequence: 0 })
  same.rebind(2, 0)
  moving = true
  t.same(same.decode(await same.next()), { timestamp: T0 + 1, workerId: 2, sequence: 0 })
})
