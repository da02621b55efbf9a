import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Connection } from 'mysql2/promise'
import { FAST_EVS, GaleraCluster, errnoOf, type GaleraNode } from '../../helpers/galera.js'
import { SCHEDULING_SLACK_MS, Timeline, errorCode, fmtMs, metrics, readyz, startLeaf, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep, waitUntil } from '../services.js'

/**
 * Tags served, each by both instances. A tag's loads come ever further apart, as its step
 * doubles with each (Leaf's rule for loads less than 15 minutes apart): each tag gives a few
 * conflicts in the first seconds and then hardly any, so it takes many tags to see hundreds.
 */
const TAGS = 200
/** IDs per request (a batch): more loads per tag in the seconds the scenario lasts. */
const COUNT = 10
/**
 * leaf_alloc.step of the tags: small, so that the first loads come quickly; 10 to 19 (tag i:
 * 10 + i % 10), so that the tags' loads, each at the ID counts its own step doubles to, are
 * spread over time instead of coming all at once: loads are under way whenever the node dies.
 */
const TABLE_STEP = 10
const stepOf = (i: number) => TABLE_STEP + (i % 10)
const INSTANCES = 2
/** Clients, each sending every request to both instances at once. */
const PAIRS = 4
/** Requests per second to each instance (both get each), spread over every tag in turn: 2.5 requests, 25 IDs a second per tag. */
const RATE = 500
/** leaf.segment.refresh-interval-ms: how soon an instance sees a tag created in the table. */
const REFRESH_MS = 1000
const WAIT_TIMEOUT_MS = 2000
/** leaf.jdbc.query-timeout-ms (its default): shorter than Galera's stall, so statements time out on the stalled nodes too. */
const QUERY_TIMEOUT_MS = 2000
const CONNECT_TIMEOUT_MS = 1000
/** The generator's backoff between failed loads doubles up to this (retryMaxMs: its default in src/segment/segment-generator.ts, the backoff in allocation-retry.ts). */
const LOAD_RETRY_MAX_MS = 1000
/** Conflicting allocations (both instances' leaf_segment_allocate_retries_total) to see before node 0 is killed. */
const CONFLICTS_WANTED = 200
/** The buffers are read every 500 ms, and the kill comes some 400 ms after the last reading: they must outlast the eviction bound by this much more. */
const BUFFER_MARGIN_MS = 1000
/** The load runs at most this long before the kill, however few conflicts or thin the buffers. */
const LOAD_MAX_MS = 40_000
/** The load goes on this long past the later of the new tag's first ID and the expected window's end. */
const AFTER_MS = 2000
/** The slowest answer allowed: a request waits for a load at most the wait timeout; its own path on the loaded 2-core machine gets 1 s. */
const LATENCY_BOUND_MS = WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS

/** A duration of the helper's EVS options (test/helpers/galera.ts FAST_EVS), e.g. evs.inactive_timeout=PT3S. */
function evsMs (option: string): number {
  const m = new RegExp(`${option.replace(/\./g, '\\.')}=PT(\\d+(?:\\.\\d+)?)S`).exec(FAST_EVS)
  if (m === null) throw new Error(`${option} not in the Galera helper's provider options: ${FAST_EVS}`)
  return Number(m[1]) * 1000
}

/**
 * How long after a node's death the survivors may take to evict it, which is as long as their
 * commits stall: a silent peer is declared inactive after evs.inactive_timeout, looked for every
 * evs.inactive_check_period, and the view without it is installed within evs.install_timeout:
 * 3 s + 0.5 s + 3 s = 6.5 s with the helper's options (measured: about 3.5 s).
 */
const EVICT_BOUND_MS = evsMs('evs.inactive_timeout') + evsMs('evs.inactive_check_period') + evsMs('evs.install_timeout')
const EVICT_FORMULA = `evs.inactive_timeout ${evsMs('evs.inactive_timeout')} ms + evs.inactive_check_period ${evsMs('evs.inactive_check_period')} ms + evs.install_timeout ${evsMs('evs.install_timeout')} ms = ${EVICT_BOUND_MS} ms`
/**
 * The tag created after the kill must be served by A within: the eviction (its INSERT, through
 * node 1, commits only then) + one refresh interval (A reads the tag list) + a connection and a
 * query timeout (its first load, on A's next host) + the wait timeout (the request that waits
 * for that load).
 */
