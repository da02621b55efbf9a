import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { HotCounter, HotHistogram, type HistogramChild } from './hot-metrics.js'
import { checkReadiness } from '../modes/readiness.js'
import type { SegmentMode } from '../modes/segment-mode.js'
import type { SnowflakeMode } from '../modes/snowflake-mode.js'
import type { LeaseSource } from '../snowflake/worker-id/worker-lease.js'

/** Snowflake keys are the caller's choice: past this many distinct keys, count under `_other`. */
export const MAX_SNOWFLAKE_KEYS = 100
export const OTHER_KEY = '_other'
/** The worker-id sources that hold a ZooKeeper session (`cache`: the zookeeper source started from its cache file). */
const ZOOKEEPER_SOURCES: ReadonlySet<LeaseSource> = new Set(['zookeeper', 'cache', 'zookeeper-lease'])
/**
 * The error codes config/alerts.yml watches, exported at 0 from the start: a counter that first
 * appears at its first increment hides that increment, or that whole burst, from increase().
 */
const ALERTED_ERRORS = { segment: ['SEGMENTS_NOT_READY'], snowflake: ['CLOCK_BACKWARDS'] } as const

export interface Metrics {
  registry: Registry
  issued (mode: string, key: string, count: number): void
  idError (mode: string, code: string): void
  request (method: string, route: string, status: number, seconds: number): void
  segmentLoad (key: string, seconds: number, ok: boolean): void
  /** IDs of a tag given back at a graceful stop: to max_id, or parked for the next start. */
  segmentGiveBack (key: string, ids: bigint, to: 'table' | 'successor'): void
  clockBackwards (): void
  /** A worker-id claim's result (recyclable sources). */
  leaseClaim (result: string): void
  /** The worker-id lease was lost: issuing stopped. */
  leaseLost (): void
  /** ID requests that failed since the start, by mode and code (the /cache page). */
  errorCounts (): { mode: string, code: string, count: number }[]
  /** What the scrape-time gauges read. */
  watch (modes: { segment: SegmentMode | undefined, snowflake: SnowflakeMode | undefined }): void
}

/**
 * The service's metrics in a registry of its own. The per-request ones are hot-metrics.ts
 * children kept in maps (a map lookup and an addition per request); gauges are computed when
 * scraped, never on the ID path.
 */
