import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { errorCode, fmtMs, metrics, readyz, startLeaf, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep, waitUntil } from '../services.js'
import { ReplicaPair } from '../../helpers/replica-pair.js'
import { createProxy, type TcpProxy } from '../../helpers/tcp-proxy.js'

const CLIENTS_PER_INSTANCE = 3
/** Requests per second to each instance. */
const RATE = 400
const TABLE_STEP = 100
const REFRESH_MS = 1000
/** The review's hold (4 s); its default would be two intervals and 8 s per host. */
const HOLD_MS = 4000
const WAIT_TIMEOUT_MS = 1000
const QUERY_TIMEOUT_MS = 1000
/** How long P is cut off from every host: longer than the hold, as in the review. */
const CUT_MS = 12_000
/** P's segment size from which the straddle is looked for: the 90% left at its preload is within the bounds below. */
const SEGMENT_MIN = 3200
/** How long the run goes on after the cut ends. */
const AFTER_MS = REFRESH_MS + HOLD_MS + 4000
/**
 * P's IDs left below Q's mark at the cut: more than P serves in the hold (with room), fewer than
 * it serves from the cut to the end, which it does without a bound.
 */
const P_LEFT_MIN = BigInt(Math.ceil(1.5 * HOLD_MS / 1000 * RATE))
const P_LEFT_MAX = BigInt(Math.floor((CUT_MS + AFTER_MS) / 1000 * RATE * 0.9))

/** Q's batch size from the cut on. */
const Q_BATCH = 20

interface Chain { segments: { value: string, max: string }[] }
/**
 * 503s expected: at P from the cut until it serves from the promoted store (the cut, then a
 * refresh, its own hold, a load and a second of scheduling); at Q from the kill until it serves
 * from the promoted store (a refresh, the hold, a load, a query timeout, a second).
 */
const P_WINDOW_MS = CUT_MS + REFRESH_MS + HOLD_MS + WAIT_TIMEOUT_MS + 2000
const Q_WINDOW_MS = REFRESH_MS + HOLD_MS + WAIT_TIMEOUT_MS + QUERY_TIMEOUT_MS + 1000

/**
 * 31. A live instance cut off from every database host across a promotion (issue 39, item 3:
 * 40,714 duplicates in the review, with a 4 s hold). A primary and its GTID replica; P reaches
 * both through TCP proxies (its host list: the primary's proxy, then the replica's), Q reaches
 * them directly. Both serve one tag under a paced load on Leaf's double buffer (Q batches of
 * 20 from the cut on, so that it allocates from the promoted store within the cut), while the
 * replica lags (from the start). P pauses until Q reserved above all P holds, then Q pauses
 * until P's chain straddles Q's mark (P serves a segment below it for longer than the hold,
 * and holds next a range reserved after Q's last); then P is cut off from both hosts (every connection reset); the primary is killed
 * and the replica promoted. Q moves to it, sees the change, raises the row above what it
 * served, holds, and allocates from it. P's cut lasts longer than the hold: on this async
 * replication it must stop serving its buffer once the hold has passed since it last reached
 * the store (STORE_UNCONFIRMED), and when it reaches the promoted store again it must drop the
 * ranges it holds (a peer may have allocated them). Passes with 0 duplicates, both instances
 * counting the failover, and the row above every ID served.
 */
