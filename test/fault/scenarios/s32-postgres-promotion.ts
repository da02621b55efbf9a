import { Timeline, errorCode, fmtMs, metrics, readyz, startLeaf, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient } from '../load.js'
import { sleep, waitUntil } from '../services.js'
import { PgReplicaPair } from '../../helpers/postgres-replica.js'

const INSTANCES = 2
const CLIENTS_PER_INSTANCE = 3
/** Small steps: the step rule doubles them at each load, so a fresh tag reserves often at first. */
const TABLE_STEP = 100
/** The review's short settings: a 1 s refresh, a hold of three. */
const REFRESH_MS = 1000
const HOLD_MS = 3000
const WAIT_TIMEOUT_MS = 1000
const QUERY_TIMEOUT_MS = 1000
/** The slowest answer allowed: the wait timeout, and 1 s for HTTP on a loaded 2-core machine. */
const BOUND_MS = WAIT_TIMEOUT_MS + 1000
/** Rows written (and replayed) before the lag: buffers the end-of-recovery checkpoint writes, paced, for minutes. */
const BALLAST_ROWS = 40_000
/** A request's pace: IDs asked for at once, and the pause after each answer. */
interface Pace { count: number, pauseMs: number }
const MODERATE: Pace = { count: 10, pauseMs: 5 }
const HEAVY: Pace = { count: 50, pauseMs: 2 }
const LIGHT: Pace = { count: 1, pauseMs: 100 }
/**
 * What instance 2 serves from the ranges it reserved after instance 1 went idle, before it
 * slows down: more than instance 1's next steps (the step rule doubles a step at each load),
 * so that instance 1, pushed up only to its own mark, would reserve them again.
 */
const SERVED_AFTER_IDLE = 30_000n

/**
 * 32. A PostgreSQL promotion with a lagging end-of-recovery checkpoint (issue 39). Two
 * instances reach a primary through a TCP proxy (a VIP: one `jdbc:postgresql://` URL for both
 * servers); a streaming replica holds the primary's 40,000 rows of ballast, then lags (its
 * stream cut) while both reserve ranges. Instance 1 goes idle; instance 2 reserves after it
 * (its ranges the highest the primary handed out), then serves on slowly from its buffer. The
 * primary's postmaster is killed (SIGKILL), the replica promoted (pg_promote()) and the VIP
 * moved to it; its end-of-recovery checkpoint runs for minutes. Instance 1 takes heavy load
 * again: its first allocation on the promoted server sees the failover, and after its hold it
 * reserves from the row it pushed up. Instance 2 allocates nothing meanwhile: only its refresh
 * can see the promotion and push its mark above the ranges it holds. With the last
 * checkpoint's timeline as the identity it saw nothing, and instance 1 reserved the ranges
 * instance 2 served (2,856 and 3,104 duplicates in the review). 0 duplicates; both count the
 * failover; the row ends above every ID served.
 */
