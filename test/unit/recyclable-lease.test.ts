import { Writable } from 'node:stream'
import pino from 'pino'
import t, { type Test } from 'tap'
import { UnansweredStatement } from '../../src/database/errors.js'
import { LeafError, LeaseRefused } from '../../src/errors.js'
import { writeWorkerCache, readWorkerCache } from '../../src/snowflake/worker-id/cache-file.js'
import type { Claimed, LeaseStore, PoolSlot } from '../../src/snowflake/worker-id/lease-store.js'
import { acquireRecyclableLease, type RecyclableLease } from '../../src/snowflake/worker-id/recyclable/recyclable-lease.js'
import { fenceMarginMs, type ClaimResult, type RecyclableLeaseOptions } from '../../src/snowflake/worker-id/recyclable/recyclable-lease-options.js'
import { createSnowflakeGenerator } from '../../src/snowflake/snowflake-generator.js'
import { tempDir } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { fakeTime, sleep } from '../helpers/time.js'
import { channels } from '../../src/channels.js'

// Unit tests of the lease protocol over an in-memory pool. The pool judges expiry by its own
// clock (Date.now, as a store would); the lease's monotonic clock is injected, so a pause or a
// slow answer is a jump of a number, not a sleep.

interface Row { owner: string | null, expiresAt: number, issuedUntil: number, by: string | undefined, generation?: number }

/** An in-memory LeaseStore with the real pools' rules (see db-lease-store.ts, zookeeper-lease-store.ts). */
class FakePool implements LeaseStore {
  readonly where = 'fake://pool'
  rows = new Map<number, Row>()
  /** Every claim, in order: the worker ids asked for. */
  claims: number[] = []
  /** Ids whose claim another claimant wins, whatever the row says (a lost race). */
  losing = new Set<number>()
  /** When set, renewals are answered only once it resolves. */
  renewGate: Promise<void> | undefined
  /** This many renewals fail (the store does not answer) before they work again. */
  failRenewals = 0
  /** This many claims fail (a lock wait, a lost connection) before they work again. */
  failClaims = 0
  /** This many claims are applied, but their answer is lost (they reject). */
  claimsLandButFail = 0
  /** This many claims are held in the network: they reject as unanswered (may still run) and run when heldClaims are called. */
  holdClaims = 0
  readonly heldClaims: (() => void)[] = []
  /** Each call yields this many times to the event loop first, at random: races interleave. */
  jitter = 0
  closed = false
  /** How long a claim or renewal holds in the store; the TTL unless set. */
  grantMs: number | undefined
  /**
   * As the db-lease pool: held and expired rows carry a version (owner, generation, expiry), and
   * an expired holder is taken over only by a claim that names the version it saw.
   */
  versioned = false
  /** While set, releases get no answer (they reject after 5 ms) and are kept here, to be run late. */
  holdReleases = false
  readonly heldReleases: (() => void)[] = []

  constructor (public ttl: number, rows: Record<number, Partial<Row>> = {}) {
    for (const [id, row] of Object.entries(rows)) this.rows.set(Number(id), { owner: null, expiresAt: Date.now(), issuedUntil: 0, by: undefined, ...row })
  }

  ttlMs (): number { return this.ttl }

  private async pause (): Promise<void> {
    const turns = Math.floor(Math.random() * (this.jitter + 1))
    for (let i = 0; i < turns; i++) await new Promise((resolve) => setImmediate(resolve))
  }

  private version (r: Row): string | undefined {
    return this.versioned && r.owner !== null ? JSON.stringify([r.owner, r.generation ?? 0, r.expiresAt]) : undefined
  }

  async list (min: number, max: number): Promise<PoolSlot[]> {
    await this.pause()
    const now = Date.now()
    return [...this.rows].filter(([id]) => id >= min && id <= max).map(([workerId, r]): PoolSlot =>
      r.owner === null
        ? { workerId, state: 'free', expiresInMs: r.expiresAt - now }
        : { workerId, state: r.expiresAt >= now ? 'held' : 'expired', expiresInMs: r.expiresAt - now, version: this.version(r) })
  }

  /** A holder renewing: its row's version changes. */
  bump (workerId: number): void {
    const row = this.rows.get(workerId) as Row
    row.generation = (row.generation ?? 0) + 1
  }

  async claim (workerId: number, owner: string, _address?: string, from?: string): Promise<Claimed | undefined> {
    await this.pause()
    if (this.failClaims > 0) {
      this.failClaims--
      throw new Error('lock wait timeout')
    }
    this.claims.push(workerId)
    if (this.holdClaims > 0) {
      this.holdClaims--
      this.heldClaims.push(() => { this.claim(workerId, owner, _address, from).catch(() => {}) })
      throw new UnansweredStatement('no answer within the query timeout', { state: 'may-still-run', why: 'no answer' }, { cause: new Error('Query inactivity timeout') })
    }
    if (this.losing.has(workerId)) return undefined
    const now = Date.now()
    const row = this.rows.get(workerId) ?? { owner: null, expiresAt: now, issuedUntil: 0, by: undefined }
    this.rows.set(workerId, row)
    if (row.owner !== null && (row.expiresAt >= now || (this.versioned && from !== this.version(row)))) return undefined
    row.owner = owner
    row.generation = (row.generation ?? 0) + 1
    row.expiresAt = now + (this.grantMs ?? this.ttl)
    if (this.claimsLandButFail > 0) {
      this.claimsLandButFail--
      throw new Error('no answer within the query timeout')
    }
    return { issuedUntil: row.issuedUntil, by: row.by }
  }

  async renew (workerId: number, owner: string, issuedUntil: number): Promise<boolean> {
    await this.renewGate
    if (this.failRenewals > 0) {
      this.failRenewals--
      throw new Error('store down')
    }
    const row = this.rows.get(workerId)
    if (row?.owner !== owner) return false
    row.expiresAt = Date.now() + (this.grantMs ?? this.ttl)
    row.issuedUntil = Math.max(row.issuedUntil, issuedUntil)
    row.by = owner
    row.generation = (row.generation ?? 0) + 1
    return true
  }

