import { readFileSync } from 'node:fs'
import t from 'tap'
import { staleFigures } from '../scripts/run-info.js'
import { LATEST, readFigures, renderFigures, type FaultResults } from './fault/render.js'
import { SCENARIOS } from './fault/scenarios.js'

// The README's reliability figures are the published run's, of every scenario, all passing,
// taken on the src/ checked out now. Publishing: `npm run test:fault -- --publish`.

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')
const latest = JSON.parse(readFileSync(LATEST, 'utf8')) as FaultResults

t.test('the README\'s reliability figures are the render of test/fault/results/latest.json', async (t) => {
  t.equal(readFigures(readme), renderFigures(latest))
})

t.test('the published run has every scenario of the suite, each PASS', async (t) => {
  t.same(latest.scenarios.map((s) => ({ id: s.id, title: s.title, status: s.status })), SCENARIOS.map((s) => ({ id: s.id, title: s.title, status: 'PASS' })))
})

t.test('the published run was taken on the src/ checked out now', async (t) => {
  t.equal(staleFigures(latest.run), undefined)
})
