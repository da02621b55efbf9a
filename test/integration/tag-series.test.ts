import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { ConfigError, loadConfig } from '../../src/config/load-config.js'
import { createMetrics, type Metrics } from '../../src/metrics/metrics.js'
import { ACTIVE_MS, OTHER_KEY } from '../../src/metrics/tag-series.js'
import type { SegmentMode } from '../../src/modes/segment-mode.js'
import { neverLoaded, type SegmentBufferView } from '../../src/segment/segment-views.js'
import { horizonSeconds } from '../../src/segment/rate-meter.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf, type Sample } from '../helpers/prometheus.js'
import { withSqlite } from '../helpers/sqlite.js'

const PER_TAG = ['leaf_ids_issued_total', 'leaf_segment_db_load_failures_total', 'leaf_segment_db_load_seconds_count', 'leaf_segment_step',
  'leaf_segment_remaining', 'leaf_segment_buffered_ids', 'leaf_segment_buffer_seconds', 'leaf_segment_loaded_segments', 'leaf_segment_next_ready']
const COUNTERS = ['leaf_ids_issued_total', 'leaf_segment_db_load_failures_total', 'leaf_segment_db_load_seconds_count', 'leaf_segment_db_load_seconds_sum',
  'leaf_segment_db_load_seconds_bucket', 'leaf_segment_ids_returned_total']

/**
 * What Prometheus keeps of the counters: every series' last value, a series that left the
 * exposition included. A value under the last one would be a reset to rate(); the sum of the
 * last values of a counter's series is what increase() over all of them adds up to.
 */
class Remembered {
  private readonly last = new Map<string, number>()

  take (t: Test, samples: Sample[], when: string): void {
    for (const s of samples) {
      if (!COUNTERS.includes(s.name) || (s.name === 'leaf_ids_issued_total' && s.labels.mode !== 'segment')) continue
      const id = `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`
      const before = this.last.get(id) ?? 0
      if (s.value < before) t.fail(`${id} went back from ${before} to ${s.value} ${when}`)
      this.last.set(id, s.value)
    }
  }

  total (name: string, labels: Record<string, string> = {}): number {
    let sum = 0
    for (const [id, v] of this.last) {
      const [n, json] = [id.slice(0, id.indexOf('[')), id.slice(id.indexOf('['))]
      const l = Object.fromEntries(JSON.parse(json) as [string, string][])
      if (n === name && Object.entries(labels).every(([k, x]) => l[k] === x)) sum += v
    }
    return sum
  }
}

/** `neverLoaded`: a tag nobody asked for (no segment, no load, nothing buffered). Otherwise one not initOk has failed its first load. */
interface FakeTag { buffered: number, rate: number, step: number, initOk: boolean, nextReady: boolean, neverLoaded?: boolean }

function view (key: string, tag: FakeTag): SegmentBufferView {
  const segments = tag.initOk ? [{ value: 10n, max: 20n, step: tag.step }] : []
  const max0 = BigInt(10 + Math.min(tag.buffered, tag.step))
  const bufferSeconds = horizonSeconds(tag.buffered, tag.rate)
  if (tag.neverLoaded === true) {
    return { key, initOk: false, nextReady: false, buffered: 0, idsPerSecond: 0, step: 0, value0: 0n, max0: 0n, segments: [], bufferSeconds: undefined, next: 'not_loaded', failedLoads: 0 } as unknown as SegmentBufferView
  }
  const next = !tag.initOk ? 'not_loaded' : tag.nextReady ? 'ready' : tag.buffered === 0 ? 'used_up' : 'not_due'
  return { ...tag, key, idsPerSecond: tag.rate, value0: 10n, max0, segments, bufferSeconds, next, failedLoads: tag.initOk ? 0 : 1 } as unknown as SegmentBufferView
}

/**
 * createMetrics watching a fake segment mode whose views are `tags`, on a clock the test moves.
 * `allViews`: the generator ignores `loaded` and gives every tag's view, never-loaded ones too.
 */
