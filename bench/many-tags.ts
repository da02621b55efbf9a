import Database from 'better-sqlite3'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { get, startServer, type ServerProcess } from '../test/helpers/server-process.js'
import { cpuSeconds } from './cpu-time.js'
import { median } from './stats.js'

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

/** Issue 30's targets, at the largest scale (its table measured 11.8 s and 180 MB for /cache, 5.0 s and 30 MB for /metrics, RSS 12x idle). */
export const MANY_TAGS_TARGETS = {
  tags: 100_000,
  readyMs: 1000,
  viewBytes: 1024 * 1024,
  cacheMs: 200,
  metricsMs: 100,
  rssToIdle: 1.5,
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`
const ms = (n: number) => `${n.toFixed(0)} ms`

export const MANY_TAGS_ROW = (what: string) => `${MANY_TAGS_TARGETS.tags.toLocaleString('en-US')} tags: ${what}`

/** The verdicts of the largest scale's row: the start, /cache, /metrics and the memory the views leave. */
export function manyTagsVerdicts (rows: ManyTagsRow[]): { row: string, target: string, met: boolean | null, why: string }[] {
  const t = MANY_TAGS_TARGETS
  const r = rows.find((x) => x.tags === t.tags)
  const all = [
    { row: MANY_TAGS_ROW('start'), target: `ready within ${ms(t.readyMs)}`, met: r === undefined ? null : r.readyMs <= t.readyMs, why: r === undefined ? 'not measured' : `ready in ${ms(r.readyMs)}` },
    {
      row: MANY_TAGS_ROW('/cache'),
      target: `≤ 1 MiB in ≤ ${ms(t.cacheMs)}`,
      met: r === undefined ? null : r.cacheBytes <= t.viewBytes && r.cacheMs <= t.cacheMs,
      why: r === undefined ? 'not measured' : `${kb(r.cacheBytes)} in ${ms(r.cacheMs)}`,
    },
    {
      row: MANY_TAGS_ROW('/metrics'),
      target: `≤ 1 MiB in ≤ ${ms(t.metricsMs)}`,
      met: r === undefined ? null : r.metricsBytes <= t.viewBytes && r.metricsMs <= t.metricsMs,
      why: r === undefined ? 'not measured' : `${kb(r.metricsBytes)} in ${ms(r.metricsMs)}`,
    },
    {
      row: MANY_TAGS_ROW('memory'),
      target: `RSS after the views ≤ ${t.rssToIdle}x idle`,
      met: r === undefined ? null : r.afterViewsRssMiB <= t.rssToIdle * r.idleRssMiB,
      why: r === undefined ? 'not measured' : `${r.afterViewsRssMiB.toFixed(0)} MiB after, ${r.idleRssMiB.toFixed(0)} MiB idle: ${(r.afterViewsRssMiB / r.idleRssMiB).toFixed(2)}x`,
    },
  ]
  return all
}

/** One line per scale, for the console and the published table. */
export function manyTagsLine (r: ManyTagsRow): string {
  return `ready ${ms(r.readyMs)}, idle RSS ${r.idleRssMiB.toFixed(0)} MiB; /cache ${kb(r.cacheBytes)} in ${ms(r.cacheMs)}, /api/cache ${kb(r.apiCacheBytes)} in ${ms(r.apiCacheMs)}, ` +
    `/metrics ${kb(r.metricsBytes)} in ${ms(r.metricsMs)}; RSS after the views ${r.afterViewsRssMiB.toFixed(0)} MiB; a refresh of the tag list ${r.refreshCpuMs.toFixed(1)} ms CPU`
}

const tagName = (i: number) => `tenant-${String(i).padStart(6, '0')}`

function rssMiB (pid: number): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  return Number(kib) / 1024
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

/** Every scale, smallest first. */
export async function manyTagsRows (): Promise<ManyTagsRow[]> {
  const rows: ManyTagsRow[] = []
  for (const tags of MANY_TAGS_SCALES) rows.push(await manyTagsRow(tags))
  return rows
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = await manyTagsRows()
  for (const r of rows) console.log(`${r.tags.toLocaleString('en-US')} tags: ${manyTagsLine(r)}`)
  for (const v of manyTagsVerdicts(rows)) console.log(`${v.met === true ? 'met   ' : 'MISSED'} ${v.row}: ${v.target}: ${v.why}`)
}
