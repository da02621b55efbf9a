import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from '../helpers/server-process.js'
import { Report, SERVER_SCRIPT, cleanUpServers, documentedErrors, fmtMs, type Suite } from './harness.js'
import { SCENARIOS } from './scenarios.js'
import { PrivateMariaDb, PrivateZooKeeper, freePort } from './services.js'

// The fault and load suite: real server processes against a private MariaDB and ZooKeeper
// that the scenarios stop and start. Usage: node --import tsx test/fault/run.ts [1 2 ...]
// (no numbers: all scenarios). Needs the build (npm run build). Prints one table, then
// "N passed, M failed"; exits 1 when a scenario failed.

/** No scenario may run longer than this (each is designed to take well under it). */
const SCENARIO_TIMEOUT_MS = 240_000

function log (line: string): void {
  process.stdout.write(`[fault] ${line}\n`)
}

interface Row {
  id: number
  title: string
  report: Report
  duplicates: number | undefined
  ms: number
}

function readdirSafe (dir: string): string[] {
  try {
    return readdirSync(dir)
  } catch {
    return []
  }
}

/** The scenarios named on the command line, or all. */
function selected (): typeof SCENARIOS {
  const wanted = process.argv.slice(2).map(Number).filter((n) => Number.isInteger(n))
  return SCENARIOS.filter((s) => wanted.length === 0 || wanted.includes(s.id))
}

async function main (): Promise<number> {
  const scenarios = selected()
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

  const db = new PrivateMariaDb(join(dir, 'mariadb'), await freePort())
  const zk = new PrivateZooKeeper(join(dir, 'zookeeper'), await freePort())
  const rows: Row[] = []
  try {
    log(`private MariaDB on 127.0.0.1:${db.port}, ZooKeeper on 127.0.0.1:${zk.port} (data under ${dir})`)
    await Promise.all([db.init(), zk.start()])
    const suite: Suite = { db, zk, dir, logDir, documented: documentedErrors() }

    for (const scenario of scenarios) {
      log(`scenario ${scenario.id}: ${scenario.title}`)
      const report = new Report()
      const started = performance.now()
      let duplicates: number | undefined
      let timer: NodeJS.Timeout | undefined
      try {
        // Services a previous scenario stopped are back before the next one.
        if (!db.running) await db.start()
        if (!zk.running) await zk.start()
        await Promise.race([
          scenario.run(suite, report),
          new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${SCENARIO_TIMEOUT_MS} ms`)), SCENARIO_TIMEOUT_MS) }),
        ])
        duplicates = report.finish().duplicates
      } catch (err) {
        report.problems.push(`aborted: ${(err as Error).stack ?? String(err)}`)
      } finally {
        clearTimeout(timer)
        await cleanUpServers(logDir, `s${scenario.id}`)
      }
      const ms = performance.now() - started
      rows.push({ id: scenario.id, title: scenario.title, report, duplicates, ms })
      log(`scenario ${scenario.id}: ${report.problems.length === 0 ? 'PASS' : 'FAIL'} in ${fmtMs(ms)}`)
      for (const note of report.notes) log(`  note: ${note}`)
      for (const problem of report.problems) log(`  problem: ${problem}`)
    }
  } finally {
    await Promise.all([db.stop('SIGTERM'), zk.stop('SIGTERM')])
    // Keep the services' own logs with the servers', then drop the data (some 150 MB).
    const serviceLogs: [string, string][] = [[join(db.dir, 'error.log'), 'mariadb-error.log']]
    for (const file of readdirSafe(zk.dir)) if (file.endsWith('.out')) serviceLogs.push([join(zk.dir, file), file])
    for (const [from, to] of serviceLogs) if (existsSync(from)) cpSync(from, join(logDir, to))
    rmSync(dir, { recursive: true, force: true })
  }

  printTable(rows, performance.now() - suiteStart, logDir)
  const failed = rows.filter((r) => r.report.problems.length > 0).length
  process.stdout.write(`${rows.length - failed} passed, ${failed} failed\n`)
  return failed === 0 && rows.length > 0 ? 0 : 1
}

function printTable (rows: Row[], totalMs: number, logDir: string): void {
  const n = (x: number) => x.toLocaleString('en-US')
  const header = ['#', 'scenario', 'requests', 'IDs checked', 'duplicates', 'failed requests', 'time to recover', 'status']
  const body = rows.map((r) => [
    String(r.id),
    r.title,
    n(r.report.requests),
    n(r.report.ledger.ids),
    r.duplicates === undefined ? '-' : n(r.duplicates),
    n(r.report.failed) + (r.report.expected > 0 ? ` (+${n(r.report.expected)} ${r.report.expectedWhat})` : ''),
    r.report.recover,
    r.report.problems.length === 0 ? 'PASS' : 'FAIL',
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => (row[i] as string).length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(' | ')} |`
  const out = [
    '',
    line(header),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...body.map(line),
    '',
    `Total ${fmtMs(totalMs)}. Server logs: ${logDir}`,
  ]
  for (const r of rows) {
    if (r.report.problems.length > 0) out.push(`Scenario ${r.id} failed: ${r.report.problems.join('; ')}`)
  }
  process.stdout.write(out.join('\n') + '\n')
}

// On Ctrl-C or a kill, exit through process.exit so that the services' exit hook stops the
// processes the suite started.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130))

main().then((code) => process.exit(code), (err: unknown) => {
  process.stderr.write(`[fault] ${(err as Error).stack ?? String(err)}\n`)
  process.stdout.write(`0 passed, ${selected().length} failed\n`)
  process.exit(1)
})
