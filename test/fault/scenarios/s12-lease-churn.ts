import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, fmtMs, takeIds, unique, zkInspector, type Leaf, type Report, type Suite, type ZkInspector } from '../harness.js'
import { HttpClient } from '../load.js'
import { LEASE_SOURCES, cacheDirOf, decodeAll, heldCount, isLeaseLost, largestWait, logLines, startLeaseLeaf, type LeaseSource } from '../lease.js'
import { offsetClock, sleep } from '../services.js'

/** Starts per source: FAULT_CHURN_STARTS overrides (e.g. a shorter run while developing). */
export const CHURN_STARTS = Number(process.env.FAULT_CHURN_STARTS ?? 300)
/** Processes alive at once: with the leases of the dead ones still running out, the pool's size or near. */
const CONCURRENCY = 7
/**
 * Instances that hold an id from the churn's start to its end, per source. ZooKeeper frees a
 * SIGTERMed holder's id at once and a killed one's a session timeout later, and a claimant
 * takes it the moment it is gone: with 7 churning over 8 ids a slow host (CI's, 2 cores) can
 * keep the pool short of full (peak 6 of 8 in one run). Two residents leave 6 ids to 7
 * churners. db-lease needs none: its claimants watch a dead holder's row stand still for a
 * whole TTL, so nearly every start there waits for a free id anyway.
 */
const RESIDENTS: Record<LeaseSource, number> = { 'db-lease': 0, 'zookeeper-lease': 2 }
export const POOL_MIN = 0
export const POOL_MAX = 7
const POOL_SIZE = POOL_MAX - POOL_MIN + 1
const TTL_MS = 2000
const HEARTBEAT_MS = 600
/** The clock of an instance started ahead (faketime's offset, within max-clock-drift-ms): its last millisecond outlives its lease. */
const AHEAD = '+4s'
/** A paused instance stays stopped this long: past its TTL, so its id is taken meanwhile. */
const PAUSE_MS = TTL_MS + 1000
/** leaf.snowflake.port of the first start; each start has its own. */
const FIRST_PORT = 30_000
/** Requests per instance: one ID, a batch, one ID. */
const COUNTS = [undefined, 5, undefined] as const
const WAIT_MSG_EXHAUSTED = 'every worker id is leased: waiting for the oldest lease to expire'
/** A start's refusal after waiting its TTL (and the store's slack) with every id leased at each look. */
const REFUSED_EXHAUSTED = 'start refused: every worker id of'
/**
 * A refusal is fair only when the store showed every id leased within this long before it:
 * the store is sampled every 50 ms, and a server's claims are at most EXHAUSTED_POLL_MS
 * (250 ms) apart, so an id free for this long through a refusal was free to that server.
 */
const REFUSAL_WINDOW_MS = 1000

/**
 * How each start ends, by its number, in a cycle of 20: SIGKILL (its id stays leased until
 * its TTL runs out), SIGTERM (a clean release), SIGSTOP past the TTL then SIGCONT (its id is
 * taken meanwhile: it must stop issuing under it), started with its clock 4 s ahead and
 * SIGKILLed (the next holder of its id must wait for the last millisecond it recorded), or
 * started 4 s ahead and SIGTERMed, then restarted at once with the clock set right: the
 * restart reads the id from its cache folder and asks for it first, but a claimant already
 * waiting for a free id usually takes it before, and it is that claimant that waits for the
 * millisecond the earlier life released it at (the note counts how often the restart took it
 * back, and how often that restart waited). (A killed holder's id is taken late or not at all where
 * released ids are about: ZooKeeper ends the dead session after a TTL, and a claimant takes
 * a free id before an expired one, so by then its last millisecond has passed.)
 */
const ENDINGS = ['kill', 'term', 'ahead', 'kill', 'term', 'pause', 'kill', 'term', 'kill', 'ahead-term',
  'term', 'kill', 'pause', 'kill', 'term', 'ahead', 'kill', 'term', 'pause', 'kill'] as const
type Ending = typeof ENDINGS[number]

