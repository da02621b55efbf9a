import t from 'tap'
import { nextBatchSize } from '../../client/src/batch-size.js'
import { createLeafClient } from '../../client/src/client.js'
import type { LeafClientOptions } from '../../client/src/client-options.js'
import { errorFromAnswer, LeafClientError } from '../../client/src/errors.js'
import { parseIdRanges, type IdRange } from '../../client/src/id-ranges.js'
import type { Clock } from '../../client/src/clock.js'
import { HighWaterMarks } from '../../client/src/high-water.js'
import type { FetchedIds, Mode, Transport } from '../../client/src/transport.js'

// The client's algorithms against a fake transport and a fake clock: no server, no sleeping.

interface Call { server: string, mode: Mode, key: string, count: number, timeoutMs: number }

/** A clock that moves only when told; timers fire as it passes them, sleeping moves it. */
class FakeClock implements Clock {
  t = 0
  private timers: { at: number, fn: () => void, live: boolean }[] = []
  now = (): number => this.t
  sleep = async (ms: number): Promise<void> => { this.advance(ms) }
  timer = (fn: () => void, ms: number): (() => void) => {
    const entry = { at: this.t + ms, fn, live: true }
    this.timers.push(entry)
    return () => { entry.live = false }
  }

  advance (ms: number): void {
    this.t += ms
    for (const e of this.timers.filter((x) => x.live && x.at <= this.t).sort((a, b) => a.at - b.at)) {
      e.live = false
      e.fn()
    }
    this.timers = this.timers.filter((x) => x.live)
  }
}

type Answer = IdRange[] | FetchedIds

/**
 * Answers IDs from one counter per (mode, key), as servers on one database do, or as `answer`
 * says; each server names the instance `instances` gives it (none: no Leaf-Instance header).
 */
class FakeTransport implements Transport {
  calls: Call[] = []
  counters = new Map<string, bigint>()
  answer: ((call: Call) => Promise<Answer> | Answer) | undefined
  instances = new Map<string, string>()
  closed = false

  async fetchIds (server: string, mode: Mode, key: string, count: number, timeoutMs: number): Promise<FetchedIds> {
    const call = { server, mode, key, count, timeoutMs }
    this.calls.push(call)
    const answer = this.answer !== undefined ? await this.answer(call) : this.issue(call)
    return Array.isArray(answer) ? { ranges: answer, instance: this.instances.get(server) } : answer
  }

  issue ({ mode, key, count }: Call, base = 1n): IdRange[] {
    const k = `${mode} ${key}`
    const first = this.counters.get(k) ?? base
    this.counters.set(k, first + BigInt(count))
    return [{ first, last: first + BigInt(count - 1) }]
  }

  async close (): Promise<void> {
    this.closed = true
  }
}

/** A promise and its resolve/reject, for answers the test releases. */
function deferred<T> () {
  let settle!: { resolve: (v: T) => void, reject: (e: unknown) => void }
  const promise = new Promise<T>((resolve, reject) => { settle = { resolve, reject } })
  return { promise, resolve: (v: T) => settle.resolve(v), reject: (e: unknown) => settle.reject(e) }
}

const tick = () => new Promise((resolve) => setImmediate(resolve))

function setup (options: Partial<LeafClientOptions> = {}) {
  const transport = new FakeTransport()
  const clock = new FakeClock()
  const leaf = createLeafClient({ servers: ['http://a:1', 'http://b:2'], transport, clock, ...options })
  return { transport, clock, leaf }
}

t.test('a batch answer is read as runs of consecutive IDs', async (t) => {
  t.same(parseIdRanges('1\n2\n3'), [{ first: 1n, last: 3n }])
  t.same(parseIdRanges('7\n8\n20\n21\n'), [{ first: 7n, last: 8n }, { first: 20n, last: 21n }], 'two runs, a trailing newline')
  t.same(parseIdRanges('999999998\n999999999\n1000000000\n1000000001'), [{ first: 999_999_998n, last: 1_000_000_001n }], 'across the 9-digit carry')
  t.same(parseIdRanges('2127912860469166095\n2127912860469166096\n2127912860473360384'),
    [{ first: 2127912860469166095n, last: 2127912860469166096n }, { first: 2127912860473360384n, last: 2127912860473360384n }], 'snowflake IDs past 2^53, exact')
  t.same(parseIdRanges('9223372036854775806\n9223372036854775807'), [{ first: 9223372036854775806n, last: 9223372036854775807n }], 'int64 max')
  t.same(parseIdRanges('-5\n-4\n-3'), [{ first: -5n, last: -3n }], 'negative IDs (Vesta version 1)')
  for (const bad of ['', '<html>', '1\n\n2', '1\nx', '12345678901234567890123']) t.equal(parseIdRanges(bad), undefined, JSON.stringify(bad))
})

t.test('sizing: Leaf\'s step rule, within the bounds', async (t) => {
  const o = { minBatch: 100, maxBatch: 10_000, targetIntervalMs: 1000 }
  t.equal(nextBatchSize(100, undefined, o), 100, 'the first fetch asks for minBatch')
  t.equal(nextBatchSize(100, 300, o), 200, 'emptied faster than the aim: doubled')
  t.equal(nextBatchSize(8000, 10, o), 10_000, 'never above maxBatch')
  t.equal(nextBatchSize(800, 1500, o), 800, 'between the aim and twice it: kept')
  t.equal(nextBatchSize(800, 2000, o), 400, 'at twice the aim: halved')
  t.equal(nextBatchSize(800, 60_000, o), 400, 'after an idle minute: halved once, not reset')
  t.equal(nextBatchSize(150, 60_000, o), 100, 'never below minBatch')
})