  async release (workerId: number, owner: string, issuedUntil: number | undefined, recordedBy: string | undefined): Promise<void> {
    const run = () => {
      const row = this.rows.get(workerId)
      if (row?.owner !== owner) return
      // What the next claim reads: the db-lease pool's released_until of a clean release, or
      // (nothing known) the recorded bound.
      Object.assign(row, { owner: null, expiresAt: Date.now(), issuedUntil: issuedUntil ?? row.issuedUntil, by: issuedUntil === undefined ? row.by : recordedBy, generation: (row.generation ?? 0) + 1 })
    }
    if (!this.holdReleases) return run()
    this.heldReleases.push(run)
    await sleep(5)
    throw new Error('no answer within the query timeout')
  }

  async close (): Promise<void> {
    this.closed = true
  }

  /** The id's holder as the store sees it now. */
  holder (workerId: number): string | null | undefined {
    const row = this.rows.get(workerId)
    return row === undefined || row.owner === null || row.expiresAt < Date.now() ? undefined : row.owner
  }
}

/** A monotonic clock moved only by hand. */
function manualClock (start = 10_000) {
  const m = { now: start, read: () => m.now }
  return m
}

interface Recorded { claims: ClaimResult[], lost: number, changes: [number, number][] }

/** Each options object its own address: the channels' messages are told apart by it. */
let nextPort = 8080

function options (pool: LeaseStore, overrides: Partial<RecyclableLeaseOptions> = {}): RecyclableLeaseOptions & { seen: Recorded } {
  const seen: Recorded = { claims: [], lost: 0, changes: [] }
  const address = overrides.address ?? `10.1.2.3:${nextPort++}`
  // Subscribed for the rest of the file: a lease may publish after its test (a late fence).
  channels.leaseClaim.subscribe((m) => { if (m.address === address) seen.claims.push(m.result) })
  channels.leaseLost.subscribe((m) => { if (m.address === address) seen.lost++ })
  return {
    source: 'db-lease',
    pool,
    address,
    min: 0,
    max: 3,
    cacheDir: tempDir('leaf-lease-'),
    // The longest the pool allows. Tests that count renewals use TTLs longer than they run, and
    // call heartbeat() themselves.
    heartbeatIntervalMs: Math.floor(pool.ttlMs() / 3),
    maxClockDriftMs: 5000,
    clock: Date.now,
    logger: silentLogger,
    ...overrides,
    seen,
  }
}

/** A lease closed when `t` ends, with what its callbacks were told. */
async function lease (t: Test, o: RecyclableLeaseOptions & { seen: Recorded }): Promise<RecyclableLease & { seen: Recorded }> {
  const l = await acquireRecyclableLease(o)
  t.teardown(() => l.close())
  l.whenWorkerChanges((id, notBefore) => o.seen.changes.push([id, notBefore]))
  return Object.assign(l, { seen: o.seen })
}

function checks (l: RecyclableLease, ms = Date.now()): boolean {
  try {
    l.check(ms)
    return true
  } catch (err) {
    if (!(err instanceof LeafError) || err.code !== 'WORKER_LEASE_LOST') throw err
    return false
  }
}

// Time is fake (Date, performance.now, timers) and jumps to the next timer whenever the test
// and the lease wait: a lease's TTL passes in no real time.
t.beforeEach((t) => { fakeTime(t, { auto: true }) })

t.test('the fence margin: a tenth of the TTL, at least 50 ms', async (t) => {
  t.equal(fenceMarginMs(30_000), 3000)
  t.equal(fenceMarginMs(1000), 100)
  t.equal(fenceMarginMs(300), 50)
})

t.test('claim preference: the cached id, then the lowest free id (never leased or released), then the one expired longest ago', async (t) => {
  const now = Date.now()
  // 0 held by a live instance, 1 expired 5 s ago, 2 expired 10 s ago, 3 never leased, 4 released.
  const seed = () => ({
    0: { owner: 'live', expiresAt: now + 60_000 },
    1: { owner: 'gone-1', expiresAt: now - 5000 },
    2: { owner: 'gone-2', expiresAt: now - 10_000 },
    4: { owner: null },
  })
  const range = { min: 0, max: 4 }

  // Every claim loses its race: the attempts show the order, then the start is refused.
  const losing = new FakePool(10_000, seed())
  losing.losing = new Set([0, 1, 2, 3, 4])
  const o = options(losing, range)
  writeWorkerCache(o.cacheDir, { workerId: 2, lastTimestamp: now - 20_000, address: o.address })
  await t.rejects(acquireRecyclableLease(o), { name: 'LeaseRefused', code: 'LEASE_POOL_EXHAUSTED' })
  t.same(losing.claims, [2, 3, 4, 1], 'cached 2 first, then free 3 and 4 in order, then expired 1 (2 not asked twice); live 0 never')
  t.same(o.seen.claims, ['conflict', 'conflict', 'conflict', 'conflict', 'exhausted'])
  t.ok(losing.closed, 'a refused start closes its pool')

  const cases: [string, Record<number, Partial<Row>>, number | undefined, number][] = [
    ['the cached id, though lower free ids exist', seed(), 2, 2],
    ['no cache: the lowest free id, one never leased', seed(), undefined, 3],
    ['a cached id out of [min, max] is ignored', seed(), 9, 3],
    ['a cached id held by a live instance: the next choice', seed(), 0, 3],
    ['no free id: the one expired longest ago', { ...seed(), 3: { owner: 'live', expiresAt: now + 60_000 }, 4: { owner: 'live', expiresAt: now + 60_000 } }, undefined, 2],
  ]
  for (const [what, rows, cached, expected] of cases) {
    const pool = new FakePool(10_000, rows)
    const o = options(pool, range)
    if (cached !== undefined) writeWorkerCache(o.cacheDir, { workerId: cached, lastTimestamp: now - 20_000, address: o.address })
    const l = await lease(t, o)
    t.equal(l.workerId, expected, what)
    t.equal(readWorkerCache(o.cacheDir)?.workerId, expected, `${what}: the cache file names the id taken`)
    t.equal(pool.holder(0), 'live', `${what}: the live holder keeps 0`)
  }
})

