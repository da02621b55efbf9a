import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import pino from 'pino'
import { createLeafClient, type FetchedIds, type Transport } from '@leaf-ts/client'
import { ROOT } from '../scripts/run-info.js'
import { createSegmentGenerator, type Id } from '../src/segment/segment-generator.js'
import { FakeStore } from '../test/helpers/fake-store.js'
import { measure, measureAsync } from './in-process.js'
import { startServer, type ServerProcess } from '../test/helpers/server-process.js'
import { seedSqlite } from '../test/helpers/sqlite.js'
import { cpuSeconds } from './cpu-time.js'
import { median } from './stats.js'

// The client's rows (@leaf-ts/client, built, as a user imports it), each beside its ceiling
// measured in the same run: tryNextId on a warm buffer beside a bare loop making the same
// type, the server's in-process segment generator beside them; await nextId; then against a
// local server (dist/server.js, on core 0 when pinned): 50 callers for E2E_SECONDS, the
// server's CPU per million IDs beside the single-ID route's, and one caller's nextId latency
// in steady state. Run alone: `node --import tsx bench/client.ts` after `npm run build`.

export interface ClientBench {
  /** IDs/s of each loop, same run. */
  tryNextId: number
  bigintCounter: number
  tryNextNumber: number
  numberCounter: number
  segmentGenerator: number
  awaitNextId: number
  e2e: {
    seconds: number
    callers: number
    ids: number
    idsPerSecond: number
    requests: number
    requestsPerMillionIds: number
    errors: number
    /** Server CPU seconds per million IDs through the client, and through the single-ID route. */
    serverCpuPerMillionIds: number
    singleRouteCpuPerMillionIds: number
    singleRouteFailed: number
  }
  latency: {
    samples: number
    p50Us: number
    p999Us: number
    p9999Us: number
    maxUs: number
    seconds: number
    /** The floor: the same loop awaiting a bare bigint counter, its blocks interleaved with nextId's. */
    floorP999Us: number
    floorP9999Us: number
    /**
     * The same two p99.99s in each of LATENCY_PERIODS periods of the run, in order: the verdict is
     * on the median of their differences (absent in results from before the periods).
     */
    periods?: Array<{ p9999Us: number, floorP9999Us: number }>
    /** Measured calls that found the buffer empty and waited for a fetch (the client's `waits`). */
    waited: number
  }
}

export const CLIENT_TARGETS = {
  tryNextIdShareOfCeiling: 0.75,
  awaitNextIdPerSecond: 5_000_000,
  requestsPerMillionIds: 200,
  /**
   * nextId's p99.99 at most this far above its floor's (an await of a bare counter, measured in
   * the same run): an absolute figure judged the host, whose own floor moved from 4 to 51 µs.
   * Judged on the median over LATENCY_PERIODS periods: one p99.99 per run rests on its slowest
   * hundred calls, and missed by 1.5 and 6.4 µs on code that met it by 2 and 7 µs.
   */
  p9999OverFloorUs: 1,
  /** Periods the median is taken over. */
  periods: 9,
}

/** nextId's p99.99 over its floor's, in µs, per period (one, the whole run, in results from before the periods). */
export function overFloorUs (latency: ClientBench['latency']): number[] {
  return (latency.periods ?? [latency]).map((p) => p.p9999Us - p.floorP9999Us)
}

/** The differences as the verdict reads them: their median and range. */
export function overFloorSummary (latency: ClientBench['latency']): string {
  const d = overFloorUs(latency)
  const us = (n: number) => `${n >= 0 ? '+' : ''}${n.toFixed(2)} µs`
  return `p99.99 over the floor's: median ${us(median(d))} over ${d.length} period${d.length === 1 ? '' : 's'}, range ${us(Math.min(...d))}..${us(Math.max(...d))}`
}

/** Whether nextId's p99.99 is within its target of the floor measured beside it, in the median period. */
export function latencyMet (latency: ClientBench['latency']): boolean {
  return median(overFloorUs(latency)) <= CLIENT_TARGETS.p9999OverFloorUs
}

const E2E_SECONDS = Number(process.env.BENCH_CLIENT_SECONDS ?? 10)
const CALLERS = 50
/** Measured seconds of the latency row: one per period. */
const LATENCY_SECONDS = CLIENT_TARGETS.periods
const BLOCK = 10_000

/** Answers any batch from a counter at once: the buffer, not the network, is measured. */
function memoryTransport (): Transport {
  let next = 1n
  return {
    async fetchIds (_server, _mode, _key, count): Promise<FetchedIds> {
      const first = next
      next += BigInt(count)
      return { ranges: [{ first, last: next - 1n }], instance: 'memory' }
    },
    async close () {},
  }
}

