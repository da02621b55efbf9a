import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'
import { HotCounter, HotHistogram, type HistogramChild } from './hot-metrics.js'
import { OTHER_KEY, TagCounter, TagHistogram, TagPlan, type TagSignal } from './tag-series.js'
import { checkReadiness } from '../modes/readiness.js'
import type { SegmentMode } from '../modes/segment-mode.js'
import type { SnowflakeMode } from '../modes/snowflake-mode.js'
import type { Regression } from '../segment/max-id-guard.js'
import { SegmentBuffer } from '../segment/segment-buffer.js'
import { toView, type SegmentBufferView } from '../segment/segment-views.js'
import { createSnowflakeGauges } from './snowflake-gauges.js'
import { valuesMetric } from './values-metric.js'
import { createSegmentTagGauges } from './segment-tag-gauges.js'

/** Snowflake keys are the caller's choice: past this many distinct keys, count under `_other`. */
export const MAX_SNOWFLAKE_KEYS = 100
export { OTHER_KEY }
/** LeafSegmentBufferLow's threshold (config/alerts.yml). */
const BUFFER_LOW_SECONDS = 60
/**
 * The error codes config/alerts.yml watches, exported at 0 from the start: a counter that first
 * appears at its first increment hides that increment, or that whole burst, from increase().
 */
const ALERTED_ERRORS = { segment: ['SEGMENTS_NOT_READY', 'STORE_UNCONFIRMED'], snowflake: ['CLOCK_BACKWARDS'] } as const
const NEVER_LOADED = toView(new SegmentBuffer(OTHER_KEY), 0, { history: false })
/** The core's causes (segment/max-id-guard.ts) as label values: snake_case, as every label value the service chooses. */
export const REGRESSION_CAUSE_LABELS: Readonly<Record<Regression['cause'], string>> = { 'store changed': 'store_changed', 'max_id went back': 'max_id_went_back' }
/**
 * prom-client's default gauges named `_total`, which promtool refuses ("non-counter metrics should
 * not have _total suffix"): each is the sum of its family by type (nodejs_active_handles ...).
 */
export const DROPPED_DEFAULT_METRICS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']

export interface Metrics {
  registry: Registry
  issued (mode: string, key: string, count: number): void
  idError (mode: string, code: string): void
  request (method: string, route: string, status: number, seconds: number): void
  segmentLoad (key: string, seconds: number, ok: boolean): void
  segmentGiveBack (key: string, ids: bigint, to: 'table' | 'successor'): void
  /** An allocation repeated after a conflict (Galera's certification, a lock wait). */
  segmentRetry (key: string, reason: string): void
  segmentRegression (r: { cause: Regression['cause'] }): void
  clockBackwards (): void
  leaseClaim (result: string): void
  /** The worker-id lease was lost: issuing stopped. */
  leaseLost (): void
  /** For the /cache page. */
  errorCounts (): { mode: string, code: string, count: number }[]
  watch (modes: { segment: SegmentMode | undefined, snowflake: SnowflakeMode | undefined }): void
  scrape (): Promise<string>
}

export interface MetricsOptions {
  /** leaf.metrics.max-tag-series. */
  maxTagSeries: number
  /** Monotonic ms; tests inject one. */
  now?: () => number
}

/** Buffer under a minute while serving, or the current segment used up with none after it. */
function alerting (v: SegmentBufferView): boolean {
  return (v.bufferSeconds !== undefined && v.bufferSeconds < BUFFER_LOW_SECONDS) || v.next === 'used_up'
}