function setup (maxTagSeries: number, tags: Map<string, FakeTag>, { allViews = false } = {}) {
  let clock = 1_000_000
  const metrics = createMetrics({ maxTagSeries, now: () => clock })
  const segment = {
    store: { ping: async () => {} },
    generator: {
      initialized: true,
      warming: false,
      endedTags: () => [],
      exhaustedTags: () => [],
      views: (o?: { loaded?: boolean }) => [...tags].map(([k, v]) => view(k, v)).filter((v) => allViews || o?.loaded !== true || !neverLoaded(v)),
      tagCount: () => tags.size,
      view: (k: string) => { const tag = tags.get(k); return tag === undefined ? undefined : view(k, tag) },
    },
    guard: { view: () => ({ holdingMs: 0, raisesOwed: 0 }) },
  } as unknown as SegmentMode
  metrics.watch({ segment, snowflake: undefined })
  return { metrics, advance: (ms: number) => { clock += ms } }
}

const keysOf = (samples: Sample[], name: string) => new Set(samples.filter((s) => s.name === name && s.labels.key !== undefined).map((s) => s.labels.key as string))
const tagName = (i: number) => `tag-${String(i).padStart(4, '0')}`

async function scrape (t: Test, metrics: Metrics, remembered: Remembered, cap: number, when: string): Promise<Sample[]> {
  const samples = parseSamples(await metrics.scrape())
  remembered.take(t, samples, when)
  for (const name of PER_TAG) {
    const keys = keysOf(samples, name)
    if (keys.size > cap + 1) t.fail(`${name}: ${keys.size} key values ${when}, over ${cap} + _other`)
    if ([...keys].some((k) => k !== OTHER_KEY && !keysOf(samples, 'leaf_segment_step').has(k))) t.fail(`${name} has a tag the gauges fold ${when}`)
  }
  return samples
}

