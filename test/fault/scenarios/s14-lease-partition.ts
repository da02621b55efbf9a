import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { checkSlowest, fmtMs, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient } from '../load.js'
import {
  LEASE_SOURCES, LOST_MSG, cacheDirOf, decodeAll, largestWait, loadHolder, logLines, serveFor, snowflakeStatus, startLeaseLeaf, waitReleased,
  type LeaseSource, type Taken,
} from '../lease.js'
import { createProxy } from '../../helpers/tcp-proxy.js'
import { sleep, waitUntil } from '../services.js'

const TTL_MS = 2000
const HEARTBEAT_MS = 500
const X = 9
const CLIENTS = 4
const RATE = 400
/** B serves this long while the cut lasts. */
const B_SERVES_MS = 1000
/** After the cut heals, A must lease X + 1 and serve within this. */
const RECOVER_BOUND_MS = 15_000

interface Figures {
  source: LeaseSource
  fenceMs: number | undefined
  lastOkUnderXMs: number | undefined
  freeAfterMs: number
  bWaitMs: number
  cutMs: number
  recoverMs: number | undefined
  lost: number
}

/**
 * 14. A partitioned holder, per recyclable source. Instance A (pool X..X+1) reaches its store
 * (MariaDB or ZooKeeper) through a TCP proxy and serves under load. The proxy then cuts it:
 * the connections open go silent (no byte, no FIN, no RST) and new ones are refused, while
 * clients still reach A's HTTP. A must fence (503 WORKER_LEASE_LOST) within the TTL of the
 * cut, before the store frees X; B (pool X..X, direct to the store) then leases X and serves.
 * After the cut heals, A leases X + 1 and serves again. No ID repeats; B's first millisecond
 * comes after A's last under X.
 */
export async function leasePartition (suite: Suite, report: Report): Promise<void> {
  const figures: Figures[] = []
  report.expectedWhat = '503 WORKER_LEASE_LOST'
  for (const source of LEASE_SOURCES) figures.push(await partitioned(suite, report, source))
  report.note(`TTL ${TTL_MS} ms (A fences ${TTL_MS / 10} ms before it), heartbeat ${HEARTBEAT_MS} ms; ` + figures.map((f) => `${f.source}: ` +
    `first WORKER_LEASE_LOST ${f.fenceMs === undefined ? 'never' : fmtMs(f.fenceMs)} after the cut (last 200 under ${X} ${f.lastOkUnderXMs === undefined ? '-' : fmtMs(f.lastOkUnderXMs)} after it), ` +
    `X free in the store ${fmtMs(f.freeAfterMs)} after the cut, B's issuedUntil wait ${fmtMs(f.bWaitMs)}, cut for ${fmtMs(f.cutMs)}, ` +
    `${f.lost} WORKER_LEASE_LOST answers, A served under ${X + 1} ${f.recoverMs === undefined ? 'never' : `${fmtMs(f.recoverMs)} after the cut healed`}`).join('; '))
  report.recover = figures.map((f) => `${f.source === 'db-lease' ? 'db' : 'zk'} fence ${f.fenceMs === undefined ? 'never' : fmtMs(f.fenceMs)}, back ${f.recoverMs === undefined ? 'never' : fmtMs(f.recoverMs)}`).join('; ')
  // The ID path never waits on the store: the longest wait on it is the restart window, a heartbeat.
  checkSlowest(report, HEARTBEAT_MS, 'heartbeat (the restart window)')
}

