import { errorCode, fmtMs, metrics, readyz, scenarioSetup, startLeaf, takeIds, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep } from '../services.js'

const CLIENTS = 6
/** Requests per second over both instances: small steps, so each reserves a range every half second or so. */
const RATE = 800
const TABLE_STEP = 100
const REFRESH_MS = 1000
/** The review's short hold: three refresh intervals. */
const HOLD_MS = 3000
const WAIT_TIMEOUT_MS = 1000
/**
 * SEGMENTS_NOT_READY is expected for a request sent from the edit until every instance is past
 * its hold: a refresh to see it, the hold, a load, and a second of scheduling on a loaded machine.
 */
const EXPECTED_WINDOW_MS = REFRESH_MS + HOLD_MS + WAIT_TIMEOUT_MS + 1000

type Route = 'both' | 'A' | 'B'

/**
 * 30. A max_id lowered by hand with two instances holding marks (issue 39, item 2: 263,544
 * duplicates in the review). A and B serve one tag under a paced load; then only B for two
 * seconds, so B holds and has served ranges above everything A served; then only A, and
 * `UPDATE leaf_alloc SET max_id = <the value one second into the run>`, below both marks, on
 * the server itself (its identity does not change). A's next allocation starts below its mark:
 * it raises its own marks and holds. B allocates nothing: only its refresh, which reads max_id
 * with the tags, can see that the row is below its mark, and raise it before A's hold ends.
 * B is put back into the load once A's hold is over. Passes with both instances counting
 * the regression, the row above every ID served, and 0 duplicates.
 */
export async function handEditTwoMarks (suite: Suite, report: Report): Promise<void> {
  const { tag, name, options } = await scenarioSetup(suite, 's30', { step: TABLE_STEP })
  const args = [
    `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.failover-hold-ms=${HOLD_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
    '--leaf.segment.buffer-seconds=0',
  ]
  const leaves: Leaf[] = []
  for (const label of ['A', 'B']) leaves.push(await startLeaf(suite, label, { ...options, name: `${name}-${label}`, args: [...options.args ?? [], ...args] }))
  const [a, b] = leaves as [Leaf, Leaf]
  const clients = Array.from({ length: CLIENTS }, () => new HttpClient())
  const probe = new HttpClient()
  try {
    let route: Route = 'both'
    let editedAt = Infinity
    let stop = false
    const served = { A: 0n, B: 0n }
    const expected = (sentAt: number) => sentAt >= editedAt && sentAt <= editedAt + EXPECTED_WINDOW_MS
    report.expectedWhat = `SEGMENTS_NOT_READY within ${fmtMs(EXPECTED_WINDOW_MS)} of the edit`
    const load = runLoad({
      clients: clients.length,
      maxRequests: 100_000,
      maxMs: 40_000,
      ratePerSecond: RATE,
      stop: () => stop,
      async step (c) {
        const which = route === 'both' ? (c % 2 === 0 ? 'A' : 'B') : route
        const leaf = which === 'A' ? a : b
        const { ids } = await takeIds(report, clients[c] as HttpClient, leaf.url, 'segment', tag, undefined, `c${c}-${which}`,
          (ans) => errorCode(ans) === 'SEGMENTS_NOT_READY' && expected(ans.sentAt))
        for (const id of ids ?? []) if (id > served[which]) served[which] = id
      },
    })

    await sleep(1000)
    const lowered = await suite.db.maxId(tag)
    await sleep(2000)
    route = 'B'
    await sleep(2000)
    route = 'A'
    await sleep(200) // B's requests in flight are answered
    const before = await suite.db.maxId(tag)
    const atEdit = { ...served }
    editedAt = performance.now()
    await suite.db.query('UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?', [String(lowered), tag])
    // B comes back once A's hold is over: by then only B's refresh can have told it.
    await sleep(HOLD_MS + 2000)
    route = 'both'
    await sleep(5000)
    stop = true
    await load

    const rowAfter = await suite.db.maxId(tag)
    const sorted = report.ledger.sorted(`segment:${tag}`)
    const highest = sorted.length === 0 ? 0n : sorted[sorted.length - 1] as bigint
    const counted = await Promise.all(leaves.map(async (leaf) => (await metrics(probe, leaf.url)).get('leaf_segment_store_regressions_total{cause="max_id_went_back"}') ?? 0))
    const ready = await Promise.all(leaves.map((leaf) => readyz(probe, leaf.url)))
    report.check(lowered < atEdit.A && lowered < atEdit.B, `the edit (${lowered}) is not below what both served (A ${atEdit.A}, B ${atEdit.B}): the scenario tests nothing`)
    for (const [i, n] of counted.entries()) report.check(n > 0, `instance ${i === 0 ? 'A' : 'B'} never counted the regression (leaf_segment_store_regressions_total{cause="max_id_went_back"} ${n})`)
    report.check(rowAfter > highest, `the row's max_id ${rowAfter} is not above every ID served (${highest})`)
    for (const [i, r] of ready.entries()) report.check(r.status === 200, `instance ${i === 0 ? 'A' : 'B'} not ready at the end: ${r.raw}`)
    report.note(`max_id ${before} at the edit, set to ${lowered} (${before - lowered} IDs back), A had served up to ${atEdit.A}, B up to ${atEdit.B}; ` +
      `regressions counted: A ${counted[0]}, B ${counted[1]}; the row now ${rowAfter}, above every ID served (${highest})`)
    report.recover = 'served again after the hold'
  } finally {
    for (const c of [...clients, probe]) c.close()
  }
}
