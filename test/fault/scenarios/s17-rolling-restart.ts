import { join } from 'node:path'
import { fmtMs, readyz, scenarioSetup, startLeaf, takeIds, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { sleep, waitUntil } from '../services.js'

const INSTANCES = 3
const ROUNDS = 10
const CLIENTS = 9
const RATE = 1500 // requests per second over the instances
const BATCH_EVERY = 10
const BATCH = 10
const TABLE_STEP = 1000
/** Time between two restarts, with every instance serving. */
const SETTLE_MS = 1500
/** The bound on the IDs lost to restarts, as a share of the range the run consumed. */
const MAX_LOST_SHARE = 0.01

interface CacheView { key: string, segments?: { value: string, max: string }[], value0?: string, max0?: string, value1?: string, max1?: string, nextReady?: boolean }

/**
 * 17. Rolling restart: three instances serve one tag under a paced load; ten times, each in
 * turn is taken out of the load, sent SIGTERM and started again with its warm-start file,
 * then put back once /readyz is 200. Passes with every request answered with its IDs, no
 * duplicate, every SIGTERM exiting 0, and the IDs lost to the restarts under 1% of the range
 * the run consumed. Lost: the IDs between the first and the last issued that were never
 * issued, less those the running instances still hold (/api/cache) at the end.
 * FAULT_SERVER_JS=<an older build> measures that build the same way (keys it does not know
 * are given as environment variables, which it ignores).
 */
export async function rollingRestart (suite: Suite, report: Report): Promise<void> {
  const { tag, name, options } = await scenarioSetup(suite, 's17', { step: TABLE_STEP })
  const initialMaxId = await suite.db.maxId(tag)
  const start = (i: number) => startLeaf(suite, `leaf${i}`, { ...options, env: { LEAF_SEGMENT_STATE_FILE: join(suite.dir, `${name}-${i}.json`) } })
  const leaves: (Leaf | undefined)[] = []
  for (let i = 0; i < INSTANCES; i++) leaves.push(await start(i))
  const probe = new HttpClient()
  const batch = batchMix(BATCH_EVERY, BATCH)
  let issued = 0n
  let next = 0
  const exits: (number | null)[] = []
  const restartMs: number[] = []

  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxRequests: 2_000_000, maxMs: 600_000 }, async (client, c, n) => {
    // Round-robin over the instances in the load; one taken out gets nothing new.
    let leaf: Leaf | undefined
    for (let k = 0; k < INSTANCES && leaf === undefined; k++) leaf = leaves[next++ % INSTANCES]
    if (leaf === undefined) return
    const { ids } = await takeIds(report, client, leaf.url, 'segment', tag, batch(n), `c${c}-${leaf.pid}`)
    if (ids !== undefined) issued += BigInt(ids.length)
  })

  await sleep(SETTLE_MS * 2)
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < INSTANCES; i++) {
      const old = leaves[i] as Leaf
      leaves[i] = undefined
      await sleep(100) // requests sent to it before it left the load finish
      const t0 = performance.now()
      old.proc.kill('SIGTERM')
      exits.push(await old.exited)
      const fresh = await start(i)
      await waitUntil(async () => (await readyz(probe, fresh.url)).status === 200, 10_000, 20)
      restartMs.push(performance.now() - t0)
      leaves[i] = fresh
      await sleep(SETTLE_MS)
    }
  }
  const result = await load.stop()

  // What the running instances still hold is not lost.
  let held = 0n
  const sorted = report.ledger.sorted(`segment:${tag}`)
  const first = sorted[0] ?? 0n
  const last = sorted[sorted.length - 1] ?? 0n
  for (const leaf of leaves) {
    const a = await probe.get(`${(leaf as Leaf).url}/api/cache`)
    const view = (JSON.parse(a.body) as CacheView[]).find((v) => v.key === tag)
    const ranges = view?.segments ?? [{ value: view?.value0 ?? '0', max: view?.max0 ?? '0' }, ...(view?.nextReady === true ? [{ value: view.value1 ?? '0', max: view.max1 ?? '0' }] : [])]
    for (const r of ranges) {
      const lo = BigInt(r.value)
      const hi = BigInt(r.max) < last + 1n ? BigInt(r.max) : last + 1n
      if (hi > lo) held += hi - lo
    }
  }
  probe.close()
  const span = last - first + 1n
  const lost = span - issued - held
  const share = Number(lost) / Number(span)
  const finalMaxId = await suite.db.maxId(tag)

  report.check(exits.every((code) => code === 0), `exit codes at SIGTERM: ${exits.join(', ')}`)
  report.check(issued === BigInt(sorted.length), `${issued} IDs counted, ${sorted.length} in the ledger`)
  report.check(share < MAX_LOST_SHARE, `${lost} IDs lost to ${exits.length} restarts: ${(share * 100).toFixed(2)}% of the ${span} consumed (bound ${MAX_LOST_SHARE * 100}%)`)
  const slowestRestart = Math.max(...restartMs)
  report.note(`${INSTANCES} instances, ${exits.length} restarts (SIGTERM, start, ready) under ${RATE} requests/s; ${result.requests} requests, ${issued} IDs from ${first} to ${last}; ` +
    `${held} still held by the running instances; ${lost} lost = ${(share * 100).toFixed(3)}% of the ${span} consumed; max_id ${initialMaxId} at the start, ${finalMaxId} at the end; slowest restart ${fmtMs(slowestRestart)}`)
  report.recover = `${lost} IDs lost = ${(share * 100).toFixed(2)}% of ${span} consumed`
}
