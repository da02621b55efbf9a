import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { ROOT, runInfo } from '../scripts/run-info.js'
import { answerLength, callgrindAvailable, COUNTED_REQUESTS, countRoutes } from './callgrind.js'
import { clientLines, runClientBenchInChild } from './client.js'
import { runInProcess } from './in-process.js'
import { startServer, type ServerProcess } from '../test/helpers/server-process.js'
import { cpuSeconds } from './cpu-time.js'
import { publishable, RESULTS_FILE, writeFigures } from './publish.js'
import { BATCH, BATCH_ROUTE, CEILING, judge, median, roundOf, SEGMENT_ROUTE, SNOWFLAKE_ROUTE, type BenchResults, type CountedRoute, type HttpRow, type Round } from './results.js'

// The benchmark harness: in-process generator throughput, then the HTTP routes beside a bare
// Fastify ceiling measured in the same run. The HTTP comparison is the server's CPU time per
// request (from /proc/<pid>/task/*/schedstat) over a fixed number of requests, in interleaved
// rounds, as the median of per-round ratios; server and load generator pinned to different
// cores. Then, where valgrind is installed, the deterministic count: instructions per request
// under callgrind (bench/callgrind.ts), which the machine's load does not move, and by which
// the single-ID target is judged. Writes bench/results/latest.json; exits 1 when a target is
// missed. `--publish` also rewrites the table of docs/performance.md from it (bench/publish.ts).

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const COUNTS = Number(process.env.BENCH_COUNTS ?? 3)
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 20_000)
const BATCH_REQUESTS = Number(process.env.BENCH_BATCH_REQUESTS ?? 2_000)
const CONNECTIONS = 10
const cores = Number(spawnSync('nproc', { encoding: 'utf8' }).stdout.trim() || 1)
const pinned = cores >= 2 && spawnSync('taskset', ['-V']).status === 0
const publish = process.argv.includes('--publish')

if (!(COUNTS >= 3)) throw new Error(`BENCH_COUNTS=${COUNTS}: the single-ID target is judged on at least 3 counts per route`)

type Server = ServerProcess

/** `[script, ...args]` on core 0 when pinned, with the repo's config/leaf.properties. */
const start = ([script, ...args]: string[]): Promise<Server> => startServer({ script, args, wrapper: pinned ? ['taskset', '-c', '0'] : [] })

async function load (server: Server, path: string, amount: number): Promise<Round> {
  const pid = server.proc.pid as number
  const before = cpuSeconds(pid)
  const started = performance.now()
  const result = await autocannon({ url: server.url + path, connections: CONNECTIONS, amount })
  const seconds = (performance.now() - started) / 1000
  return roundOf(result, amount, cpuSeconds(pid) - before, seconds)
}

function summarize (name: string, path: string, rounds: Round[], ratios: number[] | null, idsPerRequest: number): HttpRow {
  const cpu = median(rounds.map((r) => r.cpuPerRequest))
  return {
    name,
    path,
    cpuMicrosPerRequest: cpu * 1e6,
    requestsPerSecond: median(rounds.map((r) => r.requestsPerSecond)),
    p50Ms: median(rounds.map((r) => r.p50)),
    p99Ms: median(rounds.map((r) => r.p99)),
    requests: rounds.reduce((a, r) => a + r.ok, 0),
    failed: rounds.reduce((a, r) => a + r.failed, 0),
    cpuRatioToCeiling: ratios === null ? null : median(ratios),
    idsPerCpuSecond: idsPerRequest / cpu,
  }
}

const CEILING_ARGS = [join(ROOT, 'bench/ceiling-server.mjs')]
const ceilingPath = (bodyLength: number) => `/api/ceiling/get/${bodyLength}`

const dataDirs: string[] = []

/** The service as a user runs it, both modes on, on the embedded store in a fresh folder. */
function leafArgs (): string[] {
  const data = mkdtempSync(join(tmpdir(), 'leaf-bench-'))
  dataDirs.push(data)
  return [join(ROOT, 'dist/server.js'), '--server.host=127.0.0.1', '--server.port=0',
    '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${join(data, 'leaf.db')}`,
    '--leaf.snowflake.enable=true', `--leaf.snowflake.cache.dir=${data}`]
}

const SINGLE = [
  { name: SEGMENT_ROUTE, path: '/api/segment/get/order' },
  { name: SNOWFLAKE_ROUTE, path: '/api/snowflake/get/order' },
]

