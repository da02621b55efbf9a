import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { checkSlowest, fmtMs, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient } from '../load.js'
import {
  LEASE_SOURCES, cacheDirOf, decodeAll, largestWait, loadHolder, logLines, serveFor, snowflakeStatus, startLeaseLeaf, waitReleased,
  LOST_MSG, type LeaseSource, type Taken,
} from '../lease.js'
import { sleep, waitUntil } from '../services.js'

const TTL_MS = 2000
const HEARTBEAT_MS = 500
/** A's pool: X and a second id it moves to once X is taken; B's pool is X alone. */
const X = 5
const CLIENTS = 4
const RATE = 400
/** B serves this long before A goes on. */
const B_SERVES_MS = 1000
/** A must lease X + 1 and serve within this after SIGCONT. */
const RECLAIM_BOUND_MS = 10_000

interface Figures {
  source: LeaseSource
  stoppedMs: number
  expiredAfterMs: number
  bStartMs: number
  bWaitMs: number
  lost: number
  firstLostMs: number | undefined
  reclaimMs: number | undefined
  aIds: number
  bIds: number
}

/**
 * 13. A paused holder, per recyclable source. Instance A (pool X..X+1) leases X and serves
 * under load; it is SIGSTOPped for longer than the TTL. Once the store shows X free, B
 * (pool X..X) starts, leases X and serves. Then A is SIGCONTed: no answer of A completed after
 * that may carry X unless its millisecond was reached before the pause, and none to a request
 * sent after it; it answers 503 WORKER_LEASE_LOST instead, leases X+1 from its heartbeat and
 * serves again without a restart. No ID repeats, and B's first millisecond comes after A's
 * last under X.
 */
export async function leasePausedHolder (suite: Suite, report: Report): Promise<void> {
  const figures: Figures[] = []
  report.expectedWhat = '503 WORKER_LEASE_LOST'
  for (const source of LEASE_SOURCES) figures.push(await paused(suite, report, source))
  report.note(`TTL ${TTL_MS} ms, heartbeat ${HEARTBEAT_MS} ms; ` + figures.map((f) => `${f.source}: A stopped ${fmtMs(f.stoppedMs)} ` +
    `(its lease gone from the store ${fmtMs(f.expiredAfterMs)} after SIGSTOP), B listening ${fmtMs(f.bStartMs)} after its start ` +
    `(issuedUntil wait ${fmtMs(f.bWaitMs)}); after SIGCONT A answered ${f.lost} WORKER_LEASE_LOST (first ${f.firstLostMs === undefined ? 'none' : fmtMs(f.firstLostMs)} after), ` +
    `served again under worker id ${X + 1} ${f.reclaimMs === undefined ? 'never' : `${fmtMs(f.reclaimMs)} after SIGCONT`}; IDs: A ${f.aIds}, B ${f.bIds}`).join('; '))
  report.recover = figures.map((f) => `${f.source === 'db-lease' ? 'db' : 'zk'} ${f.reclaimMs === undefined ? 'never' : fmtMs(f.reclaimMs)}`).join(', ')
  // A request A took just before SIGSTOP is answered after SIGCONT; otherwise the longest wait
  // on the ID path is the restart window, a heartbeat.
  checkSlowest(report, Math.max(...figures.map((f) => f.stoppedMs)) + HEARTBEAT_MS, 'the longest pause (SIGSTOP to SIGCONT, as measured) + heartbeat')
}

