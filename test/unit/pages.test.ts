import t from 'tap'
import { duration, horizonText, renderCachePage, sparkline, tagBadge, timeLeftLine, type InstanceView } from '../../src/http/pages.js'
import { horizonSeconds } from '../../src/segment/rate-meter.js'
import type { NextSegment, SegmentBufferView } from '../../src/segment/segment-views.js'
import type { LeaseStatus } from '../../src/snowflake/worker-id/worker-id-source.js'

// The /cache page's snowflake panel for each kind of source and state, rendered directly
// (the end-to-end tests see only the states their processes reach).

const TWEPOCH = 1288834974657
const base: LeaseStatus = {
  source: 'zookeeper',
  workerId: 5,
  zookeeperConnected: true,
  unavailable: undefined,
  lastHeartbeat: undefined,
  foreverPath: '/snowflake/leaf/forever/10.0.0.1:8080-0000000005',
  temporaryPath: '/snowflake/leaf/temporary/10.0.0.1:8080',
  cacheFile: '/tmp/leaf/workerID.properties',
}

const instance: InstanceView = {
  version: '1.2.3',
  node: '20.20.2',
  uptimeSeconds: 4000,
  renderedAt: Date.UTC(2026, 11, 2, 6, 0, 0),
  ratesAgeMs: 420,
  store: 'sqlite:/data/leaf.db',
  readiness: { ready: true, modes: { segment: { ready: true } } },
  errors: [],
}

const panel = (status: LeaseStatus | undefined) => renderCachePage(instance, undefined, status, TWEPOCH)