const NEW_TAG_BOUND_MS = EVICT_BOUND_MS + REFRESH_MS + CONNECT_TIMEOUT_MS + QUERY_TIMEOUT_MS + WAIT_TIMEOUT_MS
const NEW_TAG_FORMULA = `eviction bound ${EVICT_BOUND_MS} ms + refresh ${REFRESH_MS} ms + connect timeout ${CONNECT_TIMEOUT_MS} ms + query timeout ${QUERY_TIMEOUT_MS} ms + wait timeout ${WAIT_TIMEOUT_MS} ms = ${NEW_TAG_BOUND_MS} ms`
/**
 * A request to an existing tag may find its buffer used up only while loads cannot commit:
 * from the kill to the eviction, then a statement sent before it may still time out (query
 * timeout), the tag's load backs off (at most 1 s) and the next opens a connection (connect
 * timeout). Only requests sent within that window may get SEGMENTS_NOT_READY.
 */
const EXPECTED_WINDOW_MS = EVICT_BOUND_MS + QUERY_TIMEOUT_MS + LOAD_RETRY_MAX_MS + CONNECT_TIMEOUT_MS
const WINDOW_FORMULA = `eviction bound ${EVICT_BOUND_MS} ms + query timeout ${QUERY_TIMEOUT_MS} ms + load backoff ${LOAD_RETRY_MAX_MS} ms + connect timeout ${CONNECT_TIMEOUT_MS} ms = ${EXPECTED_WINDOW_MS} ms`

const CONFLICTS = 'leaf_segment_allocate_retries_total{reason="ER_LOCK_DEADLOCK"}'
/** IDs per second each instance takes from each tag (the load is paced). */
const TAG_RATE = RATE * COUNT / TAGS
/**
 * How far the IDs counted as served since the buffers were read may fall short of what left the
 * buffer: a request in flight per client when they were read, and the part of a batch a request
 * that then failed had taken (the generator drops it).
 */
const READ_SLACK_IDS = (PAIRS + 1) * COUNT