/** The server on the embedded store in `data`, both modes on, on core 0 when pinned. */
function startLeaf (pinned: boolean, data: string): Promise<ServerProcess> {
  return startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(data, 'leaf.db'))}`, '--leaf.snowflake.enable=true', '--leaf.snowflake.worker.id=0', `--leaf.snowflake.cache.dir=${data}`],
    cwd: data,
    shippedConfig: true,
    wrapper: pinned ? ['taskset', '-c', '0'] : [],
  })
}

const yieldToIo = () => new Promise((resolve) => setImmediate(resolve))

/** Latency histogram: 10 ns bins up to 100 µs, and the slower samples kept as they are. */
class Histogram {
  private bins = new Uint32Array(10_000)
  private slow: number[] = []
  count = 0
  add (ms: number): void {
    this.count++
    const bin = Math.floor(ms * 1e5)
    if (bin < this.bins.length) this.bins[bin] = (this.bins[bin] as number) + 1
    else this.slow.push(ms)
  }

  /** The q-quantile in µs. */
  quantile (q: number): number {
    const rank = Math.ceil(q * this.count)
    let seen = 0
    for (let i = 0; i < this.bins.length; i++) {
      seen += this.bins[i] as number
      if (seen >= rank) return (i + 1) / 100
    }
    const slow = [...this.slow].sort((a, b) => a - b)
    return (slow[rank - seen - 1] ?? slow[slow.length - 1] ?? NaN) * 1000
  }

  max (): number {
    if (this.slow.length > 0) return Math.max(...this.slow) * 1000
    for (let i = this.bins.length - 1; i >= 0; i--) if ((this.bins[i] as number) > 0) return (i + 1) / 100
    return 0
  }
}

export async function runClientBench (seconds = 3, pinned = false): Promise<ClientBench> {
  // In process: a warm buffer (one batch of 10^9 from memory, so no fetch while measuring).
  const warm = createLeafClient({ servers: ['http://127.0.0.1:1'], transport: memoryTransport(), minBatch: 1e9, maxBatch: 1e9 })
  await warm.nextId('segment', 'bench')
  await warm.nextNumber('segment', 'numbers')
  let sink: unknown
  // The ceiling is the faster of two bare bigint counters: one counting in bigints, one making a bigint of a number count.
  let counter = 0n
  let count = 0
  const bigintCounter = Math.max(measure(seconds, () => { sink = counter++ }), measure(seconds, () => { sink = BigInt(count++) }))
  const tryNextId = measure(seconds, () => { sink = warm.tryNextId('segment', 'bench') })
  let plain = 0
  const numberCounter = measure(seconds, () => { sink = plain++ })
  const tryNextNumber = measure(seconds, () => { sink = warm.tryNextNumber('segment', 'numbers') })
  const awaitNextId = await measureAsync(seconds, async () => {
    for (let i = 0; i < BLOCK; i++) await warm.nextId('segment', 'bench')
  }, BLOCK)
  await warm.close()
  const segment = createSegmentGenerator({ store: new FakeStore({ bench: { step: 1_000_000_000 } }), logger: pino({ level: 'silent' }), waitTimeoutMs: 3000, refreshIntervalMs: 3_600_000 })
  await segment.init()
  await segment.next('bench')
  const segmentGenerator = measure(seconds, () => { sink = segment.next('bench') as Id })
  segment.close()
  if (sink === Symbol.for('never')) console.log('unreachable')

  const data = mkdtempSync(join(tmpdir(), 'leaf-bench-client-'))
  const leaf = await startLeaf(pinned, data)
  const pid = leaf.proc.pid as number
  try {
    // The single-ID route: the server's CPU per million IDs without the client.
    await autocannon({ url: `${leaf.url}/api/segment/get/order`, connections: 10, amount: 5000 })
    const singleBefore = cpuSeconds(pid)
    const single = await autocannon({ url: `${leaf.url}/api/segment/get/order`, connections: 10, amount: 20_000 })
    const singleRouteCpuPerMillionIds = (cpuSeconds(pid) - singleBefore) / single['2xx'] * 1e6
    const singleRouteFailed = 20_000 - single['2xx']

    // 50 callers for E2E_SECONDS; each gives the event loop a turn every 100 IDs, as a caller
    // doing other work would, so answers are read while the buffer still holds IDs.
    const client = createLeafClient({ servers: [leaf.url] })
    await client.nextId('segment', 'order')
    const requestsBefore = client.stats().requests
    const cpuBefore = cpuSeconds(pid)
    let ids = 0
    let errors = 0
    const started = performance.now()
    const stopAt = started + E2E_SECONDS * 1000
    await Promise.all(Array.from({ length: CALLERS }, async () => {
      while (performance.now() < stopAt) {
        for (let i = 0; i < 100; i++) {
          try {
            await client.nextId('segment', 'order')
            ids++
          } catch {
            errors++
          }
        }
        await yieldToIo()
      }
    }))
    const elapsed = (performance.now() - started) / 1000
    const serverCpu = cpuSeconds(pid) - cpuBefore
    const requests = client.stats().requests - requestsBefore

    // One caller's nextId latency once warm: 1 s of warm-up, then LATENCY_SECONDS measured.
    // Its floor: the same loop awaiting a bare bigint counter, in blocks interleaved with
    // nextId's, so both see the same machine (interrupts, the other core's server, this
    // process's GC): on the 2-core VM the floor's own p99.99 has read from 4 µs to 51 µs as
    // the host's load moved, so the row also counts the measured calls that waited for a
    // fetch, the target's meaning (no caller waits on the network once warm), which no host
    // noise changes.
    // Each period keeps its own pair of histograms too: the verdict is the median period's.
    const histogram = new Histogram()
    const floor = new Histogram()
    const periods = Array.from({ length: CLIENT_TARGETS.periods }, () => ({ ids: new Histogram(), floor: new Histogram() }))
    let bare = 0n
    const bareId = () => Promise.resolve(bare++)
    const waits = () => client.stats().keys['segment/leaf-segment-test']?.waits ?? 0
    const warmUntil = performance.now() + 1000
    const periodMs = LATENCY_SECONDS * 1000 / periods.length
    const latencyEnd = warmUntil + LATENCY_SECONDS * 1000
    let waitsWhenWarm: number | undefined
    for (let now = performance.now(); now < latencyEnd; now = performance.now()) {
      const warm = now >= warmUntil
      if (waitsWhenWarm === undefined && warm) waitsWhenWarm = waits()
      const period = periods[Math.min(periods.length - 1, Math.floor((now - warmUntil) / periodMs))] as typeof periods[number]
      for (let i = 0; i < 100; i++) {
        const t0 = performance.now()
        await client.nextId('segment', 'leaf-segment-test')
        const dt = performance.now() - t0
        if (warm) { histogram.add(dt); period.ids.add(dt) }
      }
      await yieldToIo()
      for (let i = 0; i < 100; i++) {
        const t0 = performance.now()
        await bareId()
        const dt = performance.now() - t0
        if (warm) { floor.add(dt); period.floor.add(dt) }
      }
      await yieldToIo()
    }
    const waited = waits() - (waitsWhenWarm ?? 0)
    await client.close()
    return {
      tryNextId,
      bigintCounter,
      tryNextNumber,
      numberCounter,
      segmentGenerator,
      awaitNextId,
      e2e: {
        seconds: elapsed,
        callers: CALLERS,
        ids,
        idsPerSecond: ids / elapsed,
        requests,
        requestsPerMillionIds: requests / ids * 1e6,
        errors,
        serverCpuPerMillionIds: serverCpu / ids * 1e6,
        singleRouteCpuPerMillionIds,
        singleRouteFailed,
      },
      latency: { samples: histogram.count, p50Us: histogram.quantile(0.5), p999Us: histogram.quantile(0.999), p9999Us: histogram.quantile(0.9999), maxUs: histogram.max(), seconds: LATENCY_SECONDS, floorP999Us: floor.quantile(0.999), floorP9999Us: floor.quantile(0.9999), waited, periods: periods.map((p) => ({ p9999Us: p.ids.quantile(0.9999), floorP9999Us: p.floor.quantile(0.9999) })) },
    }
  } finally {
    leaf.proc.kill('SIGTERM')
    rmSync(data, { recursive: true, force: true })
  }
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })

/** The rows as the bench prints them, with each target's verdict. */
export function clientLines (c: ClientBench): string[] {
  const share = c.tryNextId / c.bigintCounter
  const e = c.e2e
  const verdict = (ok: boolean) => ok ? 'met' : 'MISSED'
  return [
    `  ${'bare loop, bigint counter (ceiling)'.padEnd(44)} ${fmt(c.bigintCounter).padStart(14)} IDs/s`,
    `  ${'tryNextId, warm buffer'.padEnd(44)} ${fmt(c.tryNextId).padStart(14)} IDs/s  ${fmt(share * 100, 1)}% of the ceiling (target ≥ ${CLIENT_TARGETS.tryNextIdShareOfCeiling * 100}%: ${verdict(share >= CLIENT_TARGETS.tryNextIdShareOfCeiling)})`,
    `  ${'bare loop, number counter (ceiling)'.padEnd(44)} ${fmt(c.numberCounter).padStart(14)} IDs/s`,
    `  ${'tryNextNumber, warm buffer'.padEnd(44)} ${fmt(c.tryNextNumber).padStart(14)} IDs/s  ${fmt(c.tryNextNumber / c.numberCounter * 100, 1)}% of the ceiling`,
    `  ${'server segment generator, in process'.padEnd(44)} ${fmt(c.segmentGenerator).padStart(14)} IDs/s`,
    `  ${'await nextId, warm buffer'.padEnd(44)} ${fmt(c.awaitNextId).padStart(14)} IDs/s  (target ≥ ${fmt(CLIENT_TARGETS.awaitNextIdPerSecond)}: ${verdict(c.awaitNextId >= CLIENT_TARGETS.awaitNextIdPerSecond)})`,
    `  ${`end to end, ${e.callers} callers, ${fmt(e.seconds, 1)} s`.padEnd(44)} ${fmt(e.idsPerSecond).padStart(14)} IDs/s  ${fmt(e.ids)} IDs, ${fmt(e.requests)} requests = ${fmt(e.requestsPerMillionIds, 1)} per million IDs (target ≤ ${CLIENT_TARGETS.requestsPerMillionIds}: ${verdict(e.requestsPerMillionIds <= CLIENT_TARGETS.requestsPerMillionIds && e.errors === 0)}), ${fmt(e.errors)} errors`,
    `  ${'server CPU per million IDs'.padEnd(44)} ${fmt(e.serverCpuPerMillionIds * 1000, 1).padStart(14)} ms  through the client; ${fmt(e.singleRouteCpuPerMillionIds * 1000, 0)} ms through the single-ID route (${fmt(e.singleRouteFailed)} failed): ${fmt(e.singleRouteCpuPerMillionIds / e.serverCpuPerMillionIds, 0)}x less`,
    `  ${`nextId latency, one caller, ${c.latency.seconds} s warm`.padEnd(44)} p50 ${fmt(c.latency.p50Us, 2)} µs, p99.9 ${fmt(c.latency.p999Us, 2)} µs, p99.99 ${fmt(c.latency.p9999Us, 2)} µs (target ≤ the floor's + ${CLIENT_TARGETS.p9999OverFloorUs} µs: ${verdict(latencyMet(c.latency))}), max ${fmt(c.latency.maxUs, 0)} µs over ${fmt(c.latency.samples)} calls`,
    `  ${'floor: await of a bare bigint counter'.padEnd(44)} p99.9 ${fmt(c.latency.floorP999Us, 2)} µs, p99.99 ${fmt(c.latency.floorP9999Us, 2)} µs (blocks interleaved with nextId's)`,
    `  ${'nextId p99.99 over the floor, per period'.padEnd(44)} ${overFloorSummary(c.latency)}`,
    `  ${'nextId calls that waited for a fetch'.padEnd(44)} ${fmt(c.latency.waited).padStart(14)} of ${fmt(c.latency.samples)} measured`,
  ]
}

