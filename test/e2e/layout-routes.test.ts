import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'
import { get, pool, startServer } from '../helpers/server-process.js'
import { batchLines } from '../helpers/ids.js'

// The layout routes over HTTP for every preset and a custom spec (in process, app.inject):
// decode, make, layout and Leaf's /decodeSnowflakeId against IDs the server issued, with the
// expected fields worked out here from the documented widths (not from src/layout/layout.ts);
// 400 INVALID_FIELD for each bad field; the routes with snowflake mode off; borrowed time in
// /metrics and the status view. Then the built server with js-safe: 1,000,000 IDs over HTTP,
// each an exact JavaScript number.

type App = Awaited<ReturnType<typeof buildApp>>

interface FieldSpec { name: string, bits: number, value?: number }
interface Case {
  /** leaf.snowflake.layout */
  layout: string
  /** Other keys the case sets. */
  extra?: Record<string, string | number>
  name: string
  /** The canonical spec /api/snowflake/layout and the status view report. */
  spec: string
  epoch: number
  unitMs: 1 | 1000
  /** From the most significant bit down. */
  fields: FieldSpec[]
  /** The static worker id the instance runs with. */
  workerId: number
}

const LEAF_TWEPOCH = 1288834974657
/** 2015-01-01 00:00 +08:00 */
const VESTA_EPOCH = Date.parse('2015-01-01T00:00:00+08:00')
const CUSTOM_EPOCH = Date.parse('2025-06-01T00:00:00Z')

const CASES: Case[] = [
  {
    layout: 'leaf',
    name: 'leaf',
    spec: 'leaf',
    epoch: LEAF_TWEPOCH,
    unitMs: 1,
    fields: [{ name: 'time', bits: 41 }, { name: 'worker', bits: 10 }, { name: 'sequence', bits: 12 }],
    workerId: 1023,
  },
  {
    layout: 'js-safe',
    name: 'js-safe',
    spec: 'js-safe',
    epoch: Date.parse('2026-01-01T00:00:00Z'),
    unitMs: 1,
    fields: [{ name: 'time', bits: 40 }, { name: 'worker', bits: 8 }, { name: 'sequence', bits: 5 }],
    workerId: 200,
  },
  {
    layout: 'vesta-max-peak',
    name: 'vesta-max-peak',
    spec: 'vesta-max-peak',
    epoch: VESTA_EPOCH,
    unitMs: 1000,
    // Vesta's defaults here: version 0, genMethod 2; type 0 is max peak.
    fields: [{ name: 'version', bits: 1, value: 0 }, { name: 'type', bits: 1, value: 0 }, { name: 'genMethod', bits: 2, value: 2 },
      { name: 'time', bits: 30 }, { name: 'sequence', bits: 20 }, { name: 'worker', bits: 10 }],
    workerId: 513,
  },
  {
    layout: 'vesta-min-granularity',
    // Version 1 sets the top bit: every ID is negative as a signed 64-bit value.
    extra: { 'leaf.snowflake.vesta.version': 1, 'leaf.snowflake.vesta.gen-method': 1 },
    name: 'vesta-min-granularity',
    spec: 'vesta-min-granularity',
    epoch: VESTA_EPOCH,
    unitMs: 1,
    fields: [{ name: 'version', bits: 1, value: 1 }, { name: 'type', bits: 1, value: 1 }, { name: 'genMethod', bits: 2, value: 1 },
      { name: 'time', bits: 40 }, { name: 'sequence', bits: 10 }, { name: 'worker', bits: 10 }],
    workerId: 7,
  },
  {
    // The worker in the lowest bits, time in seconds, an ISO epoch.
    layout: 'time=36s,sequence=17,worker=10,epoch=2025-06-01T00:00:00Z',
    name: 'custom',
    spec: `time=36s,sequence=17,worker=10,epoch=${CUSTOM_EPOCH}`,
    epoch: CUSTOM_EPOCH,
    unitMs: 1000,
    fields: [{ name: 'time', bits: 36 }, { name: 'sequence', bits: 17 }, { name: 'worker', bits: 10 }],
    workerId: 999,
  },
]

