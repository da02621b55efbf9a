import { spawn, spawnSync } from 'node:child_process'
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import autocannon from 'autocannon'
import type { CountedRow } from './results.js'

// Instructions per request, counted by valgrind's callgrind: the same figure on a busy machine
// as on an idle one, so the single-ID target can be checked without the wall-clock noise.
//
// A server runs under callgrind with `node --single-threaded` (the JIT and the GC work on the
// main thread, so they are counted, and counted the same way in every run). One process serves
// all its routes: counting is off during a warm-up of several separate load runs on every
// route in turn (every new batch of connections changes the shape of Node's socket objects and
// makes V8 recompile; this settles after two or three runs). Then each route is counted
// `rounds` times, the routes taking turns; after each count callgrind writes the count to a
// file of its own (a dump), which also zeroes it. A count with more than 5% in V8's optimizing
// compiler (functions in v8::internal::compiler) is not a steady state: it is refused, recorded
// and taken again; a route with more than MAX_REFUSED such counts fails the run. Below that,
// the compiler's own instructions are left out of the count and recorded beside it.

const WARM_RUNS = 5
const WARM_REQUESTS = 8_000
export const COUNTED_REQUESTS = 3_000
/**
 * A count with more of its instructions in TurboFan than this was taken during a burst of
 * recompiles (20% to 40% of a count when it happens). Below it, the occasional recompile of a
 * long-running server (1% to 3% of some counts) is left out of the count: the compiler's own
 * instructions are subtracted, what the recompile changed in the code stays.
 */
const MAX_COMPILE_SHARE = 0.05
/** Refused counts allowed per route before the run fails. */
const MAX_REFUSED = 5
const CONNECTIONS = 10

export function callgrindAvailable (): boolean {
  return spawnSync('valgrind', ['--version']).status === 0 && spawnSync('callgrind_control', ['-h']).status === 0
}

/**
 * The body length of one answer to `GET url`, asked with the bytes autocannon sends, on a
 * connection of its own: a request of another shape (fetch's headers) makes V8 recompile the
 * server's HTTP code, which the next count would include.
 */
export function answerLength (url: string): Promise<number> {
  const { hostname, port, pathname, search } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let head = ''
    socket.setEncoding('latin1')
    socket.setTimeout(60_000, () => socket.destroy(new Error(`no answer from ${url} within 60 s`)))
    socket.on('error', reject)
    socket.on('data', (chunk: string) => {
      head += chunk
      const end = head.indexOf('\r\n\r\n')
      if (end === -1) return
      const status = /^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]
      const length = /\r\ncontent-length: *(\d+)/i.exec(head.slice(0, end))?.[1]
      socket.destroy()
      if (status === undefined || !status.startsWith('2') || length === undefined) reject(new Error(`${url} answered: ${head.slice(0, end)}`))
      else resolve(Number(length))
    })
    socket.write(`GET ${pathname}${search} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nConnection: keep-alive\r\n\r\n`)
  })
}

/**
 * Counts each route of one server `rounds` times, in one process warmed on all of them.
 * `pin`: a command prefix that pins the server to a core (`taskset -c 0`), or none.
 */
export async function countRoutes (args: string[], routes: { name: string, path: string }[], rounds: number, cwd: string, pin: string[]): Promise<CountedRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-callgrind-'))
  const outFile = join(dir, 'cg.out')
  const command = [...pin, 'valgrind', '--tool=callgrind', '--separate-threads=yes', '--instr-atstart=no',
    `--callgrind-out-file=${outFile}`, process.execPath, '--single-threaded', ...args]
  const proc = spawn(command[0] as string, command.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } })
  let out = ''
  proc.stderr.on('data', () => {})
  const exited = new Promise<void>((resolve) => proc.once('close', () => resolve()))
  // callgrind_control exits 0 even when it finds no run: its output says whether it did.
  const control = (...command: string[]) => {
    const r = spawnSync('callgrind_control', [...command, String(proc.pid)], { encoding: 'utf8', timeout: 60_000 })
    if (r.status !== 0 || /not detected|No active callgrind/i.test(r.stdout + r.stderr)) {
      throw new Error(`callgrind_control ${command.join(' ')} failed: ${r.stdout}${r.stderr}`)
    }
  }
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`server under callgrind did not listen within 120 s: ${out}`)), 120_000)
      proc.stdout.on('data', (chunk: Buffer) => {
        out += chunk
        const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)
        if (m !== null) {
          clearTimeout(timer)
          resolve(m[1] as string)
        }
      })
      proc.once('error', reject)
      proc.once('exit', (code) => reject(new Error(`server under callgrind exited with ${code}: ${out}`)))
    })
    for (let i = 0; i < WARM_RUNS; i++) {
      for (const r of routes) {
        const warm = await autocannon({ url: url + r.path, connections: CONNECTIONS, amount: WARM_REQUESTS })
        const failed = warm.errors + warm.non2xx + warm.timeouts
        if (failed > 0) throw new Error(`${failed} failed requests while warming ${r.path}`)
      }
    }
    const results: CountedRow[] = routes.map((r) => ({ ...r, bodyLengths: [], counts: [], tickSlowPath: [], gc: [], compiler: [], refused: [] }))
    let dumps = 0
    const countOnce = async (r: CountedRow) => {
      const bodyLength = await answerLength(url + r.path)
      control('-i', 'on')
      const counted = await autocannon({ url: url + r.path, connections: CONNECTIONS, amount: COUNTED_REQUESTS })
      control('-i', 'off')
      control(`--dump=count-${++dumps}`)
      const failed = counted.errors + counted.non2xx + counted.timeouts
      if (failed > 0 || counted['2xx'] !== COUNTED_REQUESTS) {
        throw new Error(`${failed} failed requests (${counted['2xx']} of ${COUNTED_REQUESTS} answered 2xx) while counting ${r.path}`)
      }
      const { perRequest, compiled, compilerPerRequest, tickSlowPath, gcPerRequest } = readDump(`${outFile}.${dumps}-01`, r.path)
      if (compiled > MAX_COMPILE_SHARE) {
        r.refused.push({ instructionsPerRequest: perRequest, compileShare: compiled })
        if (r.refused.length > MAX_REFUSED) {
          throw new Error(`V8's optimizing compiler ran in ${r.refused.length} counts of ${r.path} (${r.refused.map((x) => `${(x.compileShare * 100).toFixed(1)}%`).join(', ')} of the count): no steady state`)
        }
        return
      }
      r.bodyLengths.push(bodyLength)
      r.counts.push(perRequest - compilerPerRequest)
      r.tickSlowPath.push(tickSlowPath)
      r.gc.push(gcPerRequest)
      r.compiler.push(compilerPerRequest)
    }
    // The routes take turns, so each count follows the other routes' load, as in service.
    while (results.some((r) => r.counts.length < rounds)) {
      for (const r of results) if (r.counts.length < rounds) await countOnce(r)
    }
    return results
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM')
      const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000)
      await exited
      clearTimeout(killer)
    }
    // BENCH_KEEP_DUMPS=<folder>: keep the counts' files there, for callgrind_annotate.
    if (process.env.BENCH_KEEP_DUMPS !== undefined) cpSync(dir, join(process.env.BENCH_KEEP_DUMPS, basename(dir)), { recursive: true })
    rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * Instructions per request of one dump (with --separate-threads, the main thread's file ends in
 * -01), all of them and those of V8's optimizing compiler, and the compiler's share.
 */