/** Whether every client target was met. */
export function clientTargetsMet (c: ClientBench): boolean {
  return c.tryNextId / c.bigintCounter >= CLIENT_TARGETS.tryNextIdShareOfCeiling &&
    c.awaitNextId >= CLIENT_TARGETS.awaitNextIdPerSecond &&
    c.e2e.requestsPerMillionIds <= CLIENT_TARGETS.requestsPerMillionIds && c.e2e.errors === 0 &&
    latencyMet(c.latency)
}

/**
 * The client's rows in a process of their own, as a caller runs them: the harness's own heap
 * and timers (autocannon's, the ceiling's) do not share the client's event loop and GC.
 */
export function runClientBenchInChild (): ClientBench {
  const child = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/client.ts'), '--json'], { cwd: ROOT, encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 })
  const last = child.stdout.trim().split('\n').at(-1) ?? ''
  if (child.status !== 0 && child.status !== 1) throw new Error(`bench/client.ts exited ${child.status}: ${child.stderr}`)
  return JSON.parse(last) as ClientBench
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const cores = Number(spawnSync('nproc', { encoding: 'utf8' }).stdout.trim() || 1)
  const pinned = cores >= 2 && spawnSync('taskset', ['-V']).status === 0
  if (pinned) spawnSync('taskset', ['-cp', '1', String(process.pid)], { stdio: 'ignore' })
  const json = process.argv.includes('--json')
  if (!json) console.log(`@leaf-ts/client (${pinned ? 'server on core 0, client on core 1' : 'not pinned'})`)
  const c = await runClientBench(3, pinned)
  if (json) console.log(JSON.stringify(c))
  else for (const line of clientLines(c)) console.log(line)
  if (!clientTargetsMet(c)) process.exitCode = 1
}
