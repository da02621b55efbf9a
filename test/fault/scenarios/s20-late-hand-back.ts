import { alive, fmtMs, steadyLoad, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { LEASED_MSG, cacheDirOf, decodeAll, logLines, startLeaseLeaf } from '../lease.js'
import { offsetClock, sleep, waitUntil } from '../services.js'
import { createProxy } from '../../helpers/tcp-proxy.js'

/** The predecessor's clock, ahead of everyone else's (faketime's offset). */
const AHEAD = '+7s'
/** How long the proxy holds each of the successor's hand-backs before it delivers it. */
const HOLD_MS = 9000
/** Every hand-back B sends in this scenario is held: the first, and those it sends again. */
const HELD_HAND_BACKS = 100
/** Any KILL the successor sends is held longer: it arrives after the hand-back has run. */
const KILL_HOLD_MS = HOLD_MS + 3000
const A_SERVES_MS = 1000
/**
 * B's leaf.snowflake.max-clock-drift-ms: it must find A's last millisecond further ahead than
 * this and hand the id back. The default (5000 ms) leaves 2 s of A's 7: on a busy host (the
 * suite's lanes run at once) B started more than 2 s after A's stop, and waited instead.
 */
const B_MAX_DRIFT_MS = 1000
const CLIENTS = 3
/** No snowflake answer waits on the store: only the host's scheduling bounds it. */
const ANSWER_BOUND_MS = 1000

/** The pool of one id each variant leases: the two run at once, and their IDs must not meet. */
interface Variant { label: string, ttlMs: number, heartbeatMs: number, workerId: number }

/** leaf.snowflake.lease.ttl-ms and heartbeat-interval-ms: the defaults, then a longer heartbeat. */
const VARIANTS: Variant[] = [
  { label: 'defaults', ttlMs: 30_000, heartbeatMs: 3000, workerId: 0 },
  { label: 'TTL 30 s, heartbeat 10 s', ttlMs: 30_000, heartbeatMs: 10_000, workerId: 1 },
]

interface Figures {
  variant: string
  aIssuedUntilAhead: number
  bListeningMs: number
  /** How many hand-backs B sent (all held), and how many were delivered after B served. */
  handBacks: number
  lateOnLiveClaim: number
  cRefusedMs: number | undefined
  dListeningAfterBStopMs: number | undefined
  ids: { a: number, b: number, d: number }
}

/**
 * 20. The late hand-back of correctness issue 25, exactly (db-lease, a pool of one id, MySQL
 * behind a proxy). Predecessor A runs with its clock 7 s ahead and stops gracefully, recording
 * its last millisecond in its own time. Successor B (A's cache folder) claims the id, finds it
 * would wait longer than max-clock-drift-ms (B_MAX_DRIFT_MS) and hands it back: the proxy holds that statement
 * 9 s, past the query timeout, and every hand-back B sends again, and holds every KILL longer
 * still, so each of them runs late. Once the first has been delivered, C starts: with B
 * serving on the only id, it must be refused (exhausted). Then B stops, and D starts. Passes
 * when no ID repeats, B serves only once a hand-back has landed and no later one frees its
 * claim, C is refused within its start's deadline, D leases the id after B's stop, every
 * answer is within the bound, and IDs increase from A to B to D.
 */
export async function lateHandBack (suite: Suite, report: Report): Promise<void> {
  report.expectedWhat = 'none'
  // The variants at once: each its own proxy and pool, and each spends its time waiting on
  // held statements and leases, not on the CPU.
  const figures = await Promise.all(VARIANTS.map((variant) => run(suite, report, variant)))
  report.note(`predecessor under faketime ${AHEAD}, every hand-back held ${fmtMs(HOLD_MS)}, every KILL ${fmtMs(KILL_HOLD_MS)}; ` + figures.map((f) =>
    `${f.variant}: A's last millisecond ${fmtMs(f.aIssuedUntilAhead)} ahead of the real clock; B listening ${fmtMs(f.bListeningMs)} after its start, ` +
    `having sent ${f.handBacks} hand-backs (${f.lateOnLiveClaim} delivered while B served: none freed it); ` +
    `C refused ${f.cRefusedMs === undefined ? 'never' : `${fmtMs(f.cRefusedMs)} after its start`}; D leased the id ${f.dListeningAfterBStopMs === undefined ? 'never' : `${fmtMs(f.dListeningAfterBStopMs)} after B's stop`}; ` +
    `IDs A ${f.ids.a}, B ${f.ids.b}, D ${f.ids.d}`).join('; '))
  report.recover = figures.map((f) => `D ${f.dListeningAfterBStopMs === undefined ? 'never' : fmtMs(f.dListeningAfterBStopMs)} after B`).join(', ')
}

/** Snowflake load on one instance until stopped. */
function load (report: Report, leaf: Leaf, stream: string): { stop (): Promise<bigint[]> } {
  return steadyLoad(report, leaf, { mode: 'snowflake', key: 'k', stream, clients: CLIENTS, boundMs: ANSWER_BOUND_MS })
}

async function run (suite: Suite, report: Report, v: Variant): Promise<Figures> {
  const proxy = await createProxy(suite.db.port, { protocol: 'mysql' })
  const name = unique('fault-s20')
  const common = { source: 'db-lease' as const, name, ttlMs: v.ttlMs, heartbeatMs: v.heartbeatMs, min: v.workerId, max: v.workerId, storePort: proxy.port }
  const shared = cacheDirOf(suite, name, 'A')
  const fig: Figures = { variant: v.label, aIssuedUntilAhead: 0, bListeningMs: 0, handBacks: 0, lateOnLiveClaim: 0, cRefusedMs: undefined, dListeningAfterBStopMs: undefined, ids: { a: 0, b: 0, d: 0 } }
  const a = await startLeaseLeaf(suite, `${v.heartbeatMs}-A`, { ...common, port: 7921, cacheDir: shared, env: offsetClock(AHEAD) })
  const aPid = a.pid
  try {
    const aLoad = load(report, a, `${v.heartbeatMs}-A`)
    await sleep(A_SERVES_MS)
    const aIds = await aLoad.stop()
    fig.ids.a = aIds.length
    process.kill(aPid, 'SIGTERM')
    await a.exited
    const released = logLines(a, 'worker-id lease released')[0]
    fig.aIssuedUntilAhead = Number(released?.issuedUntil ?? 0) - Date.now()
    report.check(fig.aIssuedUntilAhead > 5000, `${v.label}: A released with issuedUntil ${String(released?.issuedUntil)}, not 5+ s ahead of the clock: is faketime working?`)

    const held = proxy.holdStatements({ match: /^UPDATE leaf_worker_lease SET owner = NULL/, holdMs: HOLD_MS, count: HELD_HAND_BACKS })
    proxy.holdStatements({ match: /^KILL/i, holdMs: KILL_HOLD_MS, count: 1000 })
    const bStart = performance.now()
    const b = await startLeaseLeaf(suite, `${v.heartbeatMs}-B`, { ...common, port: 7921, cacheDir: shared, timeoutMs: v.ttlMs + 10_000, args: [`--leaf.snowflake.max-clock-drift-ms=${B_MAX_DRIFT_MS}`] })
    const bServing = performance.now()
    fig.bListeningMs = bServing - bStart
    const bLoad = load(report, b, `${v.heartbeatMs}-B`)
    const first = held[0]?.deliveredAt
    report.check(first !== undefined && first <= bServing, `${v.label}: B served (listening after ${fmtMs(fig.bListeningMs)}) before any hand-back was delivered`)
    // Every hand-back sent is delivered; those landing while B serves must leave B's claim alone.
    await Promise.race([Promise.all(held.map((h) => h.delivered)), sleep(HOLD_MS + 2000)])
    fig.handBacks = held.length
    fig.lateOnLiveClaim = held.filter((h) => (h.deliveredAt ?? 0) > bServing).length
    // (B sends its hand-backs again beside its renewals while it serves: the latest may still
    // be held now.)
    report.check(held.filter((h) => h.deliveredAt !== undefined).every((h) => h.clientGoneFirst), `${v.label}: a hand-back was delivered while B still waited for its answer`)
    await sleep(300)
    const rows = await suite.db.query<{ owner: string | null }[]>('SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', [name, v.workerId])
    report.check(rows[0]?.owner !== null && rows[0] !== undefined, `${v.label}: a late hand-back freed the id while B serves on it`)

    // C, once the hand-backs have landed: the only id is B's, renewed; C is refused.
    const cStart = performance.now()
    const c = await startLeaseLeaf(suite, `${v.heartbeatMs}-C`, { ...common, port: 7922, cacheDir: cacheDirOf(suite, name, 'C'), timeoutMs: v.ttlMs + 10_000 })
      .then((leaf) => leaf, (err: unknown) => err as Error)
    if (c instanceof Error) {
      fig.cRefusedMs = performance.now() - cStart
      report.check(c.message.includes(`[${v.workerId}, ${v.workerId}] (1 ids) is leased`), `${v.label}: C did not start, but not for the pool being leased: ${c.message.split('\n').slice(-3).join(' ')}`)
      report.check(fig.cRefusedMs <= v.ttlMs + v.ttlMs / 10 + 2000, `${v.label}: C refused only after ${fmtMs(fig.cRefusedMs)}`)
    } else {
      report.check(false, `${v.label}: C leased the only id while B served on it`)
      await c.stop('SIGKILL')
    }
    const bIds = await bLoad.stop()
    fig.ids.b = bIds.length
    await b.stop('SIGTERM')
    const bStopped = performance.now()
    // D after B's clean stop: the id is free, and D waits only for the millisecond B reached.
    const d = await startLeaseLeaf(suite, `${v.heartbeatMs}-D`, { ...common, port: 7923, cacheDir: cacheDirOf(suite, name, 'D'), timeoutMs: v.ttlMs + 10_000 })
    fig.dListeningAfterBStopMs = performance.now() - bStopped
    const dLoad = load(report, d, `${v.heartbeatMs}-D`)
    await sleep(1000)
    const dIds = await dLoad.stop()
    fig.ids.d = dIds.length
    await d.stop('SIGTERM')
    const [da, db, dd] = [decodeAll(aIds), decodeAll(bIds), decodeAll(dIds)]
    report.check(aIds.length > 0 && bIds.length > 0 && dIds.length > 0, `${v.label}: IDs A ${aIds.length}, B ${bIds.length}, D ${dIds.length}`)
    report.check(db.minTs > da.maxTs, `${v.label}: B's first ID at ${db.minTs}, not after A's last (${da.maxTs})`)
    report.check(dd.minTs > db.maxTs, `${v.label}: D's first ID at ${dd.minTs}, not after B's last (${db.maxTs})`)
    report.check(logLines(b, LEASED_MSG).length === 1, `${v.label}: B leased the id ${logLines(b, LEASED_MSG).length} times`)
  } finally {
    if (alive(aPid)) process.kill(aPid, 'SIGKILL')
    await waitUntil(() => !alive(aPid), 5000)
    await proxy.close()
  }
  return fig
}
