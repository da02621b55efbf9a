import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { connectZookeeper, zk, type Client } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { ROOT, SERVER_JS, startServer, type ServerProcess } from '../helpers/server-process.js'
import { IdLedger, parseIds } from './ledger.js'
import { fmtMs } from './render.js'
import { backgroundLoad, batchMix, type Answer, type HttpClient } from './load.js'
import { track, type PrivateMariaDb, type PrivateZooKeeper } from './services.js'

export { fmtMs }

// What every scenario shares: the private services, the server processes it starts, the
// checks on each answer, and its line in the table.

export interface Suite {
  db: PrivateMariaDb
  zk: PrivateZooKeeper
  /** Scratch folder of this run (cache dirs, server working dirs). */
  dir: string
  /** Where server logs of each scenario are written. */
  logDir: string
  /** The documented errors table (docs/operations.md): status -> codes. */
  documented: Map<number, Set<string>>
  /** The servers started for the scenario running on this suite, for cleanUpServers. */
  servers: Leaf[]
}

export class Report {
  requests = 0
  /** Failures the scenario forbids. */
  failed = 0
  /** Failures the scenario expects (a 503 while the database is down, a request cut by SIGKILL). */
  expected = 0
  expectedWhat = ''
  recover = 'n/a'
  /** The slowest answer to an ID request (ms). */
  slowestMs = 0
  readonly problems: string[] = []
  readonly notes: string[] = []
  readonly ledger = new IdLedger()
  private readonly failureSamples: string[] = []

  /** Records a problem when `ok` is false; returns `ok`. */
  check (ok: boolean, what: string): boolean {
    if (!ok) this.problems.push(what)
    return ok
  }

  failure (what: string): void {
    this.failed++
    if (this.failureSamples.length < 5 && !this.failureSamples.includes(what)) this.failureSamples.push(what)
  }

  note (what: string): void {
    this.notes.push(what)
  }

  /** The checks every scenario ends with: no forbidden failure, no duplicate, no disorder. */
  finish (): { duplicates: number } {
    const duplicates = this.ledger.duplicates()
    this.check(this.failed === 0, `${this.failed} failed requests, e.g. ${this.failureSamples.join(' | ')}`)
    this.check(duplicates === 0, `${duplicates} duplicate IDs: ${this.ledger.samples.join(' | ')}`)
    this.check(this.ledger.orderViolations === 0, `${this.ledger.orderViolations} IDs not strictly increasing: ${this.ledger.samples.join(' | ')}`)
    return { duplicates }
  }
}

/** Scheduling slack on the shared 2-core machine, added to a latency bound derived from the configuration. */
export const SCHEDULING_SLACK_MS = 1000

/**
 * The outage scenarios' latency rule: no ID request took longer than `waitMs`, the longest wait
 * on the ID path that `why` names from the configuration, plus SCHEDULING_SLACK_MS. Notes the
 * slowest answer beside its bound either way.
 */
export function checkSlowest (report: Report, waitMs: number, why: string): void {
  const bound = waitMs + SCHEDULING_SLACK_MS
  const formula = `${why} ${fmtMs(waitMs)} + ${fmtMs(SCHEDULING_SLACK_MS)} scheduling slack = ${fmtMs(bound)}`
  report.check(report.slowestMs <= bound, `the slowest answer took ${fmtMs(report.slowestMs)}, over its bound: ${formula}`)
  report.note(`slowest answer ${fmtMs(report.slowestMs)} (bound ${formula})`)
}

export type Mode = 'segment' | 'snowflake'

export interface LeafOptions {
  name: string
  /** leaf.jdbc.url: segment mode on. */
  segment?: string
  snowflake?: { zk: string, port: number, cacheDir: string, sessionTimeoutMs?: number, heartbeatMs?: number }
  args?: string[]
  /** Environment variables: keys an older build (FAULT_SERVER_JS) does not know are ignored there, not refused. */
  env?: Record<string, string>
  /** false: not kept for cleanUpServers (the caller stops it and keeps its output). */
  keep?: boolean
  /** How long to wait for it to listen (default 20 s). */
  timeoutMs?: number
}

export interface Leaf extends ServerProcess {
  label: string
  pid: number
}

