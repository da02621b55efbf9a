import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { SegmentMode } from '../modes/segment-mode.js'
import type { SnowflakeMode } from '../modes/snowflake-mode.js'

/** Snowflake keys are the caller's choice: past this many distinct keys, count under `_other`. */
export const MAX_SNOWFLAKE_KEYS = 100
export const OTHER_KEY = '_other'

export interface Metrics {
  registry: Registry
  issued (mode: string, key: string, count: number): void
  idError (mode: string, code: string): void
  request (method: string, route: string, status: number, seconds: number): void
  segmentLoad (key: string, seconds: number, ok: boolean): void
  clockBackwards (): void
  /** What the scrape-time gauges read. */
  watch (modes: { segment: SegmentMode | undefined, snowflake: SnowflakeMode | undefined }): void
}

/**
 * The service's metrics in a registry of its own. Hot-path counters keep their label children
 * in maps: prom-client's labels() hashes the label object on every call. Gauges are computed
 * when scraped, never on the ID path.
 */
export function createMetrics (): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  let modes: Parameters<Metrics['watch']>[0] = { segment: undefined, snowflake: undefined }

  const httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by method, route pattern and status code.',
    labelNames: ['method', 'route', 'status_code'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  })
  const idsIssued = new Counter({ name: 'leaf_ids_issued_total', help: 'IDs handed out.', labelNames: ['mode', 'key'], registers: [registry] })
  const idErrors = new Counter({ name: 'leaf_id_errors_total', help: 'ID requests that failed, by error code.', labelNames: ['mode', 'code'], registers: [registry] })
  const loadSeconds = new Histogram({
    name: 'leaf_segment_db_load_seconds',
    help: 'Time to reserve a segment in the database.',
    labelNames: ['key'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  })
  const loadFailures = new Counter({ name: 'leaf_segment_db_load_failures_total', help: 'Segment loads that failed.', labelNames: ['key'], registers: [registry] })
  const backwards = new Counter({ name: 'leaf_snowflake_clock_backwards_total', help: 'Times the clock was found behind the last snowflake ID.', registers: [registry] })

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
        this.set({ key: v.key }, v.pos === 0 ? Number(v.max0 - v.value0) : Number(v.max1 - v.value1))
      }
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
    leaseGauge('leaf_snowflake_last_heartbeat_timestamp_seconds', 'When the worker lease was last written.',
      (s) => s.lastHeartbeat === undefined ? undefined : s.lastHeartbeat / 1000),
  ]

  type CounterChild = ReturnType<typeof idsIssued.labels>
  const issuedChildren = new Map<string, CounterChild>()
  const snowflakeKeys = new Set<string>()
  const errorChildren = new Map<string, CounterChild>()
  const requestChildren = new Map<string, ReturnType<typeof httpDuration.labels>>()

  for (const gauge of [...segmentGauges, ...snowflakeGauges]) registry.registerMetric(gauge)

  return {
    registry,
    issued (mode, key, count) {
      const id = mode + '\0' + key
      let child = issuedChildren.get(id)
      if (child === undefined) {
        let label = key
        if (mode === 'snowflake') {
          if (snowflakeKeys.size < MAX_SNOWFLAKE_KEYS) snowflakeKeys.add(key)
          else label = OTHER_KEY
        }
        child = idsIssued.labels({ mode, key: label })
        // Keys past the cap all share the `_other` child but are not remembered one by one.
        if (label === key) issuedChildren.set(id, child)
      }
      child.inc(count)
    },
    idError (mode, code) {
      const id = mode + '\0' + code
      let child = errorChildren.get(id)
      if (child === undefined) {
        child = idErrors.labels({ mode, code })
        errorChildren.set(id, child)
      }
      child.inc()
    },
    request (method, route, status, seconds) {
      const id = method + ' ' + route + ' ' + status
      let child = requestChildren.get(id)
      if (child === undefined) {
        child = httpDuration.labels({ method, route, status_code: status })
        requestChildren.set(id, child)
      }
      child.observe(seconds)
    },
    segmentLoad (key, seconds, ok) {
      loadSeconds.labels({ key }).observe(seconds)
      if (!ok) loadFailures.labels({ key }).inc()
    },
    clockBackwards () {
      backwards.inc()
    },
    watch (m) {
      modes = m
    },
  }
}
