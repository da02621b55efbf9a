import t, { type Test } from 'tap'
import { describeLayout, explainId, fieldProblem, layoutEnd, makeId, msOf, timeOf, type IdFields, type Layout, type LayoutContext } from '../../src/layout/layout.js'
import { LayoutError, parseLayout } from '../../src/layout/layout-spec.js'

// The expected IDs below come from the Java sources' formulas, worked out by hand in the comments
// (and the decimal checked with an arbitrary-precision calculator). None comes from layout.ts.
//   Meituan Leaf: SnowflakeIDGenImpl.get
//   Baidu UidGenerator: BitsAllocator.allocate, DefaultUidGenerator.nextId/parseUID
//     (github.com/baidu/uid-generator at 2fcbc13d2016fcfb7648a18296951f6942215255)
//   Vesta: IdConverterImpl.doConvert (long <- Id and Id <- long), IdMeta, IdMetaFactory, IdType,
//     TimeUtils.EPOCH/genTime, vesta-rest.properties (a copy of robertleepeak/vesta-id-generator,
//     iweisi/vesta-id-generator at 0abb69a8aa42c1dca974dc1923f44cd4b5802502)

/** leaf.snowflake.twepoch (Leaf's twepoch, 2010-11-04T01:42:54.657Z). */
const TWEPOCH = 1288834974657
/** A fixed "today" (2026-12-01T00:00:00Z) so the lifetime checks do not drift with the calendar. */
const NOW = 1796083200000
const YEAR_MS = 365.25 * 24 * 3600 * 1000
/** Within UidGenerator's default lifetime (2017-07-14T02:40:00Z), as the Baidu arithmetic needs. */
const BAIDU_NOW = 1500000000000
/**
 * Baidu's defaults last 8.5 years from any epoch, so parseLayout refuses them even inside their
 * lifetime (the 10-years-left rule); the tests of their arithmetic lift the rule (minYearsLeft 0).
 */
const BAIDU = { now: BAIDU_NOW, minYearsLeft: 0 }

/** Vesta's REST server defaults: vesta.genMethod=2 (vesta-rest.properties), version 0 (the field's default). */
function ctx (over: Partial<LayoutContext> = {}): LayoutContext {
  return { twepoch: TWEPOCH, vestaVersion: 0, vestaGenMethod: 2, now: NOW, ...over }
}

/** What every field of a layout should be: [name, bits, lowest bit, fixed value?], from the top. */
type Shape = [string, number, number, number?][]
function shapeOf (layout: Layout): Shape {
  return layout.fields.map((f) => f.value === undefined ? [f.name, f.bits, f.shift] : [f.name, f.bits, f.shift, f.value])
}

interface Vector {
  what: string
  fields: IdFields
  id: bigint
}

/**
 * makeId gives the literal, and explainId gives the fields back, with the timestamp computed here
 * from the source's epoch and unit (not from the layout), plus Vesta's fixed fields.
 */
function checkVectors (t: Test, layout: Layout, source: { epoch: number, unitMs: number, fixed?: { version: number, type: number, genMethod: number } }, vectors: Vector[]) {
  for (const v of vectors) {
    t.equal(makeId(layout, v.fields), v.id, `makeId ${layout.name}: ${v.what}`)
    t.strictSame(explainId(layout, v.id), { ...v.fields, timestamp: source.epoch + v.fields.time * source.unitMs, ...source.fixed }, `explainId ${layout.name}: ${v.what}`)
    t.equal(fieldProblem(layout, v.fields), undefined, `every field of ${v.what} is in range`)
  }
}

t.test('leaf: Meituan Leaf\'s arithmetic', async (t) => {
  const layout = parseLayout('leaf', ctx())
  t.strictSame(shapeOf(layout), [['time', 41, 22], ['worker', 10, 12], ['sequence', 12, 0]])
  t.equal(layout.epoch, 1288834974657)
  t.equal(layout.unit, 'ms')
  t.equal(layout.maxTime, 2199023255551, '2^41 - 1')
  t.equal(layout.maxWorkerId, 1023, '2^10 - 1')
  t.equal(layout.maxSequence, 4095, '2^12 - 1')
  t.equal(layout.randomSequenceStart, true, 'Leaf starts each millisecond at a random sequence below 100')
  t.equal(layout.fixedBits, 0n)
  t.equal(layout.spec, 'leaf')
  t.equal(parseLayout('leaf', ctx({ twepoch: 1500000000000 })).epoch, 1500000000000, 'the leaf epoch is leaf.snowflake.twepoch')
  t.equal(parseLayout('', ctx()).signature, layout.signature, 'an empty spec is leaf')
  // Leaf SnowflakeIDGenImpl.get: (timestamp - twepoch) << timestampLeftShift | workerId << workerIdShift | sequence,
  // with workerIdBits 10 and sequenceBits 12: workerIdShift = 12, timestampLeftShift = 10 + 12 = 22.
  checkVectors(t, layout, { epoch: 1288834974657, unitMs: 1 }, [
    // time 0 (timestamp = twepoch): 0 << 22 | 1023 << 12 | 0 = 1023 * 4096 = 4190208
    { what: 'time 0, the largest worker id', fields: { time: 0, workerId: 1023, sequence: 0 }, id: 4190208n },
    // 0 << 22 | 0 << 12 | 4095 = 4095
    { what: 'time 0, the largest sequence', fields: { time: 0, workerId: 0, sequence: 4095 }, id: 4095n },
    // maxTime: (2^41 - 1) << 22 = 2^63 - 2^22 = 9223372036854775808 - 4194304 = 9223372036850581504
    // (timestamp 1288834974657 + 2199023255551 = 3487858230208, 2080-07-10T17:30:30.208Z)
    { what: 'the last time', fields: { time: 2199023255551, workerId: 0, sequence: 0 }, id: 9223372036850581504n },
    // (2^63 - 2^22) | (2^22 - 2^12) | (2^12 - 1) = 2^63 - 1 = 9223372036854775807
    { what: 'the last time, the largest worker id and sequence', fields: { time: 2199023255551, workerId: 1023, sequence: 4095 }, id: 9223372036854775807n },
    // at 2026-12-01T00:00:00Z, worker 7, sequence 42: 1796083200000 - 1288834974657 = 507248225343;
    // 507248225343 * 2^22 = 2127553260549046272; | 7 * 4096 = 28672; | 42  ->  2127553260549074986
    { what: 'worker 7, sequence 42 at 2026-12-01', fields: { time: 507248225343, workerId: 7, sequence: 42 }, id: 2127553260549074986n },
  ])
  t.equal(msOf(layout, 507248225343), 1796083200000)
  t.equal(timeOf(layout, 1796083200000), 507248225343)
  t.equal(layoutEnd(layout), 3487858230209, 'twepoch + 2^41 ms: the first millisecond 41 bits cannot hold')
})

