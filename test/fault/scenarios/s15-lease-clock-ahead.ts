import { alive, fmtMs, takeIds, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { LEASE_SOURCES, LEASED_MSG, cacheDirOf, decodeAll, largestWait, logLines, startLeaseLeaf, waitReleased, type LeaseSource } from '../lease.js'
import { offsetClock, sleep, waitUntil } from '../services.js'

const TTL_MS = 2000
const HEARTBEAT_MS = 500
const X = 3
/** The old holder's clock, ahead of everyone else's (faketime's offset). */
// 8 s: the old holder's issuedUntil must still lie ahead of the clock when the claimant takes the
// id over, after the row expires (a TTL), the new process starts (seconds under CI's load) and a
// db-lease claimant watches the dead holder's row for another TTL. (At 4 s a loaded run logged
// no wait.) The claimant waits at most max-clock-drift-ms, so that is raised to cover it.
const AHEAD = '+8s'
const AHEAD_MS = 8000
const MAX_DRIFT_MS = 15_000
const CLIENTS = 4
const RATE = 400
const OLD_SERVES_MS = 2000
const NEW_IDS = 200

interface Figures {
  source: LeaseSource
  oldIds: number
  oldMaxTs: number
  /** How far the old holder's last ID was ahead of the real clock at the kill. */
  oldAheadMs: number
  previousIssuedUntil: number
  waitMs: number
  newIds: number
  newMinTs: number
  newStartMs: number
}

/**
 * 15. A holder whose clock runs ahead, per recyclable source. The old holder runs under
 * libfaketime +4s (pool X..X) and serves under load, then is SIGKILLed. Once the store shows
 * X free, a new instance (right clock, pool X..X) leases X: it must wait for the old holder's
 * recorded issuedUntil, so that none of its IDs is at or before the old holder's last
 * millisecond. Passes when the new holder's first IDs come after the old holder's last
 * (decoded timestamps), it logged a wait, and no ID repeats.
 */
export async function leaseClockAhead (suite: Suite, report: Report): Promise<void> {
  const figures: Figures[] = []
  for (const source of LEASE_SOURCES) figures.push(await clockAhead(suite, report, source))
  report.note(`old holder under faketime ${AHEAD}, TTL ${TTL_MS} ms, heartbeat ${HEARTBEAT_MS} ms; ` + figures.map((f) => `${f.source}: old holder ${f.oldIds} IDs, ` +
    `last at ${f.oldMaxTs} (${fmtMs(f.oldAheadMs)} ahead of the real clock at the kill); new holder read previousIssuedUntil ${f.previousIssuedUntil}, ` +
    `waited ${fmtMs(f.waitMs)} (logged), listening ${fmtMs(f.newStartMs)} after its start, first ID at ${f.newMinTs} (${f.newMinTs - f.oldMaxTs} ms after the old holder's last), ${f.newIds} IDs`).join('; '))
  report.recover = `largest issuedUntil wait ${figures.map((f) => `${f.source === 'db-lease' ? 'db' : 'zk'} ${fmtMs(f.waitMs)}`).join(', ')}`
}

async function clockAhead (suite: Suite, report: Report, source: LeaseSource): Promise<Figures> {
  const name = unique(`fault-s15-${source === 'db-lease' ? 'db' : 'zk'}`)
  const common = { source, name, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS, min: X, max: X, args: [`--leaf.snowflake.max-clock-drift-ms=${MAX_DRIFT_MS}`] }
  const old = await startLeaseLeaf(suite, `${source}-old`, { ...common, port: 7901, cacheDir: cacheDirOf(suite, name, 'old'), env: offsetClock(AHEAD) })
  const fig: Figures = { source, oldIds: 0, oldMaxTs: 0, oldAheadMs: 0, previousIssuedUntil: 0, waitMs: 0, newIds: 0, newMinTs: 0, newStartMs: 0 }
  let fresh: Leaf | undefined
  try {
    const oldIds: bigint[] = []
    const state = { killed: false }
    const batch = batchMix(10, 10)
    report.expectedWhat = 'cut by SIGKILL'
    const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxRequests: 100_000, maxMs: 30_000 }, async (client, c, n) => {
      const { ids } = await takeIds(report, client, old.url, 'snowflake', 'k', batch(n), `${source}-old-c${c}`, (a) => state.killed && a.status === 0)
      if (ids !== undefined) oldIds.push(...ids)
    })
    await sleep(OLD_SERVES_MS)
    state.killed = true
    process.kill(old.pid, 'SIGKILL')
    const killedWall = Date.now()
    await load.stop()
    await old.exited
    const oldDecoded = decodeAll(oldIds)
    fig.oldIds = oldIds.length
    fig.oldMaxTs = oldDecoded.maxTs
    fig.oldAheadMs = oldDecoded.maxTs - killedWall
    report.check(oldIds.length > 0 && fig.oldAheadMs > AHEAD_MS / 2, `${source}: the old holder's last ID (${oldDecoded.maxTs}) is only ${fig.oldAheadMs} ms ahead of the clock at the kill: is faketime working?`)

    const free = await waitReleased(suite, source, name, X, 4 * TTL_MS)
    report.check(free !== undefined, `${source}: X still leased in the store ${fmtMs(4 * TTL_MS)} after the kill`)
    const started = performance.now()
    fresh = await startLeaseLeaf(suite, `${source}-new`, { ...common, port: 7902, cacheDir: cacheDirOf(suite, name, 'new') })
    fig.newStartMs = performance.now() - started
    fig.waitMs = largestWait(fresh)
    fig.previousIssuedUntil = Number(logLines(fresh, LEASED_MSG)[0]?.previousIssuedUntil ?? 0)
    const client = new HttpClient()
    const newIds: bigint[] = []
    for (let n = 0; newIds.length < NEW_IDS && n < NEW_IDS; n++) {
      const { ids } = await takeIds(report, client, fresh.url, 'snowflake', 'k', n % 5 === 4 ? 10 : undefined, `${source}-new`)
      if (ids !== undefined) newIds.push(...ids)
    }
    client.close()
    const newDecoded = decodeAll(newIds)
    fig.newIds = newIds.length
    fig.newMinTs = newDecoded.minTs
    report.check(newIds.length > 0 && [...newDecoded.workerIds].join() === String(X), `${source}: the new holder's IDs: ${newIds.length}, worker ids ${[...newDecoded.workerIds].join(', ')}`)
    report.check(newDecoded.minTs > oldDecoded.maxTs, `${source}: the new holder's first ID at ${newDecoded.minTs}, at or before the old holder's last (${oldDecoded.maxTs})`)
    report.check(fig.previousIssuedUntil >= oldDecoded.maxTs, `${source}: previousIssuedUntil ${fig.previousIssuedUntil} is before the old holder's last ID (${oldDecoded.maxTs})`)
    report.check(fig.waitMs > 0, `${source}: the new holder logged no wait for the previous holder's last millisecond`)
    await fresh.stop('SIGTERM')
  } finally {
    if (alive(old.pid)) process.kill(old.pid, 'SIGKILL')
    await waitUntil(() => !alive(old.pid), 5000)
  }
  return fig
}
