import { overFloorSummary } from './client.js'
import { BORROWING_ROW, BURST, BURST_BORROW_MS, BURST_FLOOR_ROW, burstRow, LAYOUT_PRESET_ROWS } from './in-process.js'
import { BUSY, manyTagsLine, manyTagsVerdicts } from './many-tags.js'
import { BATCH_ROUTE, CEILING, CLIENT_AWAIT_ROW, CLIENT_E2E_ROW, CLIENT_LATENCY_ROW, CLIENT_TRY_ROW, judge, LAYOUT_LIMIT, SINGLE_ID_ROUTES, VARIANT_MODULES, variantRow, type BenchResults, type Verdict } from './results.js'
import { median } from './stats.js'

// The published performance figures, rendered from a results file (bench/results/latest.json):
// a line naming the run, then the table. docs/performance.md holds them between two markers;
// `npm run bench:publish` rewrites them and test/docs/bench-figures.test.ts checks they match.

export const START = '<!-- figures: rendered from bench/results/latest.json by `npm run bench:publish` -->'
export const END = '<!-- end of figures -->'

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
const pct = (r: number) => `${fmt(r * 100, 1)}%`
const range = (values: number[], show: (n: number) => string) => `${show(Math.min(...values))}..${show(Math.max(...values))}`
const met = (v: Verdict | undefined) => v === undefined ? '' : v.met === true ? 'yes' : v.met === false ? '**no**' : 'not checked'

