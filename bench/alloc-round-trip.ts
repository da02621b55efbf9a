import { parseJdbcUrl } from '../src/config/jdbc-url.js'
import type { SegmentStore } from '../src/segment/store.js'
import { createStore } from '../src/segment/stores/create-store.js'
import { createTestDatabase } from '../test/helpers/mysql.js'
import { createTestPgDatabase } from '../test/helpers/postgres.js'

// The allocation round trip: one SegmentStore.allocate() call (one reservation of a segment),
// timed from the call to its answer, on the tests' MariaDB (a transaction of two statements in
// one multi-statement round trip) and PostgreSQL (one UPDATE ... RETURNING). Informational:
// neither is on an ID's path. IDs are served from the segments in memory, and the database is
// touched once per segment, in the background, long before the buffer runs out
// (docs/performance.md). Run alone: node --import tsx bench/alloc-round-trip.ts [calls]

const POOL = { connectTimeoutMs: 2000, poolSize: 4, queryTimeoutMs: 2000 }
const WARMUP = 200

export interface RoundTripRow { engine: string, calls: number, p50Us: number, p99Us: number, maxUs: number }

function quantile (sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number
}

async function time (engine: string, store: SegmentStore, calls: number): Promise<RoundTripRow> {
  for (let i = 0; i < WARMUP; i++) await store.allocate('order')
  const us: number[] = []
  for (let i = 0; i < calls; i++) {
    const started = performance.now()
    const a = await store.allocate('order')
    us.push((performance.now() - started) * 1000)
    if (a === undefined) throw new Error(`${engine}: the tag is missing`)
  }
  us.sort((a, b) => a - b)
  return { engine, calls, p50Us: quantile(us, 0.5), p99Us: quantile(us, 0.99), maxUs: us[us.length - 1] as number }
}

/** One after the other, calls one at a time (the generator loads one segment per tag at a time). */
export async function measureAllocationRoundTrip (calls = 5000): Promise<RoundTripRow[]> {
  const rows: RoundTripRow[] = []
  const engines = [
    { engine: 'MariaDB', open: createTestDatabase },
    { engine: 'PostgreSQL', open: createTestPgDatabase },
  ]
  for (const { engine, open } of engines) {
    const db = await open()
    const store = createStore(parseJdbcUrl(db.jdbc.url, db.jdbc.username, db.jdbc.password), POOL)
    try {
      rows.push(await time(engine, store, calls))
    } finally {
      await store.close()
      await db.drop()
    }
  }
  return rows
}

if (process.argv[1]?.endsWith('alloc-round-trip.ts') === true) {
  const calls = Number(process.argv[2] ?? 5000)
  for (const r of await measureAllocationRoundTrip(calls)) {
    console.log(`${r.engine.padEnd(10)} allocate() x ${r.calls}: p50 ${r.p50Us.toFixed(0)} us, p99 ${r.p99Us.toFixed(0)} us, max ${r.maxUs.toFixed(0)} us`)
  }
}