t.test('sizing in the client: a burst grows the batch to maxBatch, an idle minute halves it once', async (t) => {
  const { transport, clock, leaf } = setup({ minBatch: 10, maxBatch: 160 })
  for (let i = 0; i < 1000; i++) {
    if (leaf.tryNextId('segment', 'k') === undefined) await leaf.nextId('segment', 'k')
  }
  t.same(transport.calls.slice(0, 6).map((c) => c.count), [10, 20, 40, 80, 160, 160], 'doubled per fetch while the clock stands still')
  clock.advance(60_000)
  const before = transport.calls.length
  while (transport.calls.length === before) await leaf.nextId('segment', 'k')
  t.equal(transport.calls.at(-1)?.count, 80, 'after a minute idle: half, so the burst is not one round trip per ID')
  t.equal(leaf.stats().keys['segment/k']?.batchSize, 80)
})

t.test('one fetch in flight per key, however many callers wait', async (t) => {
  const { transport, leaf } = setup({ minBatch: 100 })
  const answer = deferred<IdRange[]>()
  transport.answer = () => answer.promise
  const waiting = Array.from({ length: 50 }, () => leaf.nextId('segment', 'k'))
  t.equal(leaf.tryNextId('segment', 'k'), undefined, 'nothing buffered yet')
  await tick()
  t.equal(transport.calls.length, 1, '51 callers, one request')
  transport.answer = undefined
  answer.resolve([{ first: 1n, last: 100n }])
  const ids = await Promise.all(waiting)
  t.same(ids, Array.from({ length: 50 }, (_, i) => BigInt(i + 1)), 'in the order they asked')
  await tick()
  t.equal(transport.calls.length, 2, 'half used: one refill in the background')
  t.equal(leaf.tryNextId('segment', 'k'), 51n, 'the current batch continues')
  t.equal(await leaf.nextId('segment', 'k'), 52n)
  t.equal(leaf.stats().keys['segment/k']?.waits, 50, 'the 50 callers that found it empty waited; calls served from the buffer do not count')
  t.same(await leaf.nextIds('segment', 'other', 3), [1n, 2n, 3n], 'another key has its own buffer and fetch')
  t.equal(leaf.stats().keys['segment/other']?.waits, 1)
})

t.test('a key whose fetches come faster than the aim refills at a batch\'s first take, a cooler one at half', async (t) => {
  const { transport, clock, leaf } = setup({ minBatch: 100, maxBatch: 100 })
  /** Takes `n` IDs of `key`, lets a due refill start, and checks how many fetches were made. */
  const takeThenFetches = async (key: string, n: number, fetches: number, why: string) => {
    for (let i = 0; i < n; i++) if (leaf.tryNextId('segment', key) === undefined) await leaf.nextId('segment', key)
    await tick()
    t.equal(transport.calls.length, fetches, why)
  }
  await takeThenFetches('hot', 50, 2, 'the first batch refills at half')
  await takeThenFetches('hot', 50, 2, 'the second batch is held, not yet current')
  await takeThenFetches('hot', 1, 3, 'fetches 0 ms apart, capped at maxBatch: the third starts at the second batch\'s first take')
  t.equal(leaf.stats().keys['segment/hot']?.waits, 1, 'only the very first call waited')

  await takeThenFetches('cool', 1, 4, 'the cool key\'s first fetch')
  clock.advance(1500) // past the 1 s aim, short of the 2 s that halves the batch
  await takeThenFetches('cool', 99, 5, 'the cool key\'s refill (fetched 1.5 s after its first) is held')
  await takeThenFetches('cool', 1, 5, 'no refill at the first take of a batch fetched at the aim\'s pace')
  await takeThenFetches('cool', 49, 6, 'but at its half')
})

t.test('waiters are served in order, across batches', async (t) => {
  const { transport, leaf } = setup({ minBatch: 4, maxBatch: 4 })
  const gates = [deferred<void>(), deferred<void>()]
  let n = 0
  transport.answer = async (call) => {
    const gate = gates[n++]
    if (gate !== undefined) await gate.promise
    return transport.issue(call)
  }
  const a = leaf.nextIds('segment', 'k', 3)
  const b = leaf.nextId('segment', 'k')
  const c = leaf.nextIds('segment', 'k', 3)
  const d = leaf.nextId('segment', 'k')
  const order: string[] = []
  for (const [name, p] of [['a', a], ['b', b], ['c', c], ['d', d]] as const) p.then(() => order.push(name), () => order.push(`${name} failed`))
  gates[0]?.resolve()
  await tick()
  t.same(order, ['a', 'b'], 'the first batch (1..4) serves a and b; c has one ID and waits')
  gates[1]?.resolve()
  t.same(await a, [1n, 2n, 3n])
  t.equal(await b, 4n)
  t.same(await c, [5n, 6n, 7n], 'c gets the second batch\'s first IDs')
  t.equal(await d, 8n)
  t.same(order, ['a', 'b', 'c', 'd'])
})

t.test('nextIds larger than a batch is filled from several fetches, in order', async (t) => {
  const { transport, leaf } = setup({ minBatch: 100, maxBatch: 1000 })
  const ids = await leaf.nextIds('segment', 'k', 2500)
  t.same(ids, Array.from({ length: 2500 }, (_, i) => BigInt(i + 1)))
  t.ok(transport.calls.every((c) => c.count <= 1000), 'each fetch within maxBatch')
  t.equal(transport.calls[0]?.count, 1000, 'a caller\'s demand sizes the fetch')
  t.same(await leaf.nextIds('segment', 'k', 0), [])
  await t.rejects(leaf.nextIds('segment', 'k', 1.5), RangeError)
})