async function paused (suite: Suite, report: Report, source: LeaseSource): Promise<Figures> {
  const name = unique(`fault-s13-${source === 'db-lease' ? 'db' : 'zk'}`)
  const common = { source, name, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS }
  const a = await startLeaseLeaf(suite, `${source}-A`, { ...common, min: X, max: X + 1, port: 7701, cacheDir: cacheDirOf(suite, name, 'A') })
  const probe = new HttpClient()
  const statusA = await snowflakeStatus(probe, a.url)
  report.check(statusA?.workerId === X, `${source}: A leased worker id ${statusA?.workerId}, not ${X}`)

  const state = { stoppedAt: 0, stoppedWall: 0, contAt: Infinity }
  const load = loadHolder(report, `${source}-A`, a, CLIENTS, RATE, () => state.stoppedAt)
  const answers = load.answers
  let b: Leaf | undefined
  let bAnswers: Taken[] = []
  const fig: Figures = { source, stoppedMs: 0, expiredAfterMs: 0, bStartMs: 0, bWaitMs: 0, lost: 0, firstLostMs: undefined, reclaimMs: undefined, aIds: 0, bIds: 0 }
  try {
    await sleep(1500)
    state.stoppedAt = performance.now()
    a.proc.kill('SIGSTOP')
    // The wall clock once the signal is sent: A may still finish the millisecond it is in (a
    // reading taken before kill() flagged an ID of that very millisecond as issued after it).
    state.stoppedWall = Date.now()
    const expired = await waitReleased(suite, source, name, X, 4 * TTL_MS)
    report.check(expired !== undefined, `${source}: A's lease of ${X} still in the store ${fmtMs(4 * TTL_MS)} after SIGSTOP`)
    fig.expiredAfterMs = expired ?? 0
    const bStart = performance.now()
    b = await startLeaseLeaf(suite, `${source}-B`, { ...common, min: X, max: X, port: 7702, cacheDir: cacheDirOf(suite, name, 'B') })
    fig.bStartMs = performance.now() - bStart
    fig.bWaitMs = largestWait(b)
    // B serves, then A goes on and B serves meanwhile.
    bAnswers = await serveFor(report, `${source}-B`, b, B_SERVES_MS, async () => {
      state.contAt = performance.now()
      fig.stoppedMs = state.contAt - state.stoppedAt
      a.proc.kill('SIGCONT')
      const reclaimed = await waitUntil(() => answers.some((t) => t.sentAt >= state.contAt && t.ids.some((id) => decodeSnowflakeId(id).workerId === X + 1)), RECLAIM_BOUND_MS, 25)
      report.check(reclaimed, `${source}: A served no ID under worker id ${X + 1} within ${fmtMs(RECLAIM_BOUND_MS)} after SIGCONT`)
    })
    await sleep(500)
  } finally {
    if (a.proc.signalCode === null && a.proc.exitCode === null) a.proc.kill('SIGCONT')
    await load.stop()
  }
  const statusAfter = await snowflakeStatus(probe, a.url)
  probe.close()

  // After SIGCONT: nothing under X but what was reached before the pause.
  const after = answers.filter((t) => t.doneAt >= state.contAt)
  const aUnderX = answers.flatMap((t) => t.ids).filter((id) => decodeSnowflakeId(id).workerId === X)
  for (const t of after) {
    const underX = t.ids.filter((id) => decodeSnowflakeId(id).workerId === X)
    if (underX.length === 0) continue
    const late = t.sentAt >= state.contAt || underX.some((id) => decodeSnowflakeId(id).timestamp > state.stoppedWall)
    if (late) report.check(false, `${source}: A answered ${underX.length} IDs under worker id ${X} after SIGCONT (request sent ${fmtMs(t.sentAt - state.contAt)} after it), e.g. ${underX[0]} at ${decodeSnowflakeId(underX[0] as bigint).timestamp}`)
  }
  const bIds = bAnswers.flatMap((t) => t.ids)
  const bDecoded = decodeAll(bIds)
  const aX = decodeAll(aUnderX)
  report.check(bIds.length > 0 && [...bDecoded.workerIds].join() === String(X), `${source}: B's IDs: ${bIds.length}, worker ids ${[...bDecoded.workerIds].join(', ')}`)
  report.check(aUnderX.length === 0 || bDecoded.minTs > aX.maxTs, `${source}: B's first millisecond ${bDecoded.minTs} is not after A's last under ${X} (${aX.maxTs})`)
  const lostAfter = after.filter((t) => t.status === 503 && t.code === 'WORKER_LEASE_LOST')
  fig.lost = lostAfter.length
  fig.firstLostMs = lostAfter.length === 0 ? undefined : Math.min(...lostAfter.map((t) => t.doneAt)) - state.contAt
  const firstX1 = answers.filter((t) => t.sentAt >= state.contAt && t.ids.some((id) => decodeSnowflakeId(id).workerId === X + 1))
  fig.reclaimMs = firstX1.length === 0 ? undefined : Math.min(...firstX1.map((t) => t.doneAt)) - state.contAt
  fig.aIds = answers.reduce((n, t) => n + t.ids.length, 0)
  fig.bIds = bIds.length
  report.check(logLines(a, LOST_MSG).length > 0, `${source}: A never logged '${LOST_MSG}'`)
  report.check(statusAfter?.workerId === X + 1 && statusAfter.issuing, `${source}: A's status at the end: ${JSON.stringify(statusAfter)}`)
  await a.stop('SIGTERM')
  await b?.stop('SIGTERM')
  return fig
}
