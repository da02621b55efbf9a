import { fileURLToPath } from 'node:url'
import type { RunInfo } from '../../scripts/run-info.js'

// The fault suite's results as data (test-output/fault/results.json on every run,
// test/fault/results/latest.json when published), and the published figures rendered from
// them: docs/reliability.md shows exactly what a run wrote, never numbers typed in by hand.

export interface ScenarioResult {
  id: number
  title: string
  status: 'PASS' | 'FAIL'
  requests: number
  /** IDs recorded in the ledger. */
  ids: number
  /** Undefined when the scenario aborted before the check. */
  duplicates: number | undefined
  /** Failures the scenario forbids. */
  failed: number
  /** Failures it expects, and what they are (`503 SEGMENTS_NOT_READY`). */
  expected: number
  expectedWhat: string
  /** The slowest answer to an ID request (ms). */
  slowestMs: number
  /** The scenario's recovery figure, as it computed it from its timestamps. */
  recover: string
  ms: number
  problems: string[]
  notes: string[]
}

export interface FaultResults {
  run: RunInfo
  /** The scenarios asked for on the command line (empty: all). */
  selected: number[]
  totalMs: number
  scenarios: ScenarioResult[]
}

/** The published results, which the page's figures are rendered from. */
export const LATEST = fileURLToPath(new URL('results/latest.json', import.meta.url))

/** The page that holds the published figures. */
export const FIGURES_PAGE = fileURLToPath(new URL('../../docs/reliability.md', import.meta.url))

/** The figures sit between these two lines of the page's "The latest published run". */
export const FIGURES_START = '<!-- fault figures: written by `npm run test:fault -- --publish` from test/fault/results/latest.json -->'
export const FIGURES_END = '<!-- end of fault figures -->'

export function fmtMs (ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`
}

const n = (x: number) => x.toLocaleString('en-US')

/** The results table, columns padded (the console and the page print the same one). */
export function renderTable (scenarios: ScenarioResult[]): string {
  const header = ['#', 'scenario', 'requests', 'IDs checked', 'duplicates', 'failed requests', 'slowest answer', 'time to recover', 'status']
  const body = scenarios.map((r) => [
    String(r.id),
    r.title,
    n(r.requests),
    n(r.ids),
    r.duplicates === undefined ? '-' : n(r.duplicates),
    n(r.failed) + (r.expected > 0 ? ` (+${n(r.expected)} ${r.expectedWhat})` : ''),
    r.slowestMs > 0 ? fmtMs(r.slowestMs) : '-',
    r.recover,
    r.status,
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => (row[i] as string).length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(' | ')} |`
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...body.map(line)].join('\n')
}

/** The page's block: where the figures come from, then the table. */
export function renderFigures (results: FaultResults): string {
  const { run } = results
  const failed = results.scenarios.filter((s) => s.status === 'FAIL').length
  const summary = `${results.scenarios.length - failed} passed, ${failed} failed`
  return [
    FIGURES_START,
    `The latest published run: commit \`${run.commit.slice(0, 12)}\`${run.dirty ? ' with uncommitted changes in the measured code' : ''}, ` +
      `${run.date.slice(0, 10)}, ${run.cores} cores, ${fmtMs(results.totalMs)} in all, ${summary}:`,
    '',
    renderTable(results.scenarios),
    '',
    FIGURES_END,
  ].join('\n')
}

/** The figures block of `page`, or undefined when it has none. */
export function readFigures (page: string): string | undefined {
  const start = page.indexOf(FIGURES_START)
  const end = page.indexOf(FIGURES_END, start)
  return start < 0 || end < 0 ? undefined : page.slice(start, end + FIGURES_END.length)
}

/** `page` with its figures block replaced by `figures`. */
export function replaceFigures (page: string, figures: string): string {
  const current = readFigures(page)
  if (current === undefined) throw new Error(`the page has no figures block (a line ${FIGURES_START} ... ${FIGURES_END})`)
  return page.replace(current, () => figures)
}
