import t from 'tap'
import { LeafError } from '../../src/errors.js'
import { expandRanges } from '../../src/id-range.js'
import type { LayoutContext } from '../../src/layout/layout.js'
import { parseLayout } from '../../src/layout/layout-spec.js'
import { createSnowflakeGenerator, type SnowflakeGenerator } from '../../src/snowflake/snowflake-generator.js'
import type { IssueGuard } from '../../src/snowflake/issue-guard.js'
import { channels } from '../../src/channels.js'
import { listen } from '../helpers/channels.js'

// The generator with borrowed time (leaf.snowflake.borrow-ahead-ms) and with the layouts of
// layout.ts. Every test but the real-clock one runs on a clock moved by hand.

/** 2026-09-21T14:13:20Z: a whole second (…000), after every preset's epoch. */
const T0 = 1_790_000_000_000
/** Leaf's layout: 4096 IDs per millisecond. */
const PER_MS = 4096
/** Leaf's twepoch. */
const TWEPOCH = 1288834974657

/** A clock tests move by hand; `sleep` moves it too (and records each wait), so waits cost no real time. */
function fakeTime (start = T0) {
  const time = { now: start, slept: [] as number[], reads: 0 }
  return {
    time,
    clock: () => { time.reads++; return time.now },
    sleep: async (ms: number) => { time.slept.push(ms); time.now += ms },
    /** A sleep that never moves the clock. */
    stuck: async (ms: number) => { time.slept.push(ms) },
  }
}

function ctx (over: Partial<LayoutContext> = {}): LayoutContext {
  return { twepoch: TWEPOCH, vestaVersion: 0, vestaGenMethod: 2, now: T0, ...over }
}

/** `count` calls of next(), each of which must return a bigint at once (no wait). */
function burst (gen: SnowflakeGenerator, count: number): { ids: bigint[], async: number } {
  const ids: bigint[] = []
  let async = 0
  for (let i = 0; i < count; i++) {
    const id = gen.next()
    if (typeof id === 'bigint') ids.push(id)
    else {
      async++
      id.catch(() => {}) // not awaited: counted as a wait
    }
  }
  return { ids, async }
}

function increasing (ids: readonly bigint[]): boolean {
  return ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint))
}

// --- Borrowed time --------------------------------------------------------------------------------

t.test('borrowing: a burst of 4 x 4096 IDs in one frozen millisecond is served at once, 3 ms ahead', async (t) => {
  const f = fakeTime()
  // Frozen for every read a correct generator makes (one per ID); one that spun would find the
  // clock moving on afterwards (and fail below) rather than hang.
  const frozenReads = 1 + 4 * PER_MS + 10
  const clock = () => { f.time.reads++; return f.time.reads > frozenReads ? T0 + (f.time.reads - frozenReads) : T0 }
  const gen = createSnowflakeGenerator({ workerId: 7, clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 10 })
  t.equal(gen.borrowedMs(), 0, 'nothing borrowed before the first ID')
  f.time.reads = 1 // the constructor and borrowedMs each read it once; count from the constructor
  const { ids, async } = burst(gen, 4 * PER_MS)
  t.equal(async, 0, 'every next() returned a bigint synchronously')
  t.equal(ids.length, 4 * PER_MS)
  t.same(f.time.slept, [], 'sleep never called')
  t.equal(f.time.reads, 1 + 4 * PER_MS, 'one clock read per ID: no spinning')
  t.ok(increasing(ids), 'strictly increasing')
  t.equal(new Set(ids).size, ids.length, 'unique')
  t.equal(gen.borrowedMs(), 3, 'the last ID\'s millisecond is 3 ms ahead of the clock')
  const decoded = ids.map((id) => gen.decode(id))
  for (let ms = 0; ms < 4; ms++) {
    const inMs = decoded.filter((d) => d.timestamp === T0 + ms)
    t.equal(inMs.length, PER_MS, `${PER_MS} IDs in T0 + ${ms}`)
    t.same([inMs[0]?.sequence, inMs.at(-1)?.sequence], [0, 4095], `T0 + ${ms}: sequences 0 to 4095`)
  }
  t.ok(decoded.every((d) => d.workerId === 7))

  // The same through nextBatch: an array at once, one range per millisecond.
  const g = fakeTime()
  const batchGen = createSnowflakeGenerator({ workerId: 7, clock: g.clock, sleep: g.sleep, random: () => 0, borrowAheadMs: 10 })
  const ranges = batchGen.nextRanges('k', 4 * PER_MS)
  t.ok(Array.isArray(ranges), 'nextRanges: no Promise')
  t.same((ranges as { count: number }[]).map((r) => r.count), [PER_MS, PER_MS, PER_MS, PER_MS])
  t.same(expandRanges(ranges as { first: bigint, count: number }[]), ids, 'the same IDs')
})

