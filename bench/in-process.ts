import pino from 'pino'
import { Snowflake } from '@sapphire/snowflake'
import { createSegmentGenerator, type Id } from '../src/segment/segment-generator.js'
import { createSnowflakeGenerator, DEFAULT_TWEPOCH } from '../src/snowflake/snowflake-generator.js'
import type { SegmentStore } from '../src/segment/store.js'
import { FakeStore } from '../test/helpers/fake-store.js'

// In-process generator throughput: each figure is IDs per second over `seconds` after a
// warm-up, checked in blocks so the clock is read rarely.

export interface InProcessRow { name: string, idsPerSecond: number, note?: string }

const BLOCK = 10_000

function measure (seconds: number, fn: () => unknown): number {
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