t.test('2,000 tags: at most the cap keep series of their own, _other sums the rest, and no counter goes back', async (t) => {
  const CAP = 50
  const tags = new Map<string, FakeTag>()
  for (let i = 0; i < 2000; i++) tags.set(tagName(i), { buffered: 1000 + i, rate: 0, step: 1000 + (i % 7), initOk: i % 2 === 0, nextReady: i % 4 === 0 })
  const { metrics, advance } = setup(CAP, tags)
  const remembered = new Remembered()
  const truth = { issued: 0, failures: 0, loads: 0, returned: 0 }
  const issue = (i: number, n: number) => { metrics.issued('segment', tagName(i), n); truth.issued += n }
  const load = (i: number, ok: boolean) => { metrics.segmentLoad(tagName(i), 0.003 * (1 + i % 5), ok); truth.loads++; if (!ok) truth.failures++ }
  const check = (samples: Sample[], when: string) => {
    t.equal(remembered.total('leaf_ids_issued_total'), truth.issued, `IDs issued add up to the truth ${when}`)
    t.equal(remembered.total('leaf_segment_db_load_seconds_count'), truth.loads, `loads add up ${when}`)
    t.equal(remembered.total('leaf_segment_db_load_seconds_bucket', { le: '+Inf' }), truth.loads, `the +Inf buckets add up ${when}`)
    t.equal(remembered.total('leaf_segment_db_load_failures_total'), truth.failures, `load failures add up ${when}`)
    t.equal(remembered.total('leaf_segment_ids_returned_total'), truth.returned, `returned IDs add up ${when}`)
    const own = [...keysOf(samples, 'leaf_segment_step')].filter((k) => k !== OTHER_KEY)
    t.equal(valueOf(samples, 'leaf_segment_folded_tags'), tags.size - own.length, `the folded-tags gauge counts the tags without a series ${when}`)
    const folded = [...tags].filter(([k]) => !own.includes(k)).map(([, v]) => v)
    t.equal(valueOf(samples, 'leaf_segment_buffered_ids', { key: OTHER_KEY }), folded.length === 0 ? undefined : folded.reduce((a, v) => a + v.buffered, 0),
      `_other's buffered IDs are the folded tags' sum ${when}`)
    t.equal(valueOf(samples, 'leaf_segment_loaded_segments', { key: OTHER_KEY }), folded.length === 0 ? undefined : folded.filter((v) => v.initOk).length)
    return own
  }

  let samples = await scrape(t, metrics, remembered, CAP, 'with no traffic')
  let own = check(samples, 'with no traffic')
  t.same(own, [], 'over the cap, an idle tag has no series of its own')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: OTHER_KEY }), 0, '_other\'s counters are there from the start')
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: OTHER_KEY }), 0)
  t.equal(valueOf(samples, 'leaf_segment_buffer_seconds', { key: OTHER_KEY }), Infinity, 'idle: +Inf, LeafSegmentBufferLow stays quiet')
  t.equal(valueOf(samples, 'leaf_segment_next_ready', { key: OTHER_KEY }), 0, 'the worst of the loaded tags')
  t.equal(valueOf(samples, 'leaf_segment_step', { key: OTHER_KEY }), 1006, 'the largest step')

  // 100 tags serve and load: the first 50 by name get the room.
  for (let i = 0; i < 100; i++) { issue(i, i + 1); load(i, i % 10 !== 3) }
  samples = await scrape(t, metrics, remembered, CAP, 'after 100 tags served')
  own = check(samples, 'after 100 tags served')
  t.equal(own.length, CAP)
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(0) }), 0,
    'a tag that leaves _other starts its series where it was (0): what it counted meanwhile is in _other, whose series Prometheus already has')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: OTHER_KEY }), truth.issued)

  for (let i = 0; i < 100; i++) issue(i, 10)
  samples = await scrape(t, metrics, remembered, CAP, 'after a second round')
  check(samples, 'after a second round')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(0) }), 10, 'a kept tag counts on its own series')

  // 60 idle tags come under a minute of buffer: alert conditions take the room first, and the
  // 50 busy tags (still issuing) are demoted with what they counted since the last scrape.
  for (let i = 1000; i < 1060; i++) Object.assign(tags.get(tagName(i)) as FakeTag, { rate: 100, buffered: 3000 + i })
  for (let i = 0; i < 50; i++) issue(i, 5)
  returned(metrics, truth, 7, 40)
  samples = await scrape(t, metrics, remembered, CAP, 'when 60 tags alert')
  own = check(samples, 'when 60 tags alert')
  const lowBuffer = (k: string) => k >= tagName(1000) && k < tagName(1060)
  const failedLoad = (k: string) => k < tagName(100) && k.endsWith('3')
  t.equal(own.length, CAP)
  t.ok(own.every((k) => lowBuffer(k) || failedLoad(k)), 'only alerting tags have the room: buffer under a minute, or a load failed within 5 minutes')
  t.ok(own.filter(failedLoad).length === 10, 'those that also serve first')
  const lowest = Math.min(...[...tags].filter(([k]) => !own.includes(k)).map(([, v]) => v.rate >= 1 ? v.buffered / v.rate : Infinity))
  t.ok(lowest < 60, 'some alerting tags are past the cap')
  t.equal(valueOf(samples, 'leaf_segment_buffer_seconds', { key: OTHER_KEY }), lowest, '_other: the lowest of the folded: LeafSegmentBufferLow fires for them as _other')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(0) }), undefined, 'demoted')

  // The alert clears; 6 minutes on, the first 10 tags serve again and come back.
  for (let i = 1000; i < 1060; i++) Object.assign(tags.get(tagName(i)) as FakeTag, { rate: 0 })
  advance(ACTIVE_MS + 60_000)
  for (let i = 0; i < 10; i++) issue(i, 3)
  samples = await scrape(t, metrics, remembered, CAP, 'when 10 tags serve again')
  own = check(samples, 'when 10 tags serve again')
  t.same(own.sort(), Array.from({ length: 10 }, (_, i) => tagName(i)), 'only the tags active in the last 5 minutes')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(0) }), 10, 'back where it left its series')
  for (let i = 0; i < 10; i++) issue(i, 2)
  load(3, false)
  samples = await scrape(t, metrics, remembered, CAP, 'after they serve on')
  check(samples, 'after they serve on')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(0) }), 12)
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: tagName(3) }), 1)
})

