import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { readResults } from '../bench/publish.js'
import { LATEST, type FaultResults } from '../test/fault/render.js'
import { SCENARIOS } from '../test/fault/scenarios.js'
import { staleFigures } from './run-info.js'

// `npm run check:figures`: whether the published bench and fault figures still describe the code
// checked out. Not part of `npm test`: figures inform, they never fail a correct change; they are
// republished (`npm run bench -- --publish`, `npm run test:fault -- --publish`) at the end of the
// issue that changed a measured path. Exits 1 when either set is stale.

export interface FiguresState {
  what: string
  page: string
  commit: string
  date: string
  /** Why the figures no longer describe the code, or undefined when they do. */
  stale: string | undefined
}

/** The suite's scenarios that the published fault run does not have under the same title. */
export function scenariosSince (latest: Pick<FaultResults, 'scenarios'>): number[] {
  return SCENARIOS.filter((s) => latest.scenarios.find((p) => p.id === s.id)?.title !== s.title).map((s) => s.id)
}

export function figuresState (): FiguresState[] {
  const bench = readResults()
  const fault = JSON.parse(readFileSync(LATEST, 'utf8')) as FaultResults
  const added = scenariosSince(fault)
  const faultStale = [staleFigures(fault.run), added.length > 0 ? `scenarios ${added.join(', ')} added or retitled since the published run` : undefined]
    .filter((s) => s !== undefined).join('; ')
  return [
    { what: 'bench', page: 'docs/performance.md', commit: bench.run.commit, date: bench.run.date, stale: staleFigures(bench.run) },
    { what: 'fault', page: 'docs/reliability.md', commit: fault.run.commit, date: fault.run.date, stale: faultStale === '' ? undefined : faultStale },
  ]
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const states = figuresState()
  for (const s of states) {
    const on = `${s.commit.slice(0, 12)}, ${s.date.slice(0, 10)}`
    console.log(s.stale === undefined ? `${s.what} figures (${s.page}, ${on}): current` : `${s.what} figures (${s.page}, ${on}): STALE: ${s.stale}`)
  }
  process.exitCode = states.some((s) => s.stale !== undefined) ? 1 : 0
}
