import t from 'tap'
import type { ClientBench } from '../bench/client.js'
import { renderFigures } from '../bench/render.js'
import { CLIENT_E2E_ROW, CLIENT_LATENCY_ROW, CLIENT_TRY_ROW, judge, type BenchResults } from '../bench/results.js'
import { readResults } from '../bench/publish.js'

// The client's bench rows: judged against their targets, and in the table only when the
// results file has them (figures published before the client render as they did).

function client (): ClientBench {
  return {
    tryNextId: 40e6,
    bigintCounter: 50e6,
    tryNextNumber: 200e6,
    numberCounter: 250e6,
    segmentGenerator: 60e6,
    awaitNextId: 20e6,
    e2e: { seconds: 10, callers: 50, ids: 9e7, idsPerSecond: 9e6, requests: 9000, requestsPerMillionIds: 100, errors: 0, serverCpuPerMillionIds: 0.02, singleRouteCpuPerMillionIds: 15, singleRouteFailed: 0 },
    latency: { samples: 2e7, p50Us: 0.1, p999Us: 0.6, p9999Us: 2.4, maxUs: 3000, seconds: 5, floorP999Us: 0.5, floorP9999Us: 2.2, waited: 0 },
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
  slow.latency.p9999Us = 3.21 // its floor's 2.20 + 1.01
  t.same(rows(slow).filter((v) => v.met === false).map((v) => v.row), [CLIENT_TRY_ROW, CLIENT_LATENCY_ROW])
  const noisy = client()
  noisy.latency.p9999Us = 46.2
  noisy.latency.floorP9999Us = 45.3
  t.same(rows(noisy).map((v) => v.met), [true, true, true, true], 'a tail the host\'s own floor shares (46.2 µs beside 45.3 µs) meets it')
  const chatty = client()
  chatty.e2e.requestsPerMillionIds = 201
  t.same(rows(chatty).filter((v) => v.met === false).map((v) => v.row), [CLIENT_E2E_ROW])
  const failing = client()
  failing.e2e.errors = 1
  t.same(rows(failing).filter((v) => v.met === false).map((v) => v.row), [CLIENT_E2E_ROW], 'an error fails the end-to-end row')
  t.match(renderFigures(withClient(client())), /`@leaf-ts\/client` `tryNextId`, warm buffer, in process \| 40,000,000 IDs\/s = 80\.0% of a bare bigint counter/)
  t.match(renderFigures(withClient(client())), /p99\.99 2\.40 µs over 20,000,000 calls; the floor \(an await of a bare bigint counter, interleaved\) p99\.9 0\.50 µs, p99\.99 2\.20 µs; 0 of them waited for a fetch/, 'the latency row shows its floor and the calls that waited')
  const waiting = client()
  waiting.latency.waited = 3
  t.match(renderFigures(withClient(waiting)), /; 3 of them waited for a fetch \| p99\.99 ≤ the floor's p99\.99 \+ 1 µs, measured in the same run \| yes \|/, 'calls that waited are shown; the verdict is p99.99 against the floor')
  t.notMatch(renderFigures(base), /@leaf-ts\/client/, 'a results file without the client renders without its rows')
})