export async function cutOffPromotion (suite: Suite, report: Report): Promise<void> {
  const home = join(suite.dir, 's31-replication')
  mkdirSync(home, { recursive: true })
  const pair = await ReplicaPair.create(home)
  const tag = unique('s31')
  const leaves: Leaf[] = []
  const proxies: TcpProxy[] = []
  const clients = Array.from({ length: 2 * CLIENTS_PER_INSTANCE }, () => new HttpClient())
  const probe = new HttpClient()
  try {
    await pair.init()
    await pair.primary.addTag(tag, TABLE_STEP)
    // The replica applies nothing from here on: every range the instances reserve is lost in
    // the promotion (P's buffer is reserved in its first seconds).
    await pair.lag()
    proxies.push(await createProxy(pair.ports.primary), await createProxy(pair.ports.replica))
    const common = [
      `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.failover-hold-ms=${HOLD_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
      `--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, '--leaf.jdbc.connect-timeout-ms=1000',
    ]
    const hosts = (ports: number[]) => `mysql://leaf:leaf@${ports.map((p) => `127.0.0.1:${p}`).join(',')}/leaf`
    leaves.push(await startLeaf(suite, 'P', {
      name: unique('fault-s31-p'),
      segment: hosts(proxies.map((p) => p.port)),
      args: [...common, '--leaf.segment.buffer-seconds=0'],
    }))
    leaves.push(await startLeaf(suite, 'Q', {
      name: unique('fault-s31-q'),
      segment: hosts([pair.ports.primary, pair.ports.replica]),
      args: [...common, '--leaf.segment.buffer-seconds=0'],
    }))
    const [p, q] = leaves as [Leaf, Leaf]
    let cutAt = Infinity
    let killedAt = Infinity
    let stop = false
    const counts = { P: { ok: 0, unconfirmed: 0, afterCut: 0 }, Q: { ok: 0, unconfirmed: 0, afterCut: 0 } }
    const expected = (which: 'P' | 'Q', sentAt: number, code: string | undefined) => which === 'P'
      ? sentAt >= cutAt && sentAt <= cutAt + P_WINDOW_MS && (code === 'STORE_UNCONFIRMED' || code === 'SEGMENTS_NOT_READY')
      : sentAt >= killedAt && sentAt <= killedAt + Q_WINDOW_MS && code === 'SEGMENTS_NOT_READY'
    report.expectedWhat = `P: 503 within ${fmtMs(P_WINDOW_MS)} of the cut; Q: SEGMENTS_NOT_READY within ${fmtMs(Q_WINDOW_MS)} of the kill`
    // A paced load of each instance's own: P's rate does not grow when Q's requests wait.
    const paused = { P: false, Q: false }
    let qBatches = false
    const loadOf = (which: 'P' | 'Q') => runLoad({
      clients: CLIENTS_PER_INSTANCE,
      maxRequests: 1_000_000,
      maxMs: 100_000,
      ratePerSecond: RATE,
      stop: () => stop,
      async step (i) {
        if (paused[which]) {
          await sleep(5)
          return
        }
        const c = which === 'P' ? i : CLIENTS_PER_INSTANCE + i
        const leaf = which === 'P' ? p : q
        // From the cut Q serves batches: it uses up what it holds and allocates from the promoted
        // store within the cut, as a busy peer does.
        const count = which === 'Q' && (qBatches || performance.now() > cutAt) ? Q_BATCH : undefined
        const { answer, ids } = await takeIds(report, clients[c] as HttpClient, leaf.url, 'segment', tag, count, `c${c}-${which}`,
          (a) => expected(which, a.sentAt, errorCode(a)))
        if (ids !== undefined) {
          counts[which].ok++
          if (answer.sentAt > cutAt) counts[which].afterCut++
        } else if (errorCode(answer) === 'STORE_UNCONFIRMED') counts[which].unconfirmed++
      },
    })
    const load = Promise.all([loadOf('P'), loadOf('Q')])

    // The cut comes when P's chain straddles Q's mark: P serves its current segment, below
    // every range Q holds (so Q's push covers it), for longer than the hold, and holds next a
    // range reserved after Q's last, which the promoted store lost and nobody's mark covers.
    const chain = async (leaf: Leaf) => {
      const a = await probe.get(`${leaf.url}/api/cache`)
      return a.status === 200 ? (JSON.parse(a.body) as (Chain & { key: string })[]).find((v) => v.key === tag)?.segments.map((x) => ({ value: BigInt(x.value), max: BigInt(x.max) })) : undefined
    }
    const chainSteps = async (leaf: Leaf) => {
      const a = await probe.get(`${leaf.url}/api/cache`)
      return a.status === 200 ? (JSON.parse(a.body) as { key: string, segments: { step: number }[] }[]).find((v) => v.key === tag)?.segments.map((x) => x.step) : undefined
    }
    let atCut = ''
    const ends = (chainOf: { max: bigint }[]) => chainOf.reduce((m, x) => x.max > m ? x.max : m, 0n)
    // Until P's segments hold seconds of its traffic (the step doubles at each load), then P
    // pauses while Q, batching, reserves a range above all P holds; then Q pauses while P serves
    // on, until P reserves its next range: above Q's mark, and its current one below it.
    await waitUntil(async () => ((await chainSteps(p))?.[0] ?? 0) >= SEGMENT_MIN, 40_000, 50)
    paused.P = true
    qBatches = true
    await waitUntil(async () => {
      const [ps, qs] = await Promise.all([chain(p), chain(q)])
      return ps !== undefined && qs !== undefined && ends(qs) > ends(ps)
    }, 20_000, 20)
    qBatches = false
    paused.Q = true
    paused.P = false
    const straddles = await waitUntil(async () => {
      const [ps, qs] = await Promise.all([chain(p), chain(q)])
      if (ps?.length !== 2 || qs === undefined || qs.length === 0) return false
      const [current, next] = ps as [{ value: bigint, max: bigint }, { value: bigint, max: bigint }]
      const qMark = ends(qs)
      const left = current.max - current.value
      atCut = `P served up to ${current.value}, its current segment ends at ${current.max}, its next at ${next.max}; Q's mark ${qMark}`
      return current.max <= qMark && next.max > qMark && left >= P_LEFT_MIN && left <= P_LEFT_MAX
    }, 30_000, 20)
    paused.Q = false
    report.check(straddles, `P's chain never straddled Q's mark within 30 s (last: ${atCut}): the scenario tests nothing`)
    cutAt = performance.now()
    for (const proxy of proxies) proxy.block()
    const servedBeforeKill = report.ledger.sorted(`segment:${tag}`)
    const primaryMax = await pair.primary.maxId(tag)
    killedAt = performance.now()
    await pair.killPrimary()
    await pair.promote()
    const replicaMax = await pair.replica.maxId(tag)
    await sleep(CUT_MS - (performance.now() - cutAt))
    const pServedDuringCut = counts.P.afterCut
    for (const proxy of proxies) proxy.unblock()
    await sleep(AFTER_MS)
    stop = true
    await load

    const rowAfter = await pair.replica.maxId(tag)
    const sorted = report.ledger.sorted(`segment:${tag}`)
    const highest = sorted.length === 0 ? 0n : sorted[sorted.length - 1] as bigint
    const failovers = await Promise.all(leaves.map(async (leaf) => {
      const m = await metrics(probe, leaf.url)
      return (m.get('leaf_segment_store_regressions_total{cause="store_changed"}') ?? 0) + (m.get('leaf_segment_store_regressions_total{cause="max_id_went_back"}') ?? 0)
    }))
    const ready = await Promise.all(leaves.map((leaf) => readyz(probe, leaf.url)))
    report.check(replicaMax < primaryMax, `the promoted replica's max_id ${replicaMax} is not behind the primary's ${primaryMax}: nothing was lost, the scenario tests nothing`)
    for (const [i, n] of failovers.entries()) report.check(n > 0, `${i === 0 ? 'P' : 'Q'} never counted the failover`)
    report.check(rowAfter > highest, `the promoted row's max_id ${rowAfter} is not above every ID served (${highest})`)
    for (const [i, r] of ready.entries()) report.check(r.status === 200, `${i === 0 ? 'P' : 'Q'} not ready at the end: ${r.raw}`)
    report.note(`at the cut: ${atCut}; the primary's max_id ${primaryMax} at the kill, the promoted replica's ${replicaMax} (${primaryMax - replicaMax} IDs lost with it); ` +
      `${servedBeforeKill.length} IDs served before the kill; P answered ${pServedDuringCut} requests with IDs during its ${fmtMs(CUT_MS)} cut ` +
      `and ${counts.P.unconfirmed} with STORE_UNCONFIRMED; failovers counted: P ${failovers[0]}, Q ${failovers[1]}; the row now ${rowAfter}, above every ID served (${highest})`)
    report.recover = 'P served again after the cut and its hold'
  } finally {
    for (const c of [...clients, probe]) c.close()
    for (const leaf of leaves) await leaf.stop('SIGTERM').catch(() => undefined)
    for (const proxy of proxies) await proxy.close()
    await pair.close({ keep: report.problems.length > 0 || report.failed > 0 })
  }
}
