import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT, staleFigures } from '../scripts/run-info.js'
import { withFigures } from './render.js'
import { judge, type BenchResults } from './results.js'

// `npm run bench:publish`: rewrites the performance table of docs/performance.md from
// bench/results/latest.json (as `npm run bench -- --publish` does at the end of a run).
// Refuses figures that do not describe the code checked out now, that lack the count, or that
// miss a target (naming the rows).

export const RESULTS_FILE = join(ROOT, 'bench/results/latest.json')
/** The page that holds the published figures, between render.ts's markers. */
export const FIGURES_PAGE = join(ROOT, 'docs/performance.md')

export function readResults (): BenchResults {
  return JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as BenchResults
}

/** Why these figures may not be published, or undefined when they may. */
export function publishable (r: BenchResults): string | undefined {
  if (r.callgrind === null) return 'the instructions were not counted, so the single-ID target was not checked'
  const missed = judge(r).filter((v) => v.met === false)
  if (missed.length > 0) return `a target was missed: ${missed.map((v) => `${v.row} (${v.target}: ${v.why})`).join('; ')}`
  return staleFigures(r.run)
}

export function writeFigures (r: BenchResults): void {
  writeFileSync(FIGURES_PAGE, withFigures(readFileSync(FIGURES_PAGE, 'utf8'), r))
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = readResults()
  const refusal = publishable(results)
  if (refusal !== undefined) {
    console.error(`docs/performance.md not rewritten: ${refusal}`)
    process.exitCode = 1
  } else {
    writeFigures(results)
    console.log(`docs/performance.md: performance table rewritten from bench/results/latest.json (${results.run.commit.slice(0, 12)}, ${results.run.date})`)
  }
}
