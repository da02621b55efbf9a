import { copyFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { fenceMarginMs } from '../../../src/snowflake/worker-id/recyclable/recyclable-lease-options.js'
import { ZooKeeperEnsemble } from '../../helpers/zookeeper-ensemble.js'
import { SCHEDULING_SLACK_MS, errorCode, fmtMs, startLeaf, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix, type Answer } from '../load.js'
import { sleep } from '../services.js'

// Scenarios 22 and 23 share this part (23 imports it): a private 3-node ZooKeeper ensemble of
// the scenario's own (test/helpers/zookeeper-ensemble.ts), one instance per ZooKeeper worker-id
// source on its full connect string, a paced snowflake load on each, a watch of each
// instance's /api/snowflake/status, and the teardown that stops all of it, servers first.

/** leaf.snowflake.lease.ttl-ms of the zookeeper-lease instance (also its session timeout). */
export const TTL_MS = 4000
/** leaf.snowflake.zk.session-timeout-ms of the zookeeper instance. */
export const SESSION_TIMEOUT_MS = 4000
/** leaf.snowflake.heartbeat-interval-ms of both. */
export const HEARTBEAT_MS = 500
/** The ensemble's tick (ms): an election takes well under a second. */
const TICK_MS = 200
/** The zookeeper-lease instance leases from WORKER_MIN..WORKER_MIN + 1, away from the zookeeper source's ids (0, 1, ...). */
export const WORKER_MIN = 512
/**
 * The lease's window: it fences this long after its last confirmed renewal was sent
 * (TTL - TTL/10, docs/worker-ids.md property 4).
 */
export const WINDOW_MS = TTL_MS - fenceMarginMs(TTL_MS)
/**
 * The bound on every ID answer: nothing on the snowflake ID path waits for ZooKeeper (the lease
 * check and the cache record are local); the longest a request may wait inside the server is the
 * restart window, at most one heartbeat interval (docs/snowflake-mode.md, clock rule 2). So:
 * heartbeat-interval-ms + scheduling slack = 500 + 1000 = 1500 ms.
 */
export const LATENCY_BOUND_MS = HEARTBEAT_MS + SCHEDULING_SLACK_MS
export const LATENCY_FORMULA = `heartbeat ${HEARTBEAT_MS} ms (the longest wait on the ID path: the restart window) + ${SCHEDULING_SLACK_MS} ms scheduling slack = ${LATENCY_BOUND_MS} ms`
const CLIENTS = 4
/** Requests per second on each instance (every tenth a batch of 20). */
const RATE = 400

export type Source = 'zookeeper' | 'zookeeper-lease'

/** One ID answer of an instance. */
export interface Taken {
  /** performance.now() when sent and when the answer was in. */
  sentAt: number
  doneAt: number
  /** Date.now() when sent: the clock of the lease's end and of the IDs' milliseconds. */
  wallSent: number
  status: number
  code: string | undefined
  ids: bigint[]
}

export interface InstanceLoad {
  readonly answers: Taken[]
  stop (): Promise<void>
}

/** What /api/snowflake/status said at one moment. */
export interface StatusSample {
  /** performance.now() and Date.now() when it was asked. */
  at: number
  wall: number
  workerId: number | undefined
  issuing: boolean | undefined
  unavailable: string | undefined
  connected: boolean | undefined
  /** The last heartbeat that reached ZooKeeper (Date.now() ms). */
  lastHeartbeat: number | undefined
  /** zookeeper-lease: the lease's own estimate of its end (Date.now() ms). */
  leaseEnd: number | undefined
}

export interface StatusWatch {
  readonly samples: StatusSample[]
  readonly errors: string[]
  stop (): Promise<void>
}

function time (value: unknown): number | undefined {
  if (typeof value !== 'string') return undefined
  const ms = Date.parse(value)
  return Number.isFinite(ms) ? ms : undefined
}

/** GET /api/snowflake/status (src/http/admin-routes.ts), or the reason it failed. */
export async function readStatus (client: HttpClient, leaf: Leaf): Promise<StatusSample | string> {
  const at = performance.now()
  const wall = Date.now()
  const a = await client.get(`${leaf.url}/api/snowflake/status`, { timeoutMs: 5000 })
  if (a.status !== 200) return `${leaf.label} /api/snowflake/status: ${a.status === 0 ? a.error ?? 'no answer' : `${a.status} ${a.body.slice(0, 120)}`}`
  try {
    const j = JSON.parse(a.body) as Record<string, unknown>
    const lease = j.lease as Record<string, unknown> | undefined
    return {
      at,
      wall,
      workerId: typeof j.workerId === 'number' ? j.workerId : undefined,
      issuing: typeof j.issuing === 'boolean' ? j.issuing : undefined,
      unavailable: typeof j.unavailable === 'string' ? j.unavailable : undefined,
      connected: typeof j.zookeeperConnected === 'boolean' ? j.zookeeperConnected : undefined,
      lastHeartbeat: time(j.lastHeartbeat),
      leaseEnd: time(lease?.expiresAt),
    }
  } catch {
    return `${leaf.label} /api/snowflake/status: not JSON: ${a.body.slice(0, 120)}`
  }
}

export function describeStatus (s: StatusSample | string | undefined): string {
  if (s === undefined || typeof s === 'string') return s ?? 'none'
  return `worker id ${s.workerId}, issuing ${s.issuing}${s.unavailable === undefined ? '' : ` (${s.unavailable})`}, connected ${s.connected}`
}

/** The IDs' worker ids. */
export function workerIdsOf (answers: Taken[]): Set<number> {
  const ids = new Set<number>()
  for (const t of answers) for (const id of t.ids) ids.add(decodeSnowflakeId(id).workerId)
  return ids
}

/** The longest time between two successful answers' ends (or a bound and the nearest one) in [from, to] (performance.now()). */
export function longestGap (answers: Taken[], from: number, to: number): number {
  const points = [from, ...answers.filter((t) => t.ids.length > 0 && t.doneAt > from && t.doneAt < to).map((t) => t.doneAt).sort((a, b) => a - b), to]
  let gap = 0
  for (let i = 1; i < points.length; i++) gap = Math.max(gap, (points[i] as number) - (points[i - 1] as number))
  return gap
}

export function count (answers: Taken[]): number {
  return answers.reduce((n, t) => n + t.ids.length, 0)
}

/** An ensemble, the instances on it, their loads and watches; close() stops them all, whatever happened. */
export class EnsembleRun {
  readonly leaves: Leaf[] = []
  private readonly stoppers: (() => Promise<void>)[] = []
  private closed = false

  private constructor (readonly suite: Suite, readonly report: Report, readonly tag: string, readonly ensemble: ZooKeeperEnsemble) {}

  /** Writes the ensemble's folders under the suite's scratch folder (removed with it). */
  static async create (suite: Suite, report: Report, tag: string): Promise<EnsembleRun> {
    const ensemble = await ZooKeeperEnsemble.create({ size: 3, tickTimeMs: TICK_MS, dir: join(suite.dir, `${tag}-ensemble`) })
    return new EnsembleRun(suite, report, tag, ensemble)
  }

  /** Starts the three nodes; the ms until all three serve. */
  async start (): Promise<number> {
    const from = performance.now()
    await this.ensemble.start(60_000)
    return performance.now() - from
  }

  /** One instance of each ZooKeeper source on the ensemble's full connect string, one leaf.name. */
  async startPair (ports: [number, number]): Promise<{ name: string, zk: Leaf, lease: Leaf }> {
    const name = unique(`fault-${this.tag}`)
    const snowflake = (port: number, label: string) => ({
      zk: this.ensemble.address, port, cacheDir: join(this.suite.dir, name, label), sessionTimeoutMs: SESSION_TIMEOUT_MS, heartbeatMs: HEARTBEAT_MS,
    })
    const connect = '--leaf.snowflake.zk.connect-timeout-ms=5000'
    const zk = await startLeaf(this.suite, 'zookeeper', { name, snowflake: snowflake(ports[0], 'zookeeper'), args: ['--leaf.snowflake.worker-id.source=zookeeper', connect] })
    this.leaves.push(zk)
    const lease = await startLeaf(this.suite, 'zookeeper-lease', {
      name,
      snowflake: snowflake(ports[1], 'zookeeper-lease'),
      args: ['--leaf.snowflake.worker-id.source=zookeeper-lease', `--leaf.snowflake.lease.ttl-ms=${TTL_MS}`,
        `--leaf.snowflake.worker-id.min=${WORKER_MIN}`, `--leaf.snowflake.worker-id.max=${WORKER_MIN + 1}`, connect],
    })
    this.leaves.push(lease)
    return { name, zk, lease }
  }

  /**
   * CLIENTS clients sending RATE snowflake requests a second to `leaf` until stopped, every
   * tenth a batch of 20, each answer through takeIds (its IDs in the ledger) and none slower
   * than LATENCY_BOUND_MS; `expected` accepts an answer as expected instead of failed.
   */
  load (stream: string, leaf: Leaf, expected?: (a: Answer) => boolean): InstanceLoad {
    const answers: Taken[] = []
    const report = this.report
    const batch = batchMix(10, 20)
    const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxMs: 150_000 }, async (client, c, n) => {
      const wallSent = Date.now()
      const { answer, ids } = await takeIds(report, client, leaf.url, 'snowflake', 'k', batch(n), `${stream}-c${c}`, expected)
      if (answer.ms > LATENCY_BOUND_MS) report.failure(`${stream}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(LATENCY_BOUND_MS)})`)
      answers.push({ sentAt: answer.sentAt, doneAt: answer.sentAt + answer.ms, wallSent, status: answer.status, code: answer.status === 200 ? undefined : errorCode(answer), ids: ids ?? [] })
    })
    const stop = async () => { await load.stop() }
    this.stoppers.push(stop)
    return { answers, stop }
  }

  /** /api/snowflake/status of `leaf` every `everyMs` until stopped. */
  watch (leaf: Leaf, everyMs = 50): StatusWatch {
    const client = new HttpClient()
    const samples: StatusSample[] = []
    const errors: string[] = []
    const state = { stopped: false }
    const done = (async () => {
      while (!state.stopped) {
        const s = await readStatus(client, leaf)
        if (typeof s === 'string') errors.push(s)
        else samples.push(s)
        await sleep(everyMs)
      }
    })()
    const stop = async () => {
      state.stopped = true
      await done
      client.close()
    }
    this.stoppers.push(stop)
    return { samples, errors, stop }
  }

  /** One status read of each leaf. */
  async statuses (...leaves: Leaf[]): Promise<(StatusSample | string)[]> {
    const client = new HttpClient()
    try {
      return await Promise.all(leaves.map((leaf) => readStatus(client, leaf)))
    } finally {
      client.close()
    }
  }

  /** SIGTERM to every instance (SIGKILL after 10 s); each one's exit code, or the signal that ended it. */
  async stopLeaves (): Promise<string[]> {
    return Promise.all(this.leaves.map(async (leaf) => {
      const timer = setTimeout(() => leaf.proc.kill('SIGKILL'), 10_000)
      const code = await leaf.stop('SIGTERM')
      clearTimeout(timer)
      return code === null ? String(leaf.proc.signalCode) : String(code)
    }))
  }

  /**
   * Stops the loads and watches, then the instances (while the ensemble still runs, so that
   * they can close their sessions), then every node by its own pid; keeps the nodes' logs
   * with the servers'.
   */
  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    try {
      await Promise.all(this.stoppers.map((stop) => stop()))
      await this.stopLeaves()
    } finally {
      await this.ensemble.stop()
      for (const node of this.ensemble.nodes) {
        let files: string[] = []
        try {
          files = readdirSync(node.dir).filter((f) => f.endsWith('.out'))
        } catch {}
        for (const file of files) copyFileSync(join(node.dir, file), join(this.suite.logDir, `${this.tag}-${file}`))
      }
    }
  }
}