t.test('leases racing on one pool never both hold an id', async (t) => {
  for (let round = 0; round < 20; round++) {
    const pool = new FakePool(10_000)
    pool.grantMs = 60_000 // held well past the loser's one-TTL wait: it is refused at once
    pool.jitter = 4
    const results = await Promise.allSettled([0, 1].map(() => acquireRecyclableLease(options(pool, { min: 0, max: 0 }))))
    const won = results.flatMap((r) => r.status === 'fulfilled' ? [r.value] : [])
    const lost = results.flatMap((r) => r.status === 'rejected' ? [r.reason as unknown] : [])
    t.equal(won.length, 1, `round ${round}: one of two wins the only id`)
    t.ok(lost[0] instanceof LeaseRefused, `round ${round}: the other is refused (the id is leased for longer than one TTL)`)
    t.equal((lost[0] as LeaseRefused | undefined)?.code, 'LEASE_POOL_EXHAUSTED')
    for (const l of won) await l.close()
  }

  const pool = new FakePool(10_000)
  pool.grantMs = 60_000
  pool.jitter = 6
  const results = await Promise.allSettled(Array.from({ length: 5 }, () => acquireRecyclableLease(options(pool, { min: 0, max: 2 }))))
  const won = results.flatMap((r) => r.status === 'fulfilled' ? [r.value] : [])
  t.teardown(() => Promise.all(won.map((l) => l.close())))
  t.same(won.map((l) => l.workerId).sort(), [0, 1, 2], 'three ids, three holders')
  t.equal(results.filter((r) => r.status === 'rejected').length, 2, 'the other two are refused')
  t.equal(new Set([0, 1, 2].map((id) => pool.holder(id))).size, 3, 'three distinct owners in the store')
  t.ok(won.every((l) => checks(l)), 'and every holder may issue')
})

t.test('fence: at fenceAt by the monotonic clock check() throws WORKER_LEASE_LOST; a later renewal resumes', async (t) => {
  const mono = manualClock()
  const ttl = 30_000
  const window = ttl - fenceMarginMs(ttl) // 27 s
  const o = options(new FakePool(ttl), { monotonic: mono.read })
  const l = await lease(t, o)
  t.equal(l.status().unavailable, undefined)
  t.ok(l.issuableUntil >= Date.now() + window - 50, 'issuable until about one window ahead by the wall clock')
  mono.now += window - 1
  t.ok(checks(l), 'one millisecond before the fence: still issuing')
  t.equal(o.seen.lost, 0)
  mono.now += 1
  const err = t.throws(() => l.check(Date.now())) as LeafError
  t.ok(err instanceof LeafError)
  t.equal(err.code, 'WORKER_LEASE_LOST')
  t.equal(err.statusCode, 503)
  t.match(l.status(), { unavailable: /no renewal confirmed within the lease time/, leaseExpiresAt: undefined })
  t.equal(l.issuableUntil, -Infinity, 'issuing stops even within the current millisecond')
  t.throws(() => l.extend(Date.now()), { code: 'WORKER_LEASE_LOST' })
  t.notOk(checks(l), 'still stopped')
  t.equal(o.seen.lost, 1, 'told once')

  await l.heartbeat()
  t.equal(l.status().unavailable, undefined, 'renewed: issuing again')
  t.ok(checks(l))
  t.ok(l.issuableUntil > Date.now())
  t.equal(o.seen.lost, 1)
  mono.now += window - 1
  t.ok(checks(l), 'the new fence is a window after the renewal was sent')
  mono.now += 1
  t.notOk(checks(l))
})

t.test('fence reached through extend(): a renewal\'s issuedUntil ends at its fence, and the generator asks extend() first: told as a lost lease', async (t) => {
  const mono = manualClock()
  const ttl = 30_000
  const window = ttl - fenceMarginMs(ttl)
  const o = options(new FakePool(ttl), { monotonic: mono.read })
  const l = await lease(t, o)
  mono.now += window
  const err = t.throws(() => l.extend(l.issuableUntil + 1)) as LeafError
  t.equal(err.code, 'WORKER_LEASE_LOST')
  t.match(err.message, /lost its worker-id lease \(no renewal confirmed within the lease time\)/)
  t.equal(o.seen.lost, 1, 'the loss published, though check() was never reached')
  t.match(l.status(), { unavailable: /no renewal confirmed/, leaseExpiresAt: undefined })
})

t.test('the fence timer fired early by the monotonic clock is armed again, and tells the fence when it is due', async (t) => {
  const mono = manualClock()
  const ttl = 300
  const window = ttl - fenceMarginMs(ttl)
  const pool = new FakePool(ttl)
  const o = options(pool, { monotonic: mono.read, heartbeatIntervalMs: 100 })
  const l = await lease(t, o)
  // No renewal lands from here; the monotonic clock stands still: each firing finds the fence not yet due.
  pool.failRenewals = Infinity
  await sleep(window + 60)
  t.equal(o.seen.lost, 0, 'not due by the monotonic clock: no fence')
  mono.now += window
  await sleep(window + 60)
  t.equal(o.seen.lost, 1, 'the timer, armed again, fenced once the fence was due, with no ID asked')
  t.match(l.status(), { unavailable: /no renewal confirmed/ })
})