interface SourceRun {
  source: LeaseSource
  starts: number
  failedStarts: number
  /** Starts refused while the store showed every id leased: a pool oversubscribed for a TTL. */
  refusedExhausted: number
  endings: Record<Ending, number>
  badExits: number
  ids: number
  workerIds: Set<number>
  peakHeld: number
  /** Instances that held an id throughout (RESIDENTS). */
  residents: number
  /** Starts that found every id leased and waited for one. */
  exhaustedWaits: number
  /** Starts that waited for a previous holder's last millisecond, and the longest wait. */
  issuedUntilWaits: number
  /** Restarts after an 'ahead-term' ending that took the released id back, and those of them that waited. */
  retaken: number
  retakenWaited: number
  largestWaitMs: number
  /** After SIGCONT: answers WORKER_LEASE_LOST, and IDs served (under a new id or the old one still held). */
  pausedLost: number
  pausedServed: number
  ms: number
}

/**
 * 12. Churn on a pool of 8 worker ids (0..7) held near exhaustion, per recyclable source
 * (with RESIDENTS holding ids throughout):
 * CHURN_STARTS starts of `node dist/server.js` (snowflake only, each with its own
 * leaf.snowflake.port and cache folder), CONCURRENCY at a time, each taking a few IDs, then
 * ended as ENDINGS says. Passes when every start leases an id (a start waits for a lease to
 * run out when every id is leased), except one refused after a TTL's wait while the store
 * showed every id leased (the pool oversubscribed: the dead ones' leases run out and other
 * waiters take them first; at most a tenth of the starts), every SIGTERM exits 0 having released
 * its id, every answer is IDs (or WORKER_LEASE_LOST from a resumed paused instance), some
 * starts waited for a previous holder's last millisecond (the issuedUntil rule at work), the
 * pool ran near exhaustion (at most one id free at its peak, or a start waited for a free
 * one), and no ID repeats. The two sources churn at once: db-lease, whose claimants watch a
 * dead holder's row stand still for a TTL, sets the pace (300 starts in 160 to 340 s, nearly
 * every one waiting for a free id), and zookeeper-lease ends within it.
 */
export async function leaseChurn (suite: Suite, report: Report): Promise<void> {
  // The two sources at once: each its own pool in its own store, and a start spends most of
  // its life waiting for a lease to run out, not on the CPU.
  const runs = await Promise.all(LEASE_SOURCES.map((source) => churn(suite, report, source)))
  report.note(`${CHURN_STARTS} starts per source, ${CONCURRENCY} at a time, pool ${POOL_MIN}..${POOL_MAX}, TTL ${TTL_MS} ms, heartbeat ${HEARTBEAT_MS} ms, clock ahead ${AHEAD}, pause ${fmtMs(PAUSE_MS)}; ` +
    runs.map((r) => `${r.source}: ${r.residents} residents holding an id throughout, ${r.starts} starts (${r.failedStarts} failed, ${r.refusedExhausted} refused with every id leased; ${r.endings.kill} SIGKILL, ${r.endings.term} SIGTERM (${r.badExits} exits not 0), ` +
      `${r.endings.pause} SIGSTOP (after SIGCONT: ${r.pausedLost} WORKER_LEASE_LOST, ${r.pausedServed} served), ${r.endings.ahead} clock ahead then SIGKILL, ` +
      `${r.endings['ahead-term']} clock ahead then SIGTERM and a restart (${r.retaken} took the id back, ${r.retakenWaited} of them waited)), ` +
      `${r.ids} IDs, ${r.workerIds.size} distinct worker ids, peak ${r.peakHeld} of ${POOL_SIZE} ids leased, ${r.exhaustedWaits} starts waited for a free id, ` +
      `${r.issuedUntilWaits} waited for a previous holder's last millisecond (longest ${fmtMs(r.largestWaitMs)}), wall time ${fmtMs(r.ms)} (${(r.starts / (r.ms / 1000)).toFixed(1)} starts/s)`).join('; '))
  report.recover = runs.map((r) => `${r.source} ${r.starts} starts in ${fmtMs(r.ms)}`).join(', ')
}

