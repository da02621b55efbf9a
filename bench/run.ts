import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { callgrindAvailable, runCallgrind, type CallgrindRow } from './callgrind.js'
import { runInProcess, type InProcessRow } from './in-process.js'

// The benchmark harness: in-process generator throughput, then the HTTP routes beside a bare
// Fastify ceiling measured in the same run. The HTTP comparison is the server's CPU time per
// request (from /proc/<pid>/task/*/schedstat) over a fixed number of requests, in interleaved rounds,
// as the median of per-round ratios; server and load generator pinned to different cores.
// Then, where valgrind is installed, the deterministic count: instructions per request under
// callgrind (bench/callgrind.ts), which the machine's load does not move.

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 20_000)
const BATCH_REQUESTS = Number(process.env.BENCH_BATCH_REQUESTS ?? 2_000)
const CONNECTIONS = 10
const BATCH = 1000
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100)
const cores = Number(spawnSync('nproc', { encoding: 'utf8' }).stdout.trim() || 1)
const pinned = cores >= 2 && spawnSync('taskset', ['-V']).status === 0

interface Server { url: string, proc: ChildProcess }

function start (args: string[]): Promise<Server> {
  const command = pinned ? ['taskset', '-c', '0', process.execPath, ...args] : [process.execPath, ...args]
  const proc = spawn(command[0] as string, command.slice(1), { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, LOG_LEVEL: 'info' } })
  return new Promise((resolve, reject) => {
    let out = ''
    proc.stdout?.on('data', (chunk: Buffer) => {
      out += chunk
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m !== null) resolve({ url: m[1] as string, proc })
    })
    proc.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)))
  })
}

/**
 * CPU time of a process, all its threads, in seconds: the run time the scheduler accounted to
 * each thread (/proc/<pid>/task/<tid>/schedstat, in nanoseconds), so 20,000 requests are not
 * measured in 10 ms ticks. Falls back to utime + stime from /proc/<pid>/stat.
 */
function cpuSeconds (pid: number): number {
  let ns = 0
  let threads = 0
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0])
        threads++
      } catch {
        // A thread that ended since the listing: its time is gone from both readings.
      }
    }
  } catch {
    // No /proc/<pid>/task: fall back below.
  }
  if (threads > 0 && Number.isFinite(ns)) return ns / 1e9
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}

interface Round { cpuPerRequest: number, requestsPerSecond: number, p50: number, p99: number, errors: number }

async function load (server: Server, path: string, amount: number): Promise<Round> {
  const pid = server.proc.pid as number
  const before = cpuSeconds(pid)
  const started = performance.now()
  const result = await autocannon({ url: server.url + path, connections: CONNECTIONS, amount })
  const seconds = (performance.now() - started) / 1000
  const cpu = cpuSeconds(pid) - before
  return {
    cpuPerRequest: cpu / result.requests.total,
    requestsPerSecond: result.requests.total / seconds,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.non2xx + result.timeouts,
  }
}

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] as number : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

interface HttpRow {
  name: string
  cpuMicrosPerRequest: number
  requestsPerSecond: number
  p50Ms: number
  p99Ms: number
  errors: number
  /** Median over rounds of (this row's CPU per request / the ceiling's in the same round). */
  cpuRatioToCeiling: number | null
  idsPerCpuSecond: number
}

function summarize (name: string, rounds: Round[], ratios: number[] | null, idsPerRequest: number): HttpRow {
  const cpu = median(rounds.map((r) => r.cpuPerRequest))
  return {
    name,
    cpuMicrosPerRequest: cpu * 1e6,
    requestsPerSecond: median(rounds.map((r) => r.requestsPerSecond)),
    p50Ms: median(rounds.map((r) => r.p50)),
    p99Ms: median(rounds.map((r) => r.p99)),
    errors: rounds.reduce((a, r) => a + r.errors, 0),
    cpuRatioToCeiling: ratios === null ? null : median(ratios),
    idsPerCpuSecond: idsPerRequest / cpu,
  }
}

const CEILING_ARGS = [join(ROOT, 'bench/ceiling-server.mjs')]

const dataDirs: string[] = []

/** The service as a user runs it, both modes on, on the embedded store in a fresh folder. */
function leafArgs (): string[] {
  const data = mkdtempSync(join(tmpdir(), 'leaf-bench-'))
  dataDirs.push(data)
  return [join(ROOT, 'dist/server.js'), '--server.host=127.0.0.1', '--server.port=0',
    '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${join(data, 'leaf.db')}`,
    '--leaf.snowflake.enable=true', `--leaf.snowflake.cache.dir=${data}`]
}

/**
 * The HTTP rows, and the batch route's IDs per CPU second over the single-ID segment route's,
 * as the median of per-round ratios (both measured in the same round, seconds apart).
 */