/** Each field's shift, and the widths' sum. */
function placed (c: Case): { fields: (FieldSpec & { shift: number })[], bits: number } {
  const bits = c.fields.reduce((n, f) => n + f.bits, 0)
  let shift = bits
  return { bits, fields: c.fields.map((f) => ({ ...f, shift: (shift -= f.bits) })) }
}

function bitsOf (c: Case, name: string): number {
  return (c.fields.find((f) => f.name === name) as FieldSpec).bits
}

/** The fields of an ID, read with plain shifts and masks. */
function fieldsOf (c: Case, id: bigint): Record<string, number> {
  const u = BigInt.asUintN(64, id)
  return Object.fromEntries(placed(c).fields.map((f) => [f.name, Number((u >> BigInt(f.shift)) & ((1n << BigInt(f.bits)) - 1n))]))
}

/** Java's yyyy-MM-dd HH:mm:ss.SSS in this process's zone (the in-process server's too). */
function localTime (ms: number): string {
  const d = new Date(ms)
  const p = (n: number, w = 2) => String(n).padStart(w, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`
}

/** The same instant written with a +08:00 offset. */
function isoPlus8 (ms: number): string {
  return new Date(ms + 8 * 3600_000).toISOString().replace('Z', '+08:00')
}

async function app (t: Test, values: Record<string, string | number | boolean>, clock?: () => number): Promise<App> {
  const instance = await buildApp(testConfig({ 'leaf.snowflake.cache.dir': tempDir(), ...values }), { logger: silentLogger, clock })
  t.teardown(() => instance.close())
  return instance
}

/** GET /api/snowflake/make with these query values. */
function make (server: App, q: Record<string, string | number>) {
  return server.inject({ url: '/api/snowflake/make', query: Object.fromEntries(Object.entries(q).map(([k, v]) => [k, String(v)])) })
}

/** Asserts a 400 INVALID_FIELD naming `field`, with nothing but error, message and field in the body. */
function expectInvalid (t: Test, res: Awaited<ReturnType<App['inject']>>, field: string, what: string): void {
  t.equal(res.statusCode, 400, `${what}: 400`)
  t.match(res.headers['content-type'], /^application\/json/, `${what}: JSON`)
  const body = res.json() as Record<string, unknown>
  t.same(Object.keys(body).sort(), ['error', 'field', 'message'], `${what}: only error, message and field`)
  t.equal(body.error, 'INVALID_FIELD', `${what}: INVALID_FIELD`)
  t.equal(body.field, field, `${what}: names ${field}`)
  t.match(body.message, new RegExp(`^${field} `), `${what}: the message starts with the field (${String(body.message)})`)
  t.notMatch(res.body, /\n\s+at |stack|\.ts:\d+|\.js:\d+/, `${what}: no stack trace`)
}

for (const c of CASES) {
  t.test(`${c.name}: IDs the server issued decode to the layout's fields and make gives them back`, async (t) => {
    const server = await app(t, {
      'leaf.snowflake.enable': true,
      'leaf.snowflake.layout': c.layout,
      'leaf.snowflake.worker.id': c.workerId,
      ...c.extra,
    })
    const { fields, bits } = placed(c)
    const maxWorkerId = 2 ** bitsOf(c, 'worker') - 1
    const maxSequence = 2 ** bitsOf(c, 'sequence') - 1
    const end = c.epoch + 2 ** bitsOf(c, 'time') * c.unitMs
    const unitStart = (ms: number) => c.epoch + Math.floor((ms - c.epoch) / c.unitMs) * c.unitMs

    // IDs in every form the ID route answers: single and batch, text and JSON.
    const before = Date.now()
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      const res = await server.inject('/api/snowflake/get/k')
      t.equal(res.statusCode, 200)
      ids.push(res.body)
    }
    ids.push((await server.inject({ url: '/api/snowflake/get/k', headers: { accept: 'application/vnd.leaf-ts+json' } })).json().id)
    const batch = await server.inject('/api/snowflake/get/k?count=40')
    t.equal(batch.statusCode, 200)
    ids.push(...batchLines(batch.body))
    ids.push(...(await server.inject({ url: '/api/snowflake/get/k?count=5', headers: { accept: 'application/vnd.leaf-ts+json' } })).json().ids)
    const after = Date.now()
    t.equal(ids.length, 49)
    t.ok(ids.every((id) => /^-?\d{1,19}$/.test(id)), 'decimal IDs')
    const big = ids.map(BigInt)
    t.ok(big.every((id, i) => i === 0 || id > (big[i - 1] as bigint)), 'increasing in the order issued')
    if (fields[0]?.value === 1) t.ok(big.every((id) => id < 0n), 'version 1: negative as signed 64-bit values')
    else t.ok(big.every((id) => id > 0n && id < 2n ** BigInt(bits)), `below 2^${bits}`)

    const fixed = fields.filter((f) => f.value !== undefined)
    for (const [i, id] of ids.entries()) {
      const expected = fieldsOf(c, BigInt(id))
      const timestamp = c.epoch + (expected.time as number) * c.unitMs
      const res = await server.inject(`/api/snowflake/decode/${id}`)
      t.equal(res.statusCode, 200)
      const d = res.json() as Record<string, unknown>
      const problems: string[] = []
      const want: Record<string, unknown> = {
        id,
        layout: c.name,
        timestamp,
        time: new Date(timestamp).toISOString(),
        workerId: c.workerId,
        sequence: expected.sequence,
        ...Object.fromEntries(fixed.map((f) => [f.name, f.value])),
        fields: { ...expected, worker: c.workerId },
      }
      // Key order too: fields from the most significant bit down.
      if (JSON.stringify(d) !== JSON.stringify(want)) problems.push(`decode ${JSON.stringify(d)} != ${JSON.stringify(want)}`)
      if (expected.worker !== c.workerId) problems.push(`worker bits ${expected.worker}`)
      for (const f of fixed) if (expected[f.name] !== f.value) problems.push(`${f.name} bits ${expected[f.name]}`)
      if (timestamp < unitStart(before) || timestamp > after) problems.push(`timestamp ${timestamp} outside [${unitStart(before)}, ${after}]`)

      const q = { workerId: c.workerId, sequence: expected.sequence as number }
      const byMs = await make(server, { time: timestamp, ...q })
      if (byMs.statusCode !== 200 || byMs.json().id !== id) problems.push(`make(ms) ${byMs.statusCode} ${byMs.body}`)
      const byIso = await make(server, { time: new Date(timestamp).toISOString(), ...q })
      if (byIso.body !== byMs.body) problems.push(`make(ISO Z) ${byIso.body}`)
      const byOffset = await make(server, { time: isoPlus8(timestamp), ...q })
      if (byOffset.body !== byMs.body) problems.push(`make(ISO +08:00) ${byOffset.body}`)
      // Any millisecond of the unit makes the same ID; the next unit another one.
      const lastMs = await make(server, { time: timestamp + c.unitMs - 1, ...q })
      if (lastMs.body !== byMs.body) problems.push(`make(last ms of the unit) ${lastMs.body}`)
      const nextUnit = await make(server, { time: timestamp + c.unitMs, ...q })
      const nextFields = nextUnit.statusCode === 200 ? fieldsOf(c, BigInt(nextUnit.json().id)) : {}
      if (nextFields.time !== (expected.time as number) + 1 || nextFields.sequence !== expected.sequence) problems.push(`make(next unit) ${nextUnit.body}`)

      const leaf = await server.inject(`/decodeSnowflakeId?snowflakeId=${id}`)
      const leafWant = { timestamp: `${timestamp}(${localTime(timestamp)})`, sequenceId: String(expected.sequence), workerId: String(c.workerId) }
      if (leaf.statusCode !== 200 || JSON.stringify(leaf.json()) !== JSON.stringify(leafWant)) problems.push(`decodeSnowflakeId ${leaf.body} != ${JSON.stringify(leafWant)}`)
      t.same(problems, [], `ID ${i} (${id})`)
    }

    // Made from scratch at the boundaries, checked against the same arithmetic.
    const corners: [number, number, number][] = [[c.epoch, 0, 0], [end - 1, maxWorkerId, maxSequence], [c.epoch + 12_345 * c.unitMs, 1, 2]]
    for (const [ms, workerId, sequence] of corners) {
      const res = await make(server, { time: ms, workerId, sequence })
      t.equal(res.statusCode, 200, `make at ${new Date(ms).toISOString()}, worker ${workerId}, sequence ${sequence}`)
      t.same(fieldsOf(c, BigInt(res.json().id)), {
        ...Object.fromEntries(fixed.map((f) => [f.name, f.value])),
        time: Math.floor((ms - c.epoch) / c.unitMs),
        worker: workerId,
        sequence,
      })
    }
    t.same(JSON.parse((await make(server, { time: c.epoch })).body), JSON.parse((await make(server, { time: c.epoch, workerId: 0, sequence: 0 })).body),
      'workerId and sequence default to 0')

    const bad: [Record<string, string | number>, string, string][] = [
      [{ time: c.epoch - 1 }, 'time', 'a millisecond before the epoch'],
      [{ time: new Date(c.epoch - c.unitMs).toISOString() }, 'time', 'an ISO time before the epoch'],
      [{ time: end }, 'time', 'the first millisecond past the time field'],
      [{ time: 'yesterday' }, 'time', 'non-numeric time'],
      [{ time: '2026-13-45T00:00:00Z' }, 'time', 'an impossible date'],
      [{ time: '' }, 'time', 'an empty time'],
      [{ workerId: 1 }, 'time', 'no time'],
      [{ time: c.epoch, workerId: maxWorkerId + 1 }, 'workerId', 'workerId above the max'],
      [{ time: c.epoch, workerId: 'abc' }, 'workerId', 'non-numeric workerId'],
      [{ time: c.epoch, workerId: -1 }, 'workerId', 'negative workerId'],
      [{ time: c.epoch, workerId: '1.5' }, 'workerId', 'fractional workerId'],
      [{ time: c.epoch, sequence: maxSequence + 1 }, 'sequence', 'sequence above the max'],
      [{ time: c.epoch, sequence: '1e3' }, 'sequence', 'non-numeric sequence'],
      [{ time: c.epoch, sequence: '99999999999999999999' }, 'sequence', 'a 20-digit sequence'],
    ]
    for (const [q, field, what] of bad) expectInvalid(t, await make(server, q), field, what)
    t.equal((await server.inject('/api/snowflake/get/k')).statusCode, 200, 'still issuing after the bad requests')

    const asked = Date.now()
    const layout = await server.inject('/api/snowflake/layout')
    const answered = Date.now()
    t.equal(layout.statusCode, 200)
    const { timeLeftSeconds, ...described } = layout.json()
    t.ok(timeLeftSeconds >= Math.floor((end - answered) / 1000) && timeLeftSeconds <= Math.floor((end - asked) / 1000),
      `timeLeftSeconds: the whole seconds until runsOutAt (${timeLeftSeconds})`)
    t.same(described, {
      name: c.name,
      spec: c.spec,
      fields: fields.map((f) => ({ name: f.name, bits: f.bits, shift: f.shift, ...(f.value !== undefined ? { value: f.value } : {}) })),
      epoch: c.epoch,
      epochIso: new Date(c.epoch).toISOString(),
      timeUnit: c.unitMs === 1 ? 'ms' : 's',
      maxWorkerId,
      idsPerSecondPerWorker: (maxSequence + 1) * (1000 / c.unitMs),
      bits,
      jsSafe: bits <= 53,
      runsOutAt: new Date(end).toISOString(),
    }, '/api/snowflake/layout describes every field')
    const again = testConfig({ 'leaf.snowflake.layout': layout.json().spec, ...c.extra }).snowflake.layout
    t.equal(again.signature, server.leaf.config.snowflake.layout.signature, 'the spec it reports configures the same layout')

    const status = await server.inject('/api/snowflake/status')
    t.equal(status.statusCode, 200)
    t.match(status.json(), { workerId: c.workerId, layout: c.spec, borrowedMs: 0, twepoch: c.epoch }, 'status: layout spec, no time borrowed')
    const samples = parseSamples((await server.inject('/metrics')).body)
    t.equal(valueOf(samples, 'leaf_snowflake_borrowed_seconds'), 0, 'leaf_snowflake_borrowed_seconds present, 0 without borrowing')
  })
}