async function churn (suite: Suite, report: Report, source: LeaseSource): Promise<SourceRun> {
  const name = unique(`fault-s12-${source === 'db-lease' ? 'db' : 'zk'}`)
  const run: SourceRun = {
    source,
    starts: 0,
    failedStarts: 0,
    refusedExhausted: 0,
    endings: { kill: 0, term: 0, pause: 0, ahead: 0, 'ahead-term': 0 },
    badExits: 0,
    ids: 0,
    workerIds: new Set(),
    peakHeld: 0,
    residents: RESIDENTS[source],
    exhaustedWaits: 0,
    issuedUntilWaits: 0,
    retaken: 0,
    retakenWaited: 0,
    largestWaitMs: 0,
    pausedLost: 0,
    pausedServed: 0,
    ms: 0,
  }
  const inspector: ZkInspector | undefined = source === 'zookeeper-lease' ? await zkInspector(suite.zk) : undefined
  const logs: string[] = []
  const state = { next: 0, done: false }
  const started = performance.now()
  // The store's count of leased ids, every 50 ms.
  const samples: { at: number, held: number }[] = []
  const watching = (async () => {
    while (!state.done) {
      try {
        const held = await heldCount(suite, source, name, inspector)
        samples.push({ at: performance.now(), held })
        run.peakHeld = Math.max(run.peakHeld, held)
      } catch {}
      await sleep(50)
    }
  })()
  /** True when the store showed every id leased in the REFUSAL_WINDOW_MS before `at`. */
  const fullBefore = (at: number) => samples.some((s) => s.at >= at - REFUSAL_WINDOW_MS && s.at <= at && s.held >= POOL_SIZE)
  const lease = (label: string, port: number, cacheDir: string, env?: Record<string, string>) => startLeaseLeaf(suite, label, {
    source, name, min: POOL_MIN, max: POOL_MAX, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS, port, cacheDir, keep: false, ...(env === undefined ? {} : { env }),
  })
  const residents: Leaf[] = []
  try {
    for (let k = 0; k < run.residents; k++) {
      residents.push(await lease(residentLabel(source, k), FIRST_PORT + CHURN_STARTS + k, cacheDirOf(suite, name, `resident-${k}`)))
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      /** After an 'ahead-term' ending: its cache folder and worker id, for the restart that follows. */
      let restartOf: { cacheDir: string, workerId: number | undefined } | undefined
      while (state.next < CHURN_STARTS) {
        const i = state.next++
        const ending = ENDINGS[i % ENDINGS.length] as Ending
        const label = `${source}-${i}-${ending}`
        const restarting = restartOf
        restartOf = undefined
        const cacheDir = restarting?.cacheDir ?? cacheDirOf(suite, name, String(i))
        run.starts++
        let leaf: Leaf
        try {
          leaf = await lease(label, FIRST_PORT + i, cacheDir, ending === 'ahead' || ending === 'ahead-term' ? offsetClock(AHEAD) : undefined)
        } catch (err) {
          const message = (err as Error).message
          if (message.includes(REFUSED_EXHAUSTED) && fullBefore(performance.now())) {
            run.refusedExhausted++
            logs.push(`--- ${label} (refused, every id leased)`, message)
            continue
          }
          run.failedStarts++
          report.check(false, `${label}: start failed: ${message.split('\n').slice(-3).join(' | ').slice(0, 400)}`)
          logs.push(`--- ${label} (start failed)`, message)
          continue
        }
        run.endings[ending]++
        const client = new HttpClient()
        try {
          const ids: bigint[] = []
          for (const count of COUNTS) {
            const r = await takeIds(report, client, leaf.url, 'snowflake', 'k', count, label)
            if (r.ids !== undefined) ids.push(...r.ids)
            else logs.push(`--- ${label}: ${describe(r.answer)}`)
          }
          run.ids += ids.length
          const decoded = decodeAll(ids)
          for (const w of decoded.workerIds) run.workerIds.add(w)
          report.check(decoded.workerIds.size <= 1, `${label}: IDs of worker ids ${[...decoded.workerIds].join(', ')}`)
          report.check([...decoded.workerIds].every((w) => w >= POOL_MIN && w <= POOL_MAX), `${label}: worker id ${[...decoded.workerIds].join(', ')} outside the pool`)
          if (ending === 'pause' && !exited(leaf)) {
            process.kill(leaf.pid, 'SIGSTOP')
            await sleep(PAUSE_MS)
            if (!exited(leaf)) process.kill(leaf.pid, 'SIGCONT')
            // Its id ran out meanwhile and may be another's: IDs only under a lease it holds.
            const r = await takeIds(report, client, leaf.url, 'snowflake', 'k', undefined, `${label}:resumed`, isLeaseLost)
            if (r.ids !== undefined) {
              run.pausedServed++
              run.ids += r.ids.length
            } else if (isLeaseLost(r.answer)) run.pausedLost++
          }
          report.check(!exited(leaf), `${label}: exited by itself (code ${leaf.proc.exitCode}, signal ${leaf.proc.signalCode}): ${leaf.output.slice(-3).join(' | ').slice(0, 600)}`)
          const kill = ending !== 'term' && ending !== 'ahead-term'
          const code = await leaf.stop(kill ? 'SIGKILL' : 'SIGTERM')
          if (!kill && (code !== 0 || logLines(leaf, 'worker-id lease released').length !== 1)) {
            run.badExits++
            report.check(false, `${label}: SIGTERM: exit code ${code}, ${logLines(leaf, 'worker-id lease released').length} 'worker-id lease released' lines`)
          }
          const waited = largestWait(leaf)
          if (waited > 0) run.issuedUntilWaits++
          const workerId = decoded.workerIds.size === 1 ? [...decoded.workerIds][0] : undefined
          if (restarting !== undefined && workerId !== undefined && workerId === restarting.workerId) {
            run.retaken++
            if (waited > 0) run.retakenWaited++
          }
          if (ending === 'ahead-term') restartOf = { cacheDir, workerId }
          run.largestWaitMs = Math.max(run.largestWaitMs, waited)
          if (leaf.output.some((line) => line.includes(WAIT_MSG_EXHAUSTED))) run.exhaustedWaits++
          logs.push(`--- ${label} (${kill ? 'SIGKILL' : 'SIGTERM'}, exit ${code})`, ...leaf.output)
        } finally {
          client.close()
        }
      }
    }))
    // The residents served throughout, and hand their ids back.
    for (const [k, leaf] of residents.entries()) {
      const label = residentLabel(source, k)
      const client = new HttpClient()
      try {
        const r = await takeIds(report, client, leaf.url, 'snowflake', 'k', 5, label)
        report.check(r.ids !== undefined, `${label}: no IDs at the end: ${describe(r.answer)}`)
        run.ids += r.ids?.length ?? 0
        for (const w of decodeAll(r.ids ?? []).workerIds) run.workerIds.add(w)
      } finally {
        client.close()
      }
      const code = await leaf.stop('SIGTERM')
      report.check(code === 0 && logLines(leaf, 'worker-id lease released').length === 1, `${label}: SIGTERM: exit code ${code}, ${logLines(leaf, 'worker-id lease released').length} 'worker-id lease released' lines`)
      logs.push(`--- ${label} (SIGTERM, exit ${code})`, ...leaf.output)
    }
  } finally {
    for (const leaf of residents) if (!exited(leaf)) await leaf.stop('SIGKILL')
    run.ms = performance.now() - started
    state.done = true
    await watching
    await inspector?.close()
    writeFileSync(join(suite.logDir, `s12-churn-${source}.log`), logs.join('\n') + '\n')
  }
  report.check(run.failedStarts === 0, `${source}: ${run.failedStarts} of ${run.starts} starts failed (not listening in time, or refused while the store showed an id free for ${fmtMs(REFUSAL_WINDOW_MS)})`)
  report.check(run.refusedExhausted <= run.starts / 10, `${source}: ${run.refusedExhausted} of ${run.starts} starts refused with every id leased: the pool stays full, ids are not freed`)
  report.check(run.peakHeld >= POOL_SIZE - 1 || run.exhaustedWaits > 0, `${source}: the pool was never near exhaustion (peak ${run.peakHeld} of ${POOL_SIZE} ids leased, no start waited for a free id)`)
  report.check(run.issuedUntilWaits > 0, `${source}: no start waited for a previous holder's last millisecond: the issuedUntil rule was not exercised`)
  return run
}

/** The process ended, by a signal or an exit of its own. */
function exited (leaf: Leaf): boolean {
  return leaf.proc.exitCode !== null || leaf.proc.signalCode !== null
}

function residentLabel (source: LeaseSource, k: number): string {
  return `${source}-resident-${k}`
}
