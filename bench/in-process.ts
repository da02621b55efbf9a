import pino from 'pino'
import { Snowflake } from '@sapphire/snowflake'
import { createSegmentGenerator, type Id } from '../src/segment/segment-generator.js'
import { createSnowflakeGenerator, type SnowflakeGenerator } from '../src/snowflake/snowflake-generator.js'
import { DEFAULT_TWEPOCH } from '../src/snowflake/leaf-ids.js'
import { describeLayout } from '../src/layout/layout.js'
import { parseLayout } from '../src/layout/layout-spec.js'
import type { SegmentStore } from '../src/segment/store.js'
import { FakeStore } from '../test/helpers/fake-store.js'

// In-process generator throughput: each figure is IDs per second over `seconds` after a
// warm-up, checked in blocks so the clock is read rarely.

export interface InProcessRow {
  name: string
  idsPerSecond: number
  note?: string
  /** The layout's own limit for one worker (IDs/s), where the row is a layout's. */
  limit?: number
  /** Burst rows: the median time to hand out the burst, in ms. */
  burstMs?: number
}

/** The presets beside `leaf` (its row is the snowflake generator's): each measured at its own limit. */
export const LAYOUT_PRESET_ROWS = ['js-safe', 'vesta-min-granularity', 'vesta-max-peak'] as const
/** A burst that spans 4 of Leaf's milliseconds, handed out with and without borrowed time. */
export const BURST = 4 * 4096
export const BURST_BORROW_MS = 10
export const BORROWING_ROW = `snowflake generator, borrow-ahead-ms=${BURST_BORROW_MS}`
export const burstRow = (borrowMs: number) => `leaf burst of ${BURST} IDs, borrow-ahead-ms=${borrowMs}`
/** The same burst on a clock moved on a millisecond per 4,096 reads: it never waits, so it costs only CPU. */
export const BURST_FLOOR_ROW = `leaf burst of ${BURST} IDs on a clock that never makes it wait (CPU floor)`

const BLOCK = 10_000

/** Calls per second of `fn` over `seconds`, after 300 ms of warm-up, counted in blocks of 10,000 calls. */
export function measure (seconds: number, fn: () => unknown): number {
  const warmUntil = performance.now() + 300
  while (performance.now() < warmUntil) for (let i = 0; i < BLOCK; i++) fn()
  let n = 0
  const start = performance.now()
  const end = start + seconds * 1000
  let now = start
  while (now < end) {
    for (let i = 0; i < BLOCK; i++) fn()
    n += BLOCK
    now = performance.now()
  }
  return n / ((now - start) / 1000)
}

/** As measure(), for asynchronous work: `block` does `perBlock` of what is counted. */
export async function measureAsync (seconds: number, block: () => Promise<void>, perBlock: number): Promise<number> {
  const warmUntil = performance.now() + 300
  while (performance.now() < warmUntil) await block()
  let n = 0
  const start = performance.now()
  const end = start + seconds * 1000
  let now = start
  while (now < end) {
    await block()
    n += perBlock
    now = performance.now()
  }
  return n / ((now - start) / 1000)
}

/**
 * For generators that may answer with a Promise (a seconds layout waits for the next second
 * asynchronously): each is awaited and counted.
 */
function measureAwaiting (seconds: number, gen: SnowflakeGenerator): Promise<number> {
  return measureAsync(seconds, async () => {
    for (let i = 0; i < BLOCK; i++) {
      const id = gen.next()
      if (typeof id !== 'bigint') await id
    }
  }, BLOCK)
}

/**
 * The median time (ms) each generator takes to hand out BURST IDs in one synchronous run, after
 * an idle 20 ms each time (so borrowed time is paid back), over `rounds` rounds. The generators
 * take turns within each round: a change in the machine's speed reaches them all alike.
 */
