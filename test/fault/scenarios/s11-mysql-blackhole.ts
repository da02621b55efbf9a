import { SCHEDULING_SLACK_MS, Timeline, describe, errorCode, fmtMs, startScenarioLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix, type Answer } from '../load.js'
import { createProxy } from '../../helpers/tcp-proxy.js'
import { sleep } from '../services.js'

const POOL_SIZE = 2
const STEP = 200
const WAIT_TIMEOUT_MS = 2000
/** Every bound (answers, recovery): the wait timeout, plus the harness's scheduling slack. */
const BOUND_MS = WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS
const CLIENTS = 8
const RATE = 1000
/** Every 5th request is a batch of 20: about 5 IDs per request, so segments go fast. */
const BATCH_EVERY = 5
const BATCH = 20
const ROUND_MS = 12_000
/** /readyz waits at most 1 s on the database: it must answer within this. */
const READY_BOUND_MS = 2000
const READY_EVERY_MS = 250

interface Round {
  tag: string
  /** performance.now() of the blackhole, and of the round's end. */
  at: number
  end: number
  connections: number
  /** The SEGMENTS_NOT_READY answers of the round. */
  refusals: Answer[]
}

/**
 * 11. MariaDB reached through a proxy, a pool of 2 connections, a small step (loads every
 * fraction of a second at first), under paced load. Twice the proxy blackholes every
 * connection open at the time (they stay open and pass no byte; new connections work):
 * once under way on tag A, once with the load moved to tag B, whose first segment must then
 * be loaded. Passes when answers resume within the wait timeout + 1 s (the longest time
 * with no successful answer), no answer takes longer than that, SEGMENTS_NOT_READY comes
 * only within one such stretch per round, /readyz always answers within 2 s and is ready
 * at the end, and no ID repeats.
 */
export async function mysqlBlackhole (suite: Suite, report: Report): Promise<void> {
  const proxy = await createProxy(suite.db.port)
  try {
    // Both tags are in leaf_alloc before the start: the instance reads its tags then.
    const { leaf, tags } = await startScenarioLeaf(suite, 's11', {
      step: [STEP, STEP],
      segmentPort: proxy.port,
      args: [`--leaf.jdbc.pool-size=${POOL_SIZE}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`],
    })
    const prober = new HttpClient()
    const timeline = new Timeline()
    const rounds: Round[] = []
    const state = { stop: false, tag: tags[0] as string }
    const batch = batchMix(BATCH_EVERY, BATCH)
    report.expectedWhat = '503 SEGMENTS_NOT_READY'
    const refused = (a: Answer) => {
      const round = rounds[rounds.length - 1]
      const ok = round !== undefined && a.status === 503 && errorCode(a) === 'SEGMENTS_NOT_READY'
      if (ok) round.refusals.push(a)
      return ok
    }

    const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE }, async (client, c, n) => {
      const { answer, ids } = await takeIds(report, client, leaf.url, 'segment', state.tag, batch(n), `c${c}`, refused)
      timeline.add(answer, ids !== undefined, `client ${c} request ${n} (${describe(answer).slice(0, 60)})`)
    })
    const ready: Answer[] = []
    const probing = (async () => {
      while (!state.stop) {
        ready.push(await prober.get(`${leaf.url}/readyz`, { timeoutMs: 10_000 }))
        await sleep(READY_EVERY_MS)
      }
    })()

    // Early, while segments are still small (the step doubles with every quick load): the
    // blackholed connections are needed again within a second or two.
    await sleep(1500)
    for (const tag of tags) {
      state.tag = tag
      const round: Round = { tag, at: performance.now(), end: 0, connections: proxy.blackhole(), refusals: [] }
      rounds.push(round)
      await sleep(ROUND_MS)
      round.end = performance.now()
    }
    state.stop = true
    const result = await load.stop()
    await probing
    const last = await prober.get(`${leaf.url}/readyz`, { timeoutMs: 10_000 })
    prober.close()

    const { slowest } = timeline
    report.check(slowest.ms <= BOUND_MS, `an answer took ${fmtMs(slowest.ms)} (${slowest.what}; bound ${WAIT_TIMEOUT_MS} + ${SCHEDULING_SLACK_MS} ms)`)
    const gaps: number[] = []
    for (const [i, round] of rounds.entries()) {
      const gap = timeline.largestGap(round.at, round.end)
      gaps.push(gap.ms)
      if (i === 0) report.check(round.connections > 0, 'round 1: no connection open to blackhole')
      report.check(gap.ms <= BOUND_MS, `round ${i + 1} (${round.tag}): no successful answer for ${fmtMs(gap.ms)}, from ${fmtMs(gap.from - round.at)} after the blackhole (bound ${fmtMs(BOUND_MS)})`)
      const first = Math.min(...round.refusals.map((a) => a.sentAt))
      const outside = round.refusals.filter((a) => a.sentAt + a.ms > first + BOUND_MS)
      for (const a of outside) {
        report.expected--
        report.failure(`round ${i + 1}: SEGMENTS_NOT_READY answered ${fmtMs(a.sentAt + a.ms - first)} after the round's first refused request was sent (bound ${fmtMs(BOUND_MS)})`)
      }
    }
    const slowReady = ready.filter((a) => a.status === 0 || a.ms > READY_BOUND_MS)
    report.check(slowReady.length === 0, `${slowReady.length} of ${ready.length} /readyz probes not answered within ${fmtMs(READY_BOUND_MS)}, e.g. ${slowReady[0] === undefined ? '' : `${describe(slowReady[0])} after ${fmtMs(slowReady[0].ms)}`}`)
    report.check(last.status === 200, `/readyz at the end: ${describe(last)}`)
    const readyCodes = new Map<number, number>()
    for (const a of ready) readyCodes.set(a.status, (readyCodes.get(a.status) ?? 0) + 1)
    report.note(`${result.requests} paced requests in ${fmtMs(result.ms)}; ` +
      rounds.map((r, i) => `round ${i + 1} (${r.tag}): ${r.connections} connections blackholed, ${r.refusals.length} SEGMENTS_NOT_READY, longest time without a successful answer ${fmtMs(gaps[i] ?? 0)}`).join('; ') +
      `; slowest answer ${fmtMs(slowest.ms)}; /readyz answers ${[...readyCodes].map(([s, n]) => `${s}: ${n}`).join(', ')}, slowest ${fmtMs(Math.max(0, ...ready.map((a) => a.ms)))}`)
    report.recover = `longest gap ${fmtMs(Math.max(0, ...gaps))}`
  } finally {
    await proxy.close()
  }
}