t.test('a renewal answered after its own fence does not resume issuing; a timely one does', async (t) => {
  const mono = manualClock()
  const pool = new FakePool(30_000) // window: 27 s
  const o = options(pool, { monotonic: mono.read })
  const l = await lease(t, o)
  let open = () => {}
  pool.renewGate = new Promise((resolve) => { open = resolve })
  mono.now += 500
  const sent = l.heartbeat() // its fence: 500 + 27,000 after the start
  mono.now += 27_000 // the process was paused until then
  open()
  await sent
  t.ok(l.status().unavailable !== undefined, 'the answer proves nothing about now: still stopped')
  t.equal(l.issuableUntil, -Infinity)
  t.notOk(checks(l))
  t.equal(o.seen.lost, 1)

  pool.renewGate = new Promise((resolve) => { open = resolve })
  const late = l.heartbeat()
  mono.now += 26_999
  open()
  await late
  t.equal(l.status().unavailable, undefined, 'answered one millisecond before its fence: issuing again')
  t.ok(checks(l))
  pool.renewGate = undefined
})

t.test('handover: the claimant issues nothing at or before the previous holder\'s issuedUntil', async (t) => {
  const issuedUntil = Date.now() + 300
  const pool = new FakePool(10_000, { 0: { owner: null, issuedUntil, by: 'previous' } })
  const started = Date.now()
  const l = await lease(t, options(pool, { min: 0, max: 0 }))
  t.ok(Date.now() > issuedUntil, `the claim returned only once the clock passed issuedUntil (${Date.now() - started} ms)`)
  t.equal(l.notBefore, issuedUntil + 1)
  t.same(l.seen.claims, ['claimed'])
  t.ok((pool.rows.get(0)?.issuedUntil ?? 0) > issuedUntil, 'the new holder recorded its own issuedUntil')
})

t.test('handover: a previous holder further ahead than max-clock-drift-ms: that id goes back, another is taken', async (t) => {
  const ahead = Date.now() + 60_000
  const pool = new FakePool(10_000, { 0: { owner: null, issuedUntil: ahead, by: 'previous' } })
  const started = Date.now()
  const l = await lease(t, options(pool, { min: 0, max: 1, maxClockDriftMs: 1000 }))
  t.ok(Date.now() - started < 1000, 'without waiting for it')
  t.equal(l.workerId, 1)
  t.same(l.seen.claims, ['drift', 'claimed'])
  t.match(pool.rows.get(0), { owner: null, issuedUntil: ahead }, 'id 0 released, its issuedUntil kept')
  t.equal(l.notBefore, 1)
})

t.test('handover: a previous holder ahead by less than max-clock-drift-ms plus what it may borrow is waited for, not taken for drift', async (t) => {
  const issuedUntil = Date.now() + 300
  const pool = new FakePool(10_000, { 0: { owner: null, issuedUntil, by: 'previous' } })
  const l = await lease(t, options(pool, { min: 0, max: 1, maxClockDriftMs: 100, aheadMs: 400 }))
  t.equal(l.workerId, 0, 'the same id: 300 ms ahead is within 100 ms of drift plus 400 ms recorded ahead by design')
  t.same(l.seen.claims, ['claimed'])
  t.equal(l.notBefore, issuedUntil + 1)
  t.ok(Date.now() > issuedUntil, 'after its last millisecond')
})

t.test('a range of millions of ids: the pass claims the first free one', async (t) => {
  const pool = new FakePool(10_000, { 0: { owner: 'other', expiresAt: Date.now() + 60_000 } })
  const l = await lease(t, options(pool, { min: 0, max: 2 ** 22 - 1 }))
  t.equal(l.workerId, 1)
  t.same(pool.claims, [1], 'one claim: the held id is passed over, and no other asked for')
})

t.test('re-claiming an id whose record this same lease wrote waits only for what it admitted, not what it was allowed', async (t) => {
  const mono = manualClock()
  // A long TTL: the recorded issuedUntil runs 27 s ahead, past max-clock-drift-ms.
  const pool = new FakePool(30_000)
  const o = options(pool, { min: 0, max: 1, monotonic: mono.read })
  const l = await lease(t, o)
  t.equal(l.workerId, 0)
  const recorded = pool.rows.get(0)?.issuedUntil ?? 0
  t.ok(recorded > Date.now() + 20_000, 'the renewal recorded a window ahead')
  const admitted = Date.now()
  l.check(admitted)
  // The store drops our hold but keeps our record (a ZooKeeper session that expired).
  Object.assign(pool.rows.get(0) as Row, { owner: null })
  const started = Date.now()
  await l.heartbeat()
  t.ok(Date.now() - started < 1000, 'no long wait')
  t.equal(l.workerId, 0, 'the same id: not refused for drift')
  t.equal(l.notBefore, admitted + 1, 'the first millisecond after the last one it began')
  t.same(l.seen.claims, ['claimed', 'reclaimed'])
  t.same(l.seen.changes, [[0, admitted + 1]])
  t.equal(l.seen.lost, 1)
  t.ok(checks(l))
})

t.test('the same record written by another claim is waited out in full', async (t) => {
  const mono = manualClock()
  const pool = new FakePool(30_000)
  const l = await lease(t, options(pool, { min: 0, max: 1, monotonic: mono.read }))
  l.check(Date.now())
  Object.assign(pool.rows.get(0) as Row, { owner: null, by: 'another-claim' })
  await l.heartbeat()
  t.equal(l.workerId, 1, 'id 0\'s record is 27 s ahead: beyond max-clock-drift-ms, so id 1')
  t.same(l.seen.claims, ['claimed', 'drift', 'reclaimed'])
})

