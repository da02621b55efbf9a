import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

// A benchmarked server process: started (on core 0 when pinned) until it says where it
// listens, and its CPU time read from /proc. Shared by the HTTP rows and the client's rows.

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100)

export interface ServerProcess { url: string, proc: ChildProcess }

/** Starts `node <args>`, resolving once it logs "Server listening at"; rejects if it exits first. */
export function startServer (args: string[], o: { pinned: boolean, cwd: string, env: NodeJS.ProcessEnv }): Promise<ServerProcess> {
  const command = o.pinned ? ['taskset', '-c', '0', process.execPath, ...args] : [process.execPath, ...args]
  const proc = spawn(command[0] as string, command.slice(1), { cwd: o.cwd, stdio: ['ignore', 'pipe', 'inherit'], env: { ...o.env, LOG_LEVEL: 'info' } })
  return new Promise((resolve, reject) => {
    let out = ''
    proc.stdout?.on('data', (chunk: Buffer) => {
      out += chunk
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m !== null) resolve({ url: m[1] as string, proc })
    })
    proc.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)))
  })
}

/**
 * CPU time of a process, all its threads, in seconds: the run time the scheduler accounted to
 * each thread (/proc/<pid>/task/<tid>/schedstat, in nanoseconds), so 20,000 requests are not
 * measured in 10 ms ticks. Falls back to utime + stime from /proc/<pid>/stat.
 */
export function cpuSeconds (pid: number): number {
  let ns = 0
  let threads = 0
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0])
        threads++
      } catch {
        // A thread that ended since the listing: its time is gone from both readings.
      }
    }
  } catch {
    // No /proc/<pid>/task: fall back below.
  }
  if (threads > 0 && Number.isFinite(ns)) return ns / 1e9
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
}