async function runHttp (): Promise<{ rows: HttpRow[], batchToSingle: number }> {
  const ceiling = await start(CEILING_ARGS)
  const leaf = await start(leafArgs())
  try {
    const routes = [
      { name: '/api/segment/get/:key', path: '/api/segment/get/order', amount: REQUESTS, ids: 1 },
      { name: '/api/snowflake/get/:key', path: '/api/snowflake/get/order', amount: REQUESTS, ids: 1 },
      { name: `/api/segment/get/:key?count=${BATCH}`, path: `/api/segment/get/order?count=${BATCH}`, amount: BATCH_REQUESTS, ids: BATCH },
    ]
    // Warm-up: JIT both servers and let the segment step adapt.
    await load(ceiling, '/api/ceiling/get/order', REQUESTS)
    for (const r of routes) await load(leaf, r.path, r.amount)

    const ceilingRounds: Round[] = []
    const rows = routes.map(() => ({ rounds: [] as Round[], ratios: [] as number[] }))
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, r] of routes.entries()) {
        const c = await load(ceiling, '/api/ceiling/get/order', r.ids === 1 ? r.amount : REQUESTS)
        ceilingRounds.push(c)
        const m = await load(leaf, r.path, r.amount)
        rows[i]?.rounds.push(m)
        rows[i]?.ratios.push(m.cpuPerRequest / c.cpuPerRequest)
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`)
    }
    const singleRounds = rows[0]?.rounds ?? []
    const batchRounds = rows[2]?.rounds ?? []
    return {
      rows: [
        summarize('bare Fastify (ceiling)', ceilingRounds, null, 1),
        ...routes.map((r, i) => summarize(r.name, rows[i]?.rounds ?? [], r.ids === 1 ? rows[i]?.ratios ?? [] : null, r.ids)),
      ],
      batchToSingle: median(batchRounds.map((b, round) => (BATCH * (singleRounds[round]?.cpuPerRequest ?? NaN)) / b.cpuPerRequest)),
    }
  } finally {
    ceiling.proc.kill('SIGTERM')
    leaf.proc.kill('SIGTERM')
  }
}

function fmt (n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
}

if (pinned) spawnSync('taskset', ['-cp', '1', String(process.pid)], { stdio: 'ignore' })
console.log(`Leaf-TS benchmark · node ${process.version} · ${cores} cores · ${pinned ? 'server on core 0, load on core 1' : 'not pinned'} · ${ROUNDS} rounds`)
console.log('\nIn process (3 s each after a warm-up)')
const inProcess: InProcessRow[] = await runInProcess(3)
for (const row of inProcess) console.log(`  ${row.name.padEnd(34)} ${fmt(row.idsPerSecond).padStart(14)} IDs/s  ${row.note ?? ''}`)

console.log(`\nHTTP (${CONNECTIONS} connections, ${fmt(REQUESTS)} requests per row and round; batch rows ${fmt(BATCH_REQUESTS)})`)
const { rows: http, batchToSingle } = await runHttp()
console.log(`  ${'route'.padEnd(34)} ${'CPU µs/req'.padStart(10)} ${'vs ceiling'.padStart(10)} ${'req/s'.padStart(9)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'errors'.padStart(6)} ${'IDs per CPU s'.padStart(14)}`)
for (const r of http) {
  const ratio = r.cpuRatioToCeiling === null ? '' : `${fmt(r.cpuRatioToCeiling * 100, 1)}%`
  console.log(`  ${r.name.padEnd(34)} ${fmt(r.cpuMicrosPerRequest, 1).padStart(10)} ${ratio.padStart(10)} ${fmt(r.requestsPerSecond).padStart(9)} ${fmt(r.p50Ms, 1).padStart(7)} ${fmt(r.p99Ms, 1).padStart(7)} ${String(r.errors).padStart(6)} ${fmt(r.idsPerCpuSecond).padStart(14)}`)
}
console.log(`\n  batch of ${BATCH}: ${fmt(batchToSingle, 0)}x the single-ID route's IDs per CPU second (median of per-round ratios)`)
let callgrind: CallgrindRow[] | null = null
if (process.env.BENCH_CALLGRIND === '0') {
  console.log('\nInstructions per request: skipped (BENCH_CALLGRIND=0)')
} else if (!callgrindAvailable()) {
  console.log('\nInstructions per request: skipped (valgrind is not installed)')
} else {
  console.log('\nInstructions per request (callgrind, main thread, node --single-threaded, after a warm-up; deterministic)')
  callgrind = await runCallgrind(CEILING_ARGS, leafArgs(), [
    { name: '/api/segment/get/:key', path: '/api/segment/get/order' },
    { name: '/api/snowflake/get/:key', path: '/api/snowflake/get/order' },
  ], ROOT, pinned ? ['taskset', '-c', '0'] : [])
  for (const r of callgrind) {
    const ratio = r.ratioToCeiling === null ? '' : `${fmt(r.ratioToCeiling * 100, 1)}%`
    console.log(`  ${r.name.padEnd(34)} ${fmt(r.instructionsPerRequest).padStart(10)} ${ratio.padStart(10)}`)
  }
}

const dir = join(ROOT, 'bench/results')
mkdirSync(dir, { recursive: true })
writeFileSync(join(dir, 'latest.json'), JSON.stringify({
  date: new Date().toISOString(),
  node: process.version,
  cores,
  pinned,
  rounds: ROUNDS,
  inProcess,
  http,
  callgrind,
  batchToSingleIdsPerCpuSecond: batchToSingle,
}, null, 2) + '\n')
console.log('\nwritten to bench/results/latest.json')
for (const d of dataDirs) rmSync(d, { recursive: true, force: true })