t.test('release: records max(clock, admitted) and frees the id; the next holder waits for that millisecond', async (t) => {
  const pool = new FakePool(10_000)
  const first = await acquireRecyclableLease(options(pool, { min: 0, max: 0 }))
  const admitted = Date.now() + 400 // a clock that stepped back after this millisecond began
  first.check(admitted)
  await first.close()
  t.match(pool.rows.get(0), { owner: null, issuedUntil: admitted })
  t.ok(pool.closed, 'the pool closed with the lease')
  t.notOk(checks(first), 'nothing after close')
  t.match(first.status(), { unavailable: 'the lease is closed' })

  const second = await lease(t, options(pool, { min: 0, max: 0 }))
  t.equal(second.notBefore, admitted + 1)
  t.ok(Date.now() > admitted)
  await second.close()
  const released = pool.rows.get(0)?.issuedUntil ?? 0
  t.ok(released >= admitted + 1 && released <= Date.now(), 'a clock ahead of the admitted millisecond: the clock is recorded')
  t.equal(pool.rows.get(0)?.owner, null)
})

t.test('every free id passed over for drift: refused, naming the ids and the clocks, not the pool\'s size', async (t) => {
  const ahead = Date.now() + 60_000
  const pool = new FakePool(600, {
    0: { owner: null, issuedUntil: ahead, by: 'previous' },
    1: { owner: null, issuedUntil: ahead, by: 'previous' },
  })
  const o = options(pool, { min: 0, max: 1, maxClockDriftMs: 1000 })
  const err = await acquireRecyclableLease(o).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused)
  t.equal((err as LeaseRefused).code, 'LEASE_CLOCK_DRIFT')
  t.match((err as Error).message, /no worker id of fake:\/\/pool in \[0, 1\] \(2 ids\) could be leased within leaf\.snowflake\.lease\.ttl-ms \(600 ms\): 2 \(0, 1\) were passed over/)
  t.match((err as Error).message, /max-clock-drift-ms \(1000 ms\) ahead of this clock.*check the clocks/)
  t.notMatch((err as Error).message, /every worker id/)
  t.equal(o.seen.claims.at(-1), 'exhausted')
  t.equal(pool.rows.get(0)?.issuedUntil, ahead, 'the ids went back with their previous holder\'s issuedUntil')
})

t.test('exhausted: waits for the soonest expiry and claims that id', async (t) => {
  const now = Date.now()
  const pool = new FakePool(2000, { 0: { owner: 'a', expiresAt: now + 60_000 }, 1: { owner: 'b', expiresAt: now + 300 } })
  const l = await lease(t, options(pool, { min: 0, max: 1 }))
  t.ok(Date.now() >= now + 300, `claimed once 1 expired (${Date.now() - now} ms)`)
  t.equal(l.workerId, 1)
  t.same(l.seen.claims, ['claimed'])
})

t.test('exhausted for longer than one TTL: refused, naming the pool, its range and size', async (t) => {
  const pool = new FakePool(600, { 0: { owner: 'a' }, 1: { owner: 'b' } })
  // Two live holders renewing every 50 ms.
  const renewing = setInterval(() => { for (const row of pool.rows.values()) row.expiresAt = Date.now() + 200 }, 50)
  t.teardown(() => clearInterval(renewing))
  for (const row of pool.rows.values()) row.expiresAt = Date.now() + 200
  const o = options(pool, { min: 0, max: 1 })
  const started = Date.now()
  const err = await acquireRecyclableLease(o).then(() => undefined, (e: unknown) => e)
  const waited = Date.now() - started
  t.ok(err instanceof LeaseRefused)
  t.equal((err as LeaseRefused).code, 'LEASE_POOL_EXHAUSTED')
  t.match((err as Error).message, /every worker id of fake:\/\/pool in \[0, 1\] \(2 ids\) is leased, and none expires within leaf\.snowflake\.lease\.ttl-ms \(600 ms\)/)
  t.match((err as Error).message, /widen leaf\.snowflake\.worker-id\.min\/max/)
  t.ok(waited >= 350 && waited < 1500, `polled for about one TTL first (${waited} ms)`)
  t.equal(o.seen.claims.at(-1), 'exhausted')
  t.ok(pool.closed)

  const far = new FakePool(600, { 0: { owner: 'a', expiresAt: Date.now() + 60_000 } })
  const at = Date.now()
  await t.rejects(acquireRecyclableLease(options(far, { min: 0, max: 0 })), { name: 'LeaseRefused', code: 'LEASE_POOL_EXHAUSTED', message: /\[0, 0\] \(1 ids\)/ })
  t.ok(Date.now() - at < 300, 'no expiry within one TTL: refused at once')
})

t.test('the store says the id is no longer ours: issuing stops, another id is claimed, the generator is told', async (t) => {
  const now = Date.now()
  const pool = new FakePool(10_000, { 1: { owner: null, issuedUntil: now + 200, by: 'earlier' } })
  const o = options(pool, { min: 0, max: 2 })
  const l = await lease(t, o)
  t.equal(l.workerId, 0)
  let open = () => {}
  // Another instance takes id 0; our renewal finds out.
  Object.assign(pool.rows.get(0) as Row, { owner: 'thief', expiresAt: Date.now() + 60_000 })
  pool.renewGate = new Promise((resolve) => { open = resolve })
  // The generator must carry the new id before issuing may resume.
  const unavailableAtRebind: Array<string | undefined> = []
  l.whenWorkerChanges((id, notBefore) => {
    unavailableAtRebind.push(l.status().unavailable)
    o.seen.changes.push([id, notBefore])
  })
  const beat = l.heartbeat()
  await sleep(10)
  t.ok(checks(l), 'until the store answers, the fence holds')
  open()
  pool.renewGate = undefined
  await beat
  t.equal(l.workerId, 1, 'id 0 is the thief\'s: id 1 leased instead')
  // (id 0 is held by the thief: not even tried)
  t.same(o.seen.claims, ['claimed', 'reclaimed'])
  t.same(o.seen.changes, [[1, now + 201]], 'told the new id and the first millisecond after its previous holder\'s')
  t.equal(unavailableAtRebind.length, 1)
  t.match(unavailableAtRebind[0], /no longer leased/, 'told while issuing was still stopped')
  t.equal(o.seen.lost, 1)
  t.equal(l.notBefore, now + 201)
  t.equal(l.status().unavailable, undefined)
  t.ok(checks(l))
  t.equal(pool.holder(0), 'thief')
  t.equal(readWorkerCache(o.cacheDir)?.workerId, 1, 'the cache names the new id')

  // Taken again, and no id left: stopped, and it stays so at later heartbeats.
  for (const id of [1, 2]) pool.rows.set(id, { owner: 'thief', expiresAt: Date.now() + 60_000, issuedUntil: 0, by: undefined })
  await l.heartbeat()
  t.match(l.status().unavailable, /worker id 1 is no longer leased to this instance in fake:\/\/pool/)
  t.notOk(checks(l))
  await l.heartbeat()
  t.notOk(checks(l), 'still nothing free')
  t.equal(o.seen.lost, 2)
  const freed = pool.rows.get(2) as Row
  freed.owner = null
  await l.heartbeat()
  t.equal(l.workerId, 2, 'a freed id is leased at the next heartbeat')
  t.ok(checks(l))
})

