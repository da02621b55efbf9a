import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse, stringify } from 'dot-properties'

// Java Leaf's local worker-id cache, `workerID.properties`, with the last timestamp added
// so a start from the cache can tell whether the clock went back.
export const CACHE_FILE = 'workerID.properties'

export interface CachedWorker {
  workerId: number
  /** The last time (ms) this instance wrote to ZooKeeper; undefined in a file Leaf wrote. */
  lastTimestamp: number | undefined
}

export function readWorkerCache (dir: string): CachedWorker | undefined {
  let text: string
  try {
    text = readFileSync(join(dir, CACHE_FILE), 'utf8')
  } catch {
    return undefined
  }
  const values = parse(text) as Record<string, string>
  const digits = (v: string | undefined) => v !== undefined && /^\d{1,15}$/.test(v.trim()) ? Number(v) : undefined
  const workerId = digits(values.workerID)
  if (workerId === undefined) return undefined
  return { workerId, lastTimestamp: digits(values.lastTimestamp) }
}

/** Writes the cache atomically (a reader never sees half a file). */
export function writeWorkerCache (dir: string, worker: { workerId: number, lastTimestamp: number }): void {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, CACHE_FILE)
  const tmp = `${file}.${process.pid}.tmp`
  writeFileSync(tmp, stringify({ workerID: String(worker.workerId), lastTimestamp: String(worker.lastTimestamp) }) + '\n')
  renameSync(tmp, file)
}
