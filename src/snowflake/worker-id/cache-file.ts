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
  const workerId = Number(values.workerID)
  if (values.workerID === undefined || !Number.isInteger(workerId)) return undefined
  const lastTimestamp = values.lastTimestamp === undefined ? undefined : Number(values.lastTimestamp)
  return { workerId, lastTimestamp: Number.isFinite(lastTimestamp) ? lastTimestamp : undefined }
}

/** Writes the cache atomically (a reader never sees half a file). */
export function writeWorkerCache (dir: string, worker: { workerId: number, lastTimestamp: number }): void {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, CACHE_FILE)
  const tmp = `${file}.${process.pid}.tmp`
  writeFileSync(tmp, stringify({ workerID: String(worker.workerId), lastTimestamp: String(worker.lastTimestamp) }) + '\n')
  renameSync(tmp, file)
}
