import { SCHEDULING_SLACK_MS, Timeline, fmtMs, startLeaf, takeIds, unique, watchMaxId, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { PrivatePostgres } from '../pg-service.js'
import { freePort, sleep } from '../services.js'

const CLIENTS = 8
const RATE = 800 // requests per second, over both instances
const BATCH_EVERY = 10
const BATCH = 10
const IDS_PER_SECOND = RATE * (BATCH_EVERY - 1 + BATCH) / BATCH_EVERY
/** How long the postmaster stays dead before it is started again. */
const DOWN_MS = 1500
/** Time allowed on top of that for PostgreSQL's crash recovery and the old backends' exit. */
const RESTART_ALLOWANCE_MS = 5000
/**
 * As in scenario 2: a stop may find 90% of one segment buffered and nothing else, and that
 * covers twice the IDs of the outage and the restart even if one instance takes all the load.
 */
const STEP = Math.ceil(IDS_PER_SECOND * (DOWN_MS + RESTART_ALLOWANCE_MS) / 1000 * 2 / 0.9 / 1000) * 1000
/** leaf.segment.wait-timeout-ms, given explicitly: the latency bound is this plus SCHEDULING_SLACK_MS. */
const WAIT_TIMEOUT_MS = 3000
/** leaf.jdbc.connect-timeout-ms and query-timeout-ms: a load sent to the dead server fails within them, and is retried. */
const DB_TIMEOUT_MS = 1000
const DRAIN_BATCH = 10_000
const MAX_DRAIN_REQUESTS = 100

/**
 * 26. Segment mode on PostgreSQL: two instances on one tag, the private PostgreSQL's
 * postmaster killed (SIGKILL, by its pid) under load and started again: no request fails, no
 * answer takes longer than the wait timeout + 1 s, no ID is handed out twice, max_id never
 * moves backwards, and both instances reserve new segments from the restarted server.
 */
export async function postgresRestart (suite: Suite, report: Report): Promise<void> {
  const db = new PrivatePostgres(await freePort())
  try {
    await db.start()
    await run(suite, report, db)
  } finally {
    await db.stop()
  }
}

async function run (suite: Suite, report: Report, db: PrivatePostgres): Promise<void> {
  const tag = unique('s26')
  await db.addTag(tag, STEP)
  const options = {
    name: unique('fault-s26'),
    segment: db.url(),
    args: [`--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`, `--leaf.jdbc.connect-timeout-ms=${DB_TIMEOUT_MS}`, `--leaf.jdbc.query-timeout-ms=${DB_TIMEOUT_MS}`],
  }
  const leaves: Leaf[] = [await startLeaf(suite, 'segment-a', options), await startLeaf(suite, 'segment-b', options)]
  const watch = watchMaxId(db, tag)
  const batch = batchMix(BATCH_EVERY, BATCH)
  let phase: 'before' | 'outage' | 'after' = 'before'
  const outage = { requests: 0, failed: 0, maxMs: 0 }
  const timeline = new Timeline()

  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE }, async (client, c, n) => {
    const during = phase === 'outage'
    const failedBefore = report.failed
    const leaf = leaves[c % leaves.length] as Leaf
    const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', tag, batch(n), `c${c}`)
    timeline.add(answer, ids !== undefined, `client ${c} (${leaf.label}) request ${n}`)
    if (during) {
      outage.requests++
      outage.failed += report.failed - failedBefore
      outage.maxMs = Math.max(outage.maxMs, answer.ms)
    }
  })

  await sleep(3000)
  const maxBefore = await db.maxId(tag)
  const killedAt = performance.now()
  phase = 'outage'
  const pid = db.kill()
  await sleep(DOWN_MS)
  await db.start()
  const downMs = db.upAt - killedAt
  phase = 'after'
  const maxAtUp = await db.maxId(tag)
  report.check(maxAtUp >= maxBefore, `max_id after the restart (${maxAtUp}) is below the value read before it (${maxBefore})`)
  await sleep(4000)
  const result = await load.stop()
  const loadEnd = performance.now()

  // Each instance serves IDs from a segment it reserved from the restarted server.
  const servedMax: bigint[] = []
  let drained = 0
  const drainer = new HttpClient()
  for (const leaf of leaves) {
    let served = 0n
    for (let i = 0; served < maxAtUp && i < MAX_DRAIN_REQUESTS; i++) {
      const { answer, ids } = await takeIds(report, drainer, leaf.url, 'segment', tag, DRAIN_BATCH, `drain-${leaf.label}`)
      timeline.add(answer, ids !== undefined, `drain batch ${i} on ${leaf.label}`)
      drained++
      if (ids === undefined) break
      served = ids[ids.length - 1] as bigint
    }
    servedMax.push(served)
  }
  drainer.close()
  await sleep(300)
  await watch.stop()
  const finalMax = await db.maxId(tag)

  for (const [i, served] of servedMax.entries()) {
    report.check(served >= maxAtUp, `${leaves[i]?.label}: no ID from a segment reserved after the restart (served up to ${served}, max_id at restart ${maxAtUp})`)
  }
  report.check(outage.requests > 0 && outage.failed === 0, `${outage.failed} of ${outage.requests} requests failed while PostgreSQL was down`)
  const { slowest } = timeline
  report.check(slowest.ms <= WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS, `an answer took ${fmtMs(slowest.ms)} (${slowest.what}, sent ${fmtMs(slowest.sentAt - killedAt)} after the kill; bound ${WAIT_TIMEOUT_MS} + ${SCHEDULING_SLACK_MS} ms)`)
  report.check(watch.backwards.length === 0, `max_id moved backwards: ${watch.backwards.join(', ')}`)
  const sorted = report.ledger.sorted(`segment:${tag}`)
  const last = sorted[sorted.length - 1]
  report.check(last !== undefined && last < finalMax, `an ID (${last}) at or past max_id ${finalMax}`)
  const gap = timeline.largestGap(killedAt, loadEnd)
  report.note(`2 instances, step ${STEP} for ${IDS_PER_SECOND} IDs/s; postmaster ${pid} killed (SIGKILL), PostgreSQL answering again after ${fmtMs(downMs)}; ` +
    `${outage.requests} requests meanwhile, slowest ${fmtMs(outage.maxMs)}; slowest of the scenario ${fmtMs(slowest.ms)} (${slowest.what}); ` +
    `${result.requests} paced requests then ${drained} batches of ${DRAIN_BATCH}; max_id ${maxBefore} before, ${maxAtUp} at restart, ${finalMax} at the end, ` +
    `${watch.values.length} distinct values read, never backwards`)
  report.recover = `longest gap ${fmtMs(gap.ms)} (PostgreSQL down ${fmtMs(downMs)})`
}
