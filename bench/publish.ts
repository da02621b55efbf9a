import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT, staleFigures } from '../scripts/run-info.js'
import { withFigures } from './render.js'
import type { BenchResults } from './results.js'

// `npm run bench:publish`: rewrites the README's performance table from
// bench/results/latest.json (as `npm run bench -- --publish` does at the end of a run).
// Refuses figures that do not describe the src/ checked out now, or that lack the count.

export const RESULTS_FILE = join(ROOT, 'bench/results/latest.json')
const README = join(ROOT, 'README.md')

export function readResults (): BenchResults {
  return JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as BenchResults
}

/** Why these figures may not go to the README, or undefined when they may. */
export function publishable (r: BenchResults): string | undefined {
  if (r.callgrind === null) return 'the instructions were not counted, so the single-ID target was not checked'
  return staleFigures(r.run)
}

export function writeReadmeFigures (r: BenchResults): void {
  writeFileSync(README, withFigures(readFileSync(README, 'utf8'), r))
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const results = readResults()
  const refusal = publishable(results)
  if (refusal !== undefined) {
    console.error(`README.md not rewritten: ${refusal}`)
    process.exitCode = 1
  } else {
    writeReadmeFigures(results)
    console.log(`README.md: performance table rewritten from bench/results/latest.json (${results.run.commit.slice(0, 12)}, ${results.run.date})`)
  }
}