t.test('js-safe: 40 bits of ms, 8 of worker, 5 of sequence, at most 2^53 - 1', async (t) => {
  const layout = parseLayout('js-safe', ctx())
  t.strictSame(shapeOf(layout), [['time', 40, 13], ['worker', 8, 5], ['sequence', 5, 0]])
  t.equal(layout.epoch, 1767225600000, '2026-01-01T00:00:00Z')
  t.equal(layout.unit, 'ms')
  t.equal(layout.bits, 53)
  t.equal(layout.randomSequenceStart, false)
  // Leaf's formula with these widths: time << (8 + 5) | worker << 5 | sequence
  checkVectors(t, layout, { epoch: 1767225600000, unitMs: 1 }, [
    // 0 << 13 | 255 << 5 | 0 = 255 * 32 = 8160
    { what: 'time 0, the largest worker id', fields: { time: 0, workerId: 255, sequence: 0 }, id: 8160n },
    // 0 | 0 | 31 = 31
    { what: 'time 0, the largest sequence', fields: { time: 0, workerId: 0, sequence: 31 }, id: 31n },
    // (2^40 - 1) << 13 = 2^53 - 2^13 = 9007199254740992 - 8192 = 9007199254732800
    // (timestamp 1767225600000 + 1099511627775 = 2866737227775, 2060-11-03T19:53:47.775Z)
    { what: 'the last time', fields: { time: 1099511627775, workerId: 0, sequence: 0 }, id: 9007199254732800n },
    // (2^53 - 2^13) | (2^13 - 2^5) | (2^5 - 1) = 2^53 - 1 = 9007199254740991
    { what: 'the last time, the largest worker id and sequence', fields: { time: 1099511627775, workerId: 255, sequence: 31 }, id: 9007199254740991n },
    // 2026-12-01Z: 1796083200000 - 1767225600000 = 28857600000; * 8192 = 236401459200000;
    // | 200 * 32 = 6400; | 17  ->  236401459206417
    { what: 'worker 200, sequence 17 at 2026-12-01', fields: { time: 28857600000, workerId: 200, sequence: 17 }, id: 236401459206417n },
  ])
})

t.test('js-safe: every ID up to its end is a safe JavaScript number, for 30 years, 256 workers, 8,192 IDs/s each', async (t) => {
  const layout = parseLayout('js-safe', ctx())
  const largest = makeId(layout, { time: layout.maxTime, workerId: layout.maxWorkerId, sequence: layout.maxSequence })
  t.ok(largest <= BigInt(Number.MAX_SAFE_INTEGER), `the largest ID ${largest} <= 2^53 - 1`)
  t.equal(largest, 9007199254740991n, 'and uses all 53 bits')
  t.equal(fieldProblem(layout, { time: layout.maxTime, workerId: layout.maxWorkerId, sequence: layout.maxSequence }), undefined, 'that ID is one the layout makes')
  t.equal(timeOf(layout, layoutEnd(layout) - 1), layout.maxTime, 'the last millisecond before layoutEnd holds the largest time')
  t.ok(layoutEnd(layout) - layout.epoch >= 30 * YEAR_MS, `${((layoutEnd(layout) - layout.epoch) / YEAR_MS).toFixed(1)} years from its epoch`)
  const d = describeLayout(layout)
  t.ok((d.maxWorkerId as number) + 1 >= 256, `${(d.maxWorkerId as number) + 1} worker ids`)
  t.ok((d.idsPerSecondPerWorker as number) >= 8192, `${d.idsPerSecondPerWorker as number} IDs per second per worker`)
  t.equal(d.idsPerSecondPerWorker, 32000, '32 per ms')
  t.equal(d.jsSafe, true)
  t.equal(d.bits, 53)
  t.equal(d.runsOutAt, '2060-11-03T19:53:47.776Z')
})

t.test('uid-generator: Baidu DefaultUidGenerator\'s arithmetic (28 s / 22 / 13, epoch 2016-05-20 +08:00)', async (t) => {
  // Parsed at a time inside its lifetime (2016-05-20 to 2024-11-20), without the 10-years-left rule:
  // today it has run out, and it never had 10 years left (see 'parseLayout: at least 10 years left').
  const layout = parseLayout('uid-generator', ctx(BAIDU))
  t.strictSame(shapeOf(layout), [['time', 28, 35], ['worker', 22, 13], ['sequence', 13, 0]])
  t.equal(layout.epoch, 1463673600000, 'epochSeconds = toSeconds(1463673600000)')
  t.equal(layout.unit, 's')
  t.equal(layout.bits, 63, '1 sign bit + 63')
  // BitsAllocator.allocate: deltaSeconds << timestampShift | workerId << workerIdShift | sequence, with
  // timestampShift = workerBits + seqBits = 22 + 13 = 35 and workerIdShift = seqBits = 13.
  // parseUID: sequence = low 13 bits, workerId = the next 22, deltaSeconds = uid >>> 35;
  // its time = (epochSeconds + deltaSeconds) * 1000.
  checkVectors(t, layout, { epoch: 1463673600 * 1000, unitMs: 1000 }, [
    // 0 << 35 | (2^22 - 1) << 13 | 0 = 4194303 * 8192 = 34359730176
    { what: 'delta 0, the largest worker id', fields: { time: 0, workerId: 4194303, sequence: 0 }, id: 34359730176n },
    // 0 | 0 | 2^13 - 1 = 8191
    { what: 'delta 0, the largest sequence', fields: { time: 0, workerId: 0, sequence: 8191 }, id: 8191n },
    // maxDeltaSeconds = ~(-1L << 28) = 2^28 - 1 = 268435455; << 35 = 2^63 - 2^35 = 9223372036854775808 - 34359738368
    // = 9223372002495037440 (time (1463673600 + 268435455) * 1000 = 1732109055000, 2024-11-20 21:24:15 +08:00)
    { what: 'the last second', fields: { time: 268435455, workerId: 0, sequence: 0 }, id: 9223372002495037440n },
    // (2^63 - 2^35) | (2^35 - 2^13) | (2^13 - 1) = 2^63 - 1 = 9223372036854775807
    { what: 'the last second, the largest worker id and sequence', fields: { time: 268435455, workerId: 4194303, sequence: 8191 }, id: 9223372036854775807n },
    // nextId at currentTimeMillis 1500000000000: currentSecond 1500000000 - epochSeconds 1463673600 = 36326400;
    // 36326400 << 35 = 1248165599851315200; | 1234 << 13 = 10108928; | 5  ->  1248165599861424133
    { what: 'worker 1234, sequence 5 at 2017-07-14T02:40:00Z', fields: { time: 36326400, workerId: 1234, sequence: 5 }, id: 1248165599861424133n },
  ])
  // The javadoc: "Supports about 8.7 years until to 2024-11-20 21:24:16" (+08:00).
  t.equal(layoutEnd(layout), 1732109056000, '1463673600000 + 2^28 * 1000 = 2024-11-20T13:24:16Z')
  t.equal(timeOf(layout, 1500000000999), 36326400, 'a time in seconds rounds down')
  t.equal(msOf(layout, 36326400), 1500000000000)
})