t.test('no borrowing: the same burst spins on the clock for each new millisecond', async (t) => {
  let reads = 0
  const time = { now: T0 }
  // The clock moves on one millisecond every 5,000 reads.
  const clock = () => (++reads % 5000 === 0 ? ++time.now : time.now)
  const slept: number[] = []
  const gen = createSnowflakeGenerator({ workerId: 7, clock, sleep: async (ms) => { slept.push(ms) }, random: () => 0, borrowAheadMs: 0 })
  reads = 1
  const issuedAt: number[] = []
  const ids: bigint[] = []
  for (let i = 0; i < 4 * PER_MS; i++) {
    ids.push(gen.next() as bigint)
    issuedAt.push(time.now)
  }
  t.ok(increasing(ids))
  t.ok(reads > 3 * 5000, `${reads} clock reads for ${4 * PER_MS} IDs: the generator waited on the clock`)
  t.ok(ids.every((id, i) => gen.decode(id).timestamp <= (issuedAt[i] as number)), 'no ID ahead of the clock')
  t.equal(gen.decode(ids.at(-1) as bigint).timestamp, T0 + 3)
  t.equal(gen.borrowedMs(), 0, 'nothing borrowed')
})

t.test('borrowing: a 2 ms step back of the clock is served at once, IDs still increasing', async (t) => {
  const f = fakeTime()
  const reported: number[] = []
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 10 })
  listen(t, channels.clockBackwards, (m) => reported.push(m.aheadMs))
  const before = burst(gen, 10).ids
  f.time.now -= 2
  const after = burst(gen, 2 * PER_MS)
  t.equal(after.async, 0, 'no next() waited')
  t.same(f.time.slept, [], 'sleep never called')
  t.same(reported, [], 'not reported as a clock going backwards')
  const ids = [...before, ...after.ids]
  t.ok(increasing(ids), 'never backwards')
  t.equal(new Set(ids).size, ids.length)
  t.same(gen.decode(after.ids[0] as bigint), { timestamp: T0, workerId: 7, sequence: 10 }, 'the millisecond already begun goes on')
  t.equal(gen.borrowedMs(), 4, '10 + 8,192 IDs fill T0 and T0 + 1 and begin T0 + 2: 4 ms ahead of T0 - 2')

  // Without borrowing, the same step back is waited out (twice the offset).
  const g = fakeTime()
  const plain = createSnowflakeGenerator({ workerId: 7, clock: g.clock, sleep: g.sleep, random: () => 0 })
  burst(plain, 10)
  g.time.now -= 2
  const waited = plain.next()
  t.ok(waited instanceof Promise, 'without borrowing: a Promise')
  t.same(plain.decode(await waited).timestamp, T0 + 2)
  t.same(g.time.slept, [4])
})