async function burstMs (generators: SnowflakeGenerator[], rounds = 41): Promise<number[]> {
  const times: number[][] = generators.map(() => [])
  for (let r = 0; r < rounds; r++) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    for (const [g, gen] of generators.entries()) {
      const start = performance.now()
      for (let i = 0; i < BURST; i++) {
        const id = gen.next()
        if (typeof id !== 'bigint') await id
      }
      times[g]?.push(performance.now() - start)
    }
  }
  return times.map((t) => t.sort((a, b) => a - b)[Math.floor(rounds / 2)] as number)
}

/** A store with ranges large enough that no load happens while measuring. */
function memoryStore (): SegmentStore {
  return new FakeStore({ bench: { step: 1_000_000_000 } })
}

export async function runInProcess (seconds = 3): Promise<InProcessRow[]> {
  const rows: InProcessRow[] = []
  const segment = createSegmentGenerator({ store: memoryStore(), logger: pino({ level: 'silent' }), waitTimeoutMs: 3000, refreshIntervalMs: 3_600_000 })
  await segment.init()
  await segment.next('bench')
  await new Promise((resolve) => setTimeout(resolve, 10))
  let sink: Id = 0
  rows.push({ name: 'segment generator', idsPerSecond: measure(seconds, () => { sink = segment.next('bench') as Id }) })
  segment.close()

  const snowflake = createSnowflakeGenerator({ workerId: 1 })
  const sf = measure(seconds, () => { sink = snowflake.next() as bigint })
  rows.push({ name: 'snowflake generator', idsPerSecond: sf, note: `${(sf / 4_096_000 * 100).toFixed(1)}% of the 4,096,000 IDs/s layout limit` })
  const borrowing = createSnowflakeGenerator({ workerId: 1, borrowAheadMs: BURST_BORROW_MS })
  const sfb = measure(seconds, () => { sink = borrowing.next() as bigint })
  rows.push({ name: BORROWING_ROW, idsPerSecond: sfb, limit: 4_096_000, note: `${(sfb / 4_096_000 * 100).toFixed(1)}% of the 4,096,000 IDs/s layout limit` })

  for (const preset of LAYOUT_PRESET_ROWS) {
    const layout = parseLayout(preset, { twepoch: DEFAULT_TWEPOCH, vestaVersion: 0, vestaGenMethod: 2, now: Date.now() })
    const limit = describeLayout(layout).idsPerSecondPerWorker as number
    const rate = await measureAwaiting(seconds, createSnowflakeGenerator({ workerId: 1, layout }))
    rows.push({ name: `${preset} generator`, idsPerSecond: rate, limit, note: `${(rate / limit * 100).toFixed(1)}% of the ${limit.toLocaleString('en-US')} IDs/s layout limit` })
  }
  // The floor: the real clock, moved on a millisecond more per 4,096 reads (the generator reads
  // it once per ID), so a full sequence never waits; each read still costs a Date.now().
  let reads = 0
  const floorClock = () => Date.now() + Math.floor(reads++ / 4096)
  const [plainMs, borrowedMs, floorMs] = await burstMs([
    createSnowflakeGenerator({ workerId: 1 }),
    createSnowflakeGenerator({ workerId: 1, borrowAheadMs: BURST_BORROW_MS }),
    createSnowflakeGenerator({ workerId: 1, clock: floorClock }),
  ]) as [number, number, number]
  for (const [name, ms] of [[burstRow(0), plainMs], [burstRow(BURST_BORROW_MS), borrowedMs], [BURST_FLOOR_ROW, floorMs]] as const) {
    rows.push({ name, idsPerSecond: BURST / (ms / 1000), burstMs: ms, note: `median ${ms.toFixed(2)} ms per burst` })
  }

  const sapphire = new Snowflake(DEFAULT_TWEPOCH)
  rows.push({ name: '@sapphire/snowflake (reference)', idsPerSecond: measure(seconds, () => { sink = sapphire.generate() }) })
  if (sink === -1) console.log('unreachable')
  return rows
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const row of await runInProcess()) {
    console.log(`${row.name.padEnd(34)} ${Math.round(row.idsPerSecond).toLocaleString('en-US').padStart(14)} IDs/s ${row.note ?? ''}`)
  }
}