t.test('uid-generator with Baidu\'s bit overrides (timeBits 31, workerBits 23, seqBits 9)', async (t) => {
  const layout = parseLayout('uid-generator,time=31s,worker=23,sequence=9', ctx())
  t.strictSame(shapeOf(layout), [['time', 31, 32], ['worker', 23, 9], ['sequence', 9, 0]])
  t.equal(layout.epoch, 1463673600000)
  t.equal(layout.unit, 's', 'the preset\'s unit stays')
  // BitsAllocator.allocate with timestampShift = 23 + 9 = 32, workerIdShift = 9
  checkVectors(t, layout, { epoch: 1463673600000, unitMs: 1000 }, [
    // (2^23 - 1) << 9 = 8388607 * 512 = 4294966784
    { what: 'delta 0, the largest worker id', fields: { time: 0, workerId: 8388607, sequence: 0 }, id: 4294966784n },
    // 2^9 - 1 = 511
    { what: 'delta 0, the largest sequence', fields: { time: 0, workerId: 0, sequence: 511 }, id: 511n },
    // (2^31 - 1) << 32 = 2^63 - 2^32 = 9223372036854775808 - 4294967296 = 9223372032559808512
    { what: 'the last second', fields: { time: 2147483647, workerId: 0, sequence: 0 }, id: 9223372032559808512n },
    // (2^63 - 2^32) | (2^32 - 2^9) | (2^9 - 1) = 2^63 - 1
    { what: 'the last second, the largest worker id and sequence', fields: { time: 2147483647, workerId: 8388607, sequence: 511 }, id: 9223372036854775807n },
    // 2026-12-01Z: 1796083200 - 1463673600 = 332409600; * 2^32 = 1427688360876441600; | 3 * 512 = 1536; | 9
    // ->  1427688360876443145
    { what: 'worker 3, sequence 9 at 2026-12-01', fields: { time: 332409600, workerId: 3, sequence: 9 }, id: 1427688360876443145n },
  ])
})

// Vesta IdMeta(machineBits, seqBits, timeBits, genMethodBits, typeBits, versionBits): machine from bit 0,
// seq from machineBits, time from machineBits + seqBits, genMethod, type and version above it.
// IdConverterImpl.doConvert (Id -> long): machine | seq << seqStart | time << timeStart
//   | genMethod << genMethodStart | type << typeStart | version << versionStart, in a Java long;
// (long -> Id): each field is (id >>> start) & ((1 << bits) - 1).
// TimeUtils: EPOCH = 1420041600000 (2015-01-01 00:00 +08:00); genTime is (now - EPOCH) / 1000 for
// max-peak and now - EPOCH for min-granularity; IdType.value(): max-peak 0, min-granularity 1.

t.test('vesta-max-peak: IdMeta(10, 20, 30, 2, 1, 1), seconds, type 0', async (t) => {
  const layout = parseLayout('vesta-max-peak', ctx())
  t.strictSame(shapeOf(layout), [['version', 1, 63, 0], ['type', 1, 62, 0], ['genMethod', 2, 60, 2], ['time', 30, 30], ['sequence', 20, 10], ['worker', 10, 0]])
  t.equal(layout.epoch, 1420041600000)
  t.equal(layout.unit, 's')
  t.equal(layout.bits, 64)
  // seqStart 10, timeStart 10 + 20 = 30, genMethodStart 30 + 30 = 60, typeStart 62, versionStart 63.
  // Vesta's REST defaults: version 0, type 0, genMethod 2, so every ID carries 2 << 60 = 2305843009213693952.
  t.equal(layout.fixedBits, 2305843009213693952n)
  const fixed = { version: 0, type: 0, genMethod: 2 }
  checkVectors(t, layout, { epoch: 1420041600000, unitMs: 1000, fixed }, [
    // 2 << 60 | 0 << 30 | 0 << 10 | 1023 = 2305843009213693952 + 1023 = 2305843009213694975
    { what: 'time 0, the largest machine', fields: { time: 0, workerId: 1023, sequence: 0 }, id: 2305843009213694975n },
    // 2 << 60 | (2^20 - 1) << 10 = 2305843009213693952 + 1048575 * 1024 (1073740800) = 2305843010287434752
    { what: 'time 0, the largest seq', fields: { time: 0, workerId: 0, sequence: 1048575 }, id: 2305843010287434752n },
    // 2 << 60 | (2^30 - 1) << 30 = 2305843009213693952 + (2^60 - 2^30 = 1152921503533105152) = 3458764512746799104
    // (timestamp 1420041600000 + 1073741823 * 1000 = 2493783423000, 2049-01-09T05:37:03Z)
    { what: 'the last time', fields: { time: 1073741823, workerId: 0, sequence: 0 }, id: 3458764512746799104n },
    // 2 << 60 | (2^60 - 1) = 2^61 + 2^60 - 1 = 3458764513820540927
    { what: 'the last time, the largest machine and seq', fields: { time: 1073741823, workerId: 1023, sequence: 1048575 }, id: 3458764513820540927n },
    // the REST server (vesta.machine=1021, vesta.genMethod=2) at 2026-12-01Z, seq 5:
    // time = (1796083200000 - 1420041600000) / 1000 = 376041600; << 30 = 403771593483878400;
    // 2305843009213693952 + 403771593483878400 + 5 << 10 (5120) + 1021 = 2709614602697578493
    { what: 'REST default (genMethod 2, version 0), machine 1021, seq 5 at 2026-12-01', fields: { time: 376041600, workerId: 1021, sequence: 5 }, id: 2709614602697578493n },
  ])

  // version 1: bit 63 set, so the Java long is negative: 2^63 + 2709614602697578493 = 11932986639552354301
  // unsigned, - 2^64 = -6513757434157197315.
  const v1 = parseLayout('vesta-max-peak', ctx({ vestaVersion: 1 }))
  t.equal(v1.fixedBits, -6917529027641081856n, '1 << 63 | 2 << 60 as a Java long: -2^63 + 2^61')
  const id = makeId(v1, { time: 376041600, workerId: 1021, sequence: 5 })
  t.equal(id, -6513757434157197315n, 'version 1: the negative signed 64-bit value')
  t.ok(id < 0n)
  t.strictSame(explainId(v1, -6513757434157197315n), { version: 1, type: 0, genMethod: 2, time: 376041600, timestamp: 1796083200000, workerId: 1021, sequence: 5 })
  t.strictSame(explainId(v1, 11932986639552354301n), explainId(v1, -6513757434157197315n), 'the unsigned spelling of the same 64 bits reads the same')
})

