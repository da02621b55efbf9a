import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

// A measured server's CPU time, read from /proc: shared by the HTTP rows and the client's rows
// (the servers themselves are started by test/helpers/server-process.ts, as the tests do).

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100)

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
