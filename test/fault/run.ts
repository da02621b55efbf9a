import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { runInfo } from '../../scripts/run-info.js'
import { ROOT } from '../helpers/server-process.js'
import { Report, SERVER_SCRIPT, cleanUpServers, documentedErrors, fmtMs, type Suite } from './harness.js'
import { FIGURES_END, FIGURES_PAGE, FIGURES_START, LATEST, readFigures, renderFigures, renderTable, replaceFigures, type FaultResults, type ScenarioResult } from './render.js'
import { SCENARIOS, STAGES, type Scenario } from './scenarios.js'
import { PrivateMariaDb, PrivateZooKeeper, freePort } from './services.js'

// The fault and load suite: real server processes against a private MariaDB and ZooKeeper
// that the scenarios stop and start. Usage: node --import tsx test/fault/run.ts [1 2 ...]
// [--publish] (no numbers: all scenarios). Runs them in scenarios.ts's STAGES, lanes at once,
// each lane on its own private MariaDB and ZooKeeper. Needs the build (npm run build). Prints one table,
// then "N passed, M failed"; exits 1 when a scenario failed. Every run writes its results to
// test-output/fault/results.json; --publish (or FAULT_PUBLISH=1), on a run of every scenario,
// also writes test/fault/results/latest.json and the figures of docs/reliability.md from it.

/** No scenario may run longer than this (each is designed to take well under it), unless it sets its own. */
const SCENARIO_TIMEOUT_MS = 240_000

function log (line: string): void {
  process.stdout.write(`[fault] ${line}\n`)
}

function readdirSafe (dir: string): string[] {
  try {
    return readdirSync(dir)
  } catch {
    return []
  }
}

const wanted = process.argv.slice(2).filter((a) => /^\d+$/.test(a)).map(Number)
const publish = process.argv.includes('--publish') || process.env.FAULT_PUBLISH === '1'

/** The scenarios named on the command line, or all. */
function selected (): typeof SCENARIOS {
  return SCENARIOS.filter((s) => wanted.length === 0 || wanted.includes(s.id))
}

/** Runs one scenario on a lane's suite, its services up first, and prints its block when it ends. */
async function runScenario (suite: Suite, scenario: Scenario, lane: number): Promise<ScenarioResult> {
  const report = new Report()
  const started = performance.now()
  let duplicates: number | undefined
  let timer: NodeJS.Timeout | undefined
  const timeoutMs = scenario.timeoutMs ?? SCENARIO_TIMEOUT_MS
  log(`scenario ${scenario.id} (lane ${lane}): ${scenario.title}`)
  try {
    // Services a previous scenario stopped are back before the next one.
    if (!suite.db.running) await suite.db.start()
    if (!suite.zk.running) await suite.zk.start()
    await Promise.race([
      scenario.run(suite, report),
      new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs) }),
    ])
    duplicates = report.finish().duplicates
  } catch (err) {
    report.problems.push(`aborted: ${(err as Error).stack ?? String(err)}`)
  } finally {
    clearTimeout(timer)
    await cleanUpServers(suite, `s${scenario.id}`)
  }
  const ms = performance.now() - started
  const status = report.problems.length === 0 ? 'PASS' : 'FAIL'
  // One write per scenario: the lanes' blocks do not interleave.
  log([`scenario ${scenario.id}: ${status} in ${fmtMs(ms)}`, ...report.notes.map((n) => `  note: ${n}`), ...report.problems.map((p) => `  problem: ${p}`)].join('\n[fault] '))
  return {
    id: scenario.id,
    title: scenario.title,
    status,
    requests: report.requests,
    ids: report.ledger.ids,
    duplicates,
    failed: report.failed,
    expected: report.expected,
    expectedWhat: report.expectedWhat,
    slowestMs: Math.round(report.slowestMs),
    recover: report.recover,
    ms: Math.round(ms),
    problems: report.problems,
    notes: report.notes,
  }
}