export function readDump (file: string, path: string): { perRequest: number, compiled: number, compilerPerRequest: number, tickSlowPath: number, gcPerRequest: number } {
  const text = readFileSync(file, 'utf8')
  const totals = /^totals: (\d+)/m.exec(text)
  if (totals === null) throw new Error(`no totals line in ${file} (${readdirSync(join(file, '..')).join(', ')})`)
  const perRequest = Number(totals[1]) / COUNTED_REQUESTS
  if (perRequest < 1000) throw new Error(`${perRequest} instructions per request for ${path}: counting did not cover the requests`)
  const profile = readProfile(text)
  return { perRequest, compiled: profile.compileShare, compilerPerRequest: perRequest * profile.compileShare, tickSlowPath: profile.slowPathCalls / COUNTED_REQUESTS, gcPerRequest: profile.gc / COUNTED_REQUESTS }
}

/**
 * V8's runtime function behind the tick records' slow path (docs/performance.md): with the feedback of
 * Node's nextTick literal megamorphic, each nextTick record defines its properties through it
 * (20 to 30 calls and 25,000 to 37,000 instructions per request).
 */
export const TICK_SLOW_PATH = 'Runtime_DefineKeyedOwnPropertyInLiteral'

/** V8's entry to every garbage collection: the inclusive cost of its calls is the GC's. */
const GC = 'v8::internal::Heap::CollectGarbage('

/**
 * Share of the counted instructions spent in V8's optimizing compiler (TurboFan), the calls of
 * TICK_SLOW_PATH and the instructions spent in garbage collection.
 */
function readProfile (text: string): { compileShare: number, slowPathCalls: number, gc: number } {
  // callgrind's format: "fn=(id) name" opens a function and "cfn=(id) name" names a callee (the
  // name only the first time an id is seen); cost lines are "<position> <count>"; "calls=<n>
  // <position>" counts the calls to the callee, and the cost line after it is the call's
  // inclusive cost, already counted in the callee.
  const names = new Map<string, string>()
  let inCompiler = false
  let callee = ''
  let afterCall = false
  let compiler = 0
  let total = 0
  let slowPathCalls = 0
  let gc = 0
  for (const line of text.split('\n')) {
    const fn = /^(c?fn)=\((\d+)\)(?: (.*))?$/.exec(line)
    if (fn !== null) {
      if (fn[3] !== undefined) names.set(fn[2] as string, fn[3])
      const name = names.get(fn[2] as string) ?? ''
      if (fn[1] === 'fn') inCompiler = name.includes('v8::internal::compiler::')
      else callee = name
    } else if (line.startsWith('calls=')) {
      afterCall = true
      if (callee.includes(TICK_SLOW_PATH)) slowPathCalls += Number(line.slice('calls='.length).split(' ')[0])
    } else if (/^[0-9+*-]/.test(line)) {
      if (afterCall) {
        afterCall = false
        if (callee.startsWith(GC)) gc += Number(line.split(' ')[1] ?? 0)
        continue
      }
      const cost = Number(line.split(' ')[1] ?? 0)
      total += cost
      if (inCompiler) compiler += cost
    }
  }
  return { compileShare: total === 0 ? 0 : compiler / total, slowPathCalls, gc }
}