t.test('a store granting less than 3 heartbeats of lease is refused before any claim', async (t) => {
  const pool = new FakePool(900)
  await t.rejects(acquireRecyclableLease(options(pool, { heartbeatIntervalMs: 301 })), {
    name: 'LeaseRefused',
    code: 'LEASE_TTL_TOO_SHORT',
    message: 'fake://pool grants a lease of 900 ms, less than 3 heartbeat intervals (leaf.snowflake.heartbeat-interval-ms is 301): one late renewal would stop issuing',
  })
  t.same(pool.claims, [], 'nothing claimed')
  t.ok(pool.closed)
  const l = await lease(t, options(new FakePool(900), { heartbeatIntervalMs: 300 }))
  t.equal(l.workerId, 0, 'exactly 3 heartbeats: accepted')
})

t.test('a claim whose first renewal fails is not used: the id goes back and the next one is tried', async (t) => {
  const pool = new FakePool(30_000)
  pool.failRenewals = 1
  const l = await lease(t, options(pool, { min: 0, max: 1 }))
  t.equal(l.workerId, 1)
  t.same(l.seen.claims, ['error', 'claimed'], 'a first start: claimed, not reclaimed')
  t.match(pool.rows.get(0), { owner: null, issuedUntil: 0 }, 'id 0 released, nothing recorded for it')
  t.equal(l.notBefore, 1)
  t.match(l.status(), { workerId: 1, unavailable: undefined })
})

t.test('the wall clock jumps past the recorded issuedUntil: nothing past it until a renewal, asked at once, records more', async (t) => {
  let offset = 0
  const clock = () => Date.now() + offset
  const pool = new FakePool(30_000)
  const { logger, lines } = captureLogger()
  const l = await lease(t, options(pool, { clock, logger }))
  const paused = () => lines.filter((x) => x.msg === 'snowflake issuing paused: the clock passed the last millisecond the worker-id lease recorded')
  const gen = createSnowflakeGenerator({ workerId: l.workerId, clock, guard: l, notBefore: l.notBefore })
  t.equal(gen.decode(await gen.next()).workerId, 0)
  const recorded = l.issuableUntil
  t.equal(pool.rows.get(0)?.issuedUntil, recorded, 'issuable up to what the store confirmed')
  offset = 60_000
  t.throws(() => gen.next(), { code: 'WORKER_LEASE_LOST', message: /The clock \(\d+\) passed the last millisecond this lease recorded/ })
  t.match(l.status().unavailable, /the clock \(\d+\) passed the last millisecond this lease recorded/, 'told at once, though not a loss: the id is still ours')
  const until = Date.now() + 2000
  while (l.issuableUntil === recorded && Date.now() < until) await sleep(5)
  t.ok(l.issuableUntil >= clock() + 27_000 - 1000, 'renewed without waiting for the heartbeat, from the new clock')
  t.equal(pool.rows.get(0)?.issuedUntil, l.issuableUntil)
  t.equal(paused().length, 1, 'logged once, when issuing stopped')
  t.match(paused()[0], { level: 40, issuedUntil: recorded })
  t.equal(l.status().unavailable, undefined, 'the renewal ended the pause')
  t.equal(lines.filter((x) => x.msg === 'snowflake issuing resumed: a renewal recorded a later issuedUntil').length, 1)
  const id = await gen.next()
  t.ok(gen.decode(id).timestamp > recorded, 'issuing again, past the old record')
})

t.test('a store failing at start is tried again until the deadline; then refused naming its error', async (t) => {
  const pool = new FakePool(600)
  pool.failClaims = 2
  const o = options(pool, { min: 0, max: 3 })
  const l = await lease(t, o)
  t.equal(l.workerId, 0)
  t.same(o.seen.claims, ['error', 'error', 'claimed'], 'two failed passes, then the claim')

  const down = new FakePool(600)
  down.failClaims = Infinity
  const o2 = options(down, { min: 0, max: 3 })
  const started = Date.now()
  const err = await acquireRecyclableLease(o2).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused)
  t.equal((err as LeaseRefused).code, 'LEASE_STORE_UNAVAILABLE')
  t.match((err as Error).message, /no worker id could be leased from fake:\/\/pool within leaf\.snowflake\.lease\.ttl-ms \(600 ms\): the store failed \(lock wait timeout\)/)
  t.ok(Date.now() - started >= 450, `tried for about one TTL (${Date.now() - started} ms)`)
  t.equal(o2.seen.claims.at(-1), 'error')
  t.ok(down.closed)
})