t.test('past the cap, tags never loaded fold without a view each, and /metrics is what it was with a view of each', async (t) => {
  const CAP = 20
  const tags = new Map<string, FakeTag>()
  for (let i = 0; i < 1000; i++) {
    tags.set(tagName(i), i % 10 === 0
      ? { buffered: 500 + i, rate: i % 20 === 0 ? 50 : 0, step: 1000 + i, initOk: true, nextReady: i % 30 !== 0 }
      : { buffered: 0, rate: 0, step: 0, initOk: false, nextReady: false, neverLoaded: true })
  }
  const lean = setup(CAP, tags)
  const full = setup(CAP, tags, { allViews: true })
  const leaf = (text: string) => parseSamples(text).filter((x) => x.name.startsWith('leaf_segment') || x.name === 'leaf_ids_issued_total')
  const both = async (when: string) => {
    const [a, b] = [leaf(await lean.metrics.scrape()), leaf(await full.metrics.scrape())]
    t.same(a, b, `the same samples ${when}`)
    return a
  }
  const folded = (samples: Sample[]) => {
    const own = keysOf(samples, 'leaf_segment_step')
    return [...tags].filter(([k]) => !own.has(k))
  }
  let samples = await both('with no traffic')
  t.equal(keysOf(samples, 'leaf_segment_step').size, CAP + 1, 'the cap filled (by the 50 tags under a minute of buffer), and _other')
  t.equal(valueOf(samples, 'leaf_segment_folded_tags'), folded(samples).length, 'the folded-tags gauge counts the never-loaded tags')
  t.equal(folded(samples).length, 980)
  t.equal(valueOf(samples, 'leaf_segment_buffered_ids', { key: OTHER_KEY }), folded(samples).reduce((a, [, v]) => a + v.buffered, 0))
  for (const m of [lean, full]) for (let i = 0; i < 100; i += 10) { m.metrics.issued('segment', tagName(i), 5); m.metrics.segmentLoad(tagName(i), 0.01, i !== 40) }
  samples = await both('after 10 tags served')
  t.equal(valueOf(samples, 'leaf_segment_folded_tags'), folded(samples).length)
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: tagName(40) }), 1, 'the failed load keeps its tag\'s series')
  t.equal(valueOf(samples, 'leaf_segment_buffer_seconds', { key: OTHER_KEY }), Math.min(...folded(samples).map(([, v]) => v.rate > 0 ? v.buffered / v.rate : Infinity)))
  // A tag that served leaves leaf_alloc and comes back: never loaded again, with counters of its own.
  tags.set(tagName(20), { buffered: 0, rate: 0, step: 0, initOk: false, nextReady: false, neverLoaded: true })
  samples = await both('after a served tag came back unloaded')
  t.equal(valueOf(samples, 'leaf_segment_folded_tags'), folded(samples).length, 'counted once')
  t.equal(valueOf(samples, 'leaf_segment_step', { key: tagName(20) }), undefined, 'folded: the room goes to the tags under a minute of buffer')
  // Under the cap, every tag keeps its series: a tag never loaded too, at 0.
  const few = new Map([...tags].slice(0, 15))
  const small = setup(CAP, few)
  samples = leaf(await small.metrics.scrape())
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: tagName(1) }), 0, 'a tag never loaded has its failure counter at 0')
  t.equal(valueOf(samples, 'leaf_segment_step', { key: tagName(1) }), undefined, 'and no step until its first load sets one')
  t.equal(valueOf(samples, 'leaf_segment_buffer_seconds', { key: tagName(1) }), undefined, 'nor a horizon')
  t.equal(valueOf(samples, 'leaf_segment_step', { key: tagName(0) }), 1000, 'a loaded tag has both')
  t.equal(valueOf(samples, 'leaf_segment_folded_tags'), 0)
})