t.test('batches are held as ranges: a batch of 10^9 IDs costs no array', async (t) => {
  const { leaf } = setup({ minBatch: 1_000_000_000, maxBatch: 1_000_000_000 })
  t.equal(await leaf.nextId('segment', 'k'), 1n)
  t.equal(leaf.stats().keys['segment/k']?.buffered, 999_999_999)
  let last = 1n
  for (let i = 0; i < 100_000; i++) last = leaf.tryNextId('segment', 'k') as bigint
  t.equal(last, 100_001n)
})

t.test('runs and batches are taken in order across the 2^53 line, by every call', async (t) => {
  // One batch of five increasing runs: a run past -2^53 (Vesta's negative IDs), a safe run
  // after it, safe numbers, a run that ends past 2^53 and a run past it; then the prefetched
  // batch (lower: another instance's behind the same URL), taken by the switch inside the hot path.
  const safeTop = BigInt(Number.MAX_SAFE_INTEGER)
  const runs: FetchedIds[] = [
    { ranges: [{ first: -(2n ** 60n), last: -(2n ** 60n) }, { first: -20n, last: -20n }, { first: 10n, last: 11n }, { first: safeTop - 1n, last: safeTop + 1n }, { first: 2n ** 60n, last: 2n ** 60n }], instance: 'x' },
    { ranges: [{ first: 30n, last: 32n }], instance: 'y' },
    { ranges: [{ first: 40n, last: 49n }], instance: 'z' },
  ]
  const { transport, leaf } = setup({ minBatch: 4, maxBatch: 4 })
  transport.answer = () => runs.shift() ?? []
  const got: bigint[] = [await leaf.nextId('segment', 'k')]
  await tick()
  t.equal(leaf.tryNextNumber('segment', 'k'), -20, 'a safe run after one past 2^53 is a number again')
  got.push(leaf.tryNextId('segment', 'k') as bigint, leaf.tryNextId('segment', 'k') as bigint)
  t.throws(() => leaf.tryNextNumber('segment', 'k'), { code: 'UNSAFE_INTEGER' }, 'past 2^53 a number is refused...')
  got.push(leaf.tryNextId('segment', 'k') as bigint, await leaf.nextId('segment', 'k'), leaf.tryNextId('segment', 'k') as bigint, leaf.tryNextId('segment', 'k') as bigint)
  await tick() // the refill (started at half the batch) answers while the first batch is served
  t.equal(await leaf.nextNumber('segment', 'k'), 30, '...and the prefetched batch follows, as a number again')
  got.push(...await leaf.nextIds('segment', 'k', 2))
  t.same(got, [-(2n ** 60n), 10n, 11n, safeTop - 1n, safeTop, safeTop + 1n, 2n ** 60n, 31n, 32n])
  await tick()
  t.equal(leaf.tryNextId('segment', 'k'), 40n, 'the next prefetch')
  t.equal(transport.calls.length, 3, 'one fetch per batch')
})

t.test('a snowflake batch is dropped once snowflakeMaxAgeMs old', async (t) => {
  const { transport, clock, leaf } = setup({ minBatch: 100, snowflakeMaxAgeMs: 1000 })
  transport.answer = (call) => transport.issue(call, 5_000_000_000_000_000_000n)
  clock.t = 10_000
  t.equal(await leaf.nextId('snowflake', 'k'), 5_000_000_000_000_000_000n)
  clock.advance(999)
  t.equal(leaf.tryNextId('snowflake', 'k'), 5_000_000_000_000_000_001n, '999 ms after the request: still served')
  clock.advance(1)
  t.equal(leaf.tryNextId('snowflake', 'k'), undefined, '1,000 ms: dropped, a fetch starts')
  t.equal(leaf.stats().keys['snowflake/k']?.droppedIds, 98)
  t.equal(await leaf.nextId('snowflake', 'k'), 5_000_000_000_000_000_100n, 'a fresh batch')

  // A prefetched next batch ages too: it is dropped when its turn comes too late.
  const ids = await leaf.nextIds('snowflake', 'k', 60) // past half: the refill runs
  t.equal(ids.length, 60)
  await tick()
  t.equal(transport.calls.length, 3, 'the refill came back')
  clock.advance(1500)
  t.equal(leaf.tryNextId('snowflake', 'k'), undefined, 'current and next batch too old')
  t.equal(transport.calls[2]?.count, 200, 'the refill came fast: twice the size')
  t.equal(leaf.stats().keys['snowflake/k']?.droppedIds, 98 + 39 + 200)
  const segment = await leaf.nextId('segment', 'k')
  clock.advance(3_600_000)
  t.equal(leaf.tryNextId('segment', 'k'), segment + 1n, 'segment IDs never age')
})

t.test('tryNextNumber: a number below 2^53 with no bigint, UNSAFE_INTEGER past it', async (t) => {
  const { transport, leaf } = setup()
  t.equal(await leaf.nextNumber('segment', 'k'), 1)
  t.equal(leaf.tryNextNumber('segment', 'k'), 2)
  t.equal(leaf.tryNextId('segment', 'k'), 3n, 'the same buffer')
  transport.answer = (call) => transport.issue(call, 2n ** 60n)
  await leaf.nextId('snowflake', 'k')
  t.throws(() => leaf.tryNextNumber('snowflake', 'k'), { code: 'UNSAFE_INTEGER' })
  t.equal(leaf.tryNextId('snowflake', 'k'), 2n ** 60n + 1n, 'the refused ID is kept for a bigint caller')
  t.equal(await leaf.nextIdString('snowflake', 'k'), String(2n ** 60n + 2n))
  t.same(await leaf.nextIdStrings('segment', 'k', 2), ['4', '5'])
})