t.test('borrowing: a 50 ms step back still fails with CLOCK_BACKWARDS', async (t) => {
  const f = fakeTime()
  const reported: number[] = []
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 10 })
  listen(t, channels.clockBackwards, (m) => reported.push(m.aheadMs))
  burst(gen, 10)
  f.time.now -= 50
  const r = gen.next()
  t.ok(r instanceof Promise, 'not an ID')
  await t.rejects(Promise.resolve(r), { code: 'CLOCK_BACKWARDS', message: /The clock is 50 ms behind/ })
  t.same(f.time.slept, [], 'refused without waiting')
  t.same(reported, [50])
  // The bound: 10 ms borrowed plus the 5 ms Leaf waits out. 15 ms back is waited (twice the 5 in
  // excess), 16 ms back is refused.
  const edge = (back: number) => {
    const g = fakeTime()
    const gen = createSnowflakeGenerator({ workerId: 7, clock: g.clock, sleep: g.sleep, random: () => 0, borrowAheadMs: 10 })
    burst(gen, 10)
    g.time.now -= back
    return { gen, g, r: Promise.resolve(gen.next()) }
  }
  const fifteen = edge(15)
  t.equal(fifteen.gen.decode(await fifteen.r).timestamp, T0, '15 ms back: served after a wait')
  t.same(fifteen.g.time.slept, [10])
  const sixteen = edge(16)
  await t.rejects(sixteen.r, { code: 'CLOCK_BACKWARDS' }, '16 ms back: refused')
  t.same(sixteen.g.time.slept, [])
})

t.test('borrowing never goes more than borrowAheadMs ahead of the clock', async (t) => {
  const f = fakeTime()
  const gen = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 3 })
  const { ids, async } = burst(gen, 4 * PER_MS)
  t.equal(async, 0, 'T0 to T0 + 3: 4 x 4096 IDs at once')
  t.ok(ids.every((id) => gen.decode(id).timestamp <= f.time.now + 3), 'every ID within the clock + 3 ms')
  t.equal(gen.decode(ids.at(-1) as bigint).timestamp, T0 + 3)
  t.same(f.time.slept, [])
  const next = gen.next()
  t.ok(next instanceof Promise, 'the 4 x 4096 + 1st waits: T0 + 4 is 4 ms ahead')
  const id = await next
  t.same(f.time.slept, [1], 'for one millisecond')
  t.equal(f.time.now, T0 + 1)
  t.same(gen.decode(id), { timestamp: T0 + 4, workerId: 7, sequence: 0 })
  t.ok(gen.decode(id).timestamp <= f.time.now + 3, 'within the clock + 3 ms')
  t.ok(id > (ids.at(-1) as bigint))

  // A clock that never moves: the wait ends in SEQUENCE_EXHAUSTED, not an ID 4 ms ahead.
  const g = fakeTime()
  const frozen = createSnowflakeGenerator({ workerId: 7, clock: g.clock, sleep: g.stuck, random: () => 0, borrowAheadMs: 3 })
  t.equal(burst(frozen, 4 * PER_MS).async, 0)
  const refused = frozen.next()
  t.ok(refused instanceof Promise)
  await t.rejects(Promise.resolve(refused), { code: 'SEQUENCE_EXHAUSTED' })
  t.ok(g.time.slept.length >= 1 && g.time.slept.length <= 4, `a bounded number of waits (${g.time.slept.join(', ')} ms)`)
  t.equal(frozen.borrowedMs(), 3, 'still 3 ms ahead, no more')
})

t.test('borrowing at its bound spins out the clock\'s next millisecond, as Leaf does without borrowing, instead of sleeping', async (t) => {
  const f = fakeTime()
  // A clock that moves a millisecond every 6,000 reads: slower than the sequence is used (a read
  // an ID), so the generator reaches its bound, where it spins some 2,000 reads a millisecond.
  // The spin's real-time bound never runs out here: a test process preempted mid-spin (tap runs
  // files in parallel) must not turn it into a wait.
  const moving = () => { if (f.time.reads % 6_000 === 5_999) f.time.now++; return f.clock() }
  const gen = createSnowflakeGenerator({ workerId: 7, clock: moving, sleep: f.sleep, spinClock: () => 0, random: () => 0, borrowAheadMs: 3 })
  const ids: bigint[] = []
  const ahead: number[] = []
  for (let i = 0; i < 24 * PER_MS; i++) {
    const id = gen.next()
    if (typeof id !== 'bigint') return t.fail(`ID ${i} waited for a timer`)
    ids.push(id)
    ahead.push(gen.decode(id).timestamp - f.time.now)
  }
  t.same(f.time.slept, [], 'twenty-four milliseconds of sequence, no sleep')
  t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)), 'increasing')
  t.equal(Math.max(...ahead), 3, 'at the bound (3 ms ahead), never past it')
  t.ok(ahead.filter((a) => a === 3).length > PER_MS, 'and held there while the clock moved on')
})

