import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse, stringify } from 'dot-properties'

// Java Leaf's local worker-id cache, `workerID.properties`, with the last recorded time added
// so a start from the cache can tell whether the clock went back, and the `ip:port` the worker
// id was leased for, so a host whose address changed does not take a former identity's id.
export const CACHE_FILE = 'workerID.properties'

export interface CachedWorker {
  workerId: number
  /** The last time (ms) this instance recorded; undefined in a file Leaf wrote. */
  lastTimestamp: number | undefined
  /** `ip:port` the id was leased for in ZooKeeper; undefined without ZooKeeper or in an older file. */
  address: string | undefined
}

export function readWorkerCache (dir: string): CachedWorker | undefined {
  let text: string
  try {
    text = readFileSync(join(dir, CACHE_FILE), 'utf8')
  } catch {
    return undefined
  }
  const values = parse(text) as Record<string, string>
  const digits = (value: string | undefined) => value !== undefined && /^\d{1,15}$/.test(value.trim()) ? Number(value) : undefined
  const workerId = digits(values.workerID)
  if (workerId === undefined) return undefined
  const address = values.address?.trim()
  return { workerId, lastTimestamp: digits(values.lastTimestamp), address: address === '' ? undefined : address }
}

/** Writes the cache atomically (a reader never sees half a file). Throws when it cannot. */
export function writeWorkerCache (dir: string, worker: { workerId: number, lastTimestamp: number, address?: string | undefined }): void {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, CACHE_FILE)
  const tmp = `${file}.${process.pid}.tmp`
  const values: Record<string, string> = { workerID: String(worker.workerId), lastTimestamp: String(worker.lastTimestamp) }
  if (worker.address !== undefined) values.address = worker.address
  writeFileSync(tmp, stringify(values) + '\n')
  renameSync(tmp, file)
}

/** The cache file's folder: as configured, or `<tmpdir>/<name>/leafconf/<port>` as Java Leaf. */
export function workerCacheDir (options: { cacheDir: string, name: string, port: number }): string {
  return options.cacheDir || join(tmpdir(), options.name, 'leafconf', String(options.port))
}
