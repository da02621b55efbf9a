import type { RunInfo } from '../scripts/run-info.js'
import { CLIENT_TARGETS, type ClientBench } from './client.js'
import type { InProcessRow } from './in-process.js'

// What a bench run records in bench/results/latest.json, and the targets it is judged by.
// run.ts writes the file and exits non-zero when a target is missed; render.ts turns the same
// file into the published table (docs/performance.md), with the same verdicts.

export interface HttpRow {
  name: string
  path: string
  cpuMicrosPerRequest: number
  requestsPerSecond: number
  p50Ms: number
  p99Ms: number
  /** Requests answered 2xx: the only ones in the per-request figures. */
  requests: number
  /** Requests answered otherwise, or not at all, over all rounds: any fails the row. */
  failed: number
  /** Median over rounds of (this row's CPU per request / the ceiling's, same body length, same round). */
  cpuRatioToCeiling: number | null
  idsPerCpuSecond: number
}

/** One load run of a row: CPU per request and what failed. */
export interface Round { cpuPerRequest: number, requestsPerSecond: number, p50: number, p99: number, ok: number, failed: number }

/** What autocannon reports of a run, the part read here. */
export interface LoadResult { '2xx': number, non2xx: number, errors: number, timeouts: number, latency: { p50: number, p99: number } }

/**
 * A round from a load run of `amount` requests that took `cpu` seconds of the server's CPU in
 * `seconds`: only 2xx answers count as requests served (an error answer is cheaper than an
 * ID, so counting it would flatter the row); every other one is a failure.
 */
export function roundOf (result: LoadResult, amount: number, cpu: number, seconds: number): Round {
  const ok = result['2xx']
  return {
    cpuPerRequest: cpu / ok,
    requestsPerSecond: ok / seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
    ok,
    failed: Math.max(amount - ok, result.non2xx + result.errors + result.timeouts),
  }
}

export interface CountedRow {
  name: string
  path: string
  /** Instructions per request, one per count. */
  counts: number[]
  /** Body length of the answer before each count. */
  bodyLengths: number[]
  /** Calls per request of V8's slow path for Node's tick records, one per count (see src/tick-shape.ts). */
  tickSlowPath: number[]
  /** Instructions per request spent in V8's garbage collection, one per count. */
  gc: number[]
  /** Counts taken while V8 recompiled, refused and taken again. */
  refused: { instructionsPerRequest: number, compileShare: number }[]
}

export interface CountedRoute extends CountedRow {
  /** Each count over the median of the ceiling's counts for a body of the same length. */
  ratios: number[]
}

export interface BenchResults {
  run: RunInfo
  /** The command that produced the figures. */
  command: string
  node: string
  pinned: boolean
  rounds: number
  inProcess: InProcessRow[]
  http: HttpRow[]
  /** Median over rounds of the batch route's IDs per CPU second over the single-ID segment route's. */
  batchToSingle: number
  /** null: not counted (valgrind missing, or BENCH_CALLGRIND=0). */
  callgrind: { countedRequests: number, ceiling: CountedRow[], routes: CountedRoute[] } | null
  /** The @leaf-ts/client rows (bench/client.ts); absent in runs from before the client. */
  client?: ClientBench
}

export const CLIENT_TRY_ROW = '@leaf-ts/client tryNextId'
export const CLIENT_AWAIT_ROW = '@leaf-ts/client await nextId'
export const CLIENT_E2E_ROW = '@leaf-ts/client end to end'
export const CLIENT_LATENCY_ROW = '@leaf-ts/client nextId latency'

export const SEGMENT_ROUTE = '/api/segment/get/:key'
export const SNOWFLAKE_ROUTE = '/api/snowflake/get/:key'
export const SINGLE_ID_ROUTES = [SEGMENT_ROUTE, SNOWFLAKE_ROUTE]
export const BATCH = 1000
export const BATCH_ROUTE = `${SEGMENT_ROUTE}?count=${BATCH}`
export const CEILING = 'bare Fastify (ceiling)'
export const LAYOUT_LIMIT = 4_096_000

export const TARGETS = {
  segmentIdsPerSecond: 20_000_000,
  snowflakeShareOfLimit: 0.85,
  /** The largest count of a single-ID route over the ceiling's, same body length. */
  singleToCeiling: 1.11,
  batchToSingle: 300,
  /** Fewer calls per request of the tick records' slow path than this: 0 while src/tick-shape.ts works, 20 to 30 when not. */
  tickSlowPathCalls: 1,
}

export interface Verdict {
  row: string
  target: string
  /** null: not checked in this run. */
  met: boolean | null
  why: string
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
const pct = (r: number) => `${fmt(r * 100, 1)}%`

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] as number : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