/** The built server (`node dist/server.js`) on 127.0.0.1, port 0, no config file. */
export async function startLeaf (suite: Suite, label: string, o: LeafOptions): Promise<Leaf> {
  const args = ['--server.port=0', '--server.host=127.0.0.1', `--leaf.name=${o.name}`, '--log.level=info']
  args.push(`--leaf.segment.enable=${o.segment !== undefined}`)
  if (o.segment !== undefined) args.push(`--leaf.jdbc.url=${o.segment}`)
  args.push(`--leaf.snowflake.enable=${o.snowflake !== undefined}`)
  if (o.snowflake !== undefined) {
    const s = o.snowflake
    args.push(`--leaf.snowflake.zk.address=${s.zk}`, '--leaf.snowflake.ip=127.0.0.1', `--leaf.snowflake.port=${s.port}`,
      `--leaf.snowflake.cache.dir=${s.cacheDir}`, `--leaf.snowflake.zk.session-timeout-ms=${s.sessionTimeoutMs ?? 2000}`)
    if (s.heartbeatMs !== undefined) args.push(`--leaf.snowflake.heartbeat-interval-ms=${s.heartbeatMs}`)
  }
  args.push(...o.args ?? [])
  // A working folder of its own: no config/leaf.properties is read, every key is given here.
  const server = await startServer({ args, env: o.env, cwd: suite.dir, script: SERVER_SCRIPT, onSpawn: track, timeoutMs: o.timeoutMs })
  const leaf = Object.assign(server, { label, pid: server.proc.pid ?? 0 })
  if (o.keep !== false) suite.servers.push(leaf)
  return leaf
}

export interface ScenarioLeafOptions {
  /** The label of its log; by default `segment`, `snowflake` or `both`, after its modes. */
  label?: string
  /** Segment mode on, with a new tag of this table step (several steps: a tag each, named `-a`, `-b`, ...), all added before the start. */
  step?: number | number[]
  /** Segment mode on, reaching the database at this port (a proxy's); the private MariaDB's by default. */
  segmentPort?: number
  /** Snowflake mode on: ZooKeeper the private one's unless given, the cache folder the scenario's. */
  snowflake?: { port: number, zk?: string, sessionTimeoutMs?: number, heartbeatMs?: number }
  args?: string[]
  env?: Record<string, string>
}

export interface ScenarioSetup {
  /** leaf.name: unique, `fault-<id>-...`. */
  name: string
  /** The first of `tags`, or '' when segment mode has no tag of the scenario's. */
  tag: string
  tags: string[]
  /** The snowflake cache folder: the scratch folder's `name`. */
  cacheDir: string
  /** What startLeaf takes to start (or restart) this identity. */
  options: LeafOptions
}

/**
 * A scenario's identity: a unique leaf.name (`fault-<id>`), its tags added to leaf_alloc, and the
 * options of an instance on the private services, for scenarios that start it more than once.
 */
export async function scenarioSetup (suite: Suite, id: string, o: ScenarioLeafOptions): Promise<ScenarioSetup> {
  const steps = o.step === undefined ? [] : typeof o.step === 'number' ? [o.step] : o.step
  const tags = steps.map((_, i) => unique(steps.length === 1 ? id : `${id}-${String.fromCharCode(97 + i)}`))
  for (const [i, tag] of tags.entries()) await suite.db.addTag(tag, steps[i] as number)
  const name = unique(`fault-${id}`)
  const cacheDir = join(suite.dir, name)
  const s = o.snowflake
  const options: LeafOptions = {
    name,
    segment: o.step !== undefined || o.segmentPort !== undefined ? suite.db.url(o.segmentPort) : undefined,
    snowflake: s === undefined ? undefined : { ...s, zk: s.zk ?? suite.zk.address, cacheDir },
    args: o.args,
    env: o.env,
  }
  return { name, tag: tags[0] ?? '', tags, cacheDir, options }
}

/** scenarioSetup, then its one instance started. */
export async function startScenarioLeaf (suite: Suite, id: string, o: ScenarioLeafOptions): Promise<ScenarioSetup & { leaf: Leaf }> {
  const setup = await scenarioSetup(suite, id, o)
  const label = o.label ?? (o.snowflake === undefined ? 'segment' : setup.options.segment === undefined ? 'snowflake' : 'both')
  return { ...setup, leaf: await startLeaf(suite, label, setup.options) }
}

/** FAULT_SERVER_JS runs another build (e.g. a patched copy) instead of dist/server.js. */
export const SERVER_SCRIPT = process.env.FAULT_SERVER_JS ?? SERVER_JS

/** Kills what a scenario left running and writes each server's output to the log folder. */
export async function cleanUpServers (suite: Suite, scenario: string): Promise<void> {
  for (const [i, leaf] of suite.servers.entries()) {
    if (leaf.proc.exitCode === null && leaf.proc.signalCode === null) {
      leaf.proc.kill('SIGTERM')
      const timer = setTimeout(() => leaf.proc.kill('SIGKILL'), 5000)
      await leaf.exited
      clearTimeout(timer)
    }
    writeFileSync(join(suite.logDir, `${scenario}-${i}-${leaf.label}.log`), leaf.output.join('\n') + '\n')
  }
  suite.servers.length = 0
}