t.test('with snowflake mode off the decode, make and layout routes still answer', async (t) => {
  const c = CASES[1] as Case // js-safe
  const server = await app(t, { 'leaf.snowflake.enable': false, 'leaf.segment.enable': false, 'leaf.snowflake.layout': 'js-safe' })
  t.equal(server.leaf.snowflake, undefined, 'no generator')
  const off = await server.inject('/api/snowflake/get/k')
  t.equal(off.statusCode, 503)
  t.equal(off.json().error, 'MODE_DISABLED')
  t.equal((await server.inject('/api/snowflake/status')).json().error, 'MODE_DISABLED')

  const ms = Date.parse('2026-03-04T05:06:07.089Z')
  const time = ms - c.epoch
  // time << 13 | worker << 5 | sequence, in plain arithmetic (it stays below 2^53).
  const id = time * 2 ** 13 + 37 * 2 ** 5 + 19
  const made = await make(server, { time: '2026-03-04T13:06:07.089+08:00', workerId: 37, sequence: 19 })
  t.equal(made.statusCode, 200)
  t.same(made.json(), { id: String(id) })
  t.match((await server.inject(`/api/snowflake/decode/${id}`)).json(), { layout: 'js-safe', timestamp: ms, workerId: 37, sequence: 19, fields: { time, worker: 37, sequence: 19 } })
  t.same((await server.inject(`/decodeSnowflakeId?snowflakeId=${id}`)).json(), { timestamp: `${ms}(${localTime(ms)})`, sequenceId: '19', workerId: '37' })
  t.match((await server.inject('/api/snowflake/layout')).json(), { name: 'js-safe', bits: 53, jsSafe: true, maxWorkerId: 255 })
  expectInvalid(t, await make(server, { time: ms, workerId: 256 }), 'workerId', 'mode off: workerId 256')
  t.equal((await server.inject('/api/snowflake/get/k')).statusCode, 503, 'and still no ID')
})

