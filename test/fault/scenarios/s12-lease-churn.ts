import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, fmtMs, takeIds, unique, zkInspector, type Report, type Suite, type ZkInspector } from '../harness.js'
import { HttpClient } from '../load.js'
import { LEASE_SOURCES, cacheDirOf, decodeAll, heldCount, largestWait, logLines, startLeaseLeaf, type LeaseSource } from '../lease.js'
import { sleep } from '../services.js'

/** Starts per source: FAULT_CHURN_STARTS overrides (e.g. a shorter run while developing). */
export const CHURN_STARTS = Number(process.env.FAULT_CHURN_STARTS ?? 2000)
/** Processes alive at once (each start costs some 0.5 s of CPU: more only queue on 2 cores). */
const CONCURRENCY = Number(process.env.FAULT_CHURN_CONCURRENCY ?? 6)
const POOL_MIN = 0
const POOL_MAX = 63
const TTL_MS = 2000
const HEARTBEAT_MS = 600
/** leaf.snowflake.port of the first start; each start has its own. */
const FIRST_PORT = 30_000
/** Requests per instance: one ID, a batch, one ID. */
const COUNTS = [undefined, 5, undefined] as const

interface SourceRun {
  source: LeaseSource
  starts: number
  failedStarts: number
  kills: number
  terms: number
  badExits: number
  ids: number
  workerIds: Set<number>
  peakHeld: number
  peakAlive: number
  largestWaitMs: number
  ms: number
}

/**
 * 12. Churn on a pool of 64 worker ids (0..63), per recyclable source: CHURN_STARTS starts of
 * `node dist/server.js` (snowflake only, each with its own leaf.snowflake.port and cache
 * folder), CONCURRENCY at a time; each takes a few IDs and is ended by SIGKILL or SIGTERM at
 * random. A SIGKILLed instance's id stays leased until its TTL (2 s) runs out. Passes when
 * every start succeeds (the pool is never exhausted), every SIGTERM exits 0 having released
 * its id, every ID request is answered, and no ID repeats.
 */
export async function leaseChurn (suite: Suite, report: Report): Promise<void> {
  const runs: SourceRun[] = []
  for (const source of LEASE_SOURCES) runs.push(await churn(suite, report, source))
  report.note(`${CHURN_STARTS} starts per source, ${CONCURRENCY} at a time, pool ${POOL_MIN}..${POOL_MAX}, TTL ${TTL_MS} ms, heartbeat ${HEARTBEAT_MS} ms; ` +
    runs.map((r) => `${r.source}: ${r.starts} starts (${r.failedStarts} failed), ${r.kills} SIGKILL + ${r.terms} SIGTERM (${r.badExits} SIGTERM exits not 0), ` +
      `${r.ids} IDs, ${r.workerIds.size} distinct worker ids, peak ${r.peakHeld} ids leased at once (${r.peakAlive} processes), ` +
      `largest issuedUntil wait ${fmtMs(r.largestWaitMs)}, wall time ${fmtMs(r.ms)} (${(r.starts / (r.ms / 1000)).toFixed(1)} starts/s)`).join('; '))
  report.recover = runs.map((r) => `${r.source} ${r.starts} starts in ${fmtMs(r.ms)}`).join(', ')
}

async function churn (suite: Suite, report: Report, source: LeaseSource): Promise<SourceRun> {
  const name = unique(`fault-s12-${source === 'db-lease' ? 'db' : 'zk'}`)
  const run: SourceRun = { source, starts: 0, failedStarts: 0, kills: 0, terms: 0, badExits: 0, ids: 0, workerIds: new Set(), peakHeld: 0, peakAlive: 0, largestWaitMs: 0, ms: 0 }
  const inspector: ZkInspector | undefined = source === 'zookeeper-lease' ? await zkInspector(suite.zk) : undefined
  const logs: string[] = []
  const state = { next: 0, alive: 0, done: false }
  const started = performance.now()
  // The store's count of leased ids, every 100 ms.
  const watching = (async () => {
    while (!state.done) {
      try {
        run.peakHeld = Math.max(run.peakHeld, await heldCount(suite, source, name, inspector))
      } catch {}
      await sleep(100)
    }
  })()
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (state.next < CHURN_STARTS) {
        const i = state.next++
        const label = `${source}-${i}`
        run.starts++
        state.alive++
        run.peakAlive = Math.max(run.peakAlive, state.alive)
        try {
          let leaf
          try {
            const cacheDir = cacheDirOf(suite, name, String(i))
            leaf = await startLeaseLeaf(suite, label, { source, name, min: POOL_MIN, max: POOL_MAX, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS, port: FIRST_PORT + i, cacheDir, keep: false })
          } catch (err) {
            run.failedStarts++
            const message = (err as Error).message
            report.check(false, `${label}: start failed: ${message.split('\n').slice(-3).join(' | ').slice(0, 400)}`)
            logs.push(`--- ${label} (start failed)`, message)
            continue
          }
          const client = new HttpClient()
          const ids: bigint[] = []
          for (const count of COUNTS) {
            const r = await takeIds(report, client, leaf.url, 'snowflake', 'k', count, label)
            if (r.ids !== undefined) ids.push(...r.ids)
            else logs.push(`--- ${label}: ${describe(r.answer)}`)
          }
          client.close()
          run.ids += ids.length
          const decoded = decodeAll(ids)
          for (const w of decoded.workerIds) run.workerIds.add(w)
          report.check(decoded.workerIds.size <= 1, `${label}: IDs of worker ids ${[...decoded.workerIds].join(', ')}`)
          report.check([...decoded.workerIds].every((w) => w >= POOL_MIN && w <= POOL_MAX), `${label}: worker id ${[...decoded.workerIds].join(', ')} outside the pool`)
          const kill = Math.random() < 0.5
          if (kill) run.kills++
          else run.terms++
          const code = await leaf.stop(kill ? 'SIGKILL' : 'SIGTERM')
          if (!kill && (code !== 0 || logLines(leaf, 'worker-id lease released').length !== 1)) {
            run.badExits++
            report.check(false, `${label}: SIGTERM: exit code ${code}, ${logLines(leaf, 'worker-id lease released').length} 'worker-id lease released' lines`)
          }
          run.largestWaitMs = Math.max(run.largestWaitMs, largestWait(leaf))
          logs.push(`--- ${label} (${kill ? 'SIGKILL' : 'SIGTERM'}, exit ${code})`, ...leaf.output)
        } finally {
          state.alive--
        }
      }
    }))
  } finally {
    run.ms = performance.now() - started
    state.done = true
    await watching
    await inspector?.close()
    writeFileSync(join(suite.logDir, `s12-churn-${source}.log`), logs.join('\n') + '\n')
  }
  report.check(run.failedStarts === 0, `${source}: ${run.failedStarts} of ${run.starts} starts failed`)
  report.check(run.peakHeld < POOL_MAX - POOL_MIN + 1, `${source}: ${run.peakHeld} ids leased at once: the pool was exhausted`)
  return run
}