export interface IdAnswer {
  answer: Answer
  /** The IDs when the answer is a 200 with exactly the IDs asked for. */
  ids: bigint[] | undefined
}

/** One ID request; `ids` undefined unless it is a 200 with `count` (or 1) decimal IDs, in the form asked for (a batch's lines each ended). */
export async function fetchIds (client: HttpClient, base: string, mode: Mode, key: string, count?: number): Promise<IdAnswer> {
  const url = `${base}/api/${mode}/get/${encodeURIComponent(key)}${count === undefined ? '' : `?count=${count}`}`
  const answer = await client.get(url)
  if (answer.status !== 200) return { answer, ids: undefined }
  const ids = parseIds(answer.body, count !== undefined)
  return { answer, ids: ids?.length === (count ?? 1) ? ids : undefined }
}

/** A short description of an answer for a failure message. */
export function describe (a: Answer): string {
  return a.status === 0 ? `no answer (${a.error ?? '?'})` : `${a.status} ${a.body.slice(0, 120).replace(/\n/g, '\\n')}`
}

/** The error code of a JSON error answer, if it is one. */
export function errorCode (a: Answer): string | undefined {
  try {
    const code = (JSON.parse(a.body) as { error?: unknown }).error
    return typeof code === 'string' ? code : undefined
  } catch {
    return undefined
  }
}

/** Prometheus text of /metrics as `name{labels}` -> value. */
export async function metrics (client: HttpClient, base: string): Promise<Map<string, number>> {
  const a = await client.get(`${base}/metrics`, { timeoutMs: 5000 })
  if (a.status !== 200) throw new Error(`/metrics: ${describe(a)}`)
  const values = new Map<string, number>()
  for (const line of a.body.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line)
    if (m !== null) values.set(m[1] as string, Number(m[2]))
  }
  return values
}

/** /readyz: its status and JSON body. */
export async function readyz (client: HttpClient, base: string): Promise<{ status: number, body: Record<string, unknown> | undefined, raw: string }> {
  const a = await client.get(`${base}/readyz`, { timeoutMs: 5000 })
  let body: Record<string, unknown> | undefined
  try {
    body = JSON.parse(a.body) as Record<string, unknown>
  } catch {
    body = undefined
  }
  return { status: a.status, body, raw: a.body }
}

/** Resident memory (kB) and open file descriptors of a process, from /proc. */
export function procStats (pid: number): { rssKb: number, fds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const rss = /VmRSS:\s+(\d+) kB/.exec(status)
  return { rssKb: Number(rss?.[1] ?? Number.NaN), fds: readdirSync(`/proc/${pid}/fd`).length }
}

export function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

export interface ZkInspector {
  client: Client
  children (path: string): Promise<string[]>
  /** The session id owning an ephemeral node (hex), or undefined when there is no node. */
  owner (path: string): Promise<string | undefined>
  data (path: string): Promise<Record<string, unknown>>
  close (): Promise<void>
}

/** A ZooKeeper session of the test's own, to look at the tree. */
export async function zkInspector (zkService: PrivateZooKeeper): Promise<ZkInspector> {
  const client = await connectZookeeper(zkService.address, 10_000, 10_000)
  return {
    client,
    async children (path) {
      try {
        return (await zk.getChildren(client, path)).sort()
      } catch {
        return []
      }
    },
    owner (path) {
      return new Promise((resolve, reject) => client.exists(path, (err, stat) => {
        if (err !== null && err !== undefined) reject(err)
        else resolve(stat === null || stat === undefined ? undefined : stat.ephemeralOwner.toString('hex'))
      }))
    },
    async data (path) {
      return JSON.parse(String(await zk.getData(client, path))) as Record<string, unknown>
    },
    close: () => zk.close(client),
  }
}

/** The errors table of docs/operations.md: each status with its codes. */
export function documentedErrors (): Map<number, Set<string>> {
  const page = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8')
  const start = page.indexOf('\n## Errors\n')
  const end = page.indexOf('\n## ', start + 1)
  const section = start === -1 ? '' : page.slice(start, end === -1 ? undefined : end)
  const table = new Map<number, Set<string>>()
  for (const m of section.matchAll(/^\| (\d{3}) \| `([A-Z_]+)` \|/gm)) {
    const status = Number(m[1])
    if (!table.has(status)) table.set(status, new Set())
    table.get(status)?.add(m[2] as string)
  }
  if (table.size === 0) throw new Error('no Errors table found in docs/operations.md')
  return table
}

