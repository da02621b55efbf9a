import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { fmtMs, type Report, type Suite } from '../harness.js'
import { isLeaseLost } from '../lease.js'
import type { Answer } from '../load.js'
import { sleep, waitUntil } from '../services.js'
import {
  EnsembleRun, HEARTBEAT_MS, LATENCY_FORMULA, SESSION_TIMEOUT_MS, TTL_MS, WINDOW_MS, WORKER_MIN,
  count, describeStatus, longestGap, workerIdsOf, type StatusSample, type Taken,
} from './s22-zookeeper-leader-killed.js'

/** From the kill of two nodes to their restart: longer than the lease TTL and the session timeout, by two heartbeats. */
const OUTAGE_MS = Math.max(TTL_MS, SESSION_TIMEOUT_MS) + 2 * HEARTBEAT_MS
/**
 * Both instances must be back within this of the quorum's return: a client finds a serving node
 * within a session timeout (its handshake guard, src/snowflake/worker-id/zookeeper-client.ts) and
 * renews, or writes its heartbeat, at the next heartbeat; one more heartbeat for a beat that began
 * just before: max(TTL, session timeout) + 2 heartbeats = 4000 + 2 x 500 = 5000 ms (as in
 * test/integration/zookeeper-ensemble.test.ts).
 */
const RESUME_BOUND_MS = Math.max(TTL_MS, SESSION_TIMEOUT_MS) + 2 * HEARTBEAT_MS
/** The load goes on this long once both are back. */
const SETTLE_MS = 1500

const iso = (ms: number | undefined) => ms === undefined ? 'none' : new Date(ms).toISOString()

/** The longest time (Date.now() ms) between two requests' sending, or a bound and the nearest one, in [from, to]. */
function sendGap (answers: Taken[], from: number, to: number): number {
  const points = [from, ...answers.map((t) => t.wallSent).filter((w) => w > from && w < to).sort((a, b) => a - b), to]
  let gap = 0
  for (let i = 1; i < points.length; i++) gap = Math.max(gap, (points[i] as number) - (points[i - 1] as number))
  return gap
}

/**
 * 23. Quorum lost for longer than the lease TTL, then restored: the same two instances as 22
 * (`zookeeper`, `zookeeper-lease`) on a 3-node ensemble of the scenario's own, under load. The
 * leader and one follower are SIGKILLed: the follower left alone stops serving. After
 * OUTAGE_MS they are started again, and a quorum forms. Passes when:
 * - zookeeper-lease: no renewal is confirmed once the quorum is gone (its lease's end, as its
 *   status says, is within a TTL of the kill); it stops issuing (503 WORKER_LEASE_LOST, the
 *   only refusal accepted, and only from the kill to the quorum's return + RESUME_BOUND_MS) no
 *   later than its lease's end: its first refusal is sent before it, and no ID it served before
 *   the quorum came back decodes to a millisecond at or past it; it issues nothing from its
 *   first refusal until the quorum is back; it serves again, with no restart, within
 *   RESUME_BOUND_MS of the quorum, and refuses nothing after that;
 * - zookeeper: it keeps issuing with its worker id throughout (docs/snowflake-mode.md: losing
 *   ZooKeeper does not stop it), with no failed request; it sees ZooKeeper go, and its heartbeats
 *   reach ZooKeeper again within RESUME_BOUND_MS of the quorum;
 * - no answer slower than LATENCY_BOUND_MS, no duplicate, both exit 0 at SIGTERM.
 */