t.test('a new id starts with nothing recorded: issuing under it stops at its own issuedUntil, not the previous id\'s', async (t) => {
  const now = Date.now()
  const pool = new FakePool(10_000)
  const o = options(pool, { min: 0, max: 1 })
  const l = await lease(t, o)
  const first = l.issuableUntil
  t.ok(first > now, 'id 0 recorded ahead of the clock')
  // The clock steps back 5 s; id 0 is taken; id 1 is claimed and recorded from the stepped clock.
  const realClock = o.clock
  o.clock = () => realClock() - 5000
  Object.assign(pool.rows.get(0) as Row, { owner: 'thief', expiresAt: Date.now() + 60_000 })
  await l.heartbeat()
  t.equal(l.workerId, 1)
  t.ok(l.issuableUntil < first, `id 1's limit (${l.issuableUntil}) is its own, below id 0's (${first})`)
  t.equal(l.issuableUntil, pool.rows.get(1)?.issuedUntil, 'exactly what the store confirmed for id 1')
})

t.test('a store that fails every renewal: one log line per 30 s of the monotonic clock, the next with the count', async (t) => {
  const lines: { level: number, msg: string, err?: unknown, repeated?: number }[] = []
  const logger = pino({ level: 'info' }, new Writable({
    write (chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as (typeof lines)[number])
      done()
    },
  }))
  const clock = manualClock()
  const pool = new FakePool(60_000)
  const l = await lease(t, options(pool, { logger, monotonic: clock.read }))
  pool.failRenewals = 100
  const notRenewed = () => lines.filter((x) => x.msg === 'worker-id lease not renewed: retried at the next heartbeat')
  for (let i = 0; i < 5; i++) {
    await l.heartbeat()
    clock.now += 1000
  }
  t.equal(notRenewed().length, 1, '5 failed renewals within 5 s: one line')
  t.match(notRenewed()[0], { level: 40, err: { message: 'store down' } })
  clock.now += 30_000
  await l.heartbeat()
  t.equal(notRenewed().length, 2)
  t.equal(notRenewed()[1]?.repeated, 4, 'the next line counts the 4 not logged')
})

t.test('every claim has a token of its own: a hand-back answered late frees only its own claim, never the one after it', async (t) => {
  // Issue 25's sequence: the previous holder ran 7 s ahead; the claimant hands id 0 back for
  // drift, and that statement gets no answer, then lands.
  const pool = new FakePool(30_000, { 0: { owner: null, issuedUntil: Date.now() + 7000, by: 'ahead' } })
  pool.holdReleases = true
  const o = options(pool, { min: 0, max: 0, maxClockDriftMs: 5000, heartbeatIntervalMs: 300 })
  const starting = acquireRecyclableLease(o)
  await sleep(300)
  t.ok(pool.heldReleases.length >= 2, `the hand-back got no answer, nor the ones sent again (${pool.heldReleases.length})`)
  const first = pool.rows.get(0) as Row
  t.ok(first.owner !== null && first.expiresAt > Date.now(), 'the id stays with the abandoned claim')
  const abandoned = first.owner as string
  t.same(pool.claims, [0], 'and is not claimed again while that claim may still be freed')
  // The hand-back lands: the id is free, and claimed again under a new token.
  pool.holdReleases = false
  ;(pool.heldReleases.shift() as () => void)()
  t.equal(pool.rows.get(0)?.owner, null)
  pool.rows.get(0)!.issuedUntil = Date.now() - 1000
  const l = await starting
  t.teardown(() => l.close())
  t.equal(l.workerId, 0)
  const token = pool.rows.get(0)?.owner
  t.ok(typeof token === 'string' && token !== abandoned, `a new token (${String(token)}, not ${abandoned})`)
  // The hand-backs sent again land now, late: they name the abandoned claim, and change nothing.
  for (const run of pool.heldReleases.splice(0)) run()
  t.equal(pool.rows.get(0)?.owner, token, 'the live claim keeps the id')
  t.ok(checks(l))
})

t.test('a release of the served claim names its token: it cannot free a claim another instance made since', async (t) => {
  const pool = new FakePool(30_000)
  const l = await lease(t, options(pool, { min: 0, max: 0 }))
  const mine = pool.rows.get(0)?.owner as string
  // Our lease ran out in the store and another instance took the id: our release is a no-op.
  Object.assign(pool.rows.get(0) as Row, { owner: 'other', expiresAt: Date.now() + 60_000, issuedUntil: 123 })
  await l.close()
  t.match(pool.rows.get(0), { owner: 'other', issuedUntil: 123 })
  t.not(mine, 'other')
})

t.test('versioned store (a database clock): an expired holder whose row keeps changing is never taken over', async (t) => {
  // The database's clock stepped ahead: its NOW(3) says the holder expired, though it renews.
  const pool = new FakePool(600, { 0: { owner: 'live', expiresAt: Date.now() - 10_000 } })
  pool.versioned = true
  const renewing = setInterval(() => pool.bump(0), 100)
  t.teardown(() => clearInterval(renewing))
  const o = options(pool, { min: 0, max: 0, heartbeatIntervalMs: 200 })
  const started = performance.now()
  const err = await acquireRecyclableLease(o).then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof LeaseRefused, 'refused')
  t.equal((err as LeaseRefused).code, 'LEASE_POOL_EXHAUSTED')
  t.match((err as Error).message, /every worker id of fake:\/\/pool in \[0, 0\] \(1 ids\) is leased/)
  t.same(pool.claims, [], 'never claimed: the holder was never seen standing still')
  const waited = performance.now() - started
  t.ok(waited >= 200 && waited < 600 + 60 + 100 + 200, `refused within the start's deadline, after one poll at least (${Math.round(waited)} ms)`)
  t.equal(pool.rows.get(0)?.owner, 'live')
})

