import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { Timeline, errorCode, fmtMs, metrics, readyz, startLeaf, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep, waitUntil } from '../services.js'
import { ReplicaPair } from '../../helpers/replica-pair.js'

const INSTANCES = 2
const CLIENTS_PER_INSTANCE = 3
/** Requests per second to each instance: small steps, so both reserve ranges every second or so. */
const RATE = 400
const TABLE_STEP = 100
const REFRESH_MS = 1000
/**
 * leaf.segment.failover-hold-ms, given: two refresh intervals. Its default adds what a refresh
 * may take per host (a connect and three query timeouts: 8 s here), for peers whose path to
 * the new store is slow; on loopback a refresh takes milliseconds.
 */
const HOLD_MS = 2 * REFRESH_MS
const WAIT_TIMEOUT_MS = 1000
const QUERY_TIMEOUT_MS = 1000
/**
 * The slowest answer allowed: a request waits for a load at most the wait timeout; the answer's
 * own path (HTTP on a loaded 2-core machine) gets 1 s on top.
 */
const BOUND_MS = WAIT_TIMEOUT_MS + 1000
/**
 * A request may find its tag's buffer used up from the kill until the promoted store serves: the
 * hold after the instance saw the change (at its next allocation or refresh, one interval at
 * most) plus a load. Only then is SEGMENTS_NOT_READY expected.
 */
const EXPECTED_WINDOW_MS = REFRESH_MS + HOLD_MS + WAIT_TIMEOUT_MS + QUERY_TIMEOUT_MS

/**
 * 25. An async replica promoted without the last allocations. Two instances reach a primary
 * and its GTID replica through leaf.jdbc.url's host list (primary first). The replica lags
 * (its SQL thread stopped) while both reserve ranges from the primary; the primary is killed
 * and the replica promoted. Both instances move to it through their URL's next host, see the
 * store change (the max_id guard: src/segment/max-id-guard.ts), raise the row above what they
 * served, hold allocations for leaf.segment.failover-hold-ms, and serve on. 0 duplicates over
 * every ID; SEGMENTS_NOT_READY only within the window after the kill; every answer within the
 * wait timeout + 1 s.
 */