export function createMetrics (): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  let modes: Parameters<Metrics['watch']>[0] = { segment: undefined, snowflake: undefined }

  const httpDuration = new HotHistogram('http_request_duration_seconds', 'HTTP request duration by method, route pattern and status code.',
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5])
  const idsIssued = new HotCounter('leaf_ids_issued_total', 'IDs handed out.')
  const idErrors = new HotCounter('leaf_id_errors_total', 'ID requests that failed, by error code.')
  const loadSeconds = new Histogram({
    name: 'leaf_segment_db_load_seconds',
    help: 'Time to reserve a segment in the database.',
    labelNames: ['key'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  })
  const loadFailures = new Counter({
    name: 'leaf_segment_db_load_failures_total',
    help: 'Segment loads that failed.',
    labelNames: ['key'],
    registers: [registry],
    collect () {
      // 0 for every known tag (see ALERTED_ERRORS for why).
      for (const v of modes.segment?.generator.views() ?? []) this.inc({ key: v.key }, 0)
    },
  })
  const returned = new Counter({
    name: 'leaf_segment_ids_returned_total',
    help: 'Unused IDs given back at a graceful stop: to="table" by a compare-and-set on max_id, to="successor" parked for the next start of this instance.',
    labelNames: ['key', 'to'],
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

  // Scrape-time gauges: prom-client calls collect() on each scrape.
  const segmentGauges = [new Gauge({
    name: 'leaf_segment_step',
    help: 'Current (adapted) step per tag.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) this.set({ key: v.key }, v.step)
    },
  }), new Gauge({
    name: 'leaf_segment_remaining',
    help: 'IDs left in the current segment per tag.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) {
        this.set({ key: v.key }, Number(v.max0 - v.value0))
      }
    },
  }), new Gauge({
    name: 'leaf_segment_buffered_ids',
    help: 'IDs held and not handed out yet, in every loaded segment of the tag.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) this.set({ key: v.key }, v.buffered)
    },
  }), new Gauge({
    name: 'leaf_segment_buffer_seconds',
    help: 'How long the buffered IDs of the tag last at its current issue rate; +Inf while it is idle.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) this.set({ key: v.key }, v.bufferSeconds)
    },
  }), new Gauge({
    name: 'leaf_segment_loaded_segments',
    help: 'Segments the tag holds, the current one included.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) this.set({ key: v.key }, v.segments.length)
    },
  }), new Gauge({
    name: 'leaf_segment_next_ready',
    help: '1 when the next segment of the tag is loaded.',
    labelNames: ['key'],
    registers: [],
    collect () {
      this.reset()
      for (const v of modes.segment?.generator.views() ?? []) this.set({ key: v.key }, v.nextReady ? 1 : 0)
    },
  })]
  const leaseGauge = (name: string, help: string, read: (s: ReturnType<SnowflakeMode['lease']['status']>) => number | undefined) =>
    new Gauge({
      name,
      help,
      registers: [],
      collect () {
        this.reset()
        const status = modes.snowflake?.lease.status()
        const value = status === undefined ? undefined : read(status)
        if (value !== undefined) this.set(value)
      },
    })
  const snowflakeGauges = [
    leaseGauge('leaf_snowflake_worker_id', 'This instance\'s snowflake worker id.', (s) => s.workerId),
    leaseGauge('leaf_zookeeper_connected', '1 while the ZooKeeper session is connected.', (s) => s.zookeeperConnected ? 1 : 0),
    // leaf_zookeeper_connected is 0 on an instance without ZooKeeper too: alerts need this to tell the two apart.
    leaseGauge('leaf_zookeeper_in_use', '1 when this instance\'s worker-id source uses ZooKeeper (zookeeper, zookeeper-lease), else 0.',
      (s) => ZOOKEEPER_SOURCES.has(s.source) ? 1 : 0),
    leaseGauge('leaf_snowflake_last_heartbeat_timestamp_seconds', 'When the worker lease was last written.',
      (s) => s.lastHeartbeat === undefined ? undefined : s.lastHeartbeat / 1000),
    leaseGauge('leaf_snowflake_lease_expiry_seconds', 'Time left until the store may free the worker-id lease (recyclable sources; the holder fences TTL/10 earlier); 0 once lost.',
      (s) => s.issuedUntil === undefined ? undefined : Math.max(0, ((s.leaseExpiresAt ?? 0) - Date.now()) / 1000)),
    new Gauge({
      // The leaf_snowflake_borrowed_ms in Prometheus's base unit: promtool refuses "_ms".
      name: 'leaf_snowflake_borrowed_seconds',
      help: 'How far ahead of the clock the generator\'s time is now, in seconds (borrowed time, leaf.snowflake.borrow-ahead-ms).',
      registers: [],
      collect () {
        this.reset()
        if (modes.snowflake !== undefined) this.set(modes.snowflake.generator.borrowedMs() / 1000)
      },
    }),
  ]

  // What /readyz would answer now, for an alert on `leaf_ready == 0`: the same function, asked
  // at scrape time (it may wait up to READY_DB_TIMEOUT_MS on the database).
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

  function errorChild (mode: string, code: string): { value: number } {
    const id = mode + '\0' + code
    let child = errorChildren.get(id)
    if (child === undefined) {
      child = idErrors.child({ mode, code })
      errorChildren.set(id, child)
    }
    return child
  }

  for (const metric of [httpDuration, idsIssued, idErrors, readyGauge, ...segmentGauges, ...snowflakeGauges]) {
    registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0])
  }

  return {
    registry,
    issued (mode, key, count) {
      const byKey = mode === 'segment' ? issuedSegment : issuedSnowflake
      let child = byKey.get(key)
      if (child === undefined) {
        if (mode === 'snowflake' && snowflakeKeys.size >= MAX_SNOWFLAKE_KEYS) {
          // Keys past the cap share one child and are not remembered one by one.
          otherKeys ??= idsIssued.child({ mode, key: OTHER_KEY })
          otherKeys.value += count
          return
        }
        if (mode === 'snowflake') snowflakeKeys.add(key)
        child = idsIssued.child({ mode, key })
        byKey.set(key, child)
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
      loadSeconds.labels({ key }).observe(seconds)
      if (!ok) loadFailures.labels({ key }).inc()
    },
    segmentGiveBack (key, ids, to) {
      returned.labels({ key, to }).inc(Number(ids))
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
      for (const mode of ['segment', 'snowflake'] as const) {
        if (m[mode] !== undefined) for (const code of ALERTED_ERRORS[mode]) errorChild(mode, code)
      }
    },
  }
}
