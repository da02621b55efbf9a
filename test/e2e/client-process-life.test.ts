import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { freePort } from '../helpers/ports.js'

// The client in a process of its own, as a user's script holds it: a pending call keeps the
// process alive until it settles (with every timer unref()ed, a top-level await on a call to
// unreachable servers ended the script with exit code 13, no answer and no error), and an
// idle client never keeps a process alive.

const CLIENT = new URL('../../client/src/index.ts', import.meta.url).href
/** Far longer than any run here takes: a child still alive then has hung. */
const KILL_AFTER_MS = 30_000
/** A deadline that no run reaches: a timer of it left behind would hold the process this long. */
const LONG_TIMEOUT_MS = 20_000

/**
 * Makes one call at the top level, as a user's script does, and prints what it got as a JSON
 * line, then how long after that the process exited (from its 'exit' event: nothing was left
 * to run).
 */
const SCRIPT = `
const { createLeafClient } = await import(process.argv[2])
const { servers, options, call } = JSON.parse(process.argv[3])
const leaf = createLeafClient({ servers, ...options })
const start = performance.now()
let settledAt = start
const print = (line) => process.stdout.write(JSON.stringify(line) + '\\n')
process.on('exit', () => print({ exitAfterMs: performance.now() - settledAt }))
try {
  if (call === 'nextId') print({ id: String(await leaf.nextId('segment', 'k')) })
  else if (call === 'nextIds') print({ ids: (await leaf.nextIds('segment', 'k', 500)).length })
  else if (call === 'tryNextId') print({ id: String(leaf.tryNextId('segment', 'k')) })
} catch (err) {
  print({ code: err.code, message: err.message, afterMs: performance.now() - start })
}
settledAt = performance.now()
`

interface Run {
  code: number | null
  killed: boolean
  answer: { id?: string, ids?: number, code?: string, message?: string, afterMs?: number }
  exitAfterMs: number | undefined
  stderr: string
}

const scriptPath = join(tempDir('leaf-client-life-'), 'call.mjs')
writeFileSync(scriptPath, SCRIPT)

function runScript (servers: string[], options: Record<string, unknown>, call: string): Promise<Run> {
  // Through env -u: tap puts its process-info hook into every child's NODE_OPTIONS (whatever
  // env is given to spawn), and that hook's exit handler turned the exit code 13 of an
  // unsettled top-level await into 0.
  const args = ['-u', 'NODE_OPTIONS', process.execPath, '--import', 'tsx', scriptPath, CLIENT, JSON.stringify({ servers, options, call })]
  const proc = spawn('env', args, { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let stderr = ''
  proc.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  proc.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  let killed = false
  const kill = setTimeout(() => { killed = true; proc.kill('SIGKILL') }, KILL_AFTER_MS)
  return new Promise((resolve) => proc.once('close', (code) => {
    clearTimeout(kill)
    const lines = out.trim().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>)
    const last = lines.at(-1) as { exitAfterMs?: number } | undefined
    resolve({ code, killed, answer: lines[0] ?? {}, exitAfterMs: last?.exitAfterMs, stderr })
  }))
}

/** A port nothing listens on: connections to it are refused. */
const refused = `http://127.0.0.1:${await freePort()}`

t.test('every server refuses: a top-level await gets UNREACHABLE long before timeoutMs, and the script ends with exit code 0', async (t) => {
  for (const [prefetch, call] of [[true, 'nextId'], [false, 'nextId'], [true, 'nextIds']] as const) {
    const run = await runScript([refused], { prefetch, timeoutMs: LONG_TIMEOUT_MS }, call)
    const what = `prefetch ${prefetch}, ${call}`
    t.equal(run.code, 0, `${what}: exit code 0 (13 was an unsettled top-level await)${run.stderr === '' ? '' : `; stderr: ${run.stderr}`}`)
    // README, Failover: refused connections, round after round, end the call with UNREACHABLE.
    t.match(run.answer, { code: 'UNREACHABLE', message: /^1 server refused the connection \(2 attempts in \d+ ms\)/ }, `${what}: UNREACHABLE, with the counts`)
    t.ok((run.answer.afterMs ?? Infinity) < 2000, `${what}: long before its ${LONG_TIMEOUT_MS} ms timeout (${run.answer.afterMs?.toFixed(0)} ms)`)
    t.ok((run.exitAfterMs ?? Infinity) < 1000, `${what}: exited ${run.exitAfterMs?.toFixed(0)} ms after it`)
  }
})

t.test('a server that takes connections and never answers: TIMEOUT at timeoutMs, exit code 0', async (t) => {
  const sockets = new Set<Socket>()
  const silent = createTcpServer((socket) => { sockets.add(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close() })
  const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`
  for (const prefetch of [true, false]) {
    const run = await runScript([url], { prefetch, timeoutMs: 600, requestTimeoutMs: 200 }, 'nextId')
    t.equal(run.code, 0, `prefetch ${prefetch}: exit code 0${run.stderr === '' ? '' : `; stderr: ${run.stderr}`}`)
    t.match(run.answer, { code: 'TIMEOUT', message: /within 600 ms/ }, `prefetch ${prefetch}: TIMEOUT`)
    t.ok((run.exitAfterMs ?? Infinity) < 1000, `prefetch ${prefetch}: exited ${run.exitAfterMs?.toFixed(0)} ms after it`)
  }
})

t.test('an idle client does not keep a process alive', async (t) => {
  let next = 1
  const server = createHttpServer((req, res) => {
    const count = Number(new URL(req.url ?? '', 'http://x').searchParams.get('count'))
    const ids = Array.from({ length: count }, () => next++)
    res.setHeader('content-type', 'text/plain')
    res.end(ids.join('\n') + '\n')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const cases = [
    { what: 'no call', servers: [url], options: {}, call: 'none', answer: {} },
    // The call waited for the first fetch: its deadline timer must be gone with its answer.
    { what: 'one nextId answered from a fetch', servers: [url], options: {}, call: 'nextId', answer: { id: '1' } },
    { what: 'one nextId without prefetch', servers: [url], options: { prefetch: false }, call: 'nextId', answer: { id: /^\d+$/ } },
    // Nobody awaits the fetch tryNextId starts: its retries wait on unref()ed timers.
    { what: 'a tryNextId whose background fetch is refused', servers: [refused], options: {}, call: 'tryNextId', answer: { id: 'undefined' } },
  ]
  for (const c of cases) {
    const run = await runScript(c.servers, { timeoutMs: LONG_TIMEOUT_MS, ...c.options }, c.call)
    t.equal(run.code, 0, `${c.what}: exit code 0${run.stderr === '' ? '' : `; stderr: ${run.stderr}`}`)
    t.notOk(run.killed, `${c.what}: exited on its own`)
    t.match(run.answer, c.answer, `${c.what}: its answer`)
    t.ok((run.exitAfterMs ?? Infinity) < 2000, `${c.what}: exited ${run.exitAfterMs?.toFixed(0)} ms after its last call, not at its ${LONG_TIMEOUT_MS} ms timeout`)
  }
})
