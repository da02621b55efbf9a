import { join } from 'node:path'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { errorCode, startLeaf, takeIds, zkInspector, type Leaf, type Report, type Suite } from './harness.js'
import { HttpClient, backgroundLoad, batchMix, type Answer } from './load.js'
import { sleep, waitUntil } from './services.js'

// What the worker-id lease scenarios (12-15) share: the two recyclable sources, the keys
// that start an instance on one of them, the store's view of one id, and the server's logs.

export const LEASE_SOURCES = ['db-lease', 'zookeeper-lease'] as const
export type LeaseSource = typeof LEASE_SOURCES[number]

export interface LeaseOptions {
  source: LeaseSource
  /** leaf.name: the pool (one per scenario and source). */
  name: string
  min: number
  max: number
  ttlMs: number
  heartbeatMs: number
  /** leaf.snowflake.port, recorded with the lease. */
  port: number
  cacheDir: string
  /** The store's port as this instance reaches it (a proxy's); the private service's by default. */
  storePort?: number
  /** Environment variables (a clock ahead: services.offsetClock). */
  env?: Record<string, string>
  keep?: boolean
  /** More keys (`--key=value`). */
  args?: string[]
  /** How long to wait for it to listen (default 20 s). */
  timeoutMs?: number
}

/** A snowflake-only instance leasing its worker id from `o.source`. */
export function startLeaseLeaf (suite: Suite, label: string, o: LeaseOptions): Promise<Leaf> {
  const zk = o.source === 'zookeeper-lease' ? `127.0.0.1:${o.storePort ?? suite.zk.port}` : suite.zk.address
  const args = [
    `--leaf.snowflake.worker-id.source=${o.source}`,
    `--leaf.snowflake.worker-id.min=${o.min}`,
    `--leaf.snowflake.worker-id.max=${o.max}`,
    `--leaf.snowflake.lease.ttl-ms=${o.ttlMs}`,
    ...o.args ?? [],
  ]
  if (o.source === 'db-lease') args.push(`--leaf.jdbc.url=${suite.db.url(o.storePort ?? suite.db.port)}`)
  return startLeaf(suite, label, {
    name: o.name,
    snowflake: { zk, port: o.port, cacheDir: o.cacheDir, heartbeatMs: o.heartbeatMs, sessionTimeoutMs: o.ttlMs },
    args,
    env: o.env,
    keep: o.keep,
    timeoutMs: o.timeoutMs,
  })
}

export function cacheDirOf (suite: Suite, name: string, label: string): string {
  return join(suite.dir, name, label)
}

/** True when the store shows `workerId` of pool `name` as leased (not released, not expired). */
export async function heldInStore (suite: Suite, source: LeaseSource, name: string, workerId: number): Promise<boolean> {
  if (source === 'db-lease') {
    const rows = await suite.db.query<{ held: string | number }[]>(
      'SELECT owner IS NOT NULL AND expires_at >= NOW(3) AS held FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', [name, workerId])
    return Number(rows[0]?.held ?? 0) === 1
  }
  const inspector = await zkInspector(suite.zk)
  try {
    return await inspector.owner(`/snowflake/${name}/lease/holders/${workerId}`) !== undefined
  } finally {
    await inspector.close()
  }
}

/**
 * How many ids of pool `name` have a holder in the store now: a row with an owner, a holder
 * node. A dead holder's lease counts until another takes it over, as it does for a claimant,
 * which must watch an expired lease stand still for a TTL before it takes it.
 */
export async function heldCount (suite: Suite, source: LeaseSource, name: string, inspector?: { children (path: string): Promise<string[]> }): Promise<number> {
  if (source === 'db-lease') {
    const rows = await suite.db.query<{ n: string | number }[]>(
      'SELECT COUNT(*) AS n FROM leaf_worker_lease WHERE pool = ? AND owner IS NOT NULL', [name])
    return Number(rows[0]?.n ?? 0)
  }
  if (inspector === undefined) throw new Error('a ZooKeeper inspector is needed')
  return (await inspector.children(`/snowflake/${name}/lease/holders`)).length
}

/** Waits until the store no longer shows `workerId` as leased; the ms it took, or undefined past `timeoutMs`. */
export async function waitReleased (suite: Suite, source: LeaseSource, name: string, workerId: number, timeoutMs: number): Promise<number | undefined> {
  const from = performance.now()
  const ok = await waitUntil(async () => !await heldInStore(suite, source, name, workerId), timeoutMs, 25)
  return ok ? performance.now() - from : undefined
}

export interface SnowflakeStatus {
  workerId: number
  source: string
  issuing: boolean
  unavailable?: string
  lease?: { pool?: string, range?: number[], expiresAt?: number, issuedUntil?: number }
}