t.test('a restart after borrowing never issues below the borrowed time', async (t) => {
  /**
   * A guard as the lease is: extend(ms) records ms, and allows IDs up to ms + window; a restart
   * waits past what was allowed (heartbeat-lease-options.ts restartWindow: recorded + window + 1).
   */
  function recordingGuard (window: number) {
    const guard = {
      recorded: 0,
      issuableUntil: 0,
      extended: [] as number[],
      extend (ms: number) {
        guard.extended.push(ms)
        guard.recorded = Math.max(guard.recorded, ms)
        guard.issuableUntil = ms + window
      },
    }
    return guard
  }
  for (const window of [0, 100]) {
    const f = fakeTime()
    const guard = recordingGuard(window)
    const first = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 10, guard })
    const ids: bigint[] = []
    const allowed: boolean[] = []
    for (let i = 0; i < 4 * PER_MS; i++) {
      const id = first.next() as bigint
      ids.push(id)
      // Leaf's unit is a millisecond: the ID's millisecond must be allowed once it is issued.
      allowed.push(first.decode(id).timestamp <= guard.issuableUntil)
    }
    const lastBorrowed = first.decode(ids.at(-1) as bigint).timestamp
    t.equal(lastBorrowed, T0 + 3, `window ${window}: borrowed up to T0 + 3`)
    t.ok(allowed.every(Boolean), `window ${window}: every ID's millisecond was recorded (or within the window) before it was issued`)
    if (window === 0) {
      t.same(guard.extended, [T0, T0 + 1, T0 + 2, T0 + 3], 'extend was called with each borrowed millisecond')
      t.ok(guard.recorded >= lastBorrowed, 'recorded >= the last borrowed ID\'s timestamp')
    }
    // The restart: same clock (still T0), the lease's window.
    const notBefore = guard.recorded + window + 1
    const second = createSnowflakeGenerator({ workerId: 7, clock: f.clock, sleep: f.sleep, random: () => 0, borrowAheadMs: 10, notBefore, guard: recordingGuard(window) })
    const r = second.next()
    const id = await r
    const ts = second.decode(id).timestamp
    t.ok(ids.every((prev) => first.decode(prev).timestamp < ts), `window ${window}: the restart's first ID (${ts - T0} ms past T0) is past every ID of the first life`)
    t.ok(id > (ids.at(-1) as bigint))
    if (window === 0) {
      t.equal(typeof r, 'bigint', 'borrowing into the restart window: at once')
      t.equal(ts, T0 + 4)
    }
  }
})

// --- Layouts in the generator ---------------------------------------------------------------------

t.test('vesta-max-peak: seconds, machine in the lowest bits; IDs of one second are not consecutive', async (t) => {
  const layout = parseLayout('vesta-max-peak', ctx())
  const f = fakeTime(T0 + 250)
  const seen: number[] = []
  const gen = createSnowflakeGenerator({ workerId: 1021, layout, clock: f.clock, sleep: f.sleep, random: (n) => { seen.push(n); return 7 } })
  const { ids, async } = burst(gen, 1000)
  t.equal(async, 0)
  t.ok(increasing(ids), 'increasing')
  t.equal(new Set(ids).size, 1000, 'unique')
  // Vesta: 2 << 60 (genMethod 2) | (T0 - 1420041600000) / 1000 << 30 | seq << 10 | machine
  const time = BigInt((T0 - 1420041600000) / 1000)
  const vesta = (seq: number) => (2n << 60n) | (time << 30n) | (BigInt(seq) << 10n) | 1021n
  t.equal(ids[0], vesta(0), 'the first ID: sequence 0, Vesta\'s formula')
  t.equal(ids[999], vesta(999))
  t.ok(ids.every((id, i) => i === 0 || id - (ids[i - 1] as bigint) === 1024n), 'one second\'s IDs are 1024 apart')
  t.same(ids.map((id) => gen.decode(id)).slice(0, 3), [
    { timestamp: T0, workerId: 1021, sequence: 0 },
    { timestamp: T0, workerId: 1021, sequence: 1 },
    { timestamp: T0, workerId: 1021, sequence: 2 },
  ], 'decode: the second, the 10-bit worker id, the sequence')
  t.same(seen, [], 'random never called: the sequence starts at 0')
  const ranges = gen.nextRanges('k', 5)
  t.ok(Array.isArray(ranges))
  t.same((ranges as { count: number }[]).map((r) => r.count), [1, 1, 1, 1, 1], '5 ranges of one ID')
  const expanded = expandRanges(ranges as { first: bigint, count: number }[])
  t.same(expanded, [1000, 1001, 1002, 1003, 1004].map(vesta), 'expandRanges gives the IDs')
  t.same(gen.nextBatch('k', 3), [1005, 1006, 1007].map(vesta), 'nextBatch too')
  f.time.now += 1000
  const nextSecond = gen.next() as bigint
  t.same(gen.decode(nextSecond), { timestamp: T0 + 1000, workerId: 1021, sequence: 0 }, 'the next second starts again at 0')
  t.same(seen, [])
})