t.test('versioned store: an expired holder that stands still is taken over once seen unchanged for a whole TTL', async (t) => {
  const pool = new FakePool(600, { 0: { owner: 'dead', expiresAt: Date.now() - 10_000, issuedUntil: Date.now() - 5000 } })
  pool.versioned = true
  const o = options(pool, { min: 0, max: 0, heartbeatIntervalMs: 200 })
  const started = performance.now()
  const l = await lease(t, o)
  const waited = performance.now() - started
  t.equal(l.workerId, 0)
  t.ok(waited >= 600, `watched for the TTL first (${Math.round(waited)} ms)`)
  t.ok(waited < 1500, `and no longer than a poll past it (${Math.round(waited)} ms)`)
  t.same(pool.claims, [0], 'one claim, naming the version seen')
  t.not(pool.rows.get(0)?.owner, 'dead')
})

t.test('versioned store: a claim naming a version the holder has since changed loses', async (t) => {
  const pool = new FakePool(600, { 0: { owner: 'dead', expiresAt: Date.now() - 10_000 } })
  pool.versioned = true
  const [slot] = await pool.list(0, 0)
  pool.bump(0)
  t.equal(await pool.claim(0, 'me', 'x', slot?.version), undefined)
  const [now] = await pool.list(0, 0)
  t.ok(await pool.claim(0, 'me', 'x', now?.version) !== undefined, 'the current version wins')
})

t.test('a claim that landed but got no answer is handed back at the next pass, leaving the previous holder\'s record as it was', async (t) => {
  const started = Date.now()
  const previous = started + 300
  const pool = new FakePool(30_000, { 0: { owner: null, issuedUntil: previous, by: 'before' } })
  pool.claimsLandButFail = 1
  const o = options(pool, { min: 0, max: 0, heartbeatIntervalMs: 1000 })
  const l = await lease(t, o)
  t.equal(l.workerId, 0)
  t.ok(Date.now() - started < 2000, `not blocked for the lost claim's TTL (${Date.now() - started} ms)`)
  t.same(pool.claims, [0, 0], 'claimed, handed back, claimed again')
  t.same(o.seen.claims, ['error', 'claimed'])
  t.ok(l.notBefore > previous, `still waits for the previous holder's millisecond (notBefore ${l.notBefore}, previous ${previous})`)
})

t.test('a claim held in the network that lands while the lease serves another id is handed back at the next heartbeat, not left to run out', async (t) => {
  const pool = new FakePool(30_000)
  const l = await lease(t, options(pool, { min: 0, max: 2 }))
  t.equal(l.workerId, 0)
  // Another instance takes id 0: the next heartbeat claims again, and that claim of id 1 is held.
  Object.assign(pool.rows.get(0) as Row, { owner: 'other', expiresAt: Date.now() + 60_000 })
  pool.holdClaims = 1
  await l.heartbeat()
  t.same(pool.claims, [0, 1], 'id 1 claimed, no answer')
  // The id it was claiming is lost to a race at the next pass: the lease serves id 2.
  pool.losing.add(1)
  await l.heartbeat()
  t.equal(l.workerId, 2)
  pool.losing.delete(1)
  // Now the held claim lands: id 1 is held for a token nobody serves.
  ;(pool.heldClaims.shift() as () => void)()
  await sleep(5)
  const late = pool.rows.get(1)?.owner
  t.ok(typeof late === 'string' && late !== pool.rows.get(2)?.owner, `the late claim holds id 1 (${String(late)})`)
  await l.heartbeat()
  await sleep(5)
  t.equal(pool.rows.get(1)?.owner, null, 'handed back by the next heartbeat')
  t.equal(l.workerId, 2, 'serving on')
  t.ok(checks(l))
})

t.test('a close while a claim pass waits for the previous holder\'s millisecond ends the wait and hands that claim back before the pool closes', async (t) => {
  const pool = new FakePool(30_000)
  const l = await acquireRecyclableLease(options(pool, { min: 0, max: 1 }))
  t.equal(l.workerId, 0)
  Object.assign(pool.rows.get(0) as Row, { owner: 'other', expiresAt: Date.now() + 60_000 })
  const previous = Date.now() + 3000
  pool.rows.set(1, { owner: null, expiresAt: Date.now(), issuedUntil: previous, by: 'before' })
  const beat = l.heartbeat()
  while (!pool.claims.includes(1)) await sleep(5)
  t.ok(pool.rows.get(1)?.owner?.includes('.'), 'id 1 claimed: the pass waits for its previous holder')
  const started = performance.now()
  await l.close()
  const took = performance.now() - started
  t.equal(pool.rows.get(1)?.owner, null, 'handed back by the time close() resolved')
  t.ok(took < 1000, `without waiting out the previous holder (${Math.round(took)} ms)`)
  await beat
  t.match(pool.rows.get(1), { issuedUntil: previous, by: 'before' }, 'the previous holder\'s record kept')
})

t.test('a close while a heartbeat sends hand-backs owed after its renewal found the id taken: the heartbeat claims nothing after it', async (t) => {
  const pool = new FakePool(30_000)
  // The first claim (id 0) lands without an answer, and its hand-backs get none either: owed.
  pool.claimsLandButFail = 1
  pool.holdReleases = true
  const l = await acquireRecyclableLease(options(pool, { min: 0, max: 2 }))
  t.equal(l.workerId, 1, 'serving on id 1; id 0 held by the abandoned claim')
  // Another instance takes id 1; the renewal's answer (not ours) waits for the gate.
  Object.assign(pool.rows.get(1) as Row, { owner: 'other', expiresAt: Date.now() + 60_000 })
  let open = (): void => {}
  pool.renewGate = new Promise((resolve) => { open = resolve })
  const claimsBefore = pool.claims.length
  const beat = l.heartbeat()
  open()
  await new Promise((resolve) => setImmediate(resolve))
  await l.close()
  await beat
  await sleep(20)
  t.same(pool.claims.slice(claimsBefore), [], 'no claim after close: id 2 was never claimed')
  t.equal(pool.rows.get(2), undefined)
})