t.test('borrow-ahead-ms: a burst past a frozen millisecond shows in /metrics and the status view', async (t) => {
  let now = Date.now()
  const server = await app(t, {
    'leaf.snowflake.enable': true,
    'leaf.snowflake.layout': 'js-safe',
    'leaf.snowflake.worker.id': 9,
    'leaf.snowflake.borrow-ahead-ms': 20,
  }, () => now)
  const borrowed = async () => {
    const samples = parseSamples((await server.inject('/metrics')).body)
    const status = (await server.inject('/api/snowflake/status')).json()
    return { seconds: valueOf(samples, 'leaf_snowflake_borrowed_seconds'), ms: status.borrowedMs, layout: status.layout }
  }
  t.same(await borrowed(), { seconds: 0, ms: 0, layout: 'js-safe' }, 'nothing borrowed before the first ID')
  t.match((await server.inject('/readyz')).json(), { modes: { snowflake: { ready: false, reason: 'restart window: first ID in 21 ms' } } }, 'no cache file: the first ID waits past the clock and the borrow bound')
  now += 21
  // 100 IDs at 32 per millisecond with the clock frozen: 4 milliseconds, the last 3 ahead of it.
  const res = await server.inject('/api/snowflake/get/k?count=100')
  t.equal(res.statusCode, 200)
  const ids = batchLines(res.body).map(Number)
  t.equal(new Set(ids).size, 100)
  const js = CASES[1] as Case
  t.same([...new Set(ids.map((id) => Math.floor(id / 2 ** 13) + js.epoch))], [now, now + 1, now + 2, now + 3], 'four milliseconds, three borrowed')
  t.same(await borrowed(), { seconds: 0.003, ms: 3, layout: 'js-safe' }, '3 ms borrowed')
  now += 2
  t.same(await borrowed(), { seconds: 0.001, ms: 1, layout: 'js-safe' }, 'the clock catches up: 1 ms')
  now += 5
  t.same(await borrowed(), { seconds: 0, ms: 0, layout: 'js-safe' }, 'the clock past it: 0')
})