t.test('vesta-min-granularity: IdMeta(10, 10, 40, 2, 1, 1), milliseconds, type 1', async (t) => {
  const layout = parseLayout('vesta-min-granularity', ctx())
  t.strictSame(shapeOf(layout), [['version', 1, 63, 0], ['type', 1, 62, 1], ['genMethod', 2, 60, 2], ['time', 40, 20], ['sequence', 10, 10], ['worker', 10, 0]])
  t.equal(layout.epoch, 1420041600000)
  t.equal(layout.unit, 'ms')
  // seqStart 10, timeStart 20, genMethodStart 60, typeStart 62, versionStart 63.
  // type 1 << 62 | genMethod 2 << 60 = 4611686018427387904 + 2305843009213693952 = 6917529027641081856
  t.equal(layout.fixedBits, 6917529027641081856n)
  const fixed = { version: 0, type: 1, genMethod: 2 }
  checkVectors(t, layout, { epoch: 1420041600000, unitMs: 1, fixed }, [
    // 6917529027641081856 + 1023 = 6917529027641082879
    { what: 'time 0, the largest machine', fields: { time: 0, workerId: 1023, sequence: 0 }, id: 6917529027641082879n },
    // 6917529027641081856 + 1023 << 10 (1047552) = 6917529027642129408
    { what: 'time 0, the largest seq', fields: { time: 0, workerId: 0, sequence: 1023 }, id: 6917529027642129408n },
    // 6917529027641081856 + (2^40 - 1) << 20 (2^60 - 2^20 = 1152921504605798400) = 8070450532246880256
    // (timestamp 1420041600000 + 1099511627775 = 2519553227775, 2049-11-03T11:53:47.775Z)
    { what: 'the last time', fields: { time: 1099511627775, workerId: 0, sequence: 0 }, id: 8070450532246880256n },
    // 6917529027641081856 + 2^60 - 1 = 8070450532247928831
    { what: 'the last time, the largest machine and seq', fields: { time: 1099511627775, workerId: 1023, sequence: 1023 }, id: 8070450532247928831n },
    // 2026-12-01Z: time = 1796083200000 - 1420041600000 = 376041600000 ms; << 20 = 394308196761600000;
    // 6917529027641081856 + 394308196761600000 + 7 << 10 (7168) + 1021 = 7311837224402690045
    { what: 'genMethod 2, version 0, machine 1021, seq 7 at 2026-12-01', fields: { time: 376041600000, workerId: 1021, sequence: 7 }, id: 7311837224402690045n },
  ])
  // version 1: 7311837224402690045 + 2^63 - 2^64 = 7311837224402690045 - 9223372036854775808 = -1911534812452085763
  const v1 = parseLayout('vesta-min-granularity', ctx({ vestaVersion: 1 }))
  t.equal(v1.fixedBits, -2305843009213693952n, '1 << 63 | 1 << 62 | 2 << 60 as a Java long: -2^63 + 2^62 + 2^61')
  t.equal(makeId(v1, { time: 376041600000, workerId: 1021, sequence: 7 }), -1911534812452085763n, 'version 1: negative as a Java long')
  t.strictSame(explainId(v1, -1911534812452085763n), { version: 1, type: 1, genMethod: 2, time: 376041600000, timestamp: 1796083200000, workerId: 1021, sequence: 7 })
  // genMethod 0 (embedded) and 1 (central server) change only bits 60-61
  t.equal(parseLayout('vesta-min-granularity', ctx({ vestaGenMethod: 1 })).fixedBits, (1n << 62n) | (1n << 60n))
})

// --- Round trips, against an encoder written here from the same formulas --------------------------

