import Database from 'better-sqlite3'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { get, startServer, type ServerProcess } from '../test/helpers/server-process.js'
import { cpuSeconds } from './cpu-time.js'

// Issue 30's rows: the built server on the embedded store with 1,000, 10,000 and 100,000 tags in
// leaf_alloc, BUSY of them in use. What a tag costs while nobody asks for it: the start, the
// memory, the views, the metrics and the tag list's refresh.

export const MANY_TAGS_SCALES = [1_000, 10_000, 100_000]
/** Tags that serve IDs before the views are visited: the ones the views and metrics show. */
export const BUSY = 200
/** Visits of each view: their median is the row's time. */
const VISITS = 5
/** The refresh interval of the measured servers, and how many refreshes the idle CPU is read over. */
const REFRESH_MS = 1000
const REFRESHES = 5

export interface ManyTagsRow {
  tags: number
  /** Spawn to /readyz 200: the tag list read. */
  readyMs: number
  /** VmRSS 2 s after ready, before any view. */
  idleRssMiB: number
  cacheBytes: number
  cacheMs: number
  apiCacheBytes: number
  apiCacheMs: number
  metricsBytes: number
  metricsMs: number
  /** VmRSS after VISITS visits of /cache, /api/cache and /metrics. */
  afterViewsRssMiB: number
  /** CPU per refresh of the tag list, idle (no request), over REFRESHES refreshes. */
  refreshCpuMs: number
}

const tagName = (i: number) => `tenant-${String(i).padStart(6, '0')}`

function rssMiB (pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  return Number(kb) / 1024
}

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] as number
}

async function visit (url: string): Promise<{ bytes: number, ms: number }> {
  const times: number[] = []
  let bytes = 0
  for (let i = 0; i < VISITS; i++) {
    const started = performance.now()
    const answer = await get(url)
    times.push(performance.now() - started)
    if (answer.status !== 200) throw new Error(`${url}: ${answer.status} ${answer.body.slice(0, 200)}`)
    bytes = Buffer.byteLength(answer.body)
  }
  return { bytes, ms: median(times) }
}

const args = (file: string) => [`--leaf.jdbc.url=sqlite:${file}`, '--server.port=0', '--leaf.segment.enable=true', '--leaf.snowflake.enable=false',
  `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`]

/** One row: a file of `tags` tags, a measured start on it. */
export async function manyTagsRow (tags: number): Promise<ManyTagsRow> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-many-tags-'))
  const file = join(dir, 'leaf.db')
  let server: ServerProcess | undefined
  try {
    // The server makes the file and its table; the tags go in while it is down.
    await (await startServer({ args: args(file) })).stop()
    const db = new Database(file)
    const insert = db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, 1, 1000, NULL)')
    db.transaction(() => { for (let i = 0; i < tags; i++) insert.run(tagName(i)) })()
    db.close()

    const started = performance.now()
    server = await startServer({ args: args(file) })
    while ((await get(`${server.url}/readyz`)).status !== 200) await sleep(5)
    const readyMs = performance.now() - started
    const pid = server.proc.pid as number
    await sleep(2000)
    const idleRssMiB = rssMiB(pid)
    const before = cpuSeconds(pid)
    await sleep(REFRESH_MS * REFRESHES)
    const refreshCpuMs = (cpuSeconds(pid) - before) * 1000 / REFRESHES
    for (let i = 0; i < BUSY; i++) {
      const key = tagName(Math.floor(i * tags / BUSY))
      const answer = await get(`${server.url}/api/segment/get/${key}?count=${1 + (i % 7)}`)
      if (answer.status !== 200) throw new Error(`${key}: ${answer.status} ${answer.body}`)
    }
    const cache = await visit(`${server.url}/cache`)
    const apiCache = await visit(`${server.url}/api/cache`)
    const metrics = await visit(`${server.url}/metrics`)
    return {
      tags,
      readyMs,
      idleRssMiB,
      cacheBytes: cache.bytes,
      cacheMs: cache.ms,
      apiCacheBytes: apiCache.bytes,
      apiCacheMs: apiCache.ms,
      metricsBytes: metrics.bytes,
      metricsMs: metrics.ms,
      afterViewsRssMiB: rssMiB(pid),
      refreshCpuMs,
    }
  } finally {
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const tags of MANY_TAGS_SCALES) console.log(JSON.stringify(await manyTagsRow(tags)))
}