t.test('a seconds layout with its sequence used up waits for the next second (a sleep, not a spin)', async (t) => {
  // 8 IDs per second; an epoch on a whole second so seconds begin at …000.
  const layout = parseLayout('time=31s,worker=8,sequence=3,epoch=1700000000000', ctx())
  t.equal(layout.maxSequence, 7)
  const f = fakeTime(T0 + 250)
  const gen = createSnowflakeGenerator({ workerId: 200, layout, clock: f.clock, sleep: f.sleep, random: () => 0 })
  const { ids, async } = burst(gen, 8)
  t.equal(async, 0, '8 IDs at once')
  t.ok(ids.every((id) => gen.decode(id).timestamp === T0))
  const readsBefore = f.time.reads
  const ninth = gen.next()
  t.ok(ninth instanceof Promise, 'the 9th: a Promise')
  const id = await ninth
  t.same(f.time.slept, [750], 'slept the 750 ms left until the next second')
  t.ok(f.time.reads - readsBefore < 20, `${f.time.reads - readsBefore} clock reads: no spinning`)
  t.same(gen.decode(id), { timestamp: T0 + 1000, workerId: 200, sequence: 0 }, 'an ID of the next second')
  // 31 bits of seconds << 11 | 200 << 3 | 0, by hand
  t.equal(id, (BigInt((T0 + 1000 - 1700000000000) / 1000) << 11n) | (200n << 3n))
  t.ok(id > (ids.at(-1) as bigint))

  // A clock that never moves: SEQUENCE_EXHAUSTED after a few waits.
  const g = fakeTime(T0 + 250)
  const frozen = createSnowflakeGenerator({ workerId: 200, layout, clock: g.clock, sleep: g.stuck, random: () => 0 })
  t.equal(burst(frozen, 8).async, 0)
  const refused = frozen.next()
  t.ok(refused instanceof Promise)
  let error: unknown
  try {
    await refused
  } catch (e) {
    error = e
  }
  t.ok(error instanceof LeafError, `a LeafError (${String(error)})`)
  t.equal((error as LeafError).code, 'SEQUENCE_EXHAUSTED')
  t.match((error as LeafError).message, /Every ID of this second for worker id 200 is issued/)
  t.ok(g.time.slept.length >= 1 && g.time.slept.length <= 4 && g.time.slept.every((ms) => ms === 750), `bounded waits for the next second (${g.time.slept.join(', ')})`)
  g.time.now += 750
  t.same(frozen.decode(frozen.next() as bigint), { timestamp: T0 + 1000, workerId: 200, sequence: 0 }, 'served again once the second turns')
})