t.test('KEY_NOT_FOUND is a LeafClientError with code, status and server, not retried', async (t) => {
  const { transport, leaf } = setup()
  transport.answer = (call) => { throw errorFromAnswer(404, '{"error":"KEY_NOT_FOUND","message":"The key is not in the leaf_alloc table."}', call.server) }
  const waiting = [leaf.nextId('segment', 'nope'), leaf.nextIds('segment', 'nope', 5)]
  for (const p of waiting) {
    const err = await p.catch((e: unknown) => e)
    t.ok(err instanceof LeafClientError)
    t.match(err, { code: 'KEY_NOT_FOUND', status: 404, server: 'http://a:1', attempts: 1, retryable: false })
  }
  t.equal(transport.calls.length, 1, 'one request, no other server asked')
  t.equal(errorFromAnswer(502, '<html>bad gateway</html>', 'http://a:1').code, 'BAD_RESPONSE', 'an error without Leaf\'s body')
})

t.test('SEGMENTS_NOT_READY and network errors go to the next server within the call', async (t) => {
  for (const failure of [
    (server: string) => errorFromAnswer(503, '{"error":"SEGMENTS_NOT_READY","message":"Both segments are used up."}', server),
    (server: string) => new LeafClientError('NETWORK', `${server}: ECONNREFUSED`, { server }),
  ]) {
    const { transport, leaf } = setup({ prefetch: false })
    transport.answer = (call) => {
      if (call.server === 'http://a:1') throw failure(call.server)
      return transport.issue(call)
    }
    t.equal(await leaf.nextId('segment', 'k'), 1n, 'answered by b')
    t.same(transport.calls.map((c) => c.server), ['http://a:1', 'http://b:2'])
    t.equal(await leaf.nextId('segment', 'k'), 2n)
    t.same(transport.calls.map((c) => c.server), ['http://a:1', 'http://b:2', 'http://b:2'], 'a is skipped while in its backoff')
    t.match(leaf.stats().servers, [{ server: 'http://a:1', failures: 1, down: true }, { server: 'http://b:2', failures: 0, down: false }])
  }
})

t.test('retries stop at the call\'s time budget', async (t) => {
  for (const prefetch of [false, true]) {
    const { transport, clock, leaf } = setup({ prefetch, timeoutMs: 1000, requestTimeoutMs: 300, backoffMs: 50, maxBackoffMs: 200 })
    transport.answer = (call) => {
      clock.advance(Math.min(call.timeoutMs, 120)) // each request takes 120 ms to fail
      throw errorFromAnswer(503, '{"error":"SEGMENTS_NOT_READY","message":"not ready"}', call.server)
    }
    const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
    t.match(err, { code: 'SEGMENTS_NOT_READY', status: 503 }, `prefetch ${prefetch}: the last server's answer`)
    t.ok(clock.t <= 1000, `gave up within the budget (at ${clock.t} ms)`)
    t.ok(transport.calls.length >= 4, `retried: ${transport.calls.length} requests`)
    t.ok(transport.calls.every((c) => c.timeoutMs <= 300), 'each request within requestTimeoutMs')
    const asked = transport.calls.length
    clock.advance(5000)
    await tick()
    t.equal(transport.calls.length, asked, 'no request after the call gave up')
  }
})

t.test('a hung server times out per request and the next one answers', async (t) => {
  const { transport, clock, leaf } = setup({ prefetch: false, timeoutMs: 3000, requestTimeoutMs: 2000 })
  transport.answer = (call) => {
    if (call.server === 'http://a:1') {
      clock.advance(call.timeoutMs)
      throw new LeafClientError('TIMEOUT', `${call.server}: no answer within ${call.timeoutMs} ms`, { server: call.server })
    }
    return transport.issue(call)
  }
  t.equal(await leaf.nextId('segment', 'k'), 1n)
  t.same(transport.calls.map((c) => [c.server, c.timeoutMs]), [['http://a:1', 2000], ['http://b:2', 1000]], 'a gets requestTimeoutMs, b what is left of the budget')
})

t.test('a call ends at its deadline even when its request does not (a transport that ignores its timeout)', async (t) => {
  for (const prefetch of [true, false]) {
    const { transport, clock, leaf } = setup({ prefetch, timeoutMs: 1000 })
    const hang = deferred<IdRange[]>()
    transport.answer = () => hang.promise
    let outcome: unknown = 'pending'
    leaf.nextId('segment', 'k').then((id) => { outcome = id }, (err: unknown) => { outcome = err })
    clock.advance(999)
    await tick()
    t.equal(outcome, 'pending', `prefetch ${prefetch}: still waiting 1 ms before its deadline`)
    clock.advance(1)
    await tick()
    t.match(outcome, { code: 'TIMEOUT', message: /within 1000 ms/ }, `prefetch ${prefetch}: TIMEOUT at timeoutMs`)
    hang.resolve([{ first: 1n, last: 1n }])
  }
})

