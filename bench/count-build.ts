import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from '../scripts/run-info.js'
import { countRoutes } from './callgrind.js'
import { seedSqlite } from '../test/helpers/sqlite.js'

// Counts another build of the service the way the bench counts this one, to compare builds:
//   node --import tsx bench/count-build.ts <path to its server.js> [processes] [counts]
// One line of JSON per process: each single-ID route's instructions per request, the calls of
// the tick records' slow path and the GC's instructions per count. BENCH_KEEP_DUMPS=<folder>
// keeps callgrind's files. docs/performance.md has the builds compared with it.

const [server, processes = '1', counts = '3'] = process.argv.slice(2)
if (server === undefined) throw new Error('usage: node --import tsx bench/count-build.ts <server.js> [processes] [counts]')
const pin = ['taskset', '-c', '0']
for (let p = 0; p < Number(processes); p++) {
  const data = mkdtempSync(join(tmpdir(), 'leaf-count-'))
  const args = [server, '--server.host=127.0.0.1', '--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(data, 'leaf.db'))}`,
    '--leaf.snowflake.enable=true', '--leaf.snowflake.worker.id=0', `--leaf.snowflake.cache.dir=${data}`]
  const started = Date.now()
  const rows = await countRoutes(args, [{ name: 'segment', path: '/api/segment/get/order' }, { name: 'snowflake', path: '/api/snowflake/get/order' }], Number(counts), ROOT, pin)
  const round = (values: number[]) => values.map((v) => Math.round(v * 10) / 10)
  console.log(JSON.stringify({
    server,
    seconds: (Date.now() - started) / 1000,
    rows: rows.map((r) => ({ name: r.name, counts: round(r.counts), tickSlowPath: round(r.tickSlowPath), gc: round(r.gc), refused: r.refused.length })),
  }))
  rmSync(data, { recursive: true, force: true })
}
