import { Timeline, checkSlowest, fmtMs, startScenarioLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { waitUntil } from '../services.js'

const CLIENTS = 8
const RATE = 500 // requests per second
// Every 5th request is a batch of 6: 2 IDs per request on average.
const BATCH_EVERY = 5
const BATCH = 6
const IDS_PER_SECOND = RATE * (BATCH_EVERY - 1 + BATCH) / BATCH_EVERY
const BUFFER_SECONDS = 30
/** A table step far below the horizon: the chain of loads has to build it. */
const TABLE_STEP = 1000
const WAIT_TIMEOUT_MS = 2000
/** The outage ends at the first failed request, or after this long. */
const MAX_OUTAGE_MS = 120_000

/**
 * 16. The buffer horizon against a database outage. An instance with
 * leaf.segment.buffer-seconds=30 serves a steady segment load on a tag whose table step is a
 * thirtieth of that; once /api/cache shows 30 s buffered, MariaDB is killed. Passes when the
 * instance serves at least 30 s without one failed request, no answer slower than the wait
 * timeout + scheduling slack, and serves again once MariaDB is back; the recovery column is how
 * long it lasted.
 */
export async function horizonOutage (suite: Suite, report: Report): Promise<void> {
  const { leaf, tag } = await startScenarioLeaf(suite, 's16', {
    step: TABLE_STEP,
    args: [`--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`],
    env: { LEAF_SEGMENT_BUFFER_SECONDS: String(BUFFER_SECONDS) },
  })
  const probe = new HttpClient()
  const at: { stopped?: number, firstFailure?: number } = {}
  const timeline = new Timeline()
  // From the kill on, a 503 SEGMENTS_NOT_READY is the drained buffer: expected, and its time is the figure.
  const drained = (a: { status: number, body: string }) => at.stopped !== undefined && a.status === 503 && a.body.includes('SEGMENTS_NOT_READY')
  report.expectedWhat = '503 SEGMENTS_NOT_READY once drained'

  const batch = batchMix(BATCH_EVERY, BATCH)
  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxRequests: 1_000_000, maxMs: 30_000 + MAX_OUTAGE_MS + 60_000 }, async (client, c, n) => {
    const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', tag, batch(n), `c${c}`, drained)
    timeline.add(answer, ids !== undefined, `client ${c} request ${n}`)
    if (ids === undefined && at.stopped !== undefined) at.firstFailure ??= answer.sentAt
  })

  const cache = async () => {
    const a = await probe.get(`${leaf.url}/api/cache`)
    return a.status === 200 ? (JSON.parse(a.body) as { key: string, bufferSeconds: number | null, bufferedIds: number, segments: unknown[], idsPerSecond: number }[]).find((v) => v.key === tag) : undefined
  }
  const built = await waitUntil(async () => ((await cache())?.bufferSeconds ?? 0) >= BUFFER_SECONDS, 30_000, 200)
  const before = await cache()
  report.check(built, `the horizon did not reach ${BUFFER_SECONDS} s within 30 s: ${JSON.stringify(before)}`)
  at.stopped = performance.now()
  await suite.db.stop('SIGKILL')
  await waitUntil(() => at.firstFailure !== undefined, MAX_OUTAGE_MS, 50)
  const lastedMs = (at.firstFailure ?? performance.now()) - at.stopped
  await suite.db.start()
  const upAt = performance.now()
  const back = await waitUntil(async () => {
    const { ids } = await takeIds(report, probe, leaf.url, 'segment', tag, undefined, undefined, drained)
    return ids !== undefined
  }, 15_000, 100)
  const backMs = performance.now() - upAt
  const result = await load.stop()
  probe.close()

  report.check(lastedMs >= BUFFER_SECONDS * 1000, `served only ${fmtMs(lastedMs)} with MariaDB down; the horizon is ${BUFFER_SECONDS} s`)
  report.check(back, `no ID within 15 s of MariaDB's restart (${fmtMs(backMs)})`)
  // A request waits for a load at most the wait timeout, then answers SEGMENTS_NOT_READY.
  checkSlowest(report, WAIT_TIMEOUT_MS, 'leaf.segment.wait-timeout-ms')
  report.note(`${IDS_PER_SECOND} IDs/s (${RATE} requests/s) on a table step of ${TABLE_STEP}; at the kill the instance held ${before?.bufferedIds} IDs in ${before?.segments.length} segments, ` +
    `${before?.bufferSeconds} s at ${before?.idsPerSecond} IDs/s; it served ${fmtMs(lastedMs)} without a failed request ${at.firstFailure === undefined ? `(the outage was ended at ${fmtMs(MAX_OUTAGE_MS)})` : 'until its first 503'}; ` +
    `IDs again ${fmtMs(backMs)} after MariaDB was up; ${result.requests} requests, slowest ${fmtMs(timeline.slowest.ms)}`)
  report.recover = `lasted ${fmtMs(lastedMs)} with MariaDB down; back ${fmtMs(backMs)} after it`
}
