import t from 'tap'
import type { ClientBench } from '../../bench/client.js'
import { renderFigures } from '../../bench/render.js'
import { CLIENT_E2E_ROW, CLIENT_LATENCY_ROW, CLIENT_TRY_ROW, judge, type BenchResults } from '../../bench/results.js'
import { readResults } from '../../bench/publish.js'

// The client's bench rows: judged against their targets, and in the table only when the
// results file has them (figures published before the client render as they did).

/** Nine periods whose p99.99s sit `over` µs above a floor of 2.2 µs. */
function periods (over: number[]): Array<{ p9999Us: number, floorP9999Us: number }> {
  return over.map((d) => ({ p9999Us: 2.2 + d, floorP9999Us: 2.2 }))
}

function client (): ClientBench {
  return {
    tryNextId: 40e6,
    bigintCounter: 50e6,
    tryNextNumber: 200e6,
    numberCounter: 250e6,
    segmentGenerator: 60e6,
    awaitNextId: 20e6,
    e2e: { seconds: 10, callers: 50, ids: 9e7, idsPerSecond: 9e6, requests: 9000, requestsPerMillionIds: 100, errors: 0, serverCpuPerMillionIds: 0.02, singleRouteCpuPerMillionIds: 15, singleRouteFailed: 0 },
    latency: { samples: 2e7, p50Us: 0.1, p999Us: 0.6, p9999Us: 2.4, maxUs: 3000, seconds: 9, floorP999Us: 0.5, floorP9999Us: 2.2, waited: 0, periods: periods([0.2, -0.5, 0.9, 0.1, 0.3, -1.2, 0.2, 0.4, 0]) },
  }
}

t.test('client rows meet their targets, and each miss fails its row', async (t) => {
  // The published file, without its client rows (whether it has them or not).
  const { client: _published, ...base } = readResults()
  const withClient = (c: ClientBench): BenchResults => ({ ...base, client: c })
  const rows = (c: ClientBench) => judge(withClient(c)).filter((v) => v.row.startsWith('@leaf-ts/client'))
  t.same(rows(client()).map((v) => v.met), [true, true, true, true])
  const slow = client()
  slow.tryNextId = 0.7 * slow.bigintCounter
  // The median period 1.01 µs over its floor: five of the nine at 1.01 or more.
  slow.latency.periods = periods([0, 1.01, 3, 0.5, 1.01, 2, 1.01, 0.2, -1])
  t.same(rows(slow).filter((v) => v.met === false).map((v) => v.row), [CLIENT_TRY_ROW, CLIENT_LATENCY_ROW])
  const noisy = client()
  noisy.latency.periods = periods([0.2, 6.4, -4, 0.9, 5.8, -3, 1, 0.95, -0.1])
  noisy.latency.p9999Us = 12.6 // the whole run's, 6.4 over its floor: not what is judged
  t.same(rows(noisy).map((v) => v.met), [true, true, true, true], 'two periods 6 µs over the floor, and a whole-run p99.99 too, leave the median period (+0.9 µs) within 1 µs')
  t.match(judge(withClient(noisy)).find((v) => v.row === CLIENT_LATENCY_ROW)?.why, /median \+0\.90 µs over 9 periods, range -4\.00 µs\.\.\+6\.40 µs/, 'the verdict shows the median and the range')
  const before = client()
  delete before.latency.periods
  before.latency.p9999Us = 3.21
  t.same(rows(before).filter((v) => v.met === false).map((v) => v.row), [CLIENT_LATENCY_ROW], 'results from before the periods are judged on the whole run (3.21 µs beside 2.20)')
  const chatty = client()
  chatty.e2e.requestsPerMillionIds = 201
  t.same(rows(chatty).filter((v) => v.met === false).map((v) => v.row), [CLIENT_E2E_ROW])
  const failing = client()
  failing.e2e.errors = 1
  t.same(rows(failing).filter((v) => v.met === false).map((v) => v.row), [CLIENT_E2E_ROW], 'an error fails the end-to-end row')
  t.match(renderFigures(withClient(client())), /`@leaf-ts\/client` `tryNextId`, warm buffer, in process \| 40,000,000 IDs\/s = 80\.0% of a bare bigint counter/)
  t.match(renderFigures(withClient(client())), /p99\.99 2\.40 µs over 20,000,000 calls; the floor \(an await of a bare bigint counter, interleaved\) p99\.9 0\.50 µs, p99\.99 2\.20 µs; p99\.99 over the floor's: median \+0\.20 µs over 9 periods, range -1\.20 µs\.\.\+0\.90 µs; 0 of them waited for a fetch/, 'the latency row shows its floor and the calls that waited')
  const waiting = client()
  waiting.latency.waited = 3
  t.match(renderFigures(withClient(waiting)), /; 3 of them waited for a fetch \| p99\.99 ≤ the floor's p99\.99 \+ 1 µs, measured in the same run: the median of 9 periods \| yes \|/, 'calls that waited are shown; the verdict is p99.99 against the floor')
  t.notMatch(renderFigures(base), /@leaf-ts\/client/, 'a results file without the client renders without its rows')
})