function returned (metrics: Metrics, truth: { returned: number }, i: number, ids: number): void {
  metrics.segmentGiveBack(tagName(i), BigInt(ids), 'table')
  truth.returned += ids
}

t.test('at most max-tag-series tags, every tag keeps its series as without a cap', async (t) => {
  const tags = new Map<string, FakeTag>()
  for (let i = 0; i < 10; i++) tags.set(tagName(i), { buffered: 5, rate: 0, step: 1000, initOk: true, nextReady: false })
  const { metrics } = setup(10, tags)
  metrics.issued('segment', tagName(1), 4)
  const samples = parseSamples(await metrics.scrape())
  t.equal(keysOf(samples, 'leaf_segment_step').size, 10, 'no _other gauge: nothing is folded')
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: tagName(9) }), 0, 'an idle tag\'s failure counter at 0')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: tagName(1) }), 4, 'a new tag counts on its own series from its first scrape')
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: OTHER_KEY }), 0)
  t.equal(valueOf(samples, 'leaf_segment_folded_tags'), 0)
})

t.test('a tag whose loads fail keeps its series past the cap, ahead of busier ones', async (t) => {
  const tags = new Map<string, FakeTag>()
  for (let i = 0; i < 20; i++) tags.set(tagName(i), { buffered: 5, rate: 0, step: 1000, initOk: true, nextReady: true })
  const { metrics, advance } = setup(2, tags)
  await metrics.scrape()
  metrics.segmentLoad(tagName(19), 0.5, false)
  for (let i = 0; i < 5; i++) metrics.issued('segment', tagName(i), 100)
  let samples = parseSamples(await metrics.scrape())
  t.same([...keysOf(samples, 'leaf_segment_step')].sort(), [OTHER_KEY, tagName(0), tagName(19)])
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: OTHER_KEY }), 1, 'the failure counts in _other, there at 0 before: increase() sees it')
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: tagName(19) }), 0)
  advance(ACTIVE_MS - 1000)
  for (let i = 0; i < 5; i++) metrics.issued('segment', tagName(i), 100)
  samples = parseSamples(await metrics.scrape())
  t.ok(keysOf(samples, 'leaf_segment_step').has(tagName(19)), 'still within 5 minutes of its failure')
  advance(2000)
  samples = parseSamples(await metrics.scrape())
  t.notOk(keysOf(samples, 'leaf_segment_step').has(tagName(19)), 'and folded after')
})