export function unique (prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`
}

/**
 * One ID request, checked and recorded: every ID of a 2xx answer goes to the ledger (unique
 * per tag or over all snowflake IDs, increasing along `stream`), even when the answer is
 * wrong otherwise; an answer without the IDs asked for is a failure unless `expected`
 * accepts it.
 */
export async function takeIds (
  report: Report, client: HttpClient, base: string, mode: Mode, key: string, count: number | undefined,
  stream: string | undefined, expected?: (a: Answer) => boolean
): Promise<IdAnswer> {
  report.requests++
  const r = await fetchIds(client, base, mode, key, count)
  if (r.answer.ms > report.slowestMs) report.slowestMs = r.answer.ms
  const received = r.answer.status >= 200 && r.answer.status < 300 ? parseIds(r.answer.body) : undefined
  if (received !== undefined) {
    report.ledger.record(mode === 'segment' ? `segment:${key}` : 'snowflake', stream === undefined ? undefined : `${stream}:${mode === 'segment' ? key : 'snowflake'}`, received)
  }
  if (r.ids === undefined) {
    if (expected?.(r.answer) === true) report.expected++
    else report.failure(`${mode} ${key}${count === undefined ? '' : ` count=${count}`}: ${r.answer.status === 200 ? `bad body ${describe(r.answer)}` : describe(r.answer)}`)
  }
  return r
}

export interface MaxIdWatch {
  /** Every value read, in order (reads fail while the database is down and are skipped). */
  readonly values: bigint[]
  /** Reads that saw max_id smaller than the read before. */
  readonly backwards: string[]
  stop (): Promise<void>
}

/** Reads a tag's max_id every `everyMs`, straight from a private database (MariaDB as root, or PostgreSQL), for at most `maxMs`. */
export function watchMaxId (db: Pick<PrivateMariaDb, 'maxId'>, tag: string, everyMs = 200, maxMs = 180_000): MaxIdWatch {
  const values: bigint[] = []
  const backwards: string[] = []
  const state = { running: true }
  const until = performance.now() + maxMs
  const loop = (async () => {
    while (state.running && performance.now() < until) {
      try {
        const v = await db.maxId(tag)
        const last = values[values.length - 1]
        if (last !== undefined && v < last) backwards.push(`${last} -> ${v}`)
        if (last === undefined || v !== last) values.push(v)
      } catch {}
      await new Promise((resolve) => setTimeout(resolve, everyMs))
    }
  })()
  return {
    values,
    backwards,
    async stop () {
      state.running = false
      await loop
    },
  }
}

/** The answers of a run in time: the slowest, and the longest stretch with no successful answer. */
export class Timeline {
  /** performance.now() when each successful answer was complete. */
  private readonly successes: number[] = []
  slowest = { ms: 0, sentAt: 0, what: '' }

  add (answer: Answer, ok: boolean, what: string): void {
    if (ok) this.successes.push(answer.sentAt + answer.ms)
    if (answer.ms > this.slowest.ms) this.slowest = { ms: answer.ms, sentAt: answer.sentAt, what }
  }

  /** The longest time between two successful answers (or a bound and the nearest one) in [from, to]. */
  largestGap (from: number, to: number): { ms: number, from: number } {
    const points = [from, ...this.successes.filter((t) => t > from && t < to).sort((a, b) => a - b), to]
    let gap = { ms: 0, from }
    for (let i = 1; i < points.length; i++) {
      const ms = (points[i] as number) - (points[i - 1] as number)
      if (ms > gap.ms) gap = { ms, from: points[i - 1] as number }
    }
    return gap
  }
}

export interface SteadyLoadOptions {
  mode: Mode
  key: string
  /** The stream's name in the ledger (each client adds `-c<n>`). */
  stream: string
  clients?: number
  /** An answer slower than this is a failure. */
  boundMs: number
  /** An answer this accepts is expected, not a failure (a 503 while the store is away). */
  expected?: (a: Answer) => boolean
}

/** Unpaced load on one instance (every fourth request a batch of 20) until stopped: its IDs, also in the ledger. */
export function steadyLoad (report: Report, leaf: Leaf, o: SteadyLoadOptions): { stop (): Promise<bigint[]> } {
  const ids: bigint[] = []
  const batch = batchMix(4, 20)
  const load = backgroundLoad({ clients: o.clients ?? 3, maxRequests: 500_000, maxMs: 120_000 }, async (client, c, n) => {
    const r = await takeIds(report, client, leaf.url, o.mode, o.key, batch(n), `${o.stream}-c${c}`, o.expected)
    if (r.answer.ms > o.boundMs) report.failure(`${o.stream}: an answer took ${fmtMs(r.answer.ms)} (bound ${fmtMs(o.boundMs)})`)
    if (r.ids !== undefined) ids.push(...r.ids)
    await new Promise((resolve) => setTimeout(resolve, 1))
  })
  return {
    async stop () {
      await load.stop()
      return ids
    },
  }
}
