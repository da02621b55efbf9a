import { spawn, type ChildProcess } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../../', import.meta.url))
export const SERVER_JS = fileURLToPath(new URL('../../dist/server.js', import.meta.url))

export interface ServerProcess {
  url: string
  port: number
  proc: ChildProcess
  /** Every line the process wrote to stdout and stderr so far. */
  output: string[]
  /** Sends the signal and resolves with the exit code. */
  stop (signal?: NodeJS.Signals): Promise<number | null>
  exited: Promise<number | null>
}

export interface StartOptions {
  args?: string[]
  env?: Record<string, string>
  cwd?: string
  /** How long to wait for "Server listening". */
  timeoutMs?: number
  /** The server script: dist/server.js unless given (the fault suite may test another build). */
  script?: string
  /** Told of the child process as soon as it is spawned (to kill it on any exit). */
  onSpawn?: (proc: ChildProcess) => void
  /** A command that execs the server (`['taskset', '-c', '0']`): its process is `proc`. */
  wrapper?: string[]
  /**
   * Let a server started in a folder without config/leaf.properties fall back to the shipped
   * file, as the server does. Off by default: such a test runs on the built-in defaults and
   * its arguments alone (LEAF_CONFIG names emptyConfigFile()), whatever the shipped file enables.
   */
  shippedConfig?: boolean
}

/** How long exited waits, after the process's exit, for the rest of its output. */
const OUTPUT_GRACE_MS = 2000

let emptyConfig: string | undefined
/**
 * A properties file of the built-in defaults with both modes off: a test turns on what it
 * tests (unset, both enable keys are on, as in Java Leaf).
 */
export function emptyConfigFile (): string {
  if (emptyConfig === undefined) {
    emptyConfig = join(mkdtempSync(join(tmpdir(), 'leaf-empty-config-')), 'leaf.properties')
    writeFileSync(emptyConfig, 'leaf.segment.enable=false\nleaf.snowflake.enable=false\n')
  }
  return emptyConfig
}

/**
 * A copy of the install (dist/, config/, package.json; node_modules linked) in a fresh folder:
 * a server run from it has its own embedded default store (`<dir>/data/leaf.db`, made at its
 * first start with the demo tags), as a new user's first `npm start` has.
 */
export function tempInstall (): { dir: string, script: string } {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-install-'))
  for (const part of ['dist', 'config', 'package.json']) cpSync(join(ROOT, part), join(dir, part), { recursive: true })
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  return { dir, script: join(dir, 'dist/server.js') }
}

/** Runs the built server (`node dist/server.js`) and waits until it listens on 127.0.0.1. */
export function startServer ({ args = [], env = {}, cwd = ROOT, timeoutMs = 20_000, script = SERVER_JS, onSpawn, wrapper = [], shippedConfig = false }: StartOptions = {}): Promise<ServerProcess> {
  const command = [...wrapper, process.execPath, script, '--server.host=127.0.0.1', ...args]
  const named = args.some((a) => a === '--config' || a.startsWith('--config=')) || env.LEAF_CONFIG !== undefined
  const noFile = !shippedConfig && !named && !existsSync(join(cwd, 'config/leaf.properties'))
  const proc = spawn(command[0] as string, command.slice(1), {
    cwd,
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'info', ...(noFile ? { LEAF_CONFIG: emptyConfigFile() } : {}), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  onSpawn?.(proc)
  const output: string[] = []
  // 'exit' can come before the last lines are read from the pipes (Node's docs say so), and a
  // check of the last log lines (a SIGTERM's 'worker-id lease released') then misses them: so
  // exited waits for both pipes to end too, at most OUTPUT_GRACE_MS.
  const ended = (stream: Readable) => stream.readableEnded ? Promise.resolve() : new Promise<void>((resolve) => { stream.once('end', resolve); stream.once('close', resolve) })
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => {
    const grace = setTimeout(() => resolve(code), OUTPUT_GRACE_MS)
    Promise.all([ended(proc.stdout), ended(proc.stderr)]).then(() => { clearTimeout(grace); resolve(code) }, () => {})
  }))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`server did not listen in time:\n${output.join('\n')}`)) }, timeoutMs)
    const onLine = (line: string) => {
      output.push(line)
      const m = /Server listening at (https?):\/\/127\.0\.0\.1:(\d+)/.exec(line)
      if (m !== null) {
        clearTimeout(timer)
        const port = Number(m[2])
        resolve({
          url: `${m[1]}://127.0.0.1:${port}`,
          port,
          proc,
          output,
          exited,
          async stop (signal = 'SIGTERM') {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal)
            return exited
          },
        })
      }
    }
    for (const stream of [proc.stdout, proc.stderr]) {
      let buffered = ''
      stream.setEncoding('utf8')
      stream.on('data', (chunk: string) => {
        buffered += chunk
        const lines = buffered.split('\n')
        buffered = lines.pop() ?? ''
        lines.forEach(onLine)
      })
    }
    exited.then((code) => { clearTimeout(timer); reject(new Error(`server exited with ${code} before listening:\n${output.join('\n')}`)) }, reject)
  })
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 })

export interface Answer { status: number, body: string, headers: Record<string, string | string[] | undefined> }

/** A GET over a keep-alive connection. */
export function get (url: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

/** Runs `task` for i in [0, total) with at most `concurrency` at once. */
export async function pool<T> (total: number, concurrency: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(total)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, async () => {
    while (next < total) {
      const i = next++
      results[i] = await task(i)
    }
  }))
  return results
}

/** The JSON log lines of a server's output. */
export function logLines (output: string[]): Record<string, unknown>[] {
  return output.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>]
    } catch {
      return []
    }
  })
}