export async function snowflakeStatus (client: HttpClient, base: string): Promise<SnowflakeStatus | undefined> {
  const a = await client.get(`${base}/api/snowflake/status`, { timeoutMs: 5000 })
  if (a.status !== 200) return undefined
  try {
    return JSON.parse(a.body) as SnowflakeStatus
  } catch {
    return undefined
  }
}

/** The server's pino lines with message `msg`, parsed. */
export function logLines (leaf: { output: string[] }, msg: string): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = []
  for (const line of leaf.output) {
    if (!line.includes(msg)) continue
    try {
      const json = JSON.parse(line) as Record<string, unknown>
      if (json.msg === msg) lines.push(json)
    } catch {}
  }
  return lines
}

export const WAIT_MSG = 'waiting for the previous holder\'s last millisecond'
export const LEASED_MSG = 'worker id leased'
export const LOST_MSG = 'worker-id lease lost: snowflake issuing stopped'

/** The largest `waitMs` a server logged while waiting for a previous holder's last millisecond (0: none). */
export function largestWait (leaf: { output: string[] }): number {
  return Math.max(0, ...logLines(leaf, WAIT_MSG).map((l) => Number(l.waitMs)).filter(Number.isFinite))
}

export function isLeaseLost (a: Answer): boolean {
  return a.status === 503 && errorCode(a) === 'WORKER_LEASE_LOST'
}

/** One snowflake answer of an instance, as a lease scenario keeps it. */
export interface Taken {
  /** performance.now() when sent and when the answer was in. */
  sentAt: number
  doneAt: number
  status: number
  code: string | undefined
  ids: bigint[]
}

export function take (a: Answer, ids: bigint[] | undefined): Taken {
  return { sentAt: a.sentAt, doneAt: a.sentAt + a.ms, status: a.status, code: a.status === 200 ? undefined : errorCode(a), ids: ids ?? [] }
}

/** The worker ids and the timestamps of a list of IDs. */
export function decodeAll (ids: Iterable<bigint>): { workerIds: Set<number>, minTs: number, maxTs: number } {
  const workerIds = new Set<number>()
  let minTs = Infinity
  let maxTs = -Infinity
  for (const id of ids) {
    const d = decodeSnowflakeId(id)
    workerIds.add(d.workerId)
    if (d.timestamp < minTs) minTs = d.timestamp
    if (d.timestamp > maxTs) maxTs = d.timestamp
  }
  return { workerIds, minTs, maxTs }
}

/** The paced load scenarios 13 and 14 put on holder A while its lease is taken from it. */
export interface HolderLoad {
  answers: Taken[]
  /** Ends the load and closes its clients. */
  stop (): Promise<void>
}

/**
 * `clients` clients sending `ratePerSecond` snowflake requests to `leaf`, every tenth a batch
 * of 10, for at most 60 s. An answer completed at or after `faultAt()` (a performance.now(),
 * 0 while no fault is on) may be 503 WORKER_LEASE_LOST: that is what a fenced holder says.
 */
export function loadHolder (report: Report, stream: string, leaf: Leaf, clients: number, ratePerSecond: number, faultAt: () => number): HolderLoad {
  const answers: Taken[] = []
  const lostOk = (x: Answer) => faultAt() > 0 && x.sentAt + x.ms >= faultAt() && isLeaseLost(x)
  const batch = batchMix(10, 10)
  const load = backgroundLoad({ clients, ratePerSecond, maxRequests: 100_000, maxMs: 60_000 }, async (client, c, n) => {
    const { answer, ids } = await takeIds(report, client, leaf.url, 'snowflake', 'k', batch(n), `${stream}-c${c}`, lostOk)
    answers.push(take(answer, ids))
  })
  return {
    answers,
    async stop () {
      await load.stop()
    },
  }
}

/** Snowflake answers of `leaf` on one client: for `ms` (every fifth a batch of 10), then 20 single IDs more once `between` has run. */
export async function serveFor (report: Report, stream: string, leaf: Leaf, ms: number, between: () => Promise<void>): Promise<Taken[]> {
  const client = new HttpClient()
  const answers: Taken[] = []
  try {
    const until = performance.now() + ms
    for (let n = 0; performance.now() < until; n++) {
      const { answer, ids } = await takeIds(report, client, leaf.url, 'snowflake', 'k', n % 5 === 4 ? 10 : undefined, stream)
      answers.push(take(answer, ids))
      await sleep(5)
    }
    await between()
    for (let n = 0; n < 20; n++) {
      const { answer, ids } = await takeIds(report, client, leaf.url, 'snowflake', 'k', undefined, stream)
      answers.push(take(answer, ids))
    }
  } finally {
    client.close()
  }
  return answers
}