t.test('LeafSegmentLoadFailing on the series the cap exports: promtool, a scrape a minute', async (t) => {
  const tags = new Map<string, FakeTag>()
  for (const key of ['order', 'billing', 'busy']) tags.set(key, { buffered: 5, rate: 0, step: 1000, initOk: true, nextReady: true })
  const { metrics, advance } = setup(1, tags)
  const MINUTES = 15
  const series = new Map<string, string[]>()
  for (let minute = 0; minute < MINUTES; minute++) {
    metrics.issued('segment', 'busy', 100)
    // order fails 4 times at 3m and holds the one place for 5 minutes; billing fails at 10m and 12m.
    const failures = { 3: ['order', 4], 10: ['billing', 2], 12: ['billing', 3] }[minute] as [string, number] | undefined
    for (let i = 0; i < (failures?.[1] ?? 0); i++) metrics.segmentLoad(failures?.[0] as string, 0.01, false)
    for (const s of parseSamples(await metrics.scrape()).filter((s) => s.name === 'leaf_segment_db_load_failures_total')) {
      const values = series.get(s.labels.key as string) ?? Array<string>(MINUTES).fill('_')
      values[minute] = String(s.value)
      series.set(s.labels.key as string, values)
    }
    advance(60_000)
  }
  const alert = (key: string, n: number) => `
          - exp_labels: { severity: warning, job: leaf, instance: 'leaf1:8080', key: ${key} }
            exp_annotations:
              summary: 'Segment loads of tag ${key} fail on leaf1:8080'
              description: 'About ${n} loads of a segment of tag ${key} from leaf_alloc failed on leaf1:8080 in the last 5 minutes. The instance serves the IDs it has buffered and retries with backoff; once they run out, requests for the tag answer SEGMENTS_NOT_READY. Its log says why (database unreachable, max_id at its limit, the row gone).'`
  const file = join(tempDir(), 'cap.test.yml')
  writeFileSync(file, `rule_files: [${JSON.stringify(resolve('config/alerts.yml'))}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:${[...series].map(([key, values]) => `
      - series: 'leaf_segment_db_load_failures_total{job="leaf",instance="leaf1:8080",key="${key}"}'
        values: '${values.join(' ')}'`).join('')}
    alert_rule_test:
      - eval_time: 5m
        alertname: LeafSegmentLoadFailing
        exp_alerts:${alert(OTHER_KEY, 4)}
      - eval_time: 9m
        alertname: LeafSegmentLoadFailing
        exp_alerts: []
      - eval_time: 12m
        alertname: LeafSegmentLoadFailing
        exp_alerts:${alert(OTHER_KEY, 2)}${alert('billing', 3)}
`)
  t.same(series.get(OTHER_KEY), ['0', '0', '0', '4', '4', '4', '4', '4', '4', '4', '6', '6', '6', '6', '6'], 'folded failures count in _other, which never jumps')
  const run = spawnSync('promtool', ['test', 'rules', file], { encoding: 'utf8' })
  t.equal(run.status, 0, `promtool: ${run.stdout}${run.stderr}\n${[...series].map(([k, v]) => `${k}: ${v.join(' ')}`).join('\n')}`)
})

t.test('leaf.metrics.max-tag-series: a bad value stops the start naming the key', async (t) => {
  for (const [raw, problem] of [['many', '"many" is not an integer'], ['-1', '-1 is out of range [0, 1000000]'], ['2.5', '"2.5" is not an integer']]) {
    t.throws(() => loadConfig({ cwd: tempDir(), argv: [`--leaf.metrics.max-tag-series=${raw}`] }),
      new ConfigError('leaf.metrics.max-tag-series', problem as string), raw as string)
  }
  t.equal(loadConfig({ cwd: tempDir() }).config.metrics.maxTagSeries, 100, 'the default')
})

t.test('the server with 2,000 tags on SQLite exports at most max-tag-series of them', async (t) => {
  const dbPath = join(tempDir(), 'leaf.db')
  withSqlite(dbPath, (db) => {
    db.exec('CREATE TABLE leaf_alloc (biz_tag VARCHAR(128) NOT NULL DEFAULT \'\' PRIMARY KEY, max_id BIGINT NOT NULL DEFAULT 1, step INT NOT NULL, description VARCHAR(256) DEFAULT NULL, update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)')
    const insert = db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, 1, 1000)')
    db.transaction(() => { for (let i = 0; i < 2000; i++) insert.run(tagName(i)) })()
  })
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': `sqlite:${dbPath}`, 'leaf.metrics.max-tag-series': 20 }), { logger: silentLogger })
  t.teardown(() => app.close())
  const remembered = new Remembered()
  let issued = 0
  for (let round = 0; round < 3; round++) {
    for (let i = round * 10; i < round * 10 + 30; i++) {
      const res = await app.inject(`/api/segment/get/${tagName(i)}?count=${i + 1}`)
      t.equal(res.statusCode, 200)
      issued += i + 1
    }
    const text = (await app.inject('/metrics')).body
    const samples = parseSamples(text)
    remembered.take(t, samples, `after round ${round}`)
    for (const name of PER_TAG) t.ok(keysOf(samples, name).size <= 21, `${name}: at most 20 tags and _other`)
    t.equal(valueOf(samples, 'leaf_segment_folded_tags'), 1980)
    t.equal(remembered.total('leaf_ids_issued_total'), issued, `round ${round}: the IDs issued add up`)
    t.ok(text.length < 60_000, `${text.length} bytes, not one block per tag`)
  }
})
