import { errorCode, fmtMs, readyz, startScenarioLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, type Answer } from '../load.js'
import { sleep, waitUntil } from '../services.js'

const CLIENTS = 8
const RATE = 2000
const STEP = 1000
const WAIT_TIMEOUT_MS = 1000
/** Scheduling slack on top of the wait timeout for "answered within the wait timeout". */
const SLACK_MS = 500
const RECOVERY_BOUND_MS = 2000

/**
 * 3. MariaDB stopped until the buffer of a small-step tag is used up (Leaf's double buffer,
 * leaf.segment.buffer-seconds=0): requests get 503
 * SEGMENTS_NOT_READY within the wait timeout, /readyz says not ready, and service comes back
 * by itself within 2 s of MariaDB accepting connections again. That 503 counts only for a
 * request sent after the stop and answered before MariaDB's restart + 2 s; any other is a
 * failure.
 */
export async function mariadbDrained (suite: Suite, report: Report): Promise<void> {
  const { leaf, tag } = await startScenarioLeaf(suite, 's3', {
    step: STEP,
    // Leaf's double buffer, so that a small step drains within seconds: the default horizon
    // would hold a minute of this load (scenario 16 measures that).
    args: [`--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`, '--leaf.segment.buffer-seconds=0'],
  })
  const probe = new HttpClient()
  report.expectedWhat = '503 SEGMENTS_NOT_READY'
  // Moments (performance.now()) the load loop and the scenario share.
  const at: { firstRefused?: number, up?: number, firstOkAfterUp?: number } = {}
  let slowest = 0
  // Judged once the restart time is known: see the check after the load.
  const refusals: Answer[] = []
  const notReady = (a: Answer) => {
    const ok = a.status === 503 && errorCode(a) === 'SEGMENTS_NOT_READY' && a.ms <= WAIT_TIMEOUT_MS + SLACK_MS
    if (ok) refusals.push(a)
    return ok
  }

  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE }, async (client, c) => {
    const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', tag, undefined, `c${c}`, notReady)
    const doneAt = answer.sentAt + answer.ms
    slowest = Math.max(slowest, answer.ms)
    if (ids === undefined) at.firstRefused ??= doneAt
    else if (at.up !== undefined && doneAt > at.up) at.firstOkAfterUp = Math.min(at.firstOkAfterUp ?? Infinity, doneAt)
  })

  await sleep(1500)
  const stoppedAt = performance.now()
  await suite.db.stop('SIGTERM')
  const drained = await waitUntil(() => at.firstRefused !== undefined, 30_000)
  report.check(drained, 'the buffer never ran out within 30 s of the stop')
  await sleep(2000)
  const notReadyAnswer = await readyz(probe, leaf.url)
  const modes = notReadyAnswer.body?.modes as Record<string, { ready?: boolean, reason?: string }> | undefined
  report.check(notReadyAnswer.status === 503 && notReadyAnswer.body?.status === 'not ready' && modes?.segment?.ready === false,
    `/readyz while drained: ${notReadyAnswer.status} ${notReadyAnswer.raw}`)

  await suite.db.start()
  // Conservative: from the last moment MariaDB was seen refusing, not from its first answer.
  const upAt = suite.db.lastDownAt
  at.up = upAt
  let readyAt: number | undefined
  await waitUntil(async () => {
    if ((await readyz(probe, leaf.url)).status !== 200) return false
    readyAt = performance.now()
    return true
  }, 10_000, 25)
  await waitUntil(() => at.firstOkAfterUp !== undefined, 10_000)
  await sleep(2000)
  await load.stop()
  probe.close()

  // A refusal outside [stop, restart + bound] is a failure, not an expected answer.
  const outside = refusals.filter((a) => a.sentAt < stoppedAt || a.sentAt + a.ms > upAt + RECOVERY_BOUND_MS)
  for (const a of outside) {
    report.expected--
    report.failure(`503 SEGMENTS_NOT_READY for a request sent ${relative(a.sentAt - stoppedAt, 'the stop')} and answered ${relative(a.sentAt + a.ms - upAt, 'the restart')} (accepted from the stop to the restart + ${RECOVERY_BOUND_MS} ms)`)
  }
  const recovered = at.firstOkAfterUp === undefined ? undefined : at.firstOkAfterUp - upAt
  const ready = readyAt === undefined ? undefined : readyAt - upAt
  report.check(report.expected > 0, 'no request got 503 SEGMENTS_NOT_READY')
  report.check(slowest <= WAIT_TIMEOUT_MS + SLACK_MS, `an answer took ${fmtMs(slowest)} (wait timeout ${WAIT_TIMEOUT_MS} ms)`)
  report.check(recovered !== undefined && recovered <= RECOVERY_BOUND_MS, `IDs again ${recovered === undefined ? 'never' : fmtMs(recovered)} after MariaDB came back (bound ${RECOVERY_BOUND_MS} ms)`)
  report.check(ready !== undefined && ready <= RECOVERY_BOUND_MS, `/readyz ready again ${ready === undefined ? 'never' : fmtMs(ready)} after MariaDB came back (bound ${RECOVERY_BOUND_MS} ms)`)
  const lastRefusal = Math.max(...refusals.map((a) => a.sentAt + a.ms))
  report.note(`buffer used up ${at.firstRefused === undefined ? '-' : fmtMs(at.firstRefused - stoppedAt)} after the stop; slowest answer ${fmtMs(slowest)}; ` +
    `${refusals.length} SEGMENTS_NOT_READY, the last answered ${refusals.length === 0 ? '-' : relative(lastRefusal - upAt, "MariaDB's restart")}, ${outside.length} outside the window; ` +
    `/readyz while down: ${notReadyAnswer.status} ${notReadyAnswer.raw.slice(0, 200)}; /readyz ready ${ready === undefined ? '-' : fmtMs(ready)} after MariaDB came back`)
  report.recover = recovered === undefined ? 'never' : fmtMs(recovered)
}

/** `ms` (signed) as "1.20 s after `what`" or "150 ms before `what`". */
function relative (ms: number, what: string): string {
  return `${fmtMs(Math.abs(ms))} ${ms < 0 ? 'before' : 'after'} ${what}`
}
