import { SCHEDULING_SLACK_MS, Timeline, fmtMs, startScenarioLeaf, takeIds, watchMaxId, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { sleep } from '../services.js'

const CLIENTS = 8
const RATE = 1000 // requests per second
// Every 10th request is a batch of 10: 19 IDs per 10 requests.
const BATCH_EVERY = 10
const BATCH = 10
const IDS_PER_SECOND = RATE * (BATCH_EVERY - 1 + BATCH) / BATCH_EVERY
const OUTAGE_MS = 20_000
/** Time allowed on top of the outage for MariaDB's crash recovery at restart. */
const RESTART_ALLOWANCE_MS = 10_000
/**
 * The preload starts once 10% of a segment is used, so in the worst case a stop finds 90% of
 * one segment and nothing else buffered. That 90% covers twice the IDs of outage + restart.
 */
const STEP = Math.ceil(IDS_PER_SECOND * (OUTAGE_MS + RESTART_ALLOWANCE_MS) / 1000 * 2 / 0.9 / 1000) * 1000
const DRAIN_BATCH = 10_000
/** leaf.segment.wait-timeout-ms, given explicitly: the latency bound is this plus SCHEDULING_SLACK_MS. */
const WAIT_TIMEOUT_MS = 3000
const MAX_DRAIN_REQUESTS = 100

/**
 * 2. MariaDB crashes (SIGKILL) for 20 s under segment load on a tag whose step outlasts it:
 * no request fails, no answer takes longer than the wait timeout + 1 s, service goes on
 * after it, and max_id never moves backwards. Its recovery figure is the longest time with
 * no successful answer from the crash to the end of the paced load.
 */
export async function mariadbOutage (suite: Suite, report: Report): Promise<void> {
  const { leaf, tag } = await startScenarioLeaf(suite, 's2', { step: STEP, args: [`--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`] })
  const watch = watchMaxId(suite.db, tag)
  const batch = batchMix(BATCH_EVERY, BATCH)
  let phase: 'before' | 'outage' | 'after' = 'before'
  const outage = { requests: 0, failed: 0, maxMs: 0 }
  const timeline = new Timeline()

  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE }, async (client, c, n) => {
    const during = phase === 'outage'
    const failedBefore = report.failed
    const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', tag, batch(n), `c${c}`)
    timeline.add(answer, ids !== undefined, `client ${c} request ${n}`)
    if (during) {
      outage.requests++
      outage.failed += report.failed - failedBefore
      outage.maxMs = Math.max(outage.maxMs, answer.ms)
    }
  })

  await sleep(3000)
  const maxBefore = await suite.db.maxId(tag)
  const stoppedAt = performance.now()
  phase = 'outage'
  await suite.db.stop('SIGKILL')
  await sleep(OUTAGE_MS - (performance.now() - stoppedAt))
  await suite.db.start()
  const downMs = suite.db.upAt - stoppedAt
  phase = 'after'
  const maxAtUp = await suite.db.maxId(tag)
  report.check(maxAtUp >= maxBefore, `max_id after the crash (${maxAtUp}) is below the value read before it (${maxBefore})`)
  await sleep(5000)
  const result = await load.stop()
  const loadEnd = performance.now()

  // Service after the outage: IDs from a segment reserved after MariaDB came back.
  let servedMax = 0n
  let drained = 0
  const drainer = new HttpClient()
  while (servedMax < maxAtUp && drained < MAX_DRAIN_REQUESTS) {
    const { answer, ids } = await takeIds(report, drainer, leaf.url, 'segment', tag, DRAIN_BATCH, 'c0')
    timeline.add(answer, ids !== undefined, `drain batch ${drained}`)
    drained++
    if (ids === undefined) break
    servedMax = ids[ids.length - 1] as bigint
  }
  drainer.close()
  await sleep(300)
  await watch.stop()
  const finalMax = await suite.db.maxId(tag)

  report.check(servedMax >= maxAtUp, `no ID from a segment reserved after the outage (served up to ${servedMax}, max_id at restart ${maxAtUp})`)
  report.check(outage.requests > 0 && outage.failed === 0, `${outage.failed} of ${outage.requests} requests failed during the outage`)
  const { slowest } = timeline
  report.check(slowest.ms <= WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS, `an answer took ${fmtMs(slowest.ms)} (${slowest.what}, sent ${fmtMs(slowest.sentAt - stoppedAt)} after the crash; bound ${WAIT_TIMEOUT_MS} + ${SCHEDULING_SLACK_MS} ms)`)
  const gap = timeline.largestGap(stoppedAt, loadEnd)
  report.check(watch.backwards.length === 0, `max_id moved backwards: ${watch.backwards.join(', ')}`)
  const sorted = report.ledger.sorted(`segment:${tag}`)
  const last = sorted[sorted.length - 1]
  report.check(last !== undefined && last < finalMax, `an ID (${last}) at or past max_id ${finalMax}`)
  report.note(`step ${STEP} for ${IDS_PER_SECOND} IDs/s; MariaDB down ${fmtMs(downMs)} (SIGKILL, restart with crash recovery); ` +
    `${outage.requests} requests during the outage, slowest ${fmtMs(outage.maxMs)}; slowest of the scenario ${fmtMs(slowest.ms)} (${slowest.what}); ` +
    `longest time without a successful answer ${fmtMs(gap.ms)}, from ${fmtMs(gap.from - stoppedAt)} after the crash; ${result.requests} paced requests then ${drained} batches of ${DRAIN_BATCH}; ` +
    `max_id ${maxBefore} before, ${maxAtUp} at restart, ${finalMax} at the end, ${watch.values.length} distinct values read, never backwards`)
  report.recover = `longest gap ${fmtMs(gap.ms)} (DB down ${fmtMs(downMs)})`
}