/**
 * The HTTP rows, and the batch route's IDs per CPU second over the single-ID segment route's,
 * as the median of per-round ratios (both measured in the same round, seconds apart). Before
 * each single-ID row's round, the ceiling answers as many requests with a body as long as the
 * route's answer just then.
 */
async function runHttp (): Promise<{ rows: HttpRow[], batchToSingle: number }> {
  const ceiling = await start(CEILING_ARGS)
  const leaf = await start(leafArgs())
  try {
    const batchPath = `/api/segment/get/order?count=${BATCH}`
    // Warm-up: JIT both servers and let the segment step adapt.
    for (const r of SINGLE) {
      await load(ceiling, ceilingPath(await answerLength(leaf.url + r.path)), REQUESTS)
      await load(leaf, r.path, REQUESTS)
    }
    await load(leaf, batchPath, BATCH_REQUESTS)

    const ceilingRounds: Round[] = []
    const single = SINGLE.map(() => ({ rounds: [] as Round[], ratios: [] as number[] }))
    const batchRounds: Round[] = []
    const batchRatios: number[] = []
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, r] of SINGLE.entries()) {
        const c = await load(ceiling, ceilingPath(await answerLength(leaf.url + r.path)), REQUESTS)
        ceilingRounds.push(c)
        const m = await load(leaf, r.path, REQUESTS)
        single[i]?.rounds.push(m)
        single[i]?.ratios.push(m.cpuPerRequest / c.cpuPerRequest)
      }
      const b = await load(leaf, batchPath, BATCH_REQUESTS)
      batchRounds.push(b)
      batchRatios.push((BATCH * (single[0]?.rounds[round]?.cpuPerRequest ?? NaN)) / b.cpuPerRequest)
      process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`)
    }
    return {
      rows: [
        summarize(CEILING, '/api/ceiling/get/:length', ceilingRounds, null, 1),
        ...SINGLE.map((r, i) => summarize(r.name, r.path, single[i]?.rounds ?? [], single[i]?.ratios ?? [], 1)),
        summarize(BATCH_ROUTE, batchPath, batchRounds, null, BATCH),
      ],
      batchToSingle: median(batchRatios),
    }
  } finally {
    ceiling.proc.kill('SIGTERM')
    leaf.proc.kill('SIGTERM')
  }
}

/**
 * The single-ID routes counted COUNTS times each in one service process, then the ceiling
 * counted as often in one process for each body length the routes answered.
 */
async function runCounts (): Promise<NonNullable<BenchResults['callgrind']>> {
  const pin = pinned ? ['taskset', '-c', '0'] : []
  const routes = await countRoutes(leafArgs(), SINGLE, COUNTS, ROOT, pin)
  const lengths = [...new Set(routes.flatMap((r) => r.bodyLengths))].sort((a, b) => a - b)
  const ceiling = (await countRoutes(CEILING_ARGS, lengths.map((n) => ({ name: `${n}-byte body`, path: ceilingPath(n) })), COUNTS, ROOT, pin))
  const ceilingMedian = new Map(ceiling.map((c, i) => [lengths[i] as number, median(c.counts)]))
  const counted: CountedRoute[] = routes.map((r) => ({
    ...r,
    ratios: r.counts.map((n, i) => n / (ceilingMedian.get(r.bodyLengths[i] as number) as number)),
  }))
  return { countedRequests: COUNTED_REQUESTS, ceiling, routes: counted }
}

function fmt (n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
}
const spread = (values: number[], show: (n: number) => string) => `${show(Math.min(...values))}..${show(Math.max(...values))}`

const run = runInfo()
const startedAt = performance.now()
if (pinned) spawnSync('taskset', ['-cp', '1', String(process.pid)], { stdio: 'ignore' })
console.log(`Leaf-TS benchmark · ${run.commit.slice(0, 12)}${run.dirty ? ' + uncommitted src/' : ''} · node ${process.version} · ${cores} cores · ${pinned ? 'server on core 0, load on core 1' : 'not pinned'} · ${ROUNDS} rounds`)
console.log('\nIn process (3 s each after a warm-up)')
const inProcess = await runInProcess(3)
for (const row of inProcess) console.log(`  ${row.name.padEnd(34)} ${fmt(row.idsPerSecond).padStart(14)} IDs/s  ${row.note ?? ''}`)

console.log(`\nHTTP (${CONNECTIONS} connections, ${fmt(REQUESTS)} requests per row and round; batch rows ${fmt(BATCH_REQUESTS)})`)
const { rows: http, batchToSingle } = await runHttp()
console.log(`  ${'route'.padEnd(34)} ${'CPU µs/req'.padStart(10)} ${'vs ceiling'.padStart(10)} ${'req/s'.padStart(9)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'failed'.padStart(6)} ${'IDs per CPU s'.padStart(14)}`)
for (const r of http) {
  const ratio = r.cpuRatioToCeiling === null ? '' : `${fmt(r.cpuRatioToCeiling * 100, 1)}%`
  console.log(`  ${r.name.padEnd(34)} ${fmt(r.cpuMicrosPerRequest, 1).padStart(10)} ${ratio.padStart(10)} ${fmt(r.requestsPerSecond).padStart(9)} ${fmt(r.p50Ms, 1).padStart(7)} ${fmt(r.p99Ms, 1).padStart(7)} ${String(r.failed).padStart(6)} ${fmt(r.idsPerCpuSecond).padStart(14)}`)
}
console.log(`\n  batch of ${BATCH}: ${fmt(batchToSingle, 0)}x the single-ID route's IDs per CPU second (median of per-round ratios)`)