// (Without prefetch: with it, the buffer's refill retries against this fake clock without end.
// test/e2e/client-process-life.test.ts meets the prefetch path's case against a refused port.)
t.test('a request the budget cut short does not hide the failures before it', async (t) => {
  const prefetch = false
  const { transport, clock, leaf } = setup({ prefetch, timeoutMs: 1000, requestTimeoutMs: 2000, backoffMs: 450, maxBackoffMs: 450 })
  // Refused at once while the budget allows a full request; a request sent with under 100 ms of
  // the budget left gets no answer in it (its error comes before the call's deadline timer).
  transport.answer = (call) => {
    if (call.timeoutMs >= 100) throw new LeafClientError('NETWORK', `${call.server}: ECONNREFUSED`, { server: call.server })
    throw new LeafClientError('TIMEOUT', `${call.server}: no answer within ${call.timeoutMs} ms`, { server: call.server })
  }
  const pending = leaf.nextId('segment', 'k').catch((e: unknown) => e)
  for (let ms = 0; ms < 1100; ms += 10) {
    clock.advance(10)
    await tick()
  }
  const err = await pending as LeafClientError
  t.ok(transport.calls.some((c) => c.timeoutMs < 100), `prefetch ${prefetch}: a request was sent with the budget's last ms (${transport.calls.map((c) => c.timeoutMs).join(', ')} ms)`)
  t.match(err, { code: 'NETWORK', message: /within 1000 ms.*ECONNREFUSED/ }, `prefetch ${prefetch}: the refusals' code, not the cut request's TIMEOUT`)
})

t.test('every server down: the call fails once each has failed, with the last error', async (t) => {
  const { transport, leaf } = setup({ prefetch: false, timeoutMs: 1000, backoffMs: 2000 })
  transport.answer = (call) => { throw new LeafClientError('NETWORK', `${call.server}: ECONNREFUSED`, { server: call.server }) }
  const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
  t.match(err, { code: 'NETWORK', status: 0, server: 'http://b:2', attempts: 2, retryable: true })
  t.same(transport.calls.map((c) => c.server), ['http://a:1', 'http://b:2'], 'each once; the backoff outlasts the budget')
  transport.answer = undefined
  t.equal(await leaf.nextId('segment', 'k'), 1n, 'a new call tries the servers in their backoff rather than failing unasked')
})

/** The transport's error for a connection the server refused: NETWORK, the socket's error as its cause. */
function refusal (server: string, code = 'ECONNREFUSED'): LeafClientError {
  return new LeafClientError('NETWORK', `${server}: ${code}`, { server, cause: Object.assign(new Error(`connect ${code}`), { code }) })
}

t.test('every server refuses the connection: UNREACHABLE after refusedRounds rounds, long before timeoutMs', async (t) => {
  for (const prefetch of [false, true]) {
    for (const rounds of [2, 3]) {
      const what = `prefetch ${prefetch}, ${rounds} rounds`
      const { transport, clock, leaf } = setup({ servers: ['http://a:1', 'http://b:2', 'http://c:3'], prefetch, timeoutMs: 10_000, backoffMs: 100, refusedRounds: rounds })
      transport.answer = (call) => { throw refusal(call.server) }
      const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
      const pauses = rounds === 2 ? 100 : 300
      t.match(err, { code: 'UNREACHABLE', status: 0, attempts: 3 * rounds, retryable: true }, what)
      t.equal(err.message, `3 servers refused the connection (${3 * rounds} attempts in ${pauses} ms): http://a:1, http://b:2, http://c:3; check that Leaf-TS runs there and that these are its address and port`, `${what}: the servers, the attempts and how long`)
      t.match(err.cause, { code: 'NETWORK', message: /ECONNREFUSED/ }, `${what}: the last refusal as its cause`)
      t.equal(clock.t, pauses, `${what}: the rounds' pauses (100 ms, doubling) and no more`)
      const servers = transport.calls.map((c) => c.server)
      t.same([...servers].sort(), Array.from({ length: rounds }, () => ['http://a:1', 'http://b:2', 'http://c:3']).flat().sort(), `${what}: each server ${rounds} times`)
      t.equal(leaf.stats().requests, 3 * rounds)
      clock.advance(20_000)
      await tick()
      t.equal(transport.calls.length, 3 * rounds, `${what}: nothing asked after the error`)
    }
  }
})

t.test('a refusal with a pause past the budget ends the call then, with UNREACHABLE', async (t) => {
  const { transport, clock, leaf } = setup({ prefetch: false, timeoutMs: 50, backoffMs: 100 })
  transport.answer = (call) => { throw refusal(call.server, call.server === 'http://a:1' ? 'ENOTFOUND' : 'ECONNREFUSED') }
  const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
  t.match(err, { code: 'UNREACHABLE', attempts: 2 })
  t.match(err.message, /^2 servers could not be connected to \(2 attempts in 0 ms\): http:\/\/a:1 \(ENOTFOUND\), http:\/\/b:2 \(ECONNREFUSED\);/, 'a name that does not resolve is named')
  t.equal(clock.t, 0)
})

t.test('a refusal beside another failure is no fail fast: the call retries until timeoutMs', async (t) => {
  for (const other of [
    (server: string) => errorFromAnswer(503, '{"error":"SEGMENTS_NOT_READY","message":"not ready"}', server),
    (server: string) => new LeafClientError('TIMEOUT', `${server}: no answer within 200 ms`, { server }),
    // A reset is not a refusal: the request may have reached the server.
    (server: string) => new LeafClientError('NETWORK', `${server}: ECONNRESET`, { server, cause: Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }) }),
  ]) {
    const { transport, clock, leaf } = setup({ prefetch: false, timeoutMs: 1000, requestTimeoutMs: 200, backoffMs: 50, maxBackoffMs: 100 })
    transport.answer = (call) => {
      clock.advance(10)
      throw call.server === 'http://a:1' ? refusal(call.server) : other(call.server)
    }
    const err = await leaf.nextId('segment', 'k').catch((e: unknown) => e) as LeafClientError
    const code = other('http://b:2').code
    t.not(err.code, 'UNREACHABLE', `${code}: not UNREACHABLE`)
    t.ok(clock.t >= 700, `${code}: retried until the budget was nearly spent (${clock.t} ms)`)
    t.ok(transport.calls.length > 4, `${code}: past two rounds (${transport.calls.length} requests)`)
  }
})