async function partitioned (suite: Suite, report: Report, source: LeaseSource): Promise<Figures> {
  const proxy = await createProxy(source === 'db-lease' ? suite.db.port : suite.zk.port)
  const name = unique(`fault-s14-${source === 'db-lease' ? 'db' : 'zk'}`)
  const common = { source, name, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS }
  const fig: Figures = { source, fenceMs: undefined, lastOkUnderXMs: undefined, freeAfterMs: 0, bWaitMs: 0, cutMs: 0, recoverMs: undefined, lost: 0 }
  let b: Leaf | undefined
  try {
    const a = await startLeaseLeaf(suite, `${source}-A`, { ...common, min: X, max: X + 1, port: 7801, cacheDir: cacheDirOf(suite, name, 'A'), storePort: proxy.port })
    const probe = new HttpClient()
    const statusA = await snowflakeStatus(probe, a.url)
    report.check(statusA?.workerId === X, `${source}: A leased worker id ${statusA?.workerId}, not ${X}`)
    const state = { cutAt: 0, healedAt: Infinity }
    const load = loadHolder(report, `${source}-A`, a, CLIENTS, RATE, () => state.cutAt)
    const answers = load.answers
    let bAnswers: Taken[] = []
    try {
      await sleep(1500)
      state.cutAt = performance.now()
      const silenced = proxy.blackhole()
      proxy.block()
      report.check(silenced > 0, `${source}: no connection to the store open to cut`)
      const free = await waitReleased(suite, source, name, X, 4 * TTL_MS)
      report.check(free !== undefined, `${source}: X still leased in the store ${fmtMs(4 * TTL_MS)} after the cut`)
      fig.freeAfterMs = performance.now() - state.cutAt
      b = await startLeaseLeaf(suite, `${source}-B`, { ...common, min: X, max: X, port: 7802, cacheDir: cacheDirOf(suite, name, 'B') })
      fig.bWaitMs = largestWait(b)
      bAnswers = await serveFor(report, `${source}-B`, b, B_SERVES_MS, async () => {
        state.healedAt = performance.now()
        fig.cutMs = state.healedAt - state.cutAt
        proxy.unblock()
        const back = await waitUntil(() => answers.some((t) => t.sentAt >= state.healedAt && t.ids.some((id) => decodeSnowflakeId(id).workerId === X + 1)), RECOVER_BOUND_MS, 25)
        report.check(back, `${source}: A served no ID under worker id ${X + 1} within ${fmtMs(RECOVER_BOUND_MS)} after the cut healed`)
      })
      await sleep(500)
    } finally {
      await load.stop()
    }
    const statusAfter = await snowflakeStatus(probe, a.url)
    probe.close()

    const lost = answers.filter((t) => t.status === 503 && t.code === 'WORKER_LEASE_LOST')
    fig.lost = lost.length
    fig.fenceMs = lost.length === 0 ? undefined : Math.min(...lost.map((t) => t.doneAt)) - state.cutAt
    report.check(fig.fenceMs !== undefined && fig.fenceMs < TTL_MS, `${source}: first WORKER_LEASE_LOST ${fig.fenceMs === undefined ? 'never' : fmtMs(fig.fenceMs)} after the cut, not within the TTL (${TTL_MS} ms)`)
    const okUnderX = answers.filter((t) => t.ids.some((id) => decodeSnowflakeId(id).workerId === X))
    const lastOk = okUnderX.length === 0 ? undefined : Math.max(...okUnderX.map((t) => t.doneAt))
    fig.lastOkUnderXMs = lastOk === undefined ? undefined : lastOk - state.cutAt
    report.check(lastOk === undefined || lastOk < state.cutAt + TTL_MS, `${source}: A answered IDs under ${X} ${fmtMs((lastOk ?? 0) - state.cutAt)} after the cut (TTL ${TTL_MS} ms)`)
    report.check(fig.freeAfterMs >= (fig.fenceMs ?? Infinity), `${source}: the store freed ${X} ${fmtMs(fig.freeAfterMs)} after the cut, before A fenced (${fig.fenceMs === undefined ? 'never' : fmtMs(fig.fenceMs)})`)
    const aUnderX = decodeAll(answers.flatMap((t) => t.ids).filter((id) => decodeSnowflakeId(id).workerId === X))
    const bIds = bAnswers.flatMap((t) => t.ids)
    const bDecoded = decodeAll(bIds)
    report.check(bIds.length > 0 && [...bDecoded.workerIds].join() === String(X), `${source}: B's IDs: ${bIds.length}, worker ids ${[...bDecoded.workerIds].join(', ')}`)
    report.check(bDecoded.minTs > aUnderX.maxTs, `${source}: B's first millisecond ${bDecoded.minTs} is not after A's last under ${X} (${aUnderX.maxTs})`)
    const firstX1 = answers.filter((t) => t.sentAt >= state.healedAt && t.ids.some((id) => decodeSnowflakeId(id).workerId === X + 1))
    fig.recoverMs = firstX1.length === 0 ? undefined : Math.min(...firstX1.map((t) => t.doneAt)) - state.healedAt
    report.check(logLines(a, LOST_MSG).length > 0, `${source}: A never logged '${LOST_MSG}'`)
    report.check(statusAfter?.workerId === X + 1 && statusAfter.issuing, `${source}: A's status at the end: ${JSON.stringify(statusAfter)}`)
    await a.stop('SIGTERM')
    await b?.stop('SIGTERM')
  } finally {
    await proxy.close()
  }
  return fig
}