t.test('a seconds layout records the LAST millisecond of its second with the guard', async (t) => {
  for (const spec of ['vesta-max-peak', 'time=31s,worker=8,sequence=3,epoch=1700000000000']) {
    const layout = parseLayout(spec, ctx())
    const extended: number[] = []
    const checked: number[] = []
    const guard: IssueGuard & { issuableUntil: number } = {
      issuableUntil: 0,
      extend (ms) { extended.push(ms); guard.issuableUntil = ms },
      check (ms) { checked.push(ms) },
    }
    const f = fakeTime(T0 + 250)
    const gen = createSnowflakeGenerator({ workerId: 3, layout, clock: f.clock, sleep: f.sleep, random: () => 0, guard })
    burst(gen, 5)
    t.same(extended, [T0 + 999], `${spec}: extended once, with the second's last millisecond`)
    t.same(checked, [T0 + 999], `${spec}: checked with it too`)
    f.time.now = T0 + 1400
    gen.next()
    t.same(extended, [T0 + 999, T0 + 1999], `${spec}: the next second: ${T0 + 1999 - T0}`)
    t.same(checked, [T0 + 999, T0 + 1999])
  }
})

t.test('the sequence starts at 0 for non-leaf layouts (random not called), at random(100) for leaf', async (t) => {
  const layouts = [
    parseLayout('js-safe', ctx()),
    parseLayout('vesta-max-peak', ctx()),
    parseLayout('vesta-min-granularity', ctx()),
    parseLayout('time=41ms,worker=10,sequence=12', ctx()),
    parseLayout('uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00', ctx()),
  ]
  for (const layout of layouts) {
    const asked: number[] = []
    const f = fakeTime()
    const gen = createSnowflakeGenerator({ workerId: 1, layout, clock: f.clock, sleep: f.sleep, random: (n) => { asked.push(n); return 37 } })
    t.equal(gen.decode(gen.next() as bigint).sequence, 0, `${layout.spec}: the first sequence is 0`)
    f.time.now += 1000
    t.equal(gen.decode(gen.next() as bigint).sequence, 0, `${layout.spec}: and the next unit's`)
    t.same(asked, [], `${layout.spec}: random never called`)
  }
  const asked: number[] = []
  const f = fakeTime()
  const leaf = createSnowflakeGenerator({ workerId: 1, layout: parseLayout('leaf', ctx()), clock: f.clock, sleep: f.sleep, random: (n) => { asked.push(n); return 37 } })
  t.equal(leaf.decode(leaf.next() as bigint).sequence, 37, 'leaf: random(100)')
  f.time.now++
  t.equal(leaf.decode(leaf.next() as bigint).sequence, 37)
  t.same(asked, [100, 100], 'leaf: asked for a value below 100 once per millisecond')
})

t.test('a worker id above the layout\'s maximum is refused', async (t) => {
  const jsSafe = parseLayout('js-safe', ctx())
  const f = fakeTime()
  t.throws(() => createSnowflakeGenerator({ workerId: 256, layout: jsSafe, clock: f.clock }), RangeError, 'js-safe: 256 refused')
  t.throws(() => createSnowflakeGenerator({ workerId: 256, layout: jsSafe, clock: f.clock }), /worker id 256 is outside \[0, 255\]/)
  const top = createSnowflakeGenerator({ workerId: 255, layout: jsSafe, clock: f.clock })
  t.equal(top.decode(top.next() as bigint).workerId, 255, 'js-safe: 255 accepted')
  t.throws(() => top.rebind(256, 0), RangeError, 'rebind too')

  const uid = parseLayout('uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00', ctx())
  const big = createSnowflakeGenerator({ workerId: 4194303, layout: uid, clock: f.clock })
  t.same(big.decode(big.next() as bigint), { timestamp: T0, workerId: 4194303, sequence: 0 }, 'uid-generator widths: 4194303 accepted')
  t.throws(() => createSnowflakeGenerator({ workerId: 4194304, layout: uid, clock: f.clock }), RangeError, '4194304 refused')
  // Baidu's defaults (22 worker bits too), on a clock inside their lifetime.
  const baidu = parseLayout('uid-generator', ctx({ now: 1500000000000, minYearsLeft: 0 }))
  const old = createSnowflakeGenerator({ workerId: 4194303, layout: baidu, clock: () => 1500000000000 })
  t.equal(old.decode(old.next() as bigint).workerId, 4194303)
  t.throws(() => createSnowflakeGenerator({ workerId: 4194304, layout: baidu, clock: () => 1500000000000 }), RangeError)
})