export async function zookeeperQuorumLost (suite: Suite, report: Report): Promise<void> {
  report.expectedWhat = '503 WORKER_LEASE_LOST'
  const run = await EnsembleRun.create(suite, report, 's23')
  try {
    const upMs = await run.start()
    const { zk, lease } = await run.startPair([7231, 7232])
    const [zkBefore, leaseBefore] = await run.statuses(zk, lease)
    const zkId = typeof zkBefore === 'string' ? undefined : zkBefore?.workerId
    const leaseId = typeof leaseBefore === 'string' ? undefined : leaseBefore?.workerId
    report.check(typeof zkBefore !== 'string' && zkBefore?.issuing === true && zkId !== undefined, `zookeeper: status at start: ${describeStatus(zkBefore)}`)
    report.check(typeof leaseBefore !== 'string' && leaseBefore?.issuing === true && leaseId !== undefined && leaseId >= WORKER_MIN && leaseId <= WORKER_MIN + 1,
      `zookeeper-lease: status at start: ${describeStatus(leaseBefore)}`)
    const documented = suite.documented.get(503)?.has('WORKER_LEASE_LOST') === true
    report.check(documented, 'WORKER_LEASE_LOST is not a 503 of the errors table (docs/operations.md)')

    const state = { killAt: Infinity, quorumAt: Infinity }
    // The lease instance's refusal, answered after the kill, sent before the quorum's return + the resume bound.
    const lostOk = (a: Answer) => isLeaseLost(a) && a.sentAt + a.ms >= state.killAt && a.sentAt <= state.quorumAt + RESUME_BOUND_MS
    const zkLoad = run.load('zookeeper', zk)
    const leaseLoad = run.load('zookeeper-lease', lease, lostOk)
    const zkWatch = run.watch(zk)
    const leaseWatch = run.watch(lease)
    await sleep(2000)

    const leader = await run.ensemble.leader()
    if (leader === undefined) throw new Error(`no leader in the ensemble: ${JSON.stringify(await run.ensemble.modes())}`)
    const killed = [leader, (leader + 1) % 3]
    const isolated = (leader + 2) % 3
    state.killAt = performance.now()
    const killAt = state.killAt
    const killWall = Date.now()
    await Promise.all(killed.map((i) => run.ensemble.stopNode(i)))
    const killedWall = Date.now()
    const alone = await waitUntil(async () => await run.ensemble.mode(isolated) === undefined, OUTAGE_MS, 20)
    const aloneMs = performance.now() - killAt
    report.check(alone, `node ${isolated + 1}, alone, still serves ${fmtMs(OUTAGE_MS)} after the kill`)
    await sleep(killAt + OUTAGE_MS - performance.now())
    report.check(await run.ensemble.mode(isolated) === undefined, `node ${isolated + 1} serves without a quorum ${fmtMs(performance.now() - killAt)} after the kill`)
    const restartAt = performance.now()
    for (const i of killed) run.ensemble.startNode(i)
    const quorumAt = await run.ensemble.waitForQuorum({ timeoutMs: 30_000 })
    state.quorumAt = quorumAt
    const quorumWall = killWall + Math.round(quorumAt - killAt)

    const resumed = () => leaseLoad.answers.some((t) => t.sentAt >= quorumAt && t.ids.length > 0)
    const zkBack = () => zkWatch.samples.some((s) => (s.lastHeartbeat ?? 0) > quorumWall)
    await waitUntil(() => resumed() && zkBack(), RESUME_BOUND_MS + 1000, 10)
    await sleep(SETTLE_MS)
    await Promise.all([zkLoad.stop(), leaseLoad.stop(), zkWatch.stop(), leaseWatch.stop()])
    const loadEnd = performance.now()
    report.check(zkWatch.errors.length + leaseWatch.errors.length === 0, `status reads failed: ${[...zkWatch.errors, ...leaseWatch.errors].slice(0, 3).join(' | ')}`)
    const alive = lease.proc.exitCode === null && lease.proc.signalCode === null && zk.proc.exitCode === null && zk.proc.signalCode === null
    report.check(alive, `an instance exited during the scenario (zookeeper ${zk.proc.exitCode ?? zk.proc.signalCode}, zookeeper-lease ${lease.proc.exitCode ?? lease.proc.signalCode})`)
    const [zkAfter, leaseAfter] = await run.statuses(zk, lease)

    // zookeeper-lease: its lease's end, as it knew it while the quorum was gone.
    const bySent = (a: Taken, b: Taken) => a.sentAt - b.sentAt
    const la = [...leaseLoad.answers].sort(bySent)
    const ends = leaseWatch.samples.filter((s) => s.at < quorumAt && s.leaseEnd !== undefined).map((s) => s.leaseEnd as number)
    const leaseEnd = ends.length === 0 ? undefined : Math.max(...ends)
    report.check(leaseEnd !== undefined, 'zookeeper-lease: its status never showed its lease\'s end')
    // (+1: the lease's estimate reads the wall and the monotonic clock a moment apart.)
    report.check(leaseEnd === undefined || leaseEnd <= killedWall + TTL_MS + 1,
      `zookeeper-lease: a renewal was confirmed once the quorum was gone: its lease ends ${iso(leaseEnd)}, ${fmtMs((leaseEnd ?? 0) - killedWall)} after the kill (TTL ${TTL_MS} ms)`)
    const outage = la.filter((t) => t.sentAt >= killAt && t.sentAt < quorumAt)
    const stopIndex = outage.findIndex((t) => t.ids.length === 0)
    const stop = outage[stopIndex]
    report.check(stop !== undefined, 'zookeeper-lease: never stopped issuing while the quorum was lost')
    report.check(stop === undefined || (stop.status === 503 && stop.code === 'WORKER_LEASE_LOST'), `zookeeper-lease: its first refusal was ${stop?.status} ${stop?.code}, not 503 WORKER_LEASE_LOST`)
    report.check(stop === undefined || leaseEnd === undefined || stop.wallSent <= leaseEnd,
      `zookeeper-lease: first refusal sent ${fmtMs((stop?.wallSent ?? 0) - (leaseEnd ?? 0))} after its lease's end ${iso(leaseEnd)}`)
    const idsBeforeQuorum = la.filter((t) => t.sentAt < quorumAt).flatMap((t) => t.ids)
    const lastTs = Math.max(-Infinity, ...idsBeforeQuorum.map((id) => decodeSnowflakeId(id).timestamp))
    report.check(leaseEnd === undefined || lastTs < leaseEnd, `zookeeper-lease: issued an ID of millisecond ${lastTs} (${iso(lastTs)}), at or past its lease's end ${iso(leaseEnd)}`)
    const issuedWhileLost = stop === undefined ? [] : outage.slice(stopIndex).filter((t) => t.ids.length > 0)
    report.check(issuedWhileLost.length === 0,
      `zookeeper-lease: ${issuedWhileLost.length} answers with IDs between its first refusal and the quorum's return, e.g. one sent ${fmtMs((issuedWhileLost[0]?.sentAt ?? 0) - killAt)} after the kill`)
    // Asked all the time from its lease's end to the quorum's return (requests never a heartbeat
    // apart, so a renewal in between would show), and refused every time.
    const pastEnd = leaseEnd === undefined ? [] : la.filter((t) => t.wallSent >= leaseEnd && t.sentAt < quorumAt)
    const pastEndMs = leaseEnd === undefined ? 0 : quorumWall - leaseEnd
    report.check(pastEnd.length > 0 && pastEnd.every((t) => t.ids.length === 0 && t.code === 'WORKER_LEASE_LOST') && sendGap(pastEnd, leaseEnd ?? 0, quorumWall) < HEARTBEAT_MS,
      `zookeeper-lease: ${pastEnd.length} answers to requests sent between its lease's end and the quorum's return (${fmtMs(pastEndMs)}), ${pastEnd.filter((t) => t.ids.length > 0).length} with IDs, ` +
      `${pastEnd.filter((t) => t.code !== 'WORKER_LEASE_LOST').length} not WORKER_LEASE_LOST; longest time without a request ${fmtMs(sendGap(pastEnd, leaseEnd ?? 0, quorumWall))} (at most ${HEARTBEAT_MS} ms)`)
    const lostCount = la.filter((t) => t.status === 503 && t.code === 'WORKER_LEASE_LOST').length

    // zookeeper-lease: back without a restart.
    const firstOk = la.find((t) => t.sentAt >= quorumAt && t.ids.length > 0)
    const resumeMs = firstOk === undefined ? undefined : firstOk.doneAt - quorumAt
    report.check(resumeMs !== undefined && resumeMs <= RESUME_BOUND_MS,
      `zookeeper-lease: served again ${resumeMs === undefined ? 'never' : fmtMs(resumeMs)} after the quorum came back (bound ${fmtMs(RESUME_BOUND_MS)})`)
    const refusedAfter = firstOk === undefined ? [] : la.filter((t) => t.sentAt > firstOk.doneAt && t.ids.length === 0)
    report.check(refusedAfter.length === 0, `zookeeper-lease: ${refusedAfter.length} refusals after it served again, e.g. ${refusedAfter[0]?.status} ${refusedAfter[0]?.code}`)
    const leaseIdAfter = typeof leaseAfter === 'string' ? undefined : leaseAfter?.workerId
    const ls = typeof leaseAfter === 'string' ? undefined : leaseAfter
    report.check(ls?.issuing === true && ls.connected === true && leaseIdAfter !== undefined && leaseIdAfter >= WORKER_MIN && leaseIdAfter <= WORKER_MIN + 1,
      `zookeeper-lease: status at the end: ${describeStatus(leaseAfter)}`)
    const beforeIds = workerIdsOf(la.filter((t) => t.sentAt < quorumAt))
    const afterIds = workerIdsOf(la.filter((t) => t.sentAt >= quorumAt))
    report.check(beforeIds.size === 1 && beforeIds.has(leaseId ?? -1) && afterIds.size === 1 && afterIds.has(leaseIdAfter ?? -1),
      `zookeeper-lease: worker ids of its IDs before the quorum's return ${[...beforeIds].join(', ')}, after ${[...afterIds].join(', ')} (status: ${leaseId} -> ${leaseIdAfter})`)

    // zookeeper: issuing throughout, with its worker id.
    const za = [...zkLoad.answers].sort(bySent)
    const zs = typeof zkAfter === 'string' ? undefined : zkAfter
    report.check(zs?.workerId === zkId && zs?.issuing === true && zs.connected === true, `zookeeper: status at the end: ${describeStatus(zkAfter)} (worker id ${zkId} at start)`)
    const zkWorkerIds = workerIdsOf(za)
    report.check(zkWorkerIds.size === 1 && zkWorkerIds.has(zkId ?? -1), `zookeeper: IDs carry worker ids ${[...zkWorkerIds].join(', ')} (its id: ${zkId})`)
    const zkOutageIds = count(za.filter((t) => t.sentAt >= killAt && t.sentAt < quorumAt))
    report.check(zkOutageIds > 0, 'zookeeper: served no ID while the quorum was lost')
    const duringOutage = (s: StatusSample) => s.at >= killAt && s.at < quorumAt
    report.check(zkWatch.samples.some((s) => duringOutage(s) && s.connected === false), 'zookeeper: its status never showed ZooKeeper gone during the outage')
    const zkBackAt = zkWatch.samples.find((s) => (s.lastHeartbeat ?? 0) > quorumWall)?.lastHeartbeat
    const zkBackMs = zkBackAt === undefined ? undefined : zkBackAt - quorumWall
    report.check(zkBackMs !== undefined && zkBackMs <= RESUME_BOUND_MS,
      `zookeeper: heartbeats reach ZooKeeper again ${zkBackMs === undefined ? 'never' : fmtMs(zkBackMs)} after the quorum came back (bound ${fmtMs(RESUME_BOUND_MS)})`)

    const exits = await run.stopLeaves()
    report.check(exits.every((code) => code === '0'), `SIGTERM exits: zookeeper ${exits[0]}, zookeeper-lease ${exits[1]}`)

    const margin = stop === undefined || leaseEnd === undefined ? undefined : leaseEnd - stop.wallSent
    report.note(`ensemble of 3 up in ${fmtMs(upMs)}; TTL ${TTL_MS} ms (window ${WINDOW_MS} ms), session timeout ${SESSION_TIMEOUT_MS} ms, heartbeat ${HEARTBEAT_MS} ms; ` +
      `nodes ${killed.map((i) => i + 1).join(' and ')} (the leader and a follower) SIGKILLed after 2 s of load, node ${isolated + 1} stopped serving ${fmtMs(aloneMs)} later; ` +
      `restarted ${fmtMs(restartAt - killAt)} after the kill, a quorum again ${fmtMs(quorumAt - restartAt)} after that (quorum lost ${fmtMs(quorumAt - killAt)}); ` +
      `zookeeper-lease: lease end ${leaseEnd === undefined ? '-' : fmtMs(leaseEnd - killedWall)} after the kill, first WORKER_LEASE_LOST sent ${stop === undefined ? '-' : fmtMs(stop.wallSent - killWall)} after the kill, ` +
      `stop margin ${margin === undefined ? '-' : fmtMs(margin)} before the lease's end (last ID's millisecond ${leaseEnd === undefined || !Number.isFinite(lastTs) ? '-' : fmtMs(leaseEnd - lastTs)} before it), ` +
      `quorum lost ${fmtMs(pastEndMs)} past the lease's end (${pastEnd.length} requests sent then, all refused), ${lostCount} WORKER_LEASE_LOST answers, served again ${resumeMs === undefined ? 'never' : fmtMs(resumeMs)} after the quorum (bound ${fmtMs(RESUME_BOUND_MS)}), ` +
      `worker id ${leaseId} -> ${leaseIdAfter}; zookeeper: ${zkOutageIds} IDs while the quorum was lost, longest time without an ID from the kill ${fmtMs(longestGap(za, killAt, loadEnd))}, ` +
      `heartbeats in ZooKeeper again ${zkBackMs === undefined ? 'never' : fmtMs(zkBackMs)} after the quorum, worker id ${zkId} kept; longest answer ${fmtMs(report.slowestMs)} ` +
      `(bound ${LATENCY_FORMULA}); IDs served: zookeeper ${count(za)}, zookeeper-lease ${count(la)}, ${report.ledger.ids} in all`)
    report.recover = `lease stopped ${margin === undefined ? '-' : fmtMs(margin)} before its end, back ${resumeMs === undefined ? 'never' : fmtMs(resumeMs)} after quorum`
  } finally {
    await run.close()
  }
}