/** Gauges are computed when scraped, never on the ID path. */
export function createMetrics ({ maxTagSeries, now = () => performance.now() }: MetricsOptions): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  for (const name of DROPPED_DEFAULT_METRICS) registry.removeSingleMetric(name)
  let modes: Parameters<Metrics['watch']>[0] = { segment: undefined, snowflake: undefined }
  const plan = new TagPlan(maxTagSeries, now)
  /** The segment generator's views as of the last scrape, split by the plan: every per-tag gauge reads these. */
  let keptViews: SegmentBufferView[] = []
  let foldedViews: SegmentBufferView[] = []

  const httpDuration = new HotHistogram('http_request_duration_seconds', 'HTTP request duration by method, route pattern and status code.',
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5])
  const segmentIssued = new TagCounter({ mode: 'segment' }, { otherFromStart: true })
  const idsIssued = new HotCounter('leaf_ids_issued_total', 'IDs handed out.',
    () => modes.segment === undefined ? [] : segmentIssued.values(plan))
  const idErrors = new HotCounter('leaf_id_errors_total', 'ID requests that failed, by error code.')
  const loadSeconds = new TagHistogram('leaf_segment_db_load_seconds', 'Time to reserve a segment in the database.',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], plan)
  // 0 for every tag with a series of its own, and for _other (see ALERTED_ERRORS for why).
  const loadFailures = new TagCounter({}, { otherFromStart: true, zeroForKept: true })
  const returnedTo = { table: new TagCounter({ to: 'table' }), successor: new TagCounter({ to: 'successor' }) }
  const tagCounters = [segmentIssued, loadFailures, returnedTo.table, returnedTo.successor]
  const perTagCounters = [
    valuesMetric('leaf_segment_db_load_failures_total', 'Segment loads that failed.', 'counter',
      () => modes.segment === undefined ? [] : loadFailures.values(plan)),
    valuesMetric('leaf_segment_ids_returned_total', 'Unused IDs given back at a graceful stop: to="table" by a compare-and-set on max_id, to="successor" parked for the next start of this instance.',
      'counter', () => [...returnedTo.table.values(plan), ...returnedTo.successor.values(plan)]),
  ]
  const retries = new Counter({
    name: 'leaf_segment_allocate_retries_total',
    help: 'Allocations repeated at once in a new transaction after a conflict: reason="ER_LOCK_DEADLOCK" (Galera\'s certification, or a deadlock) or "ER_LOCK_WAIT_TIMEOUT".',
    labelNames: ['reason'],
    registers: [registry],
  })
  const regressions = new Counter({
    name: 'leaf_segment_store_regressions_total',
    help: 'Store failovers that may have lost allocations: cause="store_changed" (another server or cluster answers) or "max_id_went_back" (a range came back below one served). Each raises every tag and holds allocations.',
    labelNames: ['cause'],
    registers: [registry],
  })
  const backwards = new Counter({ name: 'leaf_snowflake_clock_backwards_total', help: 'Times the clock was found behind the last snowflake ID.', registers: [registry] })
  const leaseClaims = new Counter({
    name: 'leaf_snowflake_lease_claims_total',
    help: 'Worker-id claims by result: claimed, reclaimed (after a loss), conflict (another instance won), drift (its previous holder ran too far ahead), exhausted, error.',
    labelNames: ['result'],
    registers: [registry],
  })
  const leaseLost = new Counter({ name: 'leaf_snowflake_lease_lost_total', help: 'Times the worker-id lease ran out or was taken and issuing stopped.', registers: [registry] })

  const segmentGauges = [new Gauge({
    name: 'leaf_segment_failover_hold_seconds',
    help: 'Seconds left of the hold on new allocations after a store failover (0: none).',
    registers: [],
    collect () {
      this.set((modes.segment?.guard.view().holdingMs ?? 0) / 1000)
    },
  }), new Gauge({
    name: 'leaf_segment_store_writable_hosts',
    help: 'Hosts of leaf.jdbc.url that answered writable at the last census, counted by store (a Galera cluster\'s nodes once); more than 1: a split brain, nothing is allocated (STORE_SPLIT). 0 without a MySQL host list.',
    registers: [],
    collect () {
      const hosts = modes.segment?.hosts?.view().hosts ?? []
      this.set(new Set(hosts.filter((h) => h.state === 'writable').map((h) => h.server ?? h.host)).size)
    },
  })]
  const perTagGauges = createSegmentTagGauges(() => ({ kept: keptViews, folded: foldedViews }), () => plan.folded)
  const snowflakeGauges = createSnowflakeGauges(() => modes.snowflake)

  // /readyz's own function: a scrape may wait up to READY_DB_TIMEOUT_MS on the database.
  const readyGauge = new Gauge({
    name: 'leaf_ready',
    help: '1 when /readyz would answer 200 (every enabled mode can serve, and one is enabled), else 0.',
    registers: [],
    async collect () {
      this.set((await checkReadiness(modes)).ready ? 1 : 0)
    },
  })

  const issuedSegment = new Map<string, { value: number }>()
  const issuedSnowflake = new Map<string, { value: number }>()
  const snowflakeKeys = new Set<string>()
  let otherKeys: { value: number } | undefined
  const errorChildren = new Map<string, { value: number }>()
  const requestChildren = new Map<string, Map<string, Map<number, HistogramChild>>>()

  /** Once per scrape: which tags were active, the plan, and each per-tag count moved to its series. */
  function foldTags (): void {
    const generator = modes.segment?.generator
    // Past the cap, one view stands for every tag never loaded, so a scrape costs what is used
    // (docs/monitoring.md#the-series-cap-one-series-per-active-tag).
    const past = generator !== undefined && generator.tagCount() > plan.maxTags
    const views = generator?.views({ history: false, loaded: past }) ?? []
    const signals = new Map<string, TagSignal>()
    const at = (key: string): TagSignal => {
      let s = signals.get(key)
      if (s === undefined) signals.set(key, s = { alert: false, moved: false, failed: false })
      return s
    }
    for (const v of views) at(v.key).alert = alerting(v)
    const moved = (key: string, m: boolean) => { if (m) at(key).moved = true; else at(key) }
    for (const counter of [segmentIssued, returnedTo.table, returnedTo.successor]) counter.signals(moved)
    loadSeconds.signals(moved)
    loadFailures.signals((key, m) => { const s = at(key); if (m) s.moved = s.failed = true })
    let idle = 0
    if (past) {
      // A tag never loaded with counters of its own (it served, left leaf_alloc, and came back)
      // has a signal: it gets its view as every tag with one does, and is no idle tag.
      const viewed = new Set(views.map((v) => v.key))
      for (const key of signals.keys()) {
        const v = viewed.has(key) ? undefined : generator.view(key, { history: false })
        if (v !== undefined) views.push(v)
      }
      idle = generator.tagCount() - views.length
    }
    plan.decide(signals, idle)
    for (const counter of tagCounters) counter.fold(plan)
    loadSeconds.fold()
    keptViews = []
    foldedViews = []
    for (const v of views) (plan.kept(v.key) ? keptViews : foldedViews).push(v)
    if (idle > 0) foldedViews.push(NEVER_LOADED)
  }

  function errorChild (mode: string, code: string): { value: number } {
    const id = mode + '\0' + code
    let child = errorChildren.get(id)
    if (child === undefined) {
      child = idErrors.child({ mode, code })
      errorChildren.set(id, child)
    }
    return child
  }

  for (const metric of [httpDuration, idsIssued, idErrors, loadSeconds, ...perTagCounters, readyGauge, ...segmentGauges, ...perTagGauges, ...snowflakeGauges]) {
    registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0])
  }

  return {
    registry,
    issued (mode, key, count) {
      // One addition site per mode: their children have different shapes.
      if (mode === 'segment') {
        let child = issuedSegment.get(key)
        if (child === undefined) issuedSegment.set(key, child = segmentIssued.child(key))
        child.value += count
        return
      }
      let child = issuedSnowflake.get(key)
      if (child === undefined) {
        if (snowflakeKeys.size >= MAX_SNOWFLAKE_KEYS) {
          // Keys past the cap share one child and are not remembered one by one.
          otherKeys ??= idsIssued.child({ mode, key: OTHER_KEY })
          otherKeys.value += count
          return
        }
        snowflakeKeys.add(key)
        child = idsIssued.child({ mode, key })
        issuedSnowflake.set(key, child)
      }
      child.value += count
    },
    idError (mode, code) {
      errorChild(mode, code).value++
    },
    errorCounts () {
      return [...errorChildren].map(([id, child]) => {
        const [mode = '', code = ''] = id.split('\0')
        return { mode, code, count: child.value }
      })
    },
    request (method, route, status, seconds) {
      // Nested maps keyed by the values themselves: no key string is built per request.
      let byRoute = requestChildren.get(route)
      if (byRoute === undefined) requestChildren.set(route, byRoute = new Map())
      let byMethod = byRoute.get(method)
      if (byMethod === undefined) byRoute.set(method, byMethod = new Map())
      let child = byMethod.get(status)
      if (child === undefined) byMethod.set(status, child = httpDuration.child({ method, route, status_code: status }))
      child.observe(seconds)
    },
    segmentLoad (key, seconds, ok) {
      loadSeconds.observe(key, seconds)
      if (!ok) loadFailures.child(key).value++
    },
    segmentGiveBack (key, ids, to) {
      returnedTo[to].child(key).value += Number(ids)
    },
    segmentRetry (key, reason) {
      retries.labels({ reason }).inc()
    },
    segmentRegression (r) {
      regressions.labels({ cause: REGRESSION_CAUSE_LABELS[r.cause] }).inc()
    },
    clockBackwards () {
      backwards.inc()
    },
    leaseClaim (result) {
      leaseClaims.labels({ result }).inc()
    },
    leaseLost () {
      leaseLost.inc()
    },
    watch (m) {
      modes = m
      // 0 from the start: LeafSegmentStoreFailover reads increase() of it (see ALERTED_ERRORS).
      if (m.segment !== undefined) for (const cause of Object.values(REGRESSION_CAUSE_LABELS)) regressions.labels({ cause }).inc(0)
      for (const mode of ['segment', 'snowflake'] as const) {
        if (m[mode] !== undefined) for (const code of ALERTED_ERRORS[mode]) errorChild(mode, code)
      }
    },
    async scrape () {
      foldTags()
      return await registry.metrics()
    },
  }
}
