import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'

// Instructions per request, counted by valgrind's callgrind: the same figure on a busy machine
// as on an idle one, so the single-ID target can be checked without the wall-clock noise.
//
// Each server runs under callgrind with `node --single-threaded` (the JIT and the GC work on
// the main thread, so they are counted, and counted the same way in every run). Counting is
// off during a warm-up of several separate load runs: every new batch of connections changes
// the shape of Node's socket objects and makes V8 recompile, and this settles after two or
// three runs. Then counting is switched on for a fixed number of requests. A run with more
// than 1% of its count in V8's optimizing compiler (functions in v8::internal::compiler) is
// refused, so a late recompile does not pass for the steady state.

export interface CallgrindRow { name: string, instructionsPerRequest: number, ratioToCeiling: number | null }

const WARM_RUNS = 5
const WARM_REQUESTS = 8_000
const COUNTED_REQUESTS = 3_000
const CONNECTIONS = 10

export function callgrindAvailable (): boolean {
  return spawnSync('valgrind', ['--version']).status === 0 && spawnSync('callgrind_control', ['-h']).status === 0
}

async function countOne (args: string[], path: string, cwd: string, pin: string[]): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-callgrind-'))
  const command = [...pin, 'valgrind', '--tool=callgrind', '--separate-threads=yes', '--instr-atstart=no',
    `--callgrind-out-file=${join(dir, 'cg.out')}`, process.execPath, '--single-threaded', ...args]
  const proc = spawn(command[0] as string, command.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } })
  let out = ''
  proc.stderr.on('data', () => {})
  const exited = new Promise<void>((resolve) => proc.once('close', () => resolve()))
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
    for (let i = 0; i < WARM_RUNS; i++) await autocannon({ url: url + path, connections: CONNECTIONS, amount: WARM_REQUESTS })
    // callgrind_control exits 0 even when it finds no run: its output says whether it did.
    const control = (state: 'on' | 'off') => {
      const r = spawnSync('callgrind_control', ['-i', state, String(proc.pid)], { encoding: 'utf8', timeout: 30_000 })
      if (r.status !== 0 || /not detected|No active callgrind/i.test(r.stdout + r.stderr)) {
        throw new Error(`callgrind_control -i ${state} failed: ${r.stdout}${r.stderr}`)
      }
    }
    control('on')
    const counted = await autocannon({ url: url + path, connections: CONNECTIONS, amount: COUNTED_REQUESTS })
    control('off')
    const failed = counted.errors + counted.non2xx + counted.timeouts
    if (failed > 0) throw new Error(`${failed} failed requests while counting ${path}`)
    proc.kill('SIGTERM')
    const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000)
    await exited
    clearTimeout(killer)
    // With --separate-threads the main thread's counts are in the file ending in -01.
    const file = readdirSync(dir).find((f) => f.endsWith('-01'))
    if (file === undefined) throw new Error(`callgrind wrote no main-thread file in ${dir}`)
    const text = readFileSync(join(dir, file), 'utf8')
    const totals = /^totals: (\d+)/m.exec(text)
    if (totals === null) throw new Error(`no totals line in ${file}`)
    const compiled = readCompiles(text)
    if (compiled > 0.01) throw new Error(`V8's optimizing compiler ran while counting ${path} (${(compiled * 100).toFixed(1)}% of the count): not a steady state`)
    const perRequest = Number(totals[1]) / COUNTED_REQUESTS
    if (perRequest < 1000) throw new Error(`${perRequest} instructions per request for ${path}: counting did not cover the requests`)
    return perRequest
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL')
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  }
}

/** Share of the counted instructions spent in V8's optimizing compiler (TurboFan). */
function readCompiles (text: string): number {
  // callgrind's format: "fn=(id) name" opens a function (the name only the first time an id
  // is seen, in an fn= or cfn= line); cost lines are "<position> <count>"; the cost line after
  // "calls=" is the call's inclusive cost, already counted in the callee.
  const names = new Map<string, string>()
  let inCompiler = false
  let afterCall = false
  let compiler = 0
  let total = 0
  for (const line of text.split('\n')) {
    const fn = /^c?fn=\((\d+)\)(?: (.*))?$/.exec(line)
    if (fn !== null) {
      if (fn[2] !== undefined) names.set(fn[1] as string, fn[2])
      if (line.startsWith('fn=')) inCompiler = (names.get(fn[1] as string) ?? '').includes('v8::internal::compiler::')
    } else if (line.startsWith('calls=')) {
      afterCall = true
    } else if (/^[0-9+*-]/.test(line)) {
      if (afterCall) {
        afterCall = false
        continue
      }
      const cost = Number(line.split(' ')[1] ?? 0)
      total += cost
      if (inCompiler) compiler += cost
    }
  }
  return total === 0 ? 0 : compiler / total
}

/** `pin`: a command prefix that pins the server to a core (`taskset -c 0`), or none. */
export async function runCallgrind (ceiling: string[], leaf: string[], routes: { name: string, path: string }[], cwd: string, pin: string[]): Promise<CallgrindRow[]> {
  const base = await countOne(ceiling, '/api/ceiling/get/order', cwd, pin)
  const rows: CallgrindRow[] = [{ name: 'bare Fastify (ceiling)', instructionsPerRequest: base, ratioToCeiling: null }]
  for (const r of routes) {
    const n = await countOne(leaf, r.path, cwd, pin)
    rows.push({ name: r.name, instructionsPerRequest: n, ratioToCeiling: n / base })
  }
  return rows
}