export async function postgresPromotion (suite: Suite, report: Report): Promise<void> {
  const pair = await PgReplicaPair.create()
  const tag = unique('s32')
  const leaves: Leaf[] = []
  const clients = Array.from({ length: INSTANCES * CLIENTS_PER_INSTANCE }, () => new HttpClient())
  const probe = new HttpClient()
  const state = { stop: false }
  let loops: Promise<void>[] = []
  try {
    await pair.primary.query('CREATE TABLE ballast (id int, pad text)')
    await pair.primary.query(`INSERT INTO ballast SELECT g, md5(g::text) FROM generate_series(1, ${BALLAST_ROWS}) g`)
    await pair.primary.addTag(tag, TABLE_STEP)
    await pair.caughtUp()
    for (let i = 0; i < INSTANCES; i++) {
      leaves.push(await startLeaf(suite, `instance${i + 1}`, {
        name: unique('fault-s32'),
        segment: pair.jdbcUrl(),
        args: [
          '--leaf.jdbc.username=leaf', '--leaf.jdbc.password=leaf',
          `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.failover-hold-ms=${HOLD_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
          `--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, '--leaf.jdbc.connect-timeout-ms=1000', '--leaf.segment.buffer-seconds=0',
        ],
      }))
    }
    const timelines = leaves.map(() => new Timeline())
    /** The highest ID each instance served. */
    const servedAbove = leaves.map(() => 0n)
    const pace: (Pace | undefined)[] = [MODERATE, MODERATE]
    let killedAt = Infinity
    // SEGMENTS_NOT_READY is expected only from the kill on: the primary gone, then the hold.
    report.expectedWhat = 'SEGMENTS_NOT_READY after the kill (primary gone, then the hold)'
    loops = clients.map(async (client, c) => {
      const i = c % INSTANCES
      const leaf = leaves[i] as Leaf
      for (let n = 0; !state.stop && n < 200_000; n++) {
        const p = pace[i]
        if (p === undefined) {
          await sleep(20)
          continue
        }
        const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', tag, p.count, `c${c}`,
          (a) => errorCode(a) === 'SEGMENTS_NOT_READY' && a.sentAt + a.ms > killedAt)
        timelines[i]?.add(answer, ids !== undefined, `instance ${i + 1}`)
        for (const id of ids ?? []) if (id > (servedAbove[i] as bigint)) servedAbove[i] = id
        if (answer.ms > BOUND_MS) report.failure(`instance ${i + 1}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(BOUND_MS)})`)
        await sleep(p.pauseMs)
      }
    })

    await sleep(1500)
    pair.lag()
    const lagMax = await pair.primary.maxId(tag)
    // Both reserve ranges the replica never receives.
    await sleep(1000)
    pace[0] = undefined
    await sleep(200)
    const idleMax = await pair.primary.maxId(tag)
    // Instance 2 reserves after instance 1's last range, and serves from them.
    pace[1] = HEAVY
    const reservedAfter = await waitUntil(async () => (servedAbove[1] as bigint) > idleMax + SERVED_AFTER_IDLE, 15_000, 20)
    pace[1] = LIGHT
    await sleep(300)
    const primaryMax = await pair.primary.maxId(tag)
    killedAt = performance.now()
    const pid = pair.primary.kill()
    await pair.promote()
    pair.moveVip()
    const promotedMs = performance.now() - killedAt
    const replicaMax = await pair.replica.maxId(tag)
    pace[0] = HEAVY
    // Until instance 1 serves from ranges the promoted server reserved above all the old
    // primary handed out (or it has served well past the hold).
    const passed = await waitUntil(() => (servedAbove[0] as bigint) > primaryMax, 20_000, 50)
    const resumedMs = performance.now() - killedAt
    await sleep(1000)
    const checkpoint = await pair.replica.timelines()
    const seen = await Promise.all(leaves.map(async (leaf) => {
      const m = await metrics(probe, leaf.url).catch(() => new Map<string, number>())
      return (m.get('leaf_segment_store_regressions_total{cause="store_changed"}') ?? 0) + (m.get('leaf_segment_store_regressions_total{cause="max_id_went_back"}') ?? 0)
    }))
    state.stop = true
    await Promise.all(loops)
    const loadEnd = performance.now()
    const rowAfter = await pair.replica.maxId(tag)
    const sorted = report.ledger.sorted(`segment:${tag}`)
    const served = sorted.length === 0 ? undefined : sorted[sorted.length - 1]
    const ready = await Promise.all(leaves.map((leaf) => readyz(probe, leaf.url)))
    const gaps = timelines.map((t) => t.largestGap(killedAt, loadEnd))

    report.check(replicaMax < lagMax + 1n && lagMax < primaryMax, `the promoted server's max_id ${replicaMax} is not behind the primary's ${primaryMax} (${lagMax} at the lag): nothing was lost, the scenario tests nothing`)
    report.check(reservedAfter, `instance 2 did not serve ${SERVED_AFTER_IDLE} IDs above ${idleMax}, the max_id when instance 1 went idle, within 15 s: the scenario tests nothing`)
    report.check(checkpoint.now === 2 && checkpoint.checkpoint === 1, `the promoted server's end-of-recovery checkpoint ended within ${fmtMs(resumedMs)} (timelines ${JSON.stringify(checkpoint)}): the scenario tests nothing`)
    for (const [i, n] of seen.entries()) report.check(n > 0, `instance ${i + 1} never counted the failover in leaf_segment_store_regressions_total`)
    report.check(passed, `instance 1 served nothing above the old primary's max_id ${primaryMax} within 20 s (highest ${servedAbove[0]})`)
    report.check(served !== undefined && rowAfter > served, `the promoted row's max_id ${rowAfter} is not above every ID served (${served})`)
    for (const [i, r] of ready.entries()) report.check(r.status === 200, `instance ${i + 1} not ready after the hold: ${r.raw}`)
    report.note(`max_id ${lagMax} when the replica's stream was cut, ${idleMax} when instance 1 went idle, ${primaryMax} at the kill of postmaster ${pid}; the promoted server's ${replicaMax} ` +
      `(${primaryMax - replicaMax} IDs of ranges lost); promoted and the VIP moved ${fmtMs(promotedMs)} after the kill; its last checkpoint still on timeline ${checkpoint.checkpoint} ` +
      `(WAL on ${checkpoint.now}) ${fmtMs(performance.now() - killedAt)} after the kill; failovers counted ${seen.join(' and ')}; instance 1 served above ${primaryMax} ${fmtMs(resumedMs)} after the kill; ` +
      `the row now ${rowAfter}, above every ID served (${served})`)
    report.recover = `instance 1 served again within ${fmtMs(gaps[0]?.ms ?? 0)} of the kill`
  } finally {
    state.stop = true
    await Promise.all(loops)
    for (const c of [...clients, probe]) c.close()
    for (const leaf of leaves) await leaf.stop('SIGTERM').catch(() => undefined)
    await pair.close()
  }
}