t.test('round-robin alternates servers per fetch; sticky keeps a key on its server until it fails', async (t) => {
  const rr = setup({ prefetch: false })
  for (let i = 0; i < 4; i++) await rr.leaf.nextId('segment', 'k')
  t.same(rr.transport.calls.map((c) => c.server), ['http://a:1', 'http://b:2', 'http://a:1', 'http://b:2'])

  const sticky = setup({ prefetch: false, balance: 'sticky' })
  let down = ''
  sticky.transport.answer = (call) => {
    if (call.server === down) throw new LeafClientError('NETWORK', 'down', { server: call.server })
    return sticky.transport.issue(call)
  }
  const first: bigint[] = []
  for (let i = 0; i < 3; i++) first.push(await sticky.leaf.nextId('segment', 'k'))
  t.same(first, [1n, 2n, 3n], 'one server: increasing')
  t.same(sticky.transport.calls.map((c) => c.server), ['http://a:1', 'http://a:1', 'http://a:1'])
  down = 'http://a:1'
  t.equal(await sticky.leaf.nextId('segment', 'k'), 4n, 'after the failover, from b')
  t.same(sticky.transport.calls.slice(3).map((c) => c.server), ['http://a:1', 'http://b:2'])
})

t.test('a server\'s lower leaf.batch.max is learnt from INVALID_COUNT', async (t) => {
  const { transport, leaf } = setup({ minBatch: 1000, maxBatch: 10_000 })
  transport.answer = (call) => {
    if (call.count > 500) throw errorFromAnswer(400, '{"error":"INVALID_COUNT","message":"count must be an integer from 1 to 500."}', call.server)
    return transport.issue(call)
  }
  t.same(await leaf.nextIds('segment', 'k', 3), [1n, 2n, 3n])
  t.same(transport.calls.map((c) => c.count), [1000, 500])
  const err = await setup().leaf.nextIds('segment', 'k', 1).then(() => undefined)
  t.equal(err, undefined)
  const bad = setup()
  bad.transport.answer = (call) => { throw errorFromAnswer(400, '{"error":"INVALID_KEY","message":"The key must be 1 to 128 characters long."}', call.server) }
  await t.rejects(bad.leaf.nextId('segment', 'k'), { code: 'INVALID_KEY', status: 400 }, 'another 400 is passed on')
  t.equal(bad.transport.calls.length, 1)
})

t.test('close() rejects waiting callers with CLOSED, drops the buffers and closes the transport', async (t) => {
  const { transport, leaf } = setup()
  await leaf.nextId('segment', 'k')
  const hang = deferred<IdRange[]>()
  transport.answer = () => hang.promise
  const waiting = leaf.nextIds('segment', 'k', 1000)
  await leaf.close()
  await t.rejects(waiting, { code: 'CLOSED' })
  t.ok(transport.closed)
  t.throws(() => leaf.tryNextId('segment', 'k'), { code: 'CLOSED' })
  await t.rejects(leaf.nextId('segment', 'k'), { code: 'CLOSED' })
  hang.resolve([{ first: 500n, last: 600n }])
  await leaf.close()
})

t.test('options are checked at creation', async (t) => {
  const transport = new FakeTransport()
  t.throws(() => createLeafClient({ servers: [], transport }), TypeError)
  t.throws(() => createLeafClient({ servers: ['not a url'], transport }), TypeError)
  t.throws(() => createLeafClient({ servers: ['ftp://x'], transport }), TypeError)
  t.throws(() => createLeafClient({ servers: ['http://a', 'http://a'], transport }), TypeError)
  t.throws(() => createLeafClient({ servers: ['http://a'], transport, minBatch: 20, maxBatch: 10 }), RangeError)
  t.throws(() => createLeafClient({ servers: ['http://a'], transport, timeoutMs: 0 }), RangeError)
  t.throws(() => createLeafClient({ servers: ['http://a'], transport, refusedRounds: 0 }), { name: 'RangeError', message: /refusedRounds/ })
  const leaf = createLeafClient({ servers: ['http://a'], transport })
  await t.rejects(leaf.nextId('other' as Mode, 'k'), TypeError)
})

/** The process warnings the client emits while `fn` runs (emitWarning delivers them on the next tick). */
async function warningsDuring (fn: () => Promise<void>): Promise<Error[]> {
  const seen: Error[] = []
  const listener = (w: Error) => { if (w.name === 'LeafClientWarning') seen.push(w) }
  process.on('warning', listener)
  try {
    await fn()
    await tick()
  } finally {
    process.off('warning', listener)
  }
  return seen
}

