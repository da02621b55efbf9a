import { readFileSync } from 'node:fs'
import t from 'tap'
import { scenariosSince } from '../../scripts/check-figures.js'
import { staleFigures } from '../../scripts/run-info.js'
import { FIGURES_PAGE, LATEST, readFigures, renderFigures, type FaultResults } from '../fault/render.js'
import { SCENARIOS } from '../fault/scenarios.js'

// The reliability figures of docs/reliability.md are the published run's, of every scenario it
// had, all passing. Figures older than the code (scripts/run-info.ts's MEASURED_PATHS changed, a
// scenario added or renamed since) are reported, not a failure: they are republished at the end
// of the issue that changed them. Publishing: `npm run test:fault -- --publish`.

const page = readFileSync(FIGURES_PAGE, 'utf8')
const latest = JSON.parse(readFileSync(LATEST, 'utf8')) as FaultResults

t.test('docs/reliability.md\'s figures are the render of test/fault/results/latest.json', async (t) => {
  t.match(FIGURES_PAGE, /docs\/reliability\.md$/)
  t.equal(readFigures(page), renderFigures(latest))
})

t.test('the published run was of every scenario it had, each PASS, in order; scenarios since are reported', async (t) => {
  t.same(latest.selected, [], 'a run of every scenario (none named)')
  t.same(latest.scenarios.filter((s) => s.status !== 'PASS').map((s) => s.id), [], 'every published scenario passed')
  const ids = latest.scenarios.map((s) => s.id)
  t.same(ids, [...ids].sort((a, b) => a - b), 'in the order of their ids')
  const suite = new Map(SCENARIOS.map((s) => [s.id, s.title]))
  t.same(ids.filter((id) => !suite.has(id)), [], 'no published scenario that the suite no longer has')
  const since = scenariosSince(latest)
  if (since.length > 0) t.comment(`fault figures are stale: scenarios ${since.join(', ')} added or retitled since the published run (npm run check:figures)`)
})

t.test('each published scenario did what it says: it sent requests, checked its IDs (none twice), failed none beyond what it expects, and has no problem', async (t) => {
  for (const s of latest.scenarios) {
    t.ok(s.requests > 0 && s.ids > 0, `${s.id}: ${s.requests} requests, ${s.ids} IDs checked`)
    t.equal(s.duplicates, 0, `${s.id}: no ID twice`)
    t.equal(s.failed, 0, `${s.id}: no failed request (${s.expected} answers it expects: ${s.expectedWhat || 'none'})`)
    t.same(s.problems, [], `${s.id}: no problem recorded`)
  }
})

// Figures older than the code are reported, never a failure: a correct fix must be able to land
// before the 7-minute fault publication runs again (issue 40).
t.test('the published run names a commit of this repository; a change since is reported', async (t) => {
  const stale = staleFigures(latest.run)
  t.notMatch(stale ?? '', /not in this repository/, `the figures' commit ${latest.run.commit}`)
  if (stale !== undefined) t.comment(`fault figures are stale: ${stale}`)
})