async function main (): Promise<number> {
  const scenarios = selected()
  const unknown = process.argv.slice(2).filter((a) => !/^\d+$/.test(a) && a !== '--publish')
  if (unknown.length > 0 || wanted.some((id) => !SCENARIOS.some((s) => s.id === id))) {
    log(`usage: run.ts [scenario numbers ${SCENARIOS.map((s) => s.id).join(' ')}] [--publish]; got ${process.argv.slice(2).join(' ')}`)
    return 1
  }
  if (publish && (scenarios.length !== SCENARIOS.length || process.env.FAULT_SERVER_JS !== undefined)) {
    log('--publish needs a run of every scenario (name none) on this checkout\'s build (no FAULT_SERVER_JS)')
    return 1
  }
  if (publish && readFigures(readFileSync(FIGURES_PAGE, 'utf8')) === undefined) {
    log(`docs/reliability.md has no figures block to publish into (a line ${FIGURES_START}, then ${FIGURES_END})`)
    return 1
  }
  // Taken before anything runs: the commit and src/ state the figures describe.
  const info = runInfo()
  if (!existsSync(SERVER_SCRIPT)) {
    log(`${SERVER_SCRIPT} is missing: run npm run build first`)
    process.stdout.write(`0 passed, ${scenarios.length} failed\n`)
    return 1
  }
  const dir = mkdtempSync(join(tmpdir(), 'leaf-fault-'))
  const logDir = join(ROOT, 'test-output', 'fault')
  rmSync(logDir, { recursive: true, force: true })
  mkdirSync(logDir, { recursive: true })
  const suiteStart = performance.now()

  /** A lane's private MariaDB and ZooKeeper, made when its first scenario runs and kept across stages. */
  const lanes: Suite[] = []
  async function laneSuite (lane: number): Promise<Suite> {
    const existing = lanes[lane]
    if (existing !== undefined) return existing
    const laneDir = join(dir, `lane${lane}`)
    const db = new PrivateMariaDb(join(laneDir, 'mariadb'), await freePort())
    const zk = new PrivateZooKeeper(join(laneDir, 'zookeeper'), await freePort())
    const suite: Suite = { db, zk, dir: laneDir, logDir, documented: documentedErrors(), servers: [] }
    lanes[lane] = suite
    log(`lane ${lane}: private MariaDB on 127.0.0.1:${db.port}, ZooKeeper on 127.0.0.1:${zk.port} (data under ${laneDir})`)
    await Promise.all([db.init(), zk.start()])
    return suite
  }

  const rows: ScenarioResult[] = []
  try {
    for (const stage of STAGES) {
      await Promise.all(stage.map(async (ids, lane) => {
        // The lane's scenarios in its order, those not asked for left out.
        for (const scenario of ids.flatMap((id) => scenarios.filter((s) => s.id === id))) {
          rows.push(await runScenario(await laneSuite(lane), scenario, lane))
        }
      }))
    }
  } finally {
    await Promise.all(lanes.map(async (suite, lane) => {
      await Promise.all([suite.db.stop('SIGTERM'), suite.zk.stop('SIGTERM')])
      // Keep the services' own logs with the servers', then drop the data (some 150 MB a lane).
      const serviceLogs: [string, string][] = [[join(suite.db.dir, 'error.log'), 'mariadb-error.log']]
      for (const file of readdirSafe(suite.zk.dir)) if (file.endsWith('.out')) serviceLogs.push([join(suite.zk.dir, file), file])
      for (const [from, to] of serviceLogs) if (existsSync(from)) cpSync(from, join(logDir, `lane${lane}-${to}`))
    }))
    rmSync(dir, { recursive: true, force: true })
  }
  rows.sort((a, b) => a.id - b.id)

  const results: FaultResults = { run: info, selected: wanted, totalMs: Math.round(performance.now() - suiteStart), scenarios: rows }
  const resultsFile = join(logDir, 'results.json')
  writeFileSync(resultsFile, JSON.stringify(results, null, 2) + '\n')
  const out = ['', renderTable(rows), '', `Total ${fmtMs(results.totalMs)}. Server logs: ${logDir}; results: ${resultsFile}`]
  for (const r of rows) if (r.status === 'FAIL') out.push(`Scenario ${r.id} failed: ${r.problems.join('; ')}`)
  process.stdout.write(out.join('\n') + '\n')
  if (publish) {
    const page = replaceFigures(readFileSync(FIGURES_PAGE, 'utf8'), renderFigures(results))
    mkdirSync(dirname(LATEST), { recursive: true })
    writeFileSync(LATEST, JSON.stringify(results, null, 2) + '\n')
    writeFileSync(FIGURES_PAGE, page)
    log(`published: ${LATEST} and the figures of docs/reliability.md${info.dirty ? ' (the measured code had uncommitted changes: the figures say so)' : ''}`)
  }
  const failed = rows.filter((r) => r.status === 'FAIL').length
  process.stdout.write(`${rows.length - failed} passed, ${failed} failed\n`)
  return failed === 0 && rows.length > 0 ? 0 : 1
}

// On Ctrl-C or a kill, exit through process.exit so that the services' exit hook stops the
// processes the suite started.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130))

main().then((code) => process.exit(code), (err: unknown) => {
  process.stderr.write(`[fault] ${(err as Error).stack ?? String(err)}\n`)
  process.stdout.write(`0 passed, ${selected().length} failed\n`)
  process.exit(1)
})