export function renderFigures (r: BenchResults): string {
  const verdicts = judge(r)
  const verdict = (row: string) => verdicts.find((v) => v.row === row)
  const inProcess = (name: string) => r.inProcess.find((row) => row.name === name)?.idsPerSecond ?? NaN
  const http = (name: string) => r.http.find((row) => row.name === name)
  const rows: [string, string, Verdict | undefined][] = []

  rows.push(['segment generator, in process', `${fmt(inProcess('segment generator'))} IDs/s`, verdict('segment generator')])
  const snowflake = inProcess('snowflake generator')
  rows.push(['snowflake generator, in process', `${fmt(snowflake)} IDs/s = ${pct(snowflake / LAYOUT_LIMIT)} of ${fmt(LAYOUT_LIMIT)} (the layout's limit)`, verdict('snowflake generator')])
  rows.push(['`@sapphire/snowflake`, same loop (reference; it enforces no per-millisecond limit)', `${fmt(inProcess('@sapphire/snowflake (reference)'))} IDs/s`, undefined])
  const borrowing = r.inProcess.find((x) => x.name === BORROWING_ROW)
  if (borrowing !== undefined) {
    rows.push([`snowflake generator with \`borrow-ahead-ms=${BURST_BORROW_MS}\`, in process`, `${fmt(borrowing.idsPerSecond)} IDs/s = ${pct(borrowing.idsPerSecond / LAYOUT_LIMIT)} of ${fmt(LAYOUT_LIMIT)} (the layout's limit: borrowing moves waits, it cannot pass the limit for long)`, verdict(BORROWING_ROW)])
  }
  for (const preset of LAYOUT_PRESET_ROWS) {
    const row = r.inProcess.find((x) => x.name === `${preset} generator`)
    if (row?.limit === undefined) continue
    rows.push([`\`${preset}\` generator, in process`, `${fmt(row.idsPerSecond)} IDs/s = ${pct(row.idsPerSecond / row.limit)} of ${fmt(row.limit)} (the layout's limit)`, undefined])
  }
  const plain = r.inProcess.find((x) => x.name === burstRow(0))?.burstMs
  const borrowed = r.inProcess.find((x) => x.name === burstRow(BURST_BORROW_MS))?.burstMs
  const floor = r.inProcess.find((x) => x.name === BURST_FLOOR_ROW)?.burstMs
  if (plain !== undefined && borrowed !== undefined && floor !== undefined) {
    rows.push([`a burst of ${fmt(BURST)} IDs (\`leaf\`: 4 ms of sequence) after 20 ms idle, in process, the three taking turns`,
      `median ${fmt(plain, 2)} ms without borrowing (it waits for each millisecond), ${fmt(borrowed, 2)} ms with \`borrow-ahead-ms=${BURST_BORROW_MS}\` (${fmt(plain / borrowed, 1)}x faster), ` +
      `${fmt(floor, 2)} ms on a clock that never makes it wait: **${fmt(borrowed / floor, 2)}x** that floor`, verdict(burstRow(BURST_BORROW_MS))])
  }

  const ceiling = http(CEILING)
  const ceilingCounts = r.callgrind === null
    ? 'instructions not counted'
    : 'instructions/request ' + r.callgrind.ceiling.map((c) => `${fmt(median(c.counts))} (${range(c.counts, fmt)}) for a ${c.name}`).join(', ')
  rows.push([CEILING, `${fmt(ceiling?.cpuMicrosPerRequest ?? NaN, 1)} µs CPU/request, ${fmt(ceiling?.requestsPerSecond ?? NaN)} req/s; ${ceilingCounts}; ${fmt(ceiling?.failed ?? NaN)} failed`, verdict(CEILING)])

  for (const name of SINGLE_ID_ROUTES) {
    const row = http(name)
    const counted = r.callgrind?.routes.find((c) => c.name === name)
    const count = counted === undefined
      ? 'instructions not counted'
      : `${fmt(median(counted.counts))} instructions (median of ${counted.counts.length} pairs, ${range(counted.counts, fmt)}), **${pct(median(counted.ratios))}** of the pair's ceiling (${range(counted.ratios, pct)}); ${fmt(Math.max(...counted.tickSlowPath), 1)} tick-record slow-path calls`
    const cpuRange = row?.cpuRatios === undefined || row.cpuRatios === null ? '' : ` (${range(row.cpuRatios, pct)})`
    rows.push([`\`${name}\``, `${fmt(row?.cpuMicrosPerRequest ?? NaN, 1)} µs CPU/request, ${pct(row?.cpuRatioToCeiling ?? NaN)} of the ceiling${cpuRange}; ${count}; ${fmt(row?.failed ?? NaN)} failed`, verdict(name)])
  }

  for (const module of VARIANT_MODULES) {
    const variant = r.callgrind?.variants?.find((v) => v.module === module)
    if (variant === undefined) continue
    const perRoute = SINGLE_ID_ROUTES.map((name) => {
      const withIt = r.callgrind?.routes.find((x) => x.name === name)?.counts ?? []
      const without = variant.routes.find((x) => x.name === name)?.counts ?? []
      return `\`${name}\` ${fmt(median(withIt))} with (${range(withIt, fmt)}), ${fmt(median(without))} without (${range(without, fmt)}): **${fmt(median(without) - median(withIt))}** more instructions per request without it`
    })
    rows.push([variantRow(module), `${perRoute.join('; ')} (the same pairs, a process of each build)`, verdict(variantRow(module))])
  }

  const batch = http(BATCH_ROUTE)
  rows.push([`\`${BATCH_ROUTE}\``, `${fmt(batch?.cpuMicrosPerRequest ?? NaN, 1)} µs CPU/request, ${fmt(batch?.idsPerCpuSecond ?? NaN)} IDs per CPU second: **${fmt(r.batchToSingle)}x** the single-ID route${r.batchRatios === undefined ? '' : ` (${range(r.batchRatios, (n) => `${fmt(n)}x`)})`}; ${fmt(batch?.failed ?? NaN)} failed`, verdict(BATCH_ROUTE)])

  const c = r.client
  if (c !== undefined) {
    const e = c.e2e
    rows.push(['`@leaf-ts/client` `tryNextId`, warm buffer, in process', `${fmt(c.tryNextId)} IDs/s = ${pct(c.tryNextId / c.bigintCounter)} of a bare bigint counter (${fmt(c.bigintCounter)} IDs/s); the server's segment generator ${fmt(c.segmentGenerator)} IDs/s`, verdict(CLIENT_TRY_ROW)])
    rows.push(['`@leaf-ts/client` `tryNextNumber`, warm buffer, in process', `${fmt(c.tryNextNumber)} IDs/s = ${pct(c.tryNextNumber / c.numberCounter)} of a bare number counter (${fmt(c.numberCounter)} IDs/s)`, undefined])
    rows.push(['`@leaf-ts/client` `await nextId`, warm buffer, in process', `${fmt(c.awaitNextId)} IDs/s`, verdict(CLIENT_AWAIT_ROW)])
    rows.push([`\`@leaf-ts/client\` end to end, ${e.callers} callers for ${fmt(e.seconds, 0)} s`, `${fmt(e.idsPerSecond)} IDs/s; ${fmt(e.requestsPerMillionIds, 1)} requests per million IDs; server CPU ${fmt(e.serverCpuPerMillionIds * 1000, 1)} ms per million IDs, ${fmt(e.singleRouteCpuPerMillionIds / e.serverCpuPerMillionIds)}x less than the single-ID route's ${fmt(e.singleRouteCpuPerMillionIds * 1000)} ms; ${fmt(e.errors)} errors`, verdict(CLIENT_E2E_ROW)])
    rows.push([`\`@leaf-ts/client\` \`nextId\` latency, one caller, ${c.latency.seconds} s warm`, `p99.9 ${fmt(c.latency.p999Us, 2)} µs, p99.99 ${fmt(c.latency.p9999Us, 2)} µs over ${fmt(c.latency.samples)} calls${c.latency.floorP9999Us === undefined ? '' : `; the floor (an await of a bare bigint counter, interleaved) p99.9 ${fmt(c.latency.floorP999Us, 2)} µs, p99.99 ${fmt(c.latency.floorP9999Us, 2)} µs`}; ${overFloorSummary(c.latency)}; ${fmt(c.latency.waited)} of them waited for a fetch`, verdict(CLIENT_LATENCY_ROW)])
  }

  // A line per scale, then the largest scale's verdicts, a row each.
  for (const m of r.manyTags ?? []) rows.push([`${fmt(m.tags)} tags in \`leaf_alloc\`, ${BUSY} in use, embedded store`, manyTagsLine(m), undefined])
  if (r.manyTags !== undefined) for (const v of manyTagsVerdicts(r.manyTags)) rows.push([v.row, v.why, verdict(v.row)])

  const caption = `Commit \`${r.run.commit.slice(0, 12)}\`${r.run.dirty ? ' with uncommitted changes in the measured code' : ''}, ${r.run.date.slice(0, 10)}, ` +
    `${r.run.cores} cores, Node ${r.node}, \`${r.command}\` (` + (r.pairs === undefined
      ? `${r.rounds} wall-clock round${r.rounds === 1 ? '' : 's'}, ${r.callgrind === null ? 'no' : r.callgrind.routes[0]?.counts.length ?? 0} counts per route):`
      : `each ratio on ${r.pairs} interleaved pairs of fresh processes, service and ceiling: the median, and the range in brackets):`)
  return [
    caption,
    '',
    '| row | figure | target | met |',
    '|---|---|---|---|',
    ...rows.map(([row, figure, v]) => `| ${row} | ${figure} | ${v?.target ?? ''} | ${met(v)} |`),
  ].join('\n')
}

/** The figures a page holds now, or undefined when it has no markers. */
export function pageFigures (page: string): string | undefined {
  const start = page.indexOf(START)
  const end = page.indexOf(END, start)
  if (start === -1 || end === -1) return undefined
  return page.slice(start + START.length, end).trim()
}

/** The page (docs/performance.md) with its figures replaced by those of `r`. */
export function withFigures (page: string, r: BenchResults): string {
  const start = page.indexOf(START)
  const end = page.indexOf(END, start)
  if (start === -1 || end === -1) throw new Error(`the page has no ${START} ... ${END} markers`)
  return `${page.slice(0, start + START.length)}\n${renderFigures(r)}\n${page.slice(end)}`
}