export async function asyncPromotion (suite: Suite, report: Report): Promise<void> {
  const home = join(suite.dir, 's25-replication')
  mkdirSync(home, { recursive: true })
  const pair = await ReplicaPair.create(home)
  const tag = unique('s25')
  const leaves: Leaf[] = []
  const clients = Array.from({ length: INSTANCES * CLIENTS_PER_INSTANCE }, () => new HttpClient())
  const probe = new HttpClient()
  try {
    await pair.init()
    await pair.primary.addTag(tag, TABLE_STEP)
    const url = `mysql://leaf:leaf@127.0.0.1:${pair.ports.primary},127.0.0.1:${pair.ports.replica}/leaf`
    for (let i = 0; i < INSTANCES; i++) {
      leaves.push(await startLeaf(suite, `instance${i + 1}`, {
        name: unique('fault-s25'),
        segment: url,
        args: [
          `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.failover-hold-ms=${HOLD_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
          `--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, '--leaf.jdbc.connect-timeout-ms=1000', '--leaf.segment.buffer-seconds=0',
        ],
      }))
    }
    const timelines = leaves.map(() => new Timeline())
    /** The highest ID each instance served. */
    const leavesServedAbove = leaves.map(() => 0n)
    let killedAt = Infinity
    let stop = false
    const outsideWindow = (sentAt: number) => sentAt < killedAt || sentAt > killedAt + EXPECTED_WINDOW_MS
    // A replica pair replicates asynchronously: an instance that has not confirmed the store
    // within the hold stops serving its buffer (STORE_UNCONFIRMED), which it may reach between
    // the kill and its move to the promoted replica.
    const expectedCodes = new Set(['SEGMENTS_NOT_READY', 'STORE_UNCONFIRMED'])
    report.expectedWhat = `SEGMENTS_NOT_READY or STORE_UNCONFIRMED within ${fmtMs(EXPECTED_WINDOW_MS)} of the kill`
    const load = runLoad({
      clients: clients.length,
      maxRequests: 200_000,
      maxMs: 60_000,
      ratePerSecond: RATE * INSTANCES,
      stop: () => stop,
      async step (c) {
        const i = c % INSTANCES
        const leaf = leaves[i] as Leaf
        const { answer, ids } = await takeIds(report, clients[c] as HttpClient, leaf.url, 'segment', tag, undefined, `c${c}`,
          (a) => expectedCodes.has(errorCode(a) ?? '') && !outsideWindow(a.sentAt))
        timelines[i]?.add(answer, ids !== undefined, `instance ${i + 1}`)
        for (const id of ids ?? []) if (id > (leavesServedAbove[i] as bigint)) leavesServedAbove[i] = id
        if (answer.ms > BOUND_MS) report.failure(`instance ${i + 1}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(BOUND_MS)})`)
      },
    })

    await sleep(3000)
    await pair.lag()
    await sleep(3000)
    const primaryMax = await pair.primary.maxId(tag)
    killedAt = performance.now()
    await pair.killPrimary()
    await pair.promote()
    const promotedMs = performance.now() - killedAt
    const replicaMax = await pair.replica.maxId(tag)
    // Both must have seen it: by their counters, then serve from the promoted store.
    const seen = await Promise.all(leaves.map(async (leaf) => {
      let at = Infinity
      await waitUntil(async () => {
        const m = await metrics(probe, leaf.url).catch(() => new Map<string, number>())
        const n = (m.get('leaf_segment_store_regressions_total{cause="store_changed"}') ?? 0) + (m.get('leaf_segment_store_regressions_total{cause="max_id_went_back"}') ?? 0)
        if (n > 0) at = performance.now() - killedAt
        return n > 0
      }, EXPECTED_WINDOW_MS + 5000, 50)
      return at
    }))
    // Until both serve from ranges the promoted store reserved after the raise: above every
    // range the old primary handed out.
    const fromPromoted = () => leavesServedAbove.every((ids) => ids > primaryMax)
    await waitUntil(fromPromoted, 30_000, 100)
    const resumedMs = performance.now() - killedAt
    await sleep(1000)
    stop = true
    await load
    const loadEnd = performance.now()
    const rowAfter = await pair.replica.maxId(tag)
    const sorted = report.ledger.sorted(`segment:${tag}`)
    const served = sorted.length === 0 ? undefined : sorted[sorted.length - 1]
    const ready = await Promise.all(leaves.map((leaf) => readyz(probe, leaf.url)))
    const gaps = timelines.map((t) => t.largestGap(killedAt, loadEnd))
    const afterHold = timelines.map((t) => t.largestGap(killedAt + EXPECTED_WINDOW_MS, loadEnd))

    report.check(replicaMax < primaryMax, `the promoted replica's max_id ${replicaMax} is not behind the primary's ${primaryMax}: nothing was lost, the scenario tests nothing`)
    for (const [i, at] of seen.entries()) {
      report.check(Number.isFinite(at), `instance ${i + 1} never counted the failover in leaf_segment_store_regressions_total`)
    }
    report.check(fromPromoted(), `not both served from the promoted store within 30 s of the kill (highest IDs ${leavesServedAbove.join(', ')}, the primary's max_id ${primaryMax})`)
    report.check(resumedMs >= HOLD_MS, `an instance served from the promoted store ${fmtMs(resumedMs)} after the kill, before the hold of ${fmtMs(HOLD_MS)} could end`)
    report.check(served !== undefined && rowAfter > served, `the promoted row's max_id ${rowAfter} is not above every ID served (${served})`)
    for (const [i, r] of ready.entries()) report.check(r.status === 200, `instance ${i + 1} not ready after the hold: ${r.raw}`)
    for (const [i, g] of afterHold.entries()) {
      report.check(g.ms < 2 * WAIT_TIMEOUT_MS, `instance ${i + 1} served nothing for ${fmtMs(g.ms)} after the expected window`)
    }
    report.note(`the primary's max_id ${primaryMax} at the kill, the promoted replica's ${replicaMax} (${primaryMax - replicaMax} IDs of ranges lost with the primary); ` +
      `promoted ${fmtMs(promotedMs)} after the kill; each instance counted the failover ${seen.map((ms) => fmtMs(ms)).join(' and ')} after the kill; ` +
      `both served from the promoted store ${fmtMs(resumedMs)} after the kill; longest stretch without an ID from the kill ${gaps.map((g) => fmtMs(g.ms)).join(' and ')} (hold ${fmtMs(HOLD_MS)}); the row now ${rowAfter}, above every ID served (${served})`)
    report.recover = `served again within ${fmtMs(Math.max(...gaps.map((g) => g.ms)))} of the kill`
  } finally {
    for (const c of [...clients, probe]) c.close()
    for (const leaf of leaves) await leaf.stop('SIGTERM').catch(() => undefined)
    await pair.close({ keep: report.problems.length > 0 || report.failed > 0 })
  }
}