t.test('built server, js-safe: 1,000,000 IDs over HTTP in text batches, each an exact JavaScript number', async (t) => {
  const WORKER = 201
  const BATCH = 10_000
  const BATCHES = 100
  const server = await startServer({
    cwd: tempDir(),
    args: ['--server.port=0', '--leaf.segment.enable=false', '--leaf.snowflake.enable=true', '--leaf.snowflake.layout=js-safe',
      `--leaf.snowflake.worker.id=${WORKER}`, `--leaf.snowflake.cache.dir=${tempDir()}`, `--leaf.batch.max=${BATCH}`],
  })
  t.teardown(() => server.stop())
  const started = Date.now()
  const seen = new Set<number>()
  const problems: string[] = []
  let max = -1
  await pool(BATCHES, 4, async (b) => {
    const res = await get(`${server.url}/api/snowflake/get/bulk?count=${BATCH}`)
    if (res.status !== 200 || !/^text\/plain/.test(String(res.headers['content-type']))) {
      problems.push(`batch ${b}: ${res.status} ${res.body.slice(0, 200)}`)
      return
    }
    const lines = res.body.endsWith('\n') ? res.body.slice(0, -1).split('\n') : []
    if (lines.length !== BATCH) problems.push(`batch ${b}: ${lines.length} lines`)
    let previous = -1
    for (const line of lines) {
      const n: unknown = JSON.parse(line)
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || BigInt(line) !== BigInt(n)) {
        if (problems.length < 20) problems.push(`batch ${b}: ${line} is not an exact safe integer`)
        continue
      }
      if (n <= previous && problems.length < 20) problems.push(`batch ${b}: ${n} after ${previous}`)
      if (Math.floor(n / 32) % 256 !== WORKER && problems.length < 20) problems.push(`batch ${b}: ${n} has worker bits ${Math.floor(n / 32) % 256}`)
      previous = n
      seen.add(n)
      if (n > max) max = n
    }
  })
  const finished = Date.now()
  t.same(problems, [], 'every line a safe integer equal to BigInt(line), increasing within its batch, with the worker bits')
  t.equal(seen.size, BATCH * BATCHES, '1,000,000 distinct IDs')

  const decoded = await get(`${server.url}/api/snowflake/decode/${max}`)
  t.equal(decoded.status, 200)
  const d = JSON.parse(decoded.body) as { workerId: number, timestamp: number, layout: string, id: string }
  t.match(d, { id: String(max), layout: 'js-safe', workerId: WORKER })
  t.ok(d.timestamp >= started && d.timestamp <= finished, `the largest ID is of the run (${d.timestamp - started} ms in, run ${finished - started} ms)`)
  const leaf = JSON.parse((await get(`${server.url}/decodeSnowflakeId?snowflakeId=${max}`)).body) as Record<string, string>
  t.equal(leaf.workerId, String(WORKER), '/decodeSnowflakeId: the same worker id')
  t.equal(await server.stop(), 0, 'exits 0')
})