t.test('Leaf\'s ZooKeeper source: connected or not, its nodes, its last heartbeat', async (t) => {
  const connected = panel({ ...base, lastHeartbeat: Date.now() - 3000 })
  t.match(connected, /badge ok">ZooKeeper connected</)
  t.match(connected, /forever node<\/dt><dd>\/snowflake\/leaf\/forever\/10\.0\.0\.1:8080-0000000005/)
  t.match(connected, /last heartbeat<\/dt><dd>\d{4}-\d\d-\d\dT[^<]+ \(3 s ago\)/)
  t.notMatch(connected, /issued until/)
  const disconnected = panel({ ...base, zookeeperConnected: false, foreverPath: undefined, temporaryPath: undefined })
  t.match(disconnected, /badge bad">ZooKeeper disconnected</)
  t.match(disconnected, /last heartbeat<\/dt><dd>—/)
  t.match(disconnected, /forever node<\/dt><dd>—/)
})

t.test('static and statefulset ids: no ZooKeeper', async (t) => {
  for (const source of ['static', 'statefulset'] as const) {
    const html = panel({ ...base, source, zookeeperConnected: false })
    t.match(html, /badge warn">no ZooKeeper</, source)
    t.match(html, new RegExp(`worker id</dt><dd>5 \\(from ${source}\\)`), source)
  }
})

t.test('a lease: leased or lost, its pool and range, its expiry and issuedUntil', async (t) => {
  const lease: LeaseStatus = { ...base, source: 'db-lease', pool: 'mysql://leaf@db:3306/leaf leaf_worker_lease (pool leaf)', range: [0, 63], leaseExpiresAt: Date.parse('2026-12-01T08:00:00Z'), issuedUntil: Date.parse('2026-12-01T07:59:57Z') }
  const leased = panel(lease)
  t.match(leased, /badge ok">leased</)
  t.match(leased, /pool<\/dt><dd>mysql:\/\/leaf@db:3306\/leaf leaf_worker_lease \(pool leaf\) · ids 0–63/)
  t.match(leased, /lease expires<\/dt><dd>2026-12-01T08:00:00\.000Z/)
  t.match(leased, /issued until<\/dt><dd>\d+ \(2026-12-01T07:59:57\.000Z\)/)
  t.notMatch(leased, /forever node/)
  const lost = panel({ ...lease, unavailable: 'no renewal confirmed within the lease time', leaseExpiresAt: undefined, issuedUntil: 0, pool: undefined, range: undefined })
  t.match(lost, /badge bad">lease lost</)
  t.match(lost, /lease expires<\/dt><dd>lost/)
  t.match(lost, /issued until<\/dt><dd>0 \(—\)/)
  t.match(lost, /pool<\/dt><dd>— · ids —/)
})

t.test('snowflake mode off', async (t) => {
  t.match(panel(undefined), /Snowflake mode is disabled/)
  t.match(panel(undefined), /Segment mode is disabled/)
})

const view: SegmentBufferView = {
  key: 'order',
  initOk: true,
  nextReady: true,
  pos: 0,
  value0: 1200n,
  max0: 2001n,
  step0: 2000,
  value1: 2001n,
  max1: 4001n,
  step1: 2000,
  step: 2000,
  minStep: 2000,
  updateTimestamp: 0,
  segments: [{ value: 1200n, max: 2001n, step: 2000 }, { value: 2001n, max: 4001n, step: 2000 }],
  buffered: 2801,
  idsPerSecond: 55,
  idsPerSecondLastMinute: 40,
  bufferSeconds: 2801 / 55,
  next: 'ready',
  history: Array.from({ length: 90 }, (_, i) => i < 60 ? 0 : i - 59),
  lastLoadSeconds: 0.0042,
  failedLoads: 3,
  ended: false,
}

/** A page of tags as the /cache route gives one: all of `views`, no search. */
const tagsOf = (views: SegmentBufferView[]) => ({ views, total: views.length, matched: views.length, offset: 0, limit: 50, search: '' })

t.test('the dashboard: the instance panel, each tag\'s rate, buffer, loads and sparkline, a reload every 5 s with the time rendered', async (t) => {
  const html = renderCachePage({
    ...instance,
    readiness: { ready: false, modes: { segment: { ready: false, reason: 'database unreachable: ECONNREFUSED (connection refused), and 1 tag(s) <x>' }, snowflake: { ready: true } } },
    errors: [{ mode: 'segment', code: 'SEGMENTS_NOT_READY', count: 7 }, { mode: 'snowflake', code: 'CLOCK_BACKWARDS', count: 0 }],
  }, tagsOf([view]), { ...base, lastHeartbeat: Date.now() }, TWEPOCH)
  t.match(html, /<meta http-equiv="refresh" content="5">/)
  t.match(html, /rendered 2026-12-02T06:00:00\.000Z; rates sampled 420 ms before; reloads every 5 s/)
  t.match(html, /Instance · Leaf-TS 1\.2\.3<\/h2><span class="badge bad">not ready/)
  t.match(html, /uptime<\/dt><dd>67 min \(Node 20\.20\.2\)/)
  t.match(html, /database<\/dt><dd>sqlite:\/data\/leaf\.db/)
  t.match(html, /ZooKeeper<\/dt><dd><span class="badge ok">connected/)
  t.match(html, /segment<\/dt><dd><span class="badge bad">not ready<\/span> database unreachable: ECONNREFUSED \(connection refused\), and 1 tag\(s\) &lt;x&gt;/, 'reasons escaped')
  t.match(html, /<span data-error="SEGMENTS_NOT_READY">segment SEGMENTS_NOT_READY <b>7<\/b><\/span>/)
  t.notMatch(html, /CLOCK_BACKWARDS/, 'codes never answered are left out')
  t.match(html, /<span data-rate>rate <b>55<\/b> IDs\/s now, <b>40<\/b> over the last minute<\/span>/)
  t.match(html, /<span data-lasts>buffer lasts <b>51 s<\/b> at the rate now<\/span>/, '2,801 IDs at 55 IDs/s')
  t.match(html, /<span data-load>last load <b>4\.2 ms<\/b>/)
  t.match(html, /<span data-failed>failed loads <b>3<\/b>/)
  t.match(html, /<svg class="spark"[^>]* data-points="90" aria-label="IDs per second over the last 15 minutes, peak 30"/)
  t.match(html, /<div class="label" data-buffered>buffered 2,801 IDs in 2 segments<\/div>/)
  t.equal((html.match(/<script/g) ?? []).length, 0, 'no script')
  const idle = renderCachePage(instance, tagsOf([{ ...view, idsPerSecondLastMinute: 0, idsPerSecond: 0, bufferSeconds: undefined, lastLoadSeconds: 0 }]), undefined, TWEPOCH)
  t.match(idle, /buffer lasts <b>idle \(under 1 ID\/s\)<\/b><\/span>/)
  t.match(idle, /last load <b>—<\/b>/)
  t.match(idle, /ZooKeeper<\/dt><dd>snowflake mode off/)
  t.match(renderCachePage(instance, tagsOf([{ ...view, ended: true }]), undefined, TWEPOCH), /badge bad" data-next="ended">ID space ended/)
})

t.test('the horizon in seconds only at 1 ID/s or more: under it, the remnant of a burst, the tag is idle', async (t) => {
  // What a tag showed once it went quiet: the rate decays towards 0 and never reaches it.
  t.equal(horizonSeconds(61_597, 61_597 / 2160684850.9), undefined)
  t.equal(horizonSeconds(61_597, 0.99), undefined)
  t.equal(horizonSeconds(61_597, 0), undefined)
  t.equal(horizonSeconds(61_597, 1), 61_597, 'at 1 ID/s the figure is shown')
  t.equal(horizonSeconds(0, 40), 0, 'an empty buffer under load is 0 s, not idle')
  t.equal(horizonText({ bufferSeconds: undefined }), 'idle (under 1 ID/s)')
  t.equal(horizonText({ bufferSeconds: 61_597 }), '17.1 h')
  t.equal(horizonText({ bufferSeconds: 17.4 }), '17 s')
})

t.test('one horizon per card, whatever the two rates: the buffered IDs over the rate the horizon plans with', async (t) => {
  // The cards: a minute's average far below the rate now (a burst), and far above it (a tag going quiet).
  for (const [idsPerSecond, idsPerSecondLastMinute] of [[82, 6], [0.5, 300]] as const) {
    const v = { ...view, buffered: 1427, idsPerSecond, idsPerSecondLastMinute, bufferSeconds: horizonSeconds(1427, idsPerSecond) }
    const html = renderCachePage(instance, tagsOf([v]), undefined, TWEPOCH)
    const card = /<section class="card tag"[\s\S]*?<\/section>/.exec(html)?.[0] ?? ''
    const horizons = [...card.matchAll(/lasts <b>([^<]+)<\/b>/g)].map((m) => m[1])
    t.same(horizons, [idsPerSecond >= 1 ? '17 s' : 'idle (under 1 ID/s)'], `${idsPerSecond} IDs/s now, ${idsPerSecondLastMinute} over the minute`)
    t.notMatch(card, /\d s at \d|\d min\b|\d h\b/, 'no second figure')
  }
})

t.test('the badge: amber only for a late load, never for a tag that does not need its next segment yet', async (t) => {
  const badge = (next: NextSegment, more: Partial<SegmentBufferView> = {}) => tagBadge({ ended: false, failedLoads: 0, next, ...more })
  t.equal(badge('ready'), '<span class="badge ok" data-next="ready">next ready</span>')
  t.equal(badge('not_due'), '<span class="badge ok" data-next="not_due">next not needed yet</span>', '5 IDs of 1,000 used: nothing to load yet')
  t.equal(badge('due'), '<span class="badge ok" data-next="due">next loads on the next request</span>')
  t.equal(badge('loading'), '<span class="badge ok" data-next="loading">next loading</span>')
  t.equal(badge('late', { failedLoads: 2 }), '<span class="badge warn" data-next="late">next load late: retrying</span>')
  t.equal(badge('used_up'), '<span class="badge bad" data-next="used_up">used up: waiting for a load</span>')
  t.equal(badge('not_loaded'), '<span class="badge idle" data-next="not_loaded">not loaded yet</span>')
  t.equal(badge('not_loaded', { failedLoads: 3 }), '<span class="badge warn" data-next="not_loaded">not loaded: 3 failed loads</span>', 'its first loads failed')
  t.equal(badge('ready', { ended: true }), '<span class="badge bad" data-next="ended">ID space ended</span>')
  const amber = (['not_loaded', 'ready', 'used_up', 'loading', 'not_due', 'due', 'late'] as const).filter((n) => badge(n).includes('warn'))
  t.same(amber, ['late'], 'amber: a late load alone')
})

t.test('a tag never loaded is a line under "not loaded yet", not a card', async (t) => {
  const never: SegmentBufferView = {
    ...view,
    key: 'fresh',
    initOk: false,
    nextReady: false,
    segments: [],
    buffered: 0,
    idsPerSecond: 0,
    idsPerSecondLastMinute: 0,
    bufferSeconds: undefined,
    next: 'not_loaded',
    failedLoads: 0,
  }
  const html = renderCachePage(instance, tagsOf([view, never]), undefined, TWEPOCH)
  t.match(html, /Not loaded yet, never asked for since the start[^<]*<\/p><ul class="idle-tags"><li data-key="fresh">fresh<\/li><\/ul>/)
  t.notMatch(html, /<section class="card tag" data-key="fresh"/)
})

t.test('durations and sparklines for a person', async (t) => {
  t.equal(duration(5.25), '5.3 s')
  t.equal(duration(90), '90 s')
  t.equal(duration(600), '10 min')
  t.equal(duration(4 * 3600), '4.0 h')
  t.equal(duration(3 * 86400), '3.0 d')
  t.equal(duration(Infinity), 'never at this rate')
  const flat = sparkline([0, 0, 0], 100, 20)
  t.match(flat, /points="0\.0,19\.0 50\.0,19\.0 100\.0,19\.0"/, 'all zero: on the baseline')
  t.match(sparkline([0, 10], 100, 20), /points="0\.0,19\.0 100\.0,1\.0"/, 'the peak at the top')
})

t.test('the instance panel shows a host list\'s census: the host in use, each state, a split, the stores left', async (t) => {
  const hosts = [
    { host: 'db1:3306', state: 'writable' as const, store: 'server_id 1' },
    { host: 'db2:3306', state: 'writable' as const, store: 'server_id 2' },
    { host: 'db3:3306', state: 'unknown' as const, error: 'ECONNREFUSED' },
  ]
  const split = renderCachePage({ ...instance, hosts: { hosts, inUse: 'db2:3306', left: ['server_id 1'], split: { hosts: ['db1:3306 (server_id 1)', 'db2:3306 (server_id 2)'], since: new Date() } } }, tagsOf([]), undefined, TWEPOCH)
  t.match(split, /<dd data-hosts><span class="badge bad">STORE_SPLIT: db1:3306 \(server_id 1\), db2:3306 \(server_id 2\) writable, nothing allocated<\/span> · db1:3306 writable server_id 1, db2:3306 \(in use\) writable server_id 2, db3:3306 unknown · left, never written again: server_id 1<\/dd>/)
  t.notMatch(renderCachePage(instance, undefined, undefined, TWEPOCH), /data-hosts/, 'no host list: no line')
})

t.test('the instance panel names the store the max_id guard sees, and the failovers it caught', async (t) => {
  const none = renderCachePage({ ...instance, failover: { holdingMs: 0, raisesOwed: 0, regressions: 0, store: 'server_id 1' } }, tagsOf([]), undefined, TWEPOCH)
  t.match(none, /<dd data-failovers>none · answering: server_id 1<\/dd>/)
  const held = renderCachePage({
    ...instance,
    failover: {
      holdingMs: 95_000,
      holdEndsAt: Date.parse('2026-12-04T03:01:35Z'),
      raisesOwed: 0,
      regressions: 2,
      store: 'server_id 2',
      last: { cause: 'max_id went back', key: 'order<b>', from: 'server_id 1', to: 'server_id 2', gap: 123_456n, tags: 3, at: new Date('2026-12-04T03:00:00Z') },
    },
  }, tagsOf([]), undefined, TWEPOCH)
  // The cause a tag with no buffered ID answers with (SEGMENTS_NOT_READY) is named, with the hold's end.
  t.match(held, /<b>2<\/b>; last 2026-12-04T03:00:00.000Z: max_id went back at order&lt;b&gt; \(and 2 more tag\(s\)\), from server_id 1, 123,456 IDs behind · <span class="badge bad" data-hold>failover hold: new allocations held 95 s more \(until 2026-12-04T03:01:35.000Z\); a tag with no buffered ID answers SEGMENTS_NOT_READY<\/span> · answering: server_id 2/)
  const lapsed = renderCachePage({ ...instance, failover: { holdingMs: 0, raisesOwed: 0, regressions: 0, store: 'server_id 1', unconfirmed: { boundMs: 136_000, sinceMs: 140_200 } } }, tagsOf([]), undefined, TWEPOCH)
  t.match(lapsed, /none · answering: server_id 1 · <span class="badge bad" data-unconfirmed>store not confirmed for 140 s \(bound 136 s\): STORE_UNCONFIRMED, no buffered ID served<\/span>/)
  const within = renderCachePage({ ...instance, failover: { holdingMs: 0, raisesOwed: 0, regressions: 0, store: 'server_id 1', unconfirmed: { boundMs: 136_000, sinceMs: 50_000 } } }, tagsOf([]), undefined, TWEPOCH)
  t.notMatch(within, /data-unconfirmed/, 'within the bound: nothing to show')
  t.notMatch(renderCachePage(instance, undefined, undefined, TWEPOCH), /data-failovers/, 'no segment mode: no line')
})

t.test('the snowflake panel shows the layout and when its time field runs out, flagged under 2 years and under 180 days', async (t) => {
  const YEAR = 365.25 * 86_400
  const end = Date.UTC(2039, 8, 7, 12)
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: 12.8 * YEAR }), 'runs out 2039-09-07 (12.8 years left)')
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: YEAR }), 'runs out 2039-09-07 (1.0 years left)')
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: YEAR - 1 }), 'runs out 2039-09-07 (365 days left)', 'under a year: days')
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: 2 * 86_400 }), 'runs out 2039-09-07 (2 days left)')
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: 100_000 }), 'runs out 2039-09-07 (27.8 h left)', 'under 2 days: hours')
  t.equal(timeLeftLine({ spec: 'leaf', runsOutAt: end, secondsLeft: 0 }), 'ran out 2039-09-07')

  const line = (secondsLeft: number) => /<dd data-time-left>(.*?)<\/dd>/.exec(renderCachePage(instance, undefined, base, TWEPOCH, { spec: 'time=30s,worker=10,sequence=12,epoch=0', runsOutAt: end, secondsLeft }))?.[1]
  t.match(renderCachePage(instance, undefined, base, TWEPOCH, { spec: 'a<b', runsOutAt: end, secondsLeft: 3 * YEAR }), /<dt>layout<\/dt><dd>a&lt;b<\/dd>/, 'the spec, escaped')
  t.equal(line(2 * YEAR), 'runs out 2039-09-07 (2.0 years left)', '2 years: no badge')
  t.equal(line(2 * YEAR - 1), 'runs out 2039-09-07 (2.0 years left) <span class="badge warn">under 2 years</span>')
  t.equal(line(180 * 86_400), 'runs out 2039-09-07 (180 days left) <span class="badge warn">under 2 years</span>')
  t.equal(line(180 * 86_400 - 1), 'runs out 2039-09-07 (179 days left) <span class="badge bad">under 180 days</span>')
  t.notMatch(panel(base), /data-time-left/, 'no layout given: no line')
})
