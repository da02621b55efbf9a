import { readFileSync } from 'node:fs'
import t from 'tap'
import { staleFigures } from '../scripts/run-info.js'
import { FIGURES_PAGE, LATEST, readFigures, renderFigures, type FaultResults } from './fault/render.js'
import { SCENARIOS } from './fault/scenarios.js'

// The reliability figures of docs/reliability.md are the published run's, of every scenario,
// all passing, taken on the src/ checked out now. Publishing: `npm run test:fault -- --publish`.

const page = readFileSync(FIGURES_PAGE, 'utf8')
const latest = JSON.parse(readFileSync(LATEST, 'utf8')) as FaultResults

t.test('docs/reliability.md\'s figures are the render of test/fault/results/latest.json', async (t) => {
  t.match(FIGURES_PAGE, /docs\/reliability\.md$/)
  t.equal(readFigures(page), renderFigures(latest))
})

t.test('the published run has every scenario of the suite, each PASS', async (t) => {
  t.same(latest.scenarios.map((s) => ({ id: s.id, title: s.title, status: s.status })), SCENARIOS.map((s) => ({ id: s.id, title: s.title, status: 'PASS' })))
})

t.test('the published run was taken on the src/ checked out now', async (t) => {
  t.equal(staleFigures(latest.run), undefined)
})