t.test('decode in a layout given as ?layout=: an ended UidGenerator layout reads old IDs; a bad spec is 400 INVALID_LAYOUT with the parser\'s reason', async (t) => {
  const server = await app(t, { 'leaf.snowflake.enable': false, 'leaf.segment.enable': false })
  // UidGenerator's default layout (28 bits of seconds from 2016-05-20, +08:00) ran out on
  // 2024-11-20: refused for issuing, read for decoding. The ID and parseUID's answer for it:
  // {"UID":"3200169789968523265","timestamp":"2019-05-02 23:26:39","workerId":"21","sequence":"1"}
  // (its timestamp in UTC+8).
  const spec = 'uid-generator,time=28s,worker=22,sequence=13,epoch=2016-05-20T00:00:00+08:00'
  const old = await server.inject(`/api/snowflake/decode/3200169789968523265?layout=${encodeURIComponent(spec)}`)
  t.equal(old.statusCode, 200)
  t.match(old.json(), { id: '3200169789968523265', layout: 'uid-generator', time: '2019-05-02T15:26:39.000Z', workerId: 21, sequence: 1, fields: { time: 93_137_199, worker: 21, sequence: 1 } })
  t.match(old.json().spec, /time=28s/, 'the spec it was read in, back')
  // The same spec can not be the layout an instance issues in.
  await t.rejects(app(t, { 'leaf.snowflake.layout': spec }), /leaf\.snowflake\.layout.*ran out on 2024-11-/)

  // A preset, with and without overrides, and a custom spec: the fields as that layout places them.
  const jsSafe = await server.inject(`/api/snowflake/decode/${37 * 2 ** 5 + 19}?layout=js-safe`)
  t.match(jsSafe.json(), { layout: 'js-safe', workerId: 37, sequence: 19 })
  const custom = await server.inject(`/api/snowflake/decode/${(5n << 22n) | (3n << 12n) | 7n}?layout=${encodeURIComponent('time=41ms,worker=10,sequence=12,epoch=0')}`)
  t.match(custom.json(), { layout: 'custom', timestamp: 5, workerId: 3, sequence: 7 })

  // Without ?layout=, the instance's own layout (leaf).
  const own = await server.inject(`/api/snowflake/decode/${(5n << 22n) | (3n << 12n) | 7n}`)
  t.match(own.json(), { layout: 'leaf', timestamp: LEAF_TWEPOCH + 5, workerId: 3, sequence: 7 })
  t.notOk('spec' in own.json(), 'no spec echoed for the instance\'s own layout')
  t.same((await server.inject(`/api/snowflake/decode/${(5n << 22n) | (3n << 12n) | 7n}?layout=`)).json(), own.json(), 'an empty ?layout= is none')

  for (const [bad, reason] of [
    ['time=41ms,worker=10,sequence=13', /layout=time=41ms,worker=10,sequence=13: the fields take 64 bits, more than the 63/],
    ['js_safe', /did you mean "js-safe"/],
    ['time=41ms,worker=10', /has no sequence field/],
    ['time=41ms,worker=10,sequence=12,epoch=2999-01-01T00:00:00Z', /lies in the future/],
  ] as const) {
    const res = await server.inject(`/api/snowflake/decode/1?layout=${encodeURIComponent(bad)}`)
    t.equal(res.statusCode, 400, `layout=${bad}: 400`)
    t.equal(res.json().error, 'INVALID_LAYOUT')
    t.match(res.json().message, reason)
    t.notMatch(res.body, /at .*\.ts:\d+/, 'no stack trace')
  }
  const twice = await server.inject('/api/snowflake/decode/1?layout=leaf&layout=js-safe')
  t.equal(twice.statusCode, 400)
  t.same(twice.json(), { error: 'INVALID_LAYOUT', message: 'layout is given more than once: give one.' })
})