console.log('\n@leaf-ts/client (a process of its own: in process 3 s each; end to end against a server on the embedded store)')
const client = runClientBenchInChild()
for (const line of clientLines(client)) console.log(line)

let callgrind: BenchResults['callgrind'] = null
if (process.env.BENCH_CALLGRIND === '0') {
  console.log('\nInstructions per request: skipped (BENCH_CALLGRIND=0)')
} else if (!callgrindAvailable()) {
  console.log('\nInstructions per request: skipped (valgrind is not installed)')
} else {
  console.log(`\nInstructions per request (callgrind, main thread, node --single-threaded, ${COUNTS} counts of ${fmt(COUNTED_REQUESTS)} requests per route in one warmed process; deterministic)`)
  callgrind = await runCounts()
  for (const c of callgrind.ceiling) console.log(`  ${`${CEILING}, ${c.name}`.padEnd(50)} ${spread(c.counts, (n) => fmt(n))}  GC ${spread(c.gc, (n) => fmt(n))} of each`)
  for (const r of callgrind.routes) {
    const refused = r.refused.length === 0 ? '' : `  (${r.refused.length} counts refused: V8 recompiled during them)`
    console.log(`  ${`${r.name}, ${r.bodyLengths.join('/')}-byte body`.padEnd(50)} ${spread(r.counts, (n) => fmt(n))}  ${spread(r.ratios, (n) => `${fmt(n * 100, 1)}%`)} of the ceiling, GC ${spread(r.gc, (n) => fmt(n))} of each, tick-record slow path ${spread(r.tickSlowPath, (n) => fmt(n, 1))} calls/request${refused}`)
  }
}

const results: BenchResults = {
  run,
  command: [...['BENCH_ROUNDS', 'BENCH_COUNTS', 'BENCH_REQUESTS', 'BENCH_BATCH_REQUESTS'].flatMap((v) => process.env[v] === undefined ? [] : [`${v}=${process.env[v]}`]), 'npm run bench'].join(' '),
  node: process.version,
  pinned,
  rounds: ROUNDS,
  inProcess,
  http,
  batchToSingle,
  callgrind,
  client,
}
mkdirSync(join(ROOT, 'bench/results'), { recursive: true })
writeFileSync(RESULTS_FILE, JSON.stringify(results, null, 2) + '\n')
for (const d of dataDirs) rmSync(d, { recursive: true, force: true })

console.log('\nTargets')
const verdicts = judge(results)
for (const v of verdicts) console.log(`  ${v.met === true ? 'met    ' : v.met === false ? 'MISSED ' : 'unknown'} ${v.row.padEnd(36)} ${v.target}: ${v.why}`)
console.log(`\nwritten to bench/results/latest.json (${fmt((performance.now() - startedAt) / 60_000, 1)} min)`)
if (publish) {
  const refusal = publishable(results)
  if (refusal === undefined) {
    writeFigures(results)
    console.log('docs/performance.md: performance table rewritten')
  } else {
    console.log(`docs/performance.md not rewritten: ${refusal}`)
    process.exitCode = 1
  }
}
if (verdicts.some((v) => v.met === false)) {
  console.log('A target was missed.')
  process.exitCode = 1
}