/**
 * 22. The ZooKeeper leader is SIGKILLed under snowflake load, with one instance of each
 * ZooKeeper source (`zookeeper`, `zookeeper-lease`) on a 3-node ensemble of the scenario's own.
 * The other two elect a new leader; the load goes on until a lease renewed last before the
 * kill would have fenced (kill + TTL - TTL/10) and a whole TTL past the re-election. Passes
 * when no request fails and none takes longer than LATENCY_BOUND_MS, no ID repeats, both keep
 * their worker ids (the status before and after, and every ID), both are connected again and
 * have written to ZooKeeper since the re-election, and the lease's end moved past the
 * re-election + its window. The premise, checked: the re-election is shorter than the lease's
 * window less a heartbeat (else a fence would be right, and this scenario's claim wrong).
 */
export async function zookeeperLeaderKilled (suite: Suite, report: Report): Promise<void> {
  const run = await EnsembleRun.create(suite, report, 's22')
  try {
    const upMs = await run.start()
    const { zk, lease } = await run.startPair([7221, 7222])
    const before = await run.statuses(zk, lease)
    const [zkBefore, leaseBefore] = before
    report.check(typeof zkBefore !== 'string' && zkBefore?.issuing === true && zkBefore.workerId !== undefined, `zookeeper: status at start: ${describeStatus(zkBefore)}`)
    report.check(typeof leaseBefore !== 'string' && leaseBefore?.issuing === true && leaseBefore.workerId !== undefined && leaseBefore.workerId >= WORKER_MIN && leaseBefore.workerId <= WORKER_MIN + 1,
      `zookeeper-lease: status at start: ${describeStatus(leaseBefore)}`)
    const ids = { zk: typeof zkBefore === 'string' ? undefined : zkBefore?.workerId, lease: typeof leaseBefore === 'string' ? undefined : leaseBefore?.workerId }

    const zkLoad = run.load('zookeeper', zk)
    const leaseLoad = run.load('zookeeper-lease', lease)
    await sleep(2000)

    const leader = await run.ensemble.leader()
    if (leader === undefined) throw new Error(`no leader in the ensemble: ${JSON.stringify(await run.ensemble.modes())}`)
    const killAt = performance.now()
    const killWall = Date.now()
    await run.ensemble.stopNode(leader)
    const quorumAt = await run.ensemble.waitForQuorum({ timeoutMs: 20_000 })
    const reElectionMs = quorumAt - killAt
    const quorumWall = killWall + Math.round(reElectionMs)
    const newLeader = await run.ensemble.leader()
    report.check(newLeader !== undefined && newLeader !== leader, `after node ${leader + 1} (the leader) was killed, the leader is node ${newLeader === undefined ? 'none' : newLeader + 1}`)
    report.check(reElectionMs < WINDOW_MS - HEARTBEAT_MS, `premise: the re-election took ${fmtMs(reElectionMs)}, not shorter than the lease's window less a heartbeat (${WINDOW_MS - HEARTBEAT_MS} ms)`)

    // Past the fence of a lease renewed last just before the kill, and a whole TTL past the re-election.
    const endAt = Math.max(killAt + WINDOW_MS, quorumAt + TTL_MS) + HEARTBEAT_MS
    await sleep(endAt - performance.now())
    await Promise.all([zkLoad.stop(), leaseLoad.stop()])
    const loadEnd = performance.now()

    const [zkAfter, leaseAfter] = await run.statuses(zk, lease)
    for (const [source, status, id, load] of [['zookeeper', zkAfter, ids.zk, zkLoad], ['zookeeper-lease', leaseAfter, ids.lease, leaseLoad]] as const) {
      const s = typeof status === 'string' ? undefined : status
      report.check(s !== undefined && s.workerId === id && s.issuing === true, `${source}: status at the end: ${describeStatus(status)} (worker id ${id} at start)`)
      report.check(s?.connected === true, `${source}: not connected to ZooKeeper at the end: ${describeStatus(status)}`)
      report.check((s?.lastHeartbeat ?? 0) > quorumWall, `${source}: no heartbeat reached ZooKeeper since the re-election (last ${s?.lastHeartbeat === undefined ? 'none' : new Date(s.lastHeartbeat).toISOString()})`)
      const workerIds = workerIdsOf(load.answers)
      report.check(workerIds.size === 1 && workerIds.has(id ?? -1), `${source}: IDs carry worker ids ${[...workerIds].join(', ')} (its id: ${id})`)
      report.check(load.answers.some((t) => t.sentAt >= quorumAt && t.ids.length > 0), `${source}: no ID served after the re-election`)
    }
    const leaseEnd = typeof leaseAfter === 'string' ? undefined : leaseAfter?.leaseEnd
    report.check(leaseEnd !== undefined && leaseEnd > quorumWall + WINDOW_MS, `zookeeper-lease: its lease's end (${leaseEnd === undefined ? 'none' : new Date(leaseEnd).toISOString()}) did not move past the re-election + its window`)
    report.check(count(zkLoad.answers) > 0 && count(leaseLoad.answers) > 0, 'an instance served no ID')

    const exits = await run.stopLeaves()
    report.check(exits.every((code) => code === '0'), `SIGTERM exits: zookeeper ${exits[0]}, zookeeper-lease ${exits[1]}`)

    const slowest = (answers: Taken[]) => Math.max(0, ...answers.map((t) => t.doneAt - t.sentAt))
    report.note(`ensemble of 3 up in ${fmtMs(upMs)}; leader node ${leader + 1} SIGKILLed after 2 s of load, node ${newLeader === undefined ? '-' : newLeader + 1} leads a quorum ` +
      `${fmtMs(reElectionMs)} later (time to re-election; the lease's window ${WINDOW_MS} ms, TTL ${TTL_MS} ms, session timeout ${SESSION_TIMEOUT_MS} ms, heartbeat ${HEARTBEAT_MS} ms); ` +
      `load on for ${fmtMs(loadEnd - quorumAt)} after it; longest answer ${fmtMs(report.slowestMs)} (zookeeper ${fmtMs(slowest(zkLoad.answers))}, zookeeper-lease ${fmtMs(slowest(leaseLoad.answers))}; ` +
      `bound ${LATENCY_FORMULA}); longest time without an ID from the kill: zookeeper ${fmtMs(longestGap(zkLoad.answers, killAt, loadEnd))}, ` +
      `zookeeper-lease ${fmtMs(longestGap(leaseLoad.answers, killAt, loadEnd))}; worker ids kept: zookeeper ${ids.zk}, zookeeper-lease ${ids.lease}; ` +
      `IDs served: zookeeper ${count(zkLoad.answers)}, zookeeper-lease ${count(leaseLoad.answers)}, ${report.ledger.ids} in all`)
    report.recover = `re-elected in ${fmtMs(reElectionMs)}`
  } finally {
    await run.close()
  }
}
