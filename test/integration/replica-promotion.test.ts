import t from 'tap'
import { createMaxIdGuard, type MaxIdGuard, type Regression } from '../../src/segment/max-id-guard.js'
import { createSegmentGenerator, type Id, type SegmentGenerator } from '../../src/segment/segment-generator.js'
import { createMysqlStore } from '../../src/segment/stores/mysql-store.js'
import type { SegmentStore } from '../../src/segment/store.js'
import { silentLogger } from '../helpers/logger.js'
import { ReplicaPair } from '../helpers/replica-pair.js'

// An async replica promoted after its primary died with allocations it never received
// (docs/production.md, "A max_id that went backwards"), against real MariaDB replication.
// Two instances reach the store through leaf.jdbc.url's host list, primary first; the replica
// lags (its SQL thread stopped) while both serve several ranges; the primary is killed and the
// replica promoted. Every live instance must see the regression, and no ID is served twice.

const HOLD_MS = 1500
const REFRESH_MS = 300
const STEP = 10

const pair = await ReplicaPair.create()
await pair.init()
t.teardown(() => pair.close())
await pair.primary.addTag('promoted', STEP)

interface Instance { name: string, store: SegmentStore, guard: MaxIdGuard, generator: SegmentGenerator, regressions: Regression[], ids: bigint[] }

function instance (name: string): Instance {
  const store = createMysqlStore({
    hosts: [{ host: '127.0.0.1', port: pair.ports.primary }, { host: '127.0.0.1', port: pair.ports.replica }],
    user: 'leaf',
    password: 'leaf',
    database: 'leaf',
    connectTimeoutMs: 1000,
    poolSize: 2,
    queryTimeoutMs: 1000,
  })
  const regressions: Regression[] = []
  const guard = createMaxIdGuard({ store, logger: silentLogger, holdMs: HOLD_MS, monotonic: () => performance.now(), onRegression: (r) => regressions.push(r) })
  const generator = createSegmentGenerator({
    store, logger: silentLogger, guard, waitTimeoutMs: 500, refreshIntervalMs: REFRESH_MS, retryMinMs: 20, retryMaxMs: 100, maxBufferedSegments: 2,
  })
  return { name, store, guard, generator, regressions, ids: [] }
}

/** `n` IDs, waiting out SEGMENTS_NOT_READY (a hold, a host down) up to `withinMs`. */
async function serve (i: Instance, n: number, withinMs: number): Promise<number> {
  const started = performance.now()
  let notReady = 0
  for (let got = 0; got < n;) {
    try {
      i.ids.push(BigInt(await i.generator.next('promoted') as Id))
      got++
    } catch (err) {
      if ((err as { code?: string }).code !== 'SEGMENTS_NOT_READY') throw err
      notReady++
      if (performance.now() - started > withinMs) throw new Error(`${i.name}: ${got} of ${n} IDs within ${withinMs} ms`)
    }
  }
  return notReady
}

const a = instance('A')
const b = instance('B')
t.teardown(async () => {
  for (const i of [a, b]) {
    i.generator.close()
    await i.store.close()
  }
})

t.test('a replica promoted without the last allocations: every live instance sees it, raises the row, holds, and no ID is served twice', async (t) => {
  await a.generator.init()
  await b.generator.init()
  await serve(a, 15, 5000)
  await serve(b, 15, 5000)
  await pair.lag()
  // Several ranges each that the replica will never have.
  await serve(a, 40, 5000)
  await serve(b, 40, 5000)
  const servedBefore = [...a.ids, ...b.ids].reduce((x, y) => x > y ? x : y)
  const primaryMax = await pair.primary.maxId('promoted')
  await pair.killPrimary()
  await pair.promote()
  const replicaMax = await pair.replica.maxId('promoted')
  t.ok(replicaMax < primaryMax, `the promoted replica is behind: max_id ${replicaMax} against the primary's ${primaryMax}`)
  t.ok(replicaMax <= servedBefore, `behind IDs already served (${servedBefore})`)
  const promotedAt = performance.now()
  // Both serve on: what each holds first, then nothing new until the hold ends; then ranges of
  // the promoted store (30 IDs past each one's buffer).
  const past = (i: Instance) => (i.generator.views().find((v) => v.key === 'promoted')?.buffered ?? 0) + 30
  await Promise.all([serve(a, past(a), 15_000), serve(b, past(b), 15_000)])
  const resumedMs = performance.now() - promotedAt
  for (const i of [a, b]) {
    t.ok(i.regressions.length >= 1, `${i.name} saw the failover (${i.regressions.map((r) => r.cause).join(', ')})`)
    t.match(i.guard.view(), { store: 'server_id 2' }, `${i.name} now on the promoted replica`)
  }
  const all = [...a.ids, ...b.ids]
  t.equal(new Set(all).size, all.length, `no ID twice: ${all.length} IDs`)
  const rowNow = await pair.replica.maxId('promoted')
  t.ok(rowNow > all.reduce((x, y) => x > y ? x : y), `the row (${rowNow}) is above every ID served`)
  t.ok(resumedMs >= HOLD_MS, `new ranges only after the hold (${Math.round(resumedMs)} ms after the promotion, hold ${HOLD_MS} ms)`)
  t.comment(`promoted replica's max_id ${replicaMax}, the primary's ${primaryMax}, served up to ${servedBefore}; both served again ${Math.round(resumedMs)} ms after the promotion`)
})