/** mulberry32: a seeded PRNG, so a failure can be replayed. */
function prng (seed: number) {
  let a = seed >>> 0
  const u32 = () => {
    a = (a + 0x6D2B79F5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return (x ^ (x >>> 14)) >>> 0
  }
  /** An integer in [0, max], max up to 2^53 - 1. */
  const upTo = (max: number) => Math.floor(((u32() >>> 11) * 2 ** 32 + u32()) / 2 ** 53 * (max + 1))
  const u64 = () => (BigInt(u32()) << 32n) | BigInt(u32())
  return { upTo, u64 }
}

interface Case {
  name: string
  layout: () => Layout
  maxTime: number
  maxWorker: number
  maxSequence: number
  /** The ID from the fields, as the Java source computes it (a signed 64-bit value). */
  encode: (time: bigint, worker: bigint, sequence: bigint) => bigint
  /** The bits time, worker and sequence may take; the rest are the fixed bits. */
  freeMask: bigint
  fixedBits: bigint
}

const vesta = (version: bigint, type: bigint, genMethod: bigint, timeShift: bigint, seqShift: bigint) =>
  (time: bigint, machine: bigint, seq: bigint) => BigInt.asIntN(64, (version << 63n) | (type << 62n) | (genMethod << 60n) | (time << timeShift) | (seq << seqShift) | machine)

const CASES: Case[] = [
  { name: 'leaf', layout: () => parseLayout('leaf', ctx()), maxTime: 2 ** 41 - 1, maxWorker: 1023, maxSequence: 4095, encode: (ti, w, s) => (ti << 22n) | (w << 12n) | s, freeMask: 2n ** 63n - 1n, fixedBits: 0n },
  { name: 'js-safe', layout: () => parseLayout('js-safe', ctx()), maxTime: 2 ** 40 - 1, maxWorker: 255, maxSequence: 31, encode: (ti, w, s) => (ti << 13n) | (w << 5n) | s, freeMask: 2n ** 53n - 1n, fixedBits: 0n },
  { name: 'uid-generator', layout: () => parseLayout('uid-generator', ctx(BAIDU)), maxTime: 2 ** 28 - 1, maxWorker: 2 ** 22 - 1, maxSequence: 8191, encode: (ti, w, s) => (ti << 35n) | (w << 13n) | s, freeMask: 2n ** 63n - 1n, fixedBits: 0n },
  { name: 'uid-generator,time=31s,worker=23,sequence=9', layout: () => parseLayout('uid-generator,time=31s,worker=23,sequence=9', ctx()), maxTime: 2 ** 31 - 1, maxWorker: 2 ** 23 - 1, maxSequence: 511, encode: (ti, w, s) => (ti << 32n) | (w << 9n) | s, freeMask: 2n ** 63n - 1n, fixedBits: 0n },
  { name: 'vesta-max-peak (version 0)', layout: () => parseLayout('vesta-max-peak', ctx()), maxTime: 2 ** 30 - 1, maxWorker: 1023, maxSequence: 2 ** 20 - 1, encode: vesta(0n, 0n, 2n, 30n, 10n), freeMask: 2n ** 60n - 1n, fixedBits: 2n << 60n },
  { name: 'vesta-max-peak (version 1)', layout: () => parseLayout('vesta-max-peak', ctx({ vestaVersion: 1 })), maxTime: 2 ** 30 - 1, maxWorker: 1023, maxSequence: 2 ** 20 - 1, encode: vesta(1n, 0n, 2n, 30n, 10n), freeMask: 2n ** 60n - 1n, fixedBits: BigInt.asIntN(64, (1n << 63n) | (2n << 60n)) },
  { name: 'vesta-min-granularity (version 0)', layout: () => parseLayout('vesta-min-granularity', ctx()), maxTime: 2 ** 40 - 1, maxWorker: 1023, maxSequence: 1023, encode: vesta(0n, 1n, 2n, 20n, 10n), freeMask: 2n ** 60n - 1n, fixedBits: (1n << 62n) | (2n << 60n) },
  { name: 'vesta-min-granularity (version 1)', layout: () => parseLayout('vesta-min-granularity', ctx({ vestaVersion: 1 })), maxTime: 2 ** 40 - 1, maxWorker: 1023, maxSequence: 1023, encode: vesta(1n, 1n, 2n, 20n, 10n), freeMask: 2n ** 60n - 1n, fixedBits: BigInt.asIntN(64, (1n << 63n) | (1n << 62n) | (2n << 60n)) },
]

const ROUNDS = 2000

for (const c of CASES) {
  t.test(`round trips, ${c.name}: ${ROUNDS} random IDs each way`, async (t) => {
    const layout = c.layout()
    t.equal(layout.maxTime, c.maxTime)
    t.equal(layout.maxWorkerId, c.maxWorker)
    t.equal(layout.maxSequence, c.maxSequence)
    const seed = 0x5EED ^ c.name.length
    const r = prng(seed)
    const wrong: string[] = []
    for (let i = 0; i < ROUNDS; i++) {
      // fields -> ID -> fields
      const f: IdFields = { time: r.upTo(c.maxTime), workerId: r.upTo(c.maxWorker), sequence: r.upTo(c.maxSequence) }
      const id = makeId(layout, f)
      const want = c.encode(BigInt(f.time), BigInt(f.workerId), BigInt(f.sequence))
      if (id !== want) wrong.push(`makeId(${JSON.stringify(f)}) = ${id}, the Java formula gives ${want}`)
      const back = explainId(layout, id)
      if (back.time !== f.time || back.workerId !== f.workerId || back.sequence !== f.sequence || back.timestamp !== layout.epoch + f.time * layout.unitMs) {
        wrong.push(`explainId(makeId(${JSON.stringify(f)})) = ${JSON.stringify(back)}`)
      }
      if (fieldProblem(layout, f) !== undefined) wrong.push(`fieldProblem refuses ${JSON.stringify(f)}`)
      // ID -> fields -> ID, from random bits in the free positions
      const raw = BigInt.asIntN(64, (r.u64() & c.freeMask) | c.fixedBits)
      const again = makeId(layout, explainId(layout, raw))
      if (again !== raw) wrong.push(`makeId(explainId(${raw})) = ${again}`)
    }
    t.strictSame(wrong.slice(0, 5), [], `no mismatch in ${ROUNDS} x 3 (seed ${seed}); ${wrong.length} found`)
  })
}

// --- parseLayout ---------------------------------------------------------------------------------

/** parseLayout(value) throws a LayoutError whose message matches. */
function refused (t: Test, value: string, c: LayoutContext, message: RegExp) {
  let error: unknown
  try {
    parseLayout(value, c)
  } catch (e) {
    error = e
  }
  t.ok(error instanceof LayoutError, `"${value}" is refused with a LayoutError (${String(error)})`)
  t.match(error, { name: 'LayoutError', code: 'LAYOUT_INVALID' })
  t.match(error instanceof Error ? error.message : '', message, `"${value}": the message says why`)
}

t.test('parseLayout: more than 63 bits in a custom layout, more than 53 in js-safe', async (t) => {
  t.equal(parseLayout('time=41ms,worker=10,sequence=12', ctx()).bits, 63, '63 bits are fine')
  refused(t, 'time=41ms,worker=11,sequence=12', ctx(), /the fields take 64 bits, more than the 63 of a positive signed 64-bit ID/)
  refused(t, 'time=50ms,worker=10,sequence=12', ctx(), /72 bits, more than the 63/)
  t.equal(parseLayout('js-safe,worker=9,sequence=4', ctx()).bits, 53, 'js-safe overrides still within 53 bits are fine')
  refused(t, 'js-safe,worker=9', ctx(), /the fields take 54 bits, more than the 53 a JavaScript number holds exactly/)
  refused(t, 'js-safe,time=41ms', ctx(), /54 bits, more than the 53/)
  refused(t, 'vesta-max-peak,time=31s', ctx(), /65 bits, more than the 64/)
})

t.test('parseLayout: time above worker and sequence, at most 31 worker bits', async (t) => {
  refused(t, 'sequence=12,time=41ms,worker=10', ctx(), /the time field must come before the worker and sequence fields/)
  refused(t, 'worker=10,time=41ms,sequence=12', ctx(), /the time field must come before the worker and sequence fields/)
  t.equal(parseLayout('time=41ms,sequence=12,worker=10', ctx()).worker.shift, 0, 'worker below sequence is fine (Vesta\'s order)')
  t.equal(parseLayout('time=31s,worker=31,sequence=1,epoch=1700000000000', ctx()).maxWorkerId, 2 ** 31 - 1, '31 worker bits are fine')
  refused(t, 'time=30s,worker=32,sequence=1,epoch=1700000000000', ctx(), /the worker field has 32 bits; at most 31/)
})

t.test('parseLayout: an epoch in the future', async (t) => {
  t.equal(parseLayout(`leaf,epoch=${NOW}`, ctx()).epoch, NOW, 'an epoch of now is fine')
  refused(t, `leaf,epoch=${NOW + 1}`, ctx(), /the epoch 2026-12-01T00:00:00.001Z lies in the future/)
  refused(t, 'time=41ms,worker=10,sequence=12,epoch=2027-01-01T00:00:00Z', ctx(), /the epoch 2027-01-01T00:00:00.000Z lies in the future/)
  refused(t, 'leaf', ctx({ twepoch: NOW + 1000 }), /lies in the future/)
})

t.test('parseLayout: at least 10 years left', async (t) => {
  // 39 bits of ms: 2^39 = 549755813888 ms; 10 years of 365.25 days = 315576000000 ms, so with the
  // epoch at E the last accepted now is E + 549755813888 - 315576000000 = E + 234179813888.
  const E = 1700000000000
  const spec = `time=39ms,worker=10,sequence=12,epoch=${E}`
  t.equal(layoutEnd(parseLayout(spec, ctx({ now: E + 234179813888 }))), E + 549755813888, 'exactly 10 years left is fine')
  refused(t, spec, ctx({ now: E + 234179813889 }), /the 39-bit time field in milliseconds from 2023-11-14T22:13:20.000Z runs out on 2041-04-16T20:10:13.888Z; a layout needs at least 10 years left/)
  refused(t, `time=38ms,worker=10,sequence=12,epoch=${NOW}`, ctx(), /the 38-bit time field in milliseconds from 2026-12-01T00:00:00.000Z runs out on .*at least 10 years left/)
  // UidGenerator's defaults ran out on 2024-11-20T13:24:16Z (21:24:16 +08:00): refused today.
  refused(t, 'uid-generator', ctx(), /the 28-bit time field in seconds from 2016-05-19T16:00:00.000Z ran out on 2024-11-20T13:24:16.000Z/)
  refused(t, 'uid-generator', ctx({ now: Date.now() }), /ran out on 2024-11-20T13:24:16.000Z/)
  // Inside its lifetime (2017-07-14), 7.35 years were left: refused all the same, by default.
  refused(t, 'uid-generator', ctx({ now: BAIDU_NOW }), /the 28-bit time field in seconds from 2016-05-19T16:00:00.000Z runs out on 2024-11-20T13:24:16.000Z; a layout needs at least 10 years left/)
  // minYearsLeft moves the rule: 2024-11-20T13:24:16Z - 2017-07-14T02:40:00Z = 232108256000 ms = 7.355 years.
  t.equal(parseLayout('uid-generator', ctx({ now: BAIDU_NOW, minYearsLeft: 7 })).name, 'uid-generator', '7 years asked, 7.35 left: accepted')
  refused(t, 'uid-generator', ctx({ now: BAIDU_NOW, minYearsLeft: 8 }), /runs out on 2024-11-20T13:24:16.000Z; a layout needs at least 8 years left/)
  t.equal(parseLayout('uid-generator', ctx(BAIDU)).name, 'uid-generator', 'minYearsLeft 0: accepted within its lifetime')
  refused(t, 'uid-generator', ctx({ minYearsLeft: 0 }), /ran out on 2024-11-20T13:24:16.000Z; a layout needs at least 0 years left/)
})

t.test('parseLayout: plain uid-generator today is refused, saying its 28 bits last 8.5 years and what to give instead', async (t) => {
  const advice = /UidGenerator's default 28 bits of seconds last 8\.5 years from any epoch: give the time bits and epochStr your deployment uses \(uid-generator,time=31s,worker=22,sequence=10,epoch=\.\.\.\)/
  refused(t, 'uid-generator', ctx({ now: Date.now() }), advice)
  refused(t, 'uid-generator', ctx(), advice)
  refused(t, 'uid-generator', ctx({ now: BAIDU_NOW }), advice)
  // The advice is UidGenerator's only: another layout short of 10 years does not get it.
  let other = ''
  try {
    parseLayout(`time=38ms,worker=10,sequence=12,epoch=${NOW}`, ctx())
  } catch (e) {
    other = e instanceof Error ? e.message : ''
  }
  t.match(other, /at least 10 years left/)
  t.notMatch(other, /UidGenerator/, 'no UidGenerator advice for a custom layout')
})

t.test('parseLayout: unknown fields, missing units, duplicates, bad values', async (t) => {
  refused(t, 'time=41ms,node=10,sequence=12', ctx(), /unknown field "node"/)
  refused(t, 'leaf,machine=10', ctx(), /unknown field "machine"/)
  refused(t, 'time=41,worker=10,sequence=12', ctx(), /the time field needs its unit: time=<bits>ms or time=<bits>s/)
  refused(t, 'time=41ms,worker=10,worker=10,sequence=12', ctx(), /worker is given twice/)
  refused(t, 'leaf,epoch=1,epoch=2', ctx(), /epoch is given twice/)
  refused(t, 'time=41ms,worker=10', ctx(), /has no sequence field/)
  refused(t, 'time=41ms,worker=10s,sequence=12', ctx(), /worker=10s: only the time field has a unit/)
  refused(t, 'time=41ms,worker=ten,sequence=12', ctx(), /worker=ten: the width is a number of bits/)
  refused(t, 'time=41ms,worker=0,sequence=12', ctx(), /the worker field has 0 bits/)
  refused(t, 'leaf,epoch=yesterday', ctx(), /epoch=yesterday is neither ms since 1970 nor an ISO-8601 time/)
  refused(t, 'snowflake', ctx(), /"snowflake" is neither a preset/)
  refused(t, 'vesta-max-peak', ctx({ vestaGenMethod: 4 }), /genMethod 4 does not fit its 2 bits \(0\.\.3\)/)
  refused(t, 'vesta-max-peak', ctx({ vestaVersion: 2 }), /version 2 does not fit its 1 bit \(0\.\.1\)/)
})

t.test('parseLayout: a misspelt preset gets a "did you mean", a name far from every preset none', async (t) => {
  const meant = (value: string, preset: string) => refused(t, value, ctx(), new RegExp(`^"${value.split(',')[0]}" is neither a preset \\(leaf, js-safe, uid-generator, vesta-max-peak, vesta-min-granularity\\) nor name=value: did you mean "${preset}"\\?$`))
  meant('js_safe', 'js-safe')
  meant('JS-Safe', 'js-safe')
  meant('uid_generator,time=28s,worker=22,sequence=13', 'uid-generator')
  meant('uidgenerator', 'uid-generator')
  meant('leaf2', 'leaf')
  meant('vesta-max-peek', 'vesta-max-peak')
  meant('vesta_min_granularty', 'vesta-min-granularity')
  for (const far of ['snowflake', 'vesta', 'js', 'time=41ms,worker=10,sequence=12,js_safe']) refused(t, far, ctx(), /nor name=value$/)
})

t.test('parseLayout: a layout\'s spec parses back to the same layout', async (t) => {
  const custom = parseLayout(' time=41ms , worker=10, sequence=12 ', ctx())
  t.equal(custom.name, 'custom')
  t.equal(custom.spec, 'time=41ms,worker=10,sequence=12,epoch=1288834974657', 'a custom spec without an epoch takes twepoch, and says so')
  t.equal(parseLayout(custom.spec, ctx({ twepoch: 0 })).signature, custom.signature, 'the spec carries the epoch: another twepoch does not change it')
  const reordered = parseLayout('time=35s,sequence=6,worker=20,epoch=2020-01-01T00:00:00Z', ctx())
  t.strictSame(shapeOf(reordered), [['time', 35, 26], ['sequence', 6, 20], ['worker', 20, 0]], 'fields sit in the order given, the first highest')
  t.equal(reordered.spec, 'time=35s,sequence=6,worker=20,epoch=1577836800000')
  t.equal(parseLayout(reordered.spec, ctx()).signature, reordered.signature)
  t.equal(parseLayout(reordered.spec, ctx()).spec, reordered.spec)
  const overridden = parseLayout('uid-generator,time=31s,worker=23,sequence=9', ctx())
  t.equal(overridden.spec, 'uid-generator,time=31s,worker=23,sequence=9,epoch=1463673600000')
  t.equal(parseLayout(overridden.spec, ctx()).signature, overridden.signature)
  const peak = parseLayout('vesta-max-peak,epoch=1500000000000', ctx())
  t.equal(peak.spec, 'vesta-max-peak,time=30s,sequence=20,worker=10,epoch=1500000000000')
  t.equal(parseLayout(peak.spec, ctx()).signature, peak.signature)
  t.not(parseLayout('vesta-max-peak', ctx({ vestaVersion: 1 })).signature, parseLayout('vesta-max-peak', ctx()).signature, 'the signature tells Vesta versions apart')
  for (const name of ['leaf', 'js-safe', 'vesta-max-peak', 'vesta-min-granularity']) {
    const l = parseLayout(name, ctx())
    t.equal(l.spec, name)
    t.equal(parseLayout(l.spec, ctx()).signature, l.signature, `${name} round-trips`)
  }
})

t.test('parseLayout: preset overrides', async (t) => {
  // The epoch override named in layout.ts: 2022-01-01 00:00 +08:00 = 2021-12-31T16:00:00Z. A later
  // epoch does not help Baidu's 28 bits of seconds: 8.5 years, to 2030-07-04T13:24:16Z.
  refused(t, 'uid-generator,epoch=2022-01-01T00:00:00+08:00', ctx(), /the 28-bit time field in seconds from 2021-12-31T16:00:00.000Z runs out on 2030-07-04T13:24:16.000Z; a layout needs at least 10 years left.*28 bits of seconds last 8\.5 years/)
  refused(t, 'uid-generator,epoch=2022-01-01T00:00:00+08:00', ctx({ now: Date.now() }), /(runs|ran) out on 2030-07-04T13:24:16.000Z/)
  // Without the rule, the override itself: Baidu's widths from the given epoch.
  const byEpoch = parseLayout('uid-generator,epoch=2022-01-01T00:00:00+08:00', ctx({ minYearsLeft: 0 }))
  t.equal(byEpoch.epoch, 1640966400000)
  t.strictSame(shapeOf(byEpoch), [['time', 28, 35], ['worker', 22, 13], ['sequence', 13, 0]], 'the widths stay Baidu\'s')
  t.equal(layoutEnd(byEpoch), 1640966400000 + 2 ** 28 * 1000, '2030-07-04T13:24:16Z')
  // What the message advises: the deployment's time bits (31) with its epoch: works today.
  const advised = parseLayout('uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00', ctx({ now: Date.now() }))
  t.equal(advised.name, 'uid-generator')
  t.equal(advised.epoch, 1640966400000, '2022-01-01T00:00:00+08:00')
  t.equal(advised.unit, 's')
  t.strictSame(shapeOf(advised), [['time', 31, 32], ['worker', 22, 10], ['sequence', 10, 0]])
  t.equal(advised.bits, 63)
  t.equal(advised.maxWorkerId, 4194303, '2^22 - 1')
  t.equal(advised.maxSequence, 1023, '2^10 - 1')
  t.equal(layoutEnd(advised), 3788450048000, '1640966400000 + 2^31 * 1000: 2090-01-19T16:54:08Z')
  t.equal(advised.spec, 'uid-generator,time=31s,worker=22,sequence=10,epoch=1640966400000')
  t.equal(parseLayout('uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00', ctx()).signature, advised.signature, 'and on the fixed day')
})

t.test('parseLayout: preset overrides of widths and epoch together', async (t) => {
  const l = parseLayout('uid-generator,time=31s,worker=23,sequence=9,epoch=2022-01-01T00:00:00+08:00', ctx({ now: Date.now() }))
  t.equal(l.epoch, 1640966400000, '2022-01-01T00:00:00+08:00')
  t.equal(l.unit, 's')
  t.strictSame(shapeOf(l), [['time', 31, 32], ['worker', 23, 9], ['sequence', 9, 0]])
  t.equal(layoutEnd(l), 1640966400000 + 2 ** 31 * 1000)
  const leafLater = parseLayout('leaf,epoch=1700000000000', ctx())
  t.equal(leafLater.epoch, 1700000000000, 'an explicit epoch beats twepoch')
  t.equal(leafLater.randomSequenceStart, true, 'still Leaf\'s sequence start')
  t.equal(parseLayout('leaf,time=40ms,worker=11', ctx()).worker.shift, 12)
})

// --- fieldProblem ---------------------------------------------------------------------------------

t.test('fieldProblem names the field out of range', async (t) => {
  const leaf = parseLayout('leaf', ctx())
  const ok = { time: 5, workerId: 5, sequence: 5 }
  t.equal(fieldProblem(leaf, ok), undefined)
  t.equal(fieldProblem(leaf, { time: 2199023255551, workerId: 1023, sequence: 4095 }), undefined, 'the largest values fit')
  t.strictSame(fieldProblem(leaf, { ...ok, time: -1 }), { field: 'time', message: 'time must lie in 2010-11-04T01:42:54.657Z to 2080-07-10T17:30:30.208Z for the leaf layout' })
  t.equal(fieldProblem(leaf, { ...ok, time: 2199023255552 })?.field, 'time', '2^41')
  t.equal(fieldProblem(leaf, { ...ok, time: 1.5 })?.field, 'time', 'not an integer')
  t.strictSame(fieldProblem(leaf, { ...ok, workerId: 1024 }), { field: 'workerId', message: 'workerId must lie in 0 to 1023 for the leaf layout' })
  t.equal(fieldProblem(leaf, { ...ok, workerId: -1 })?.field, 'workerId')
  t.strictSame(fieldProblem(leaf, { ...ok, sequence: 4096 }), { field: 'sequence', message: 'sequence must lie in 0 to 4095 for the leaf layout' })
  t.equal(fieldProblem(leaf, { ...ok, sequence: Number.NaN })?.field, 'sequence')
  const js = parseLayout('js-safe', ctx())
  t.strictSame(fieldProblem(js, { ...ok, workerId: 256 }), { field: 'workerId', message: 'workerId must lie in 0 to 255 for the js-safe layout' })
  t.strictSame(fieldProblem(js, { ...ok, sequence: 32 }), { field: 'sequence', message: 'sequence must lie in 0 to 31 for the js-safe layout' })
  t.strictSame(fieldProblem(js, { ...ok, time: 2 ** 40 }), { field: 'time', message: 'time must lie in 2026-01-01T00:00:00.000Z to 2060-11-03T19:53:47.775Z for the js-safe layout' })
  const peak = parseLayout('vesta-max-peak', ctx())
  t.strictSame(fieldProblem(peak, { ...ok, time: 2 ** 30 }), { field: 'time', message: 'time must lie in 2014-12-31T16:00:00.000Z to 2049-01-09T05:37:03.999Z for the vesta-max-peak layout' }, 'seconds: to the last ms of the last second')
  t.equal(fieldProblem(peak, { ...ok, sequence: 2 ** 20 })?.field, 'sequence')
  t.equal(fieldProblem(peak, { ...ok, workerId: 1024 })?.field, 'workerId')
})

t.test('a time field that outlasts JavaScript dates is refused; the widest accepted can be described and checked', async (t) => {
  // A JavaScript Date holds 8.64e15 ms after 1970. From twepoch (1288834974657):
  //   53 ms bits: 2^53 = 9007199254740992 ms, past it; 52: 2^52 = 4503599627370496, + twepoch within.
  //   44 s bits: 2^44 * 1000 = 1.76e16; 43: 8.796e15, past it too; 42: 4.398e15 + twepoch within.
  refused(t, 'time=53ms,worker=5,sequence=5', ctx(), /the 53-bit time field in milliseconds outlasts the dates JavaScript can hold: give it fewer bits/)
  refused(t, 'time=44s,worker=5,sequence=5', ctx(), /the 44-bit time field in seconds outlasts the dates JavaScript can hold/)
  refused(t, 'time=43s,worker=5,sequence=5', ctx(), /the 43-bit time field in seconds outlasts the dates JavaScript can hold/)
  refused(t, 'time=53ms,worker=5,sequence=5', ctx({ minYearsLeft: 0 }), /outlasts the dates JavaScript can hold/)
  for (const spec of ['time=52ms,worker=5,sequence=5', 'time=42s,worker=5,sequence=5']) {
    const layout = parseLayout(spec, ctx())
    t.ok(layoutEnd(layout) <= 8.64e15, `${spec}: ends at ${layoutEnd(layout)}, a date JavaScript holds`)
    t.ok(Number.isSafeInteger(layout.maxTime), `${spec}: maxTime ${layout.maxTime} is exact`)
    t.doesNotThrow(() => describeLayout(layout), `${spec}: describeLayout`)
    t.doesNotThrow(() => fieldProblem(layout, { time: -1, workerId: 0, sequence: 0 }), `${spec}: fieldProblem`)
    t.equal(fieldProblem(layout, { time: -1, workerId: 0, sequence: 0 })?.field, 'time', `${spec}: fieldProblem names the time`)
  }
})