/** A per-tag metric (`name{key="..."}`) as tag -> value. */
function perTag (m: Map<string, number>, name: string): Map<string, number> {
  const values = new Map<string, number>()
  for (const [key, value] of m) {
    const match = /^([^{]+)\{key="(.*)"\}$/.exec(key)
    if (match?.[1] === name) values.set(match[2] as string, value)
  }
  return values
}

/** Successful segment loads so far (every load is timed; failed ones are counted apart). */
function loadsOk (m: Map<string, number>): number {
  return total(m, 'leaf_segment_db_load_seconds_count') - total(m, 'leaf_segment_db_load_failures_total')
}

/** A metric summed over its labels (`name` or `name{...}`). */
function total (m: Map<string, number>, name: string): number {
  let sum = 0
  for (const [key, value] of m) if (key === name || key.startsWith(`${name}{`)) sum += value
  return sum
}

interface Commit { start: number, end: number, errno?: number }

/** Autocommit UPDATEs of `tag` on `node`, one after the other, each timed: how long a commit waits while the node's cluster stalls. */
async function watchCommits (node: GaleraNode, tag: string): Promise<{ commits: Commit[], stop (): Promise<void> }> {
  const conn: Connection = await node.connect()
  const commits: Commit[] = []
  const state = { on: true }
  const loop = (async () => {
    while (state.on) {
      const start = performance.now()
      try {
        await conn.query('UPDATE leaf_alloc SET max_id = max_id + 1 WHERE biz_tag = ?', [tag])
        commits.push({ start, end: performance.now() })
      } catch (err) {
        commits.push({ start, end: performance.now(), errno: errnoOf(err) })
        if ((err as { fatal?: boolean }).fatal === true) return
      }
      await sleep(20)
    }
  })()
  return {
    commits,
    async stop () {
      state.on = false
      conn.destroy()
      await loop
    },
  }
}

/**
 * 24. Galera: two instances on two nodes of a private 3-node cluster (test/helpers/galera.ts),
 * A's leaf.jdbc.url listing node 0, 1, 2 and B's node 1, 2, 0, both serving the same TAGS tags of
 * small steps with Leaf's double buffer (buffer-seconds=0), under a paced load spread over every
 * tag in turn, each request (a batch of COUNT) sent to both at once. So both load a tag at about
 * the same moment, through two nodes: one transaction fails certification (1213) and is repeated.
 * Once both together counted CONFLICTS_WANTED repeats and every tag holds IDs for longer than
 * the survivors may stall (EVICT_BOUND_MS, + BUFFER_MARGIN_MS), node 0, A's, is SIGKILLed: A moves to the next host
 * of its URL; the survivors' commits stall until they evict it (timed by a writer on node 1). A
 * tag created through node 1 after the kill must be served by A within NEW_TAG_BOUND_MS (404
 * KEY_NOT_FOUND before that is expected, or STORE_UNAVAILABLE when its lookup met the dead node or the stall). Passes with 0 duplicates; no failed request:
 * SEGMENTS_NOT_READY only for a request sent within EXPECTED_WINDOW_MS of the kill to a tag
 * whose buffer at the kill has been served; every answer within LATENCY_BOUND_MS; both loading
 * and serving after the eviction; and no store failover counted (a Galera cluster is one store,
 * whichever node answers).
 */
export async function galeraConflicts (suite: Suite, report: Report): Promise<void> {
  // Not under the suite's folder (0700): the nodes run as `mysql`, which must reach theirs.
  const home = mkdtempSync(join(tmpdir(), 'leaf-fault-s24-'))
  let cluster: GaleraCluster | undefined
  const prefix = unique('s24')
  const tags = Array.from({ length: TAGS }, (_, i) => `${prefix}-t${i}`)
  const stallTag = `${prefix}-commits`
  const newTag = `${prefix}-new`
  const leaves: Leaf[] = []
  const clients = Array.from({ length: INSTANCES * PAIRS }, () => new HttpClient())
  const probe = new HttpClient()
  const newTagClient = new HttpClient()
  const state = { stop: false }
  let load: Promise<unknown> | undefined
  let newTagLoop: Promise<void> | undefined
  let watch: Awaited<ReturnType<typeof watchCommits>> | undefined
  try {
    cluster = await GaleraCluster.create({ dir: home })
    const bootStart = performance.now()
    await cluster.init()
    const bootMs = performance.now() - bootStart
    const [n0, n1, n2] = [cluster.node(0), cluster.node(1), cluster.node(2)]
    const rows = [...tags, stallTag]
    await n0.query(`INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES ${rows.map(() => '(?, 1, ?, ?)').join(', ')}`,
      rows.flatMap((tag, i) => [tag, stepOf(i), 'fault scenario 24']))
    // Each instance reads the tag list from its own first node: both must have every row.
    for (const node of [n1, n2]) {
      const there = await waitUntil(async () => {
        const r = await node.query<{ n: string | number }[]>('SELECT COUNT(*) AS n FROM leaf_alloc WHERE biz_tag LIKE ?', [`${prefix}-%`])
        return Number(r[0]?.n) === rows.length
      }, 10_000, 50)
      if (!there) throw new Error(`node ${node.index} does not have the ${rows.length} rows written through node 0 after 10 s`)
    }
    const url = (order: GaleraNode[]) => `mysql://leaf:leaf@${order.map((n) => `127.0.0.1:${n.port}`).join(',')}/leaf`
    const urls = [url([n0, n1, n2]), url([n1, n2, n0])]
    for (const [i, u] of urls.entries()) {
      leaves.push(await startLeaf(suite, i === 0 ? 'A' : 'B', {
        name: unique('fault-s24'),
        segment: u,
        args: [
          `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
          `--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, `--leaf.jdbc.connect-timeout-ms=${CONNECT_TIMEOUT_MS}`,
          '--leaf.segment.buffer-seconds=0',
          // Every tag (and the new one) keeps series of its own, so that one scrape's sum over
          // the tags is the instance's total. Past the cap, a tag folded into _other takes its
          // own count out of the scrape, and the sums this scenario compares go down (a run with
          // the default 100 counted -8 and -45 loads after the eviction).
          `--leaf.metrics.max-tag-series=${TAGS + 1}`,
        ],
      }))
    }
    const [a, b] = leaves as [Leaf, Leaf]
    for (const leaf of leaves) {
      const ready = await waitUntil(async () => (await readyz(probe, leaf.url)).status === 200, 10_000, 100)
      if (!ready) throw new Error(`instance ${leaf.label} not ready: ${(await readyz(probe, leaf.url)).raw}`)
    }

    const timelines = leaves.map(() => new Timeline())
    const served = leaves.map(() => 0)
    const notReady = leaves.map(() => 0)
    let killedAt = Infinity
    let evictedAt = Infinity
    const inWindow = (sentAt: number) => sentAt >= killedAt && sentAt <= killedAt + EXPECTED_WINDOW_MS
    /** Each instance's buffered IDs per tag just before the kill, and the IDs it served of each since that reading was asked for. */
    let bufferedAtKill: Map<string, number>[] = []
    let readAt = Infinity
    const servedSince = leaves.map(() => new Map<string, number>())
    /** A tag may answer SEGMENTS_NOT_READY only once the IDs it buffered at the kill are served. */
    const drained = (i: number, tag: string) => (servedSince[i]?.get(tag) ?? 0) + READ_SLACK_IDS >= (bufferedAtKill[i]?.get(tag) ?? 0)
    /** The tags in turn: each request goes to both instances at once, so both use a tag's segments in step and load it at about the same moment. */
    let next = 0
    const loadStart = performance.now()
    load = runLoad({
      clients: PAIRS,
      maxRequests: 1_000_000,
      maxMs: 150_000,
      ratePerSecond: RATE,
      stop: () => state.stop,
      async step (c) {
        const tag = tags[next++ % TAGS] as string
        await Promise.all(leaves.map(async (leaf, i) => {
          const { answer, ids } = await takeIds(report, clients[c * INSTANCES + i] as HttpClient, leaf.url, 'segment', tag, COUNT, `c${c}-${leaf.label}`,
            (x) => errorCode(x) === 'SEGMENTS_NOT_READY' && inWindow(x.sentAt) && drained(i, tag))
          timelines[i]?.add(answer, ids !== undefined, `${leaf.label} ${tag}`)
          if (ids !== undefined) {
            served[i] = (served[i] as number) + ids.length
            if (answer.sentAt >= readAt) servedSince[i]?.set(tag, (servedSince[i]?.get(tag) ?? 0) + ids.length)
          } else if (errorCode(answer) === 'SEGMENTS_NOT_READY') {
            notReady[i] = (notReady[i] as number) + 1
          }
          if (answer.ms > LATENCY_BOUND_MS) report.failure(`${leaf.label} ${tag}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(LATENCY_BOUND_MS)})`)
        }))
      },
    })

    /** The least time any tag's buffered IDs last at its rate, over both instances (ms). */
    const leastBufferedMs = (ms: Map<string, number>[]) => Math.min(...ms.map((m) => {
      const buffered = perTag(m, 'leaf_segment_buffered_ids')
      return Math.min(...tags.map((tag) => buffered.get(tag) ?? 0))
    })) / TAG_RATE * 1000
    let before = [0, 0]
    /** The conflicts counted so far, each time the sum changed. */
    const samples: string[] = []
    let seen = 0
    let buffersReadyMs: number | undefined
    // Until both counted the conflicts wanted (some 3 s), and every tag holds IDs for longer
    // than the survivors may stall (EVICT_BOUND_MS, + BUFFER_MARGIN_MS; some 9 s, the steps
    // doubling with each load): a request to an existing tag that fails then is one its buffer
    // should have covered.
    await waitUntil(async () => {
      const ms = await Promise.all(leaves.map((leaf) => metrics(probe, leaf.url)))
      before = ms.map((m) => m.get(CONFLICTS) ?? 0)
      const sum = (before[0] ?? 0) + (before[1] ?? 0)
      if (sum !== seen) samples.push(`${fmtMs(performance.now() - loadStart)} ${sum}`)
      seen = sum
      const thick = leastBufferedMs(ms) >= EVICT_BOUND_MS + BUFFER_MARGIN_MS
      if (buffersReadyMs === undefined && thick) buffersReadyMs = performance.now() - loadStart
      return sum >= CONFLICTS_WANTED && thick
    }, LOAD_MAX_MS, 500)
    const loadBeforeKillMs = performance.now() - loadStart
    const idsBeforeKill = report.ledger.ids
    const metricsBefore = await Promise.all(leaves.map((leaf) => metrics(probe, leaf.url)))
    const failedLoadsBefore = metricsBefore.map((m) => total(m, 'leaf_segment_db_load_failures_total'))

    // Commits on node 1, timed, from just before the kill: how long the survivors stall.
    watch = await watchCommits(n1, stallTag)
    await sleep(300)
    readAt = performance.now()
    const atKill = await Promise.all(leaves.map((leaf) => metrics(probe, leaf.url)))
    bufferedAtKill = atKill.map((m) => perTag(m, 'leaf_segment_buffered_ids'))
    killedAt = performance.now()
    await n0.kill()
    const killMs = performance.now() - killedAt
    // The new tag, created through a survivor: its INSERT commits once node 0 is evicted.
    const inserted = n1.addTag(newTag, TABLE_STEP).then(() => performance.now() - killedAt, (err: unknown) => err as Error)
    let loadsAtEviction: number[] = []
    const evicted = cluster.waitForSize(2, { timeoutMs: 20_000 }).then(async () => {
      evictedAt = performance.now()
      loadsAtEviction = (await Promise.all(leaves.map((leaf) => metrics(probe, leaf.url)))).map(loadsOk)
      return evictedAt - killedAt
    })
    let newTagMs: number | undefined
    let newTagNotFound = 0
    let newTagIds = 0
    newTagLoop = (async () => {
      while (!state.stop) {
        const { answer, ids } = await takeIds(report, newTagClient, a.url, 'segment', newTag, undefined, 'new-tag',
          // STORE_UNAVAILABLE: its lookup in the store (segment/tag-lookup.ts) met node 0 dead or the stall.
          (x) => newTagMs === undefined && ['KEY_NOT_FOUND', 'SEGMENTS_NOT_READY', 'STORE_UNAVAILABLE'].includes(errorCode(x) ?? '') && x.sentAt + x.ms <= killedAt + NEW_TAG_BOUND_MS)
        if (answer.ms > LATENCY_BOUND_MS) report.failure(`A ${newTag}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(LATENCY_BOUND_MS)})`)
        if (ids !== undefined) {
          newTagMs ??= answer.sentAt + answer.ms - killedAt
          newTagIds += ids.length
        } else if (errorCode(answer) === 'KEY_NOT_FOUND') {
          newTagNotFound++
        }
        await sleep(50)
      }
    })()
    const evictedMs = await evicted
    const insertedMs = await inserted
    if (insertedMs instanceof Error) throw new Error(`the new tag's INSERT through node 1 failed: ${insertedMs.message}`)
    await waitUntil(() => newTagMs !== undefined, Math.max(0, killedAt + NEW_TAG_BOUND_MS + 1000 - performance.now()), 20)
    const endAt = Math.max(killedAt + (newTagMs ?? NEW_TAG_BOUND_MS), killedAt + EXPECTED_WINDOW_MS) + AFTER_MS
    await sleep(endAt - performance.now())
    state.stop = true
    await Promise.all([load, newTagLoop])
    const loadEnd = performance.now()
    await watch.stop()
    const commits = watch.commits

    const after = await Promise.all(leaves.map((leaf) => metrics(probe, leaf.url)))
    const conflictsEnd = after.map((m) => m.get(CONFLICTS) ?? 0)
    const loadsAfterEviction = after.map((m, i) => loadsOk(m) - (loadsAtEviction[i] ?? Infinity))
    const leastBuffered = atKill.map((m) => leastBufferedMs([m]))
    const failedLoads = after.map((m, i) => total(m, 'leaf_segment_db_load_failures_total') - (failedLoadsBefore[i] as number))
    const regressions = after.map((m) => total(m, 'leaf_segment_store_regressions_total'))
    const holds = after.map((m) => m.get('leaf_segment_failover_hold_seconds') ?? 0)
    const node0 = `127.0.0.1:${n0.port}`
    const aMoved = a.output.some((line) => line.includes('moving to the next host of leaf.jdbc.url') && line.includes(`"from":"${node0}"`))
    const bMoves = b.output.filter((line) => line.includes('moving to the next host of leaf.jdbc.url')).length
    const stall = commits.filter((c) => c.end >= killedAt).reduce((x, c) => (c.end - c.start > x.end - x.start ? c : x), { start: 0, end: 0 } as Commit)
    const commitsAfter = commits.filter((c) => c.start > stall.end && c.errno === undefined).length
    const gaps = timelines.map((t) => t.largestGap(killedAt, loadEnd))
    const afterWindow = timelines.map((t) => t.largestGap(killedAt + EXPECTED_WINDOW_MS, loadEnd))
    const servedAfterEviction = timelines.map((t) => t.largestGap(evictedAt, loadEnd).ms < loadEnd - evictedAt)
    const sumBefore = before.reduce((x, y) => x + y, 0)

    report.check(sumBefore >= CONFLICTS_WANTED, `only ${sumBefore} conflicting allocations (A ${before[0]}, B ${before[1]}) in ${fmtMs(loadBeforeKillMs)} of load before the kill, not ${CONFLICTS_WANTED}: the scenario tests too little`)
    report.check(evictedMs <= EVICT_BOUND_MS, `premise: the survivors evicted node 0 ${fmtMs(evictedMs)} after the kill, past the bound the EVS options give (${EVICT_FORMULA})`)
    report.check(newTagMs !== undefined && newTagMs <= NEW_TAG_BOUND_MS,
      `A served the tag created after the kill ${newTagMs === undefined ? 'never' : fmtMs(newTagMs)} after the kill, not within ${NEW_TAG_FORMULA}`)
    report.check(aMoved, `A never logged leaving node 0 (${node0}) for the next host of its URL`)
    for (const [i, leaf] of leaves.entries()) {
      report.check(regressions[i] === 0 && holds[i] === 0, `${leaf.label} counted ${regressions[i]} store failovers (hold ${holds[i]} s): the Galera cluster is one store, whichever node answers`)
      report.check(servedAfterEviction[i] === true, `${leaf.label} served no existing tag after the eviction`)
      report.check((loadsAfterEviction[i] ?? 0) > 0, `${leaf.label} loaded no segment after the eviction`)
      report.check((afterWindow[i]?.ms ?? 0) < LATENCY_BOUND_MS, `${leaf.label} served nothing for ${fmtMs(afterWindow[i]?.ms ?? 0)} after the expected window`)
    }
    report.check(stall.end > 0 && commitsAfter > 0, `commits on node 1 did not go on after the kill (${commits.length} timed, the longest ${fmtMs(stall.end - stall.start)})`)

    const notReadyAll = (notReady[0] ?? 0) + (notReady[1] ?? 0)
    report.expectedWhat = `KEY_NOT_FOUND (or STORE_UNAVAILABLE, its lookup) on the new tag before A served it${notReadyAll === 0 ? '' : `, SEGMENTS_NOT_READY (${notReadyAll}) once a tag's buffer was served`}`
    report.note(`3 Galera nodes up in ${fmtMs(bootMs)}; ${TAGS} tags of steps ${TABLE_STEP} to ${stepOf(9)}, ${RATE} requests/s of ${COUNT} IDs to each instance for ${fmtMs(loadBeforeKillMs)} before the kill: ` +
      `${sumBefore} conflicting allocations repeated (A ${before[0]}, B ${before[1]}), ${(conflictsEnd[0] ?? 0) + (conflictsEnd[1] ?? 0)} by the end (A ${conflictsEnd[0]}, B ${conflictsEnd[1]}); ` +
      `loads failed before the kill A ${failedLoadsBefore[0]}, B ${failedLoadsBefore[1]}, from the kill A ${failedLoads[0]}, B ${failedLoads[1]}; loads after the eviction A ${loadsAfterEviction[0]}, B ${loadsAfterEviction[1]}; ` +
      `IDs served ${report.ledger.ids} (${idsBeforeKill} before the kill; A ${served[0]}, B ${served[1]}, the new tag ${newTagIds})`)
    report.note(`node 0 SIGKILLed (kill() took ${fmtMs(killMs)}); the survivors at size 2 ${fmtMs(evictedMs)} after it (bound ${EVICT_FORMULA}); ` +
      `commits on node 1 stalled ${fmtMs(stall.end - stall.start)}, the longest ending ${fmtMs(stall.end - killedAt)} after the kill (${commitsAfter} commits after it); ` +
      `the new tag's INSERT through node 1 committed ${fmtMs(insertedMs)} after the kill, A served it ${newTagMs === undefined ? 'never' : fmtMs(newTagMs)} after the kill ` +
      `(bound ${NEW_TAG_FORMULA}; ${newTagNotFound} answers KEY_NOT_FOUND before); A left node 0: ${aMoved}, B moved hosts ${bMoves} times`)
    report.note(`conflicts counted after: ${samples.join(', ')}`)
    report.note(`longest answer ${fmtMs(report.slowestMs)} (bound wait timeout ${WAIT_TIMEOUT_MS} ms + ${SCHEDULING_SLACK_MS} ms slack = ${LATENCY_BOUND_MS} ms); ` +
      `longest time without an ID from the kill A ${fmtMs(gaps[0]?.ms ?? 0)}, B ${fmtMs(gaps[1]?.ms ?? 0)}; every tag buffered more than the eviction bound + ${fmtMs(BUFFER_MARGIN_MS)} ${buffersReadyMs === undefined ? 'never' : `${fmtMs(buffersReadyMs)} into the load`}, the least at the kill A ${fmtMs(leastBuffered[0] ?? 0)}, B ${fmtMs(leastBuffered[1] ?? 0)} of its ${TAG_RATE} IDs/s; ` +
      `SEGMENTS_NOT_READY A ${notReady[0]}, B ${notReady[1]} (accepted for requests sent within ${WINDOW_FORMULA} of the kill, once the tag's buffer at the kill was served)`)
    report.recover = `A served a new tag ${newTagMs === undefined ? 'never' : fmtMs(newTagMs)} after the kill; commits stalled ${fmtMs(stall.end - stall.start)}`
  } finally {
    state.stop = true
    await Promise.all([load, newTagLoop].map((p) => p?.catch(() => undefined)))
    await watch?.stop().catch(() => undefined)
    for (const c of [...clients, probe, newTagClient]) c.close()
    for (const leaf of leaves) {
      const timer = setTimeout(() => leaf.proc.kill('SIGKILL'), 10_000)
      await leaf.stop('SIGTERM').catch(() => undefined)
      clearTimeout(timer)
    }
    // Every node by its own pid, then their logs beside the servers', then the folder.
    await Promise.all((cluster?.nodes ?? []).map((node) => node.kill().catch(() => undefined)))
    for (const node of cluster?.nodes ?? []) {
      if (existsSync(node.errorLog)) copyFileSync(node.errorLog, join(suite.logDir, `s24-galera-node${node.index}-error.log`))
    }
    if (cluster === undefined) rmSync(home, { recursive: true, force: true })
    else await cluster.close()
  }
}