function noFailures (row: HttpRow | undefined): string | undefined {
  if (row === undefined) return 'not measured'
  return row.failed > 0 ? `${fmt(row.failed)} requests failed (not 2xx)` : undefined
}

/** One verdict per row with a target, in table order. */
export function judge (r: BenchResults): Verdict[] {
  const verdicts: Verdict[] = []
  const inProcess = (name: string) => r.inProcess.find((row) => row.name === name)?.idsPerSecond ?? 0
  const http = (name: string) => r.http.find((row) => row.name === name)

  const segment = inProcess('segment generator')
  verdicts.push({
    row: 'segment generator',
    target: `≥ ${fmt(TARGETS.segmentIdsPerSecond)} IDs/s`,
    met: segment >= TARGETS.segmentIdsPerSecond,
    why: `${fmt(segment)} IDs/s`,
  })
  const snowflake = inProcess('snowflake generator') / LAYOUT_LIMIT
  verdicts.push({ row: 'snowflake generator', target: `≥ ${pct(TARGETS.snowflakeShareOfLimit)} of the layout's limit`, met: snowflake >= TARGETS.snowflakeShareOfLimit, why: pct(snowflake) })

  const ceilingFailure = noFailures(http(CEILING))
  verdicts.push({ row: CEILING, target: 'no failed request', met: ceilingFailure === undefined, why: ceilingFailure ?? 'none failed' })

  for (const name of SINGLE_ID_ROUTES) {
    const failure = noFailures(http(name))
    const counted = r.callgrind?.routes.find((row) => row.name === name)
    const target = `≤ ${pct(TARGETS.singleToCeiling)} of the ceiling (largest count); no tick-record slow path; no failed request`
    if (failure !== undefined) verdicts.push({ row: name, target, met: false, why: failure })
    else if (counted === undefined) verdicts.push({ row: name, target, met: null, why: 'instructions not counted' })
    else {
      const largest = Math.max(...counted.ratios)
      const slowPath = Math.max(...counted.tickSlowPath)
      verdicts.push({
        row: name,
        target,
        met: largest <= TARGETS.singleToCeiling && slowPath < TARGETS.tickSlowPathCalls,
        why: `largest of ${counted.ratios.length} counts: ${pct(largest)}; tick-record slow path: at most ${fmt(slowPath, 1)} calls per request`,
      })
    }
  }

  const batchFailure = noFailures(http(BATCH_ROUTE))
  const batchTarget = `≥ ${TARGETS.batchToSingle}x the single-ID route's IDs per CPU second, no failed request`
  verdicts.push(batchFailure !== undefined
    ? { row: BATCH_ROUTE, target: batchTarget, met: false, why: batchFailure }
    : { row: BATCH_ROUTE, target: batchTarget, met: r.batchToSingle >= TARGETS.batchToSingle, why: `${fmt(r.batchToSingle)}x` })

  const c = r.client
  if (c !== undefined) {
    const share = c.tryNextId / c.bigintCounter
    verdicts.push({ row: CLIENT_TRY_ROW, target: `≥ ${pct(CLIENT_TARGETS.tryNextIdShareOfCeiling)} of a bare bigint counter`, met: share >= CLIENT_TARGETS.tryNextIdShareOfCeiling, why: pct(share) })
    verdicts.push({ row: CLIENT_AWAIT_ROW, target: `≥ ${fmt(CLIENT_TARGETS.awaitNextIdPerSecond)} IDs/s`, met: c.awaitNextId >= CLIENT_TARGETS.awaitNextIdPerSecond, why: `${fmt(c.awaitNextId)} IDs/s` })
    verdicts.push({
      row: CLIENT_E2E_ROW,
      target: `≤ ${CLIENT_TARGETS.requestsPerMillionIds} requests per million IDs, no error`,
      met: c.e2e.requestsPerMillionIds <= CLIENT_TARGETS.requestsPerMillionIds && c.e2e.errors === 0,
      why: `${fmt(c.e2e.requestsPerMillionIds, 1)} requests per million IDs, ${fmt(c.e2e.errors)} errors`,
    })
    verdicts.push({
      row: CLIENT_LATENCY_ROW,
      target: `p99.99 ≤ ${CLIENT_TARGETS.p9999Us} µs`,
      met: c.latency.p9999Us <= CLIENT_TARGETS.p9999Us,
      why: `p99.99 ${fmt(c.latency.p9999Us, 2)} µs, ${fmt(c.latency.waited)} call${c.latency.waited === 1 ? '' : 's'} waited for a fetch`,
    })
  }
  return verdicts
}