t.test('an instance that goes back is refused (ID_REGRESSION), counted, warned of once, and the next server answers', async (t) => {
  for (const mode of ['segment', 'snowflake'] as const) {
    for (const prefetch of [true, false]) {
      const { transport, leaf } = setup({ prefetch, minBatch: 10, maxBatch: 10 })
      transport.instances.set('http://a:1', 'leaf-a:8080').set('http://b:2', 'leaf-b:8080')
      // a restarts on a fresh store after its first answer: each later answer starts at 1
      // again; b has its own range.
      let bNext = 1000n
      transport.answer = (call) => {
        const first = call.server === 'http://a:1' ? 1n : bNext
        if (call.server === 'http://b:2') bNext += BigInt(call.count)
        return [{ first, last: first + BigInt(call.count - 1) }]
      }
      const ids: bigint[] = []
      const warnings = await warningsDuring(async () => {
        for (let i = 0; i < 40; i++) ids.push(await leaf.nextId(mode, 'k'))
      })
      const what = `${mode}, prefetch ${prefetch}`
      t.equal(new Set(ids).size, ids.length, `${what}: no ID handed out twice`)
      const fromA = ids.filter((id) => id < 1000n)
      t.same(fromA, Array.from({ length: prefetch ? 10 : 1 }, (_, i) => BigInt(i + 1)), `${what}: a's first answer, then only b's IDs`)
      const [a, b] = leaf.stats().servers
      t.ok((a?.refused ?? 0) >= 1, `${what}: a's answers that went back are counted (${a?.refused})`)
      t.equal(a?.failures, a?.refused, `${what}: as failures`)
      t.equal(a?.ids, fromA.length, `${what}: only a's first answer counted as IDs`)
      t.same(a?.instances, ['leaf-a:8080'])
      t.equal(b?.refused, 0)
      t.equal(leaf.stats().refused, a?.refused)
      t.equal(warnings.length, 1, `${what}: one warning, however many refusals`)
      t.match(warnings[0], { code: 'ID_REGRESSION', message: new RegExp(`http://a:1: 200 refused: IDs from 1, at or below ${fromA.length}, the highest this client took from leaf-a:8080 for ${mode}/k: the instance went back`) })
    }
  }
})

t.test('the only server goes back: the caller gets ID_REGRESSION, never a repeated ID; past its mark it serves again', async (t) => {
  for (const prefetch of [true, false]) {
    const { transport, clock, leaf } = setup({ servers: ['http://a:1'], prefetch, minBatch: 10, maxBatch: 10, timeoutMs: 1000, backoffMs: 100 })
    transport.instances.set('http://a:1', 'leaf-a:8080')
    t.same(await leaf.nextIds('segment', 'k', 10), Array.from({ length: 10 }, (_, i) => BigInt(i + 1)))
    await tick() // a refill (prefetch) comes back before the restart
    const taken = (transport.counters.get('segment k') as bigint) - 1n
    // Restarted on a fresh store: from 1 again, every time.
    transport.answer = (call) => [{ first: 1n, last: BigInt(call.count) }]
    const ids: bigint[] = []
    let failed: unknown
    const warnings = await warningsDuring(async () => {
      while (failed === undefined && ids.length < 100) {
        const state: { outcome: unknown } = { outcome: 'pending' }
        const call = leaf.nextId('segment', 'k').then((id) => { state.outcome = id }, (err: unknown) => { state.outcome = err })
        for (let ms = 0; ms < 1100 && state.outcome === 'pending'; ms += 50) {
          clock.advance(50)
          await tick()
        }
        await call
        if (typeof state.outcome === 'bigint') ids.push(state.outcome)
        else failed = state.outcome
      }
    })
    t.ok(ids.every((id) => id > 10n && id <= taken), `prefetch ${prefetch}: what was buffered before the restart is served (${ids.length} IDs), nothing of the fresh store's`)
    t.match(failed, { code: 'ID_REGRESSION', status: 200, server: 'http://a:1', retryable: true }, `prefetch ${prefetch}: then the caller gets ID_REGRESSION`)
    t.equal(warnings.length, 1)
    const refused = leaf.stats().servers[0]?.refused ?? 0
    t.ok(refused >= 2, `prefetch ${prefetch}: retried within the budget and refused each time (${refused})`)
    // The fresh store passes the mark: its IDs are above every ID taken from it, so they are served.
    transport.answer = undefined
    transport.counters.set('segment k', taken + 1n)
    clock.advance(5000)
    t.equal(await leaf.nextId('segment', 'k'), taken + 1n, `prefetch ${prefetch}: served again above the mark`)
  }
})

t.test('an answer that repeats an ID or goes back within itself is refused, and the next server answers', async (t) => {
  for (const [body, why] of [['777\n777\n', /777 after 777/], ['5\n6\n3\n4\n', /3 after 6/]] as const) {
    const { transport, leaf } = setup({ prefetch: false })
    transport.answer = (call) => call.server === 'http://a:1' ? parseIdRanges(body) as IdRange[] : transport.issue(call, 100n)
    let ids: bigint[] = []
    const warnings = await warningsDuring(async () => { ids = await leaf.nextIds('segment', 'k', 4) })
    t.same(ids, [100n, 101n, 102n, 103n], `${JSON.stringify(body)}: b's IDs`)
    t.equal(leaf.stats().servers[0]?.refused, 1)
    t.match(warnings[0]?.message, why)
  }
  const marks = new HighWaterMarks()
  t.match(marks.accept(marks.sent('segment/k'), 'i', [{ first: 5n, last: 4n }]), /a run from 5 down to 4/, 'a reversed run (a transport\'s own)')
  t.equal(marks.accept(marks.sent('segment/k'), 'i', []), undefined, 'an empty answer has nothing to refuse')
})

t.test('marks are per instance: two instances behind one URL each keep theirs; a URL without the header is one instance', async (t) => {
  // A load balancer's URL in front of two instances on their own ranges, answering in turn.
  for (const named of [true, false]) {
    const { transport, leaf } = setup({ servers: ['http://lb:1'], prefetch: false, minBatch: 5, maxBatch: 5, timeoutMs: 1000 })
    const next = [1n, 1_000_000n]
    let turn = 0
    transport.answer = (call) => {
      const i = turn++ % 2
      const first = next[i] as bigint
      next[i] = first + BigInt(call.count)
      return { ranges: [{ first, last: first + BigInt(call.count - 1) }], instance: named ? `leaf-${i}` : undefined }
    }
    const got = []
    for (let i = 0; i < 4; i++) got.push(await leaf.nextIds('segment', 'k', 5).then((ids) => ids[0], (err: LeafClientError) => err.code))
    if (named) {
      t.same(got, [1n, 1_000_000n, 6n, 1_000_005n], 'each instance\'s answers increase: all served')
      t.same(leaf.stats().servers[0]?.instances, ['leaf-0', 'leaf-1'])
    } else {
      t.same(got.slice(0, 2), [1n, 1_000_000n], 'without names, one mark for the URL')
      t.equal(got[2], 1_000_005n, 'the other instance\'s lower answer (6..10) is refused, the retry gets the higher one')
      t.ok((leaf.stats().servers[0]?.refused ?? 0) >= 1)
      t.same(leaf.stats().servers[0]?.instances, ['http://lb:1'], 'the URL stands for the instance')
    }
  }
})

t.test('requests under way at once: answers in any order are served, one that overlaps or goes back is refused', async (t) => {
  const { transport, leaf } = setup({ servers: ['http://a:1'], prefetch: false })
  transport.instances.set('http://a:1', 'leaf-a')
  const answers = [deferred<IdRange[]>(), deferred<IdRange[]>()]
  let n = 0
  transport.answer = () => (answers[n++] as { promise: Promise<IdRange[]> }).promise
  const first = leaf.nextIds('segment', 'k', 3)
  const second = leaf.nextIds('segment', 'k', 3)
  await tick()
  answers[1]?.resolve([{ first: 4n, last: 6n }]) // the later request answered first
  answers[0]?.resolve([{ first: 1n, last: 3n }])
  t.same(await Promise.all([first, second]), [[1n, 2n, 3n], [4n, 5n, 6n]], 'answers crossing on the way: both served')

  const marks = new HighWaterMarks()
  const a = marks.sent('segment/k')
  const b = marks.sent('segment/k')
  t.equal(marks.accept(b, 'i', [{ first: 301n, last: 400n }]), undefined)
  t.match(marks.accept(a, 'i', [{ first: 350n, last: 360n }]), /overlap 301\.\.400/, 'an answer overlapping one taken while it was under way')
  const c = marks.sent('segment/k')
  t.match(marks.accept(c, 'i', [{ first: 200n, last: 250n }]), /at or below 400/, 'an answer sent after 400 arrived must be above it')
  t.equal(marks.accept(marks.sent('segment/k'), 'j', [{ first: 200n, last: 250n }]), undefined, 'another instance has its own mark')
  t.equal(marks.accept(marks.sent('snowflake/k'), 'i', [{ first: 200n, last: 250n }]), undefined, 'another key too')
  const d = marks.sent('segment/k')
  const e = marks.sent('segment/k')
  marks.ended(d) // failed: no answer
  t.equal(marks.accept(e, 'i', [{ first: 401n, last: 500n }]), undefined)
  t.match(marks.accept(marks.sent('segment/k'), 'i', [{ first: 500n, last: 600n }]), /at or below 500/)
})

t.test('a server\'s error code and message come through as they are, whatever the code', async (t) => {
  const body = '{"error":"SEGMENTS_HELD","message":"Allocations are held after a store failover until 2025-01-01T00:00:03.000Z."}'
  for (const prefetch of [true, false]) {
    const { transport, clock, leaf } = setup({ servers: ['http://a:1'], prefetch, timeoutMs: 1000 })
    transport.answer = (call) => { throw errorFromAnswer(503, body, call.server) }
    const state: { outcome: unknown } = { outcome: 'pending' }
    const call = leaf.nextId('segment', 'k').then((id) => { state.outcome = id }, (err: unknown) => { state.outcome = err })
    for (let ms = 0; ms < 1100 && state.outcome === 'pending'; ms += 50) {
      clock.advance(50)
      await tick()
    }
    await call
    const outcome = state.outcome
    t.match(outcome, { code: 'SEGMENTS_HELD', status: 503, server: 'http://a:1', retryable: true }, `prefetch ${prefetch}: the server's code`)
    t.match((outcome as Error).message, 'Allocations are held after a store failover until 2025-01-01T00:00:03.000Z.', `prefetch ${prefetch}: and its message, unchanged`)
  }
})

t.test('with prefetch, a caller whose servers all fail gets its error at its deadline, without asking them again and again until then', async (t) => {
  const { transport, clock, leaf } = setup({ servers: ['http://a:1'], timeoutMs: 1000, backoffMs: 400, maxBackoffMs: 400 })
  transport.answer = (call) => {
    // A busy loop would ask on and on within the same fake millisecond: it ends here, with an ID.
    if (transport.calls.length > 50) return [{ first: 1n, last: 1n }]
    throw errorFromAnswer(503, '{"error":"STORE_UNAVAILABLE","message":"down"}', call.server)
  }
  const state: { outcome: unknown } = { outcome: 'pending' }
  const call = leaf.nextId('segment', 'k').then((id) => { state.outcome = id }, (err: unknown) => { state.outcome = err })
  for (let ms = 0; ms < 1100 && state.outcome === 'pending'; ms += 50) {
    clock.advance(50)
    await tick()
  }
  await call
  t.match(state.outcome, { code: 'STORE_UNAVAILABLE', status: 503 }, 'the server\'s failure')
  t.equal(clock.t, 1000, 'at timeoutMs')
  t.ok(transport.calls.length <= 4, `asked ${transport.calls.length} times in a budget of 1000 ms with a 400 ms backoff`)
})
