import { join } from 'node:path'
import { SCHEDULING_SLACK_MS, fmtMs, startLeaf, steadyLoad, unique, type Leaf, type Report, type Suite } from '../harness.js'
import { cacheDirOf, decodeAll, logLines, startLeaseLeaf } from '../lease.js'
import { sleep } from '../services.js'
import { createProxy, type HeldStatement, type TcpProxy } from '../../helpers/tcp-proxy.js'

/** leaf.jdbc.query-timeout-ms of every instance here: each held statement outlasts it several times. */
const QUERY_TIMEOUT_MS = 500
/** How long a chosen statement is held before the proxy delivers it. */
const HOLD_MS = 2000
/** A held lease write that must land after the next holder took over: past the TTL. */
const LONG_HOLD_MS = 5000
const TTL_MS = 3000
const HEARTBEAT_MS = 1000
/** Every KILL is held longer than any statement: the statements run late, as on a link no kill crosses. */
const KILL_HOLD_MS = LONG_HOLD_MS + 3000
/** leaf.segment.wait-timeout-ms (the default): a segment answer waits for a load at most this, plus the slack. */
const WAIT_TIMEOUT_MS = 3000
const SNOWFLAKE_BOUND_MS = SCHEDULING_SLACK_MS
const SEGMENT_BOUND_MS = WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS

const CLAIM = /^START TRANSACTION; INSERT INTO leaf_worker_lease/
const RENEW = /^UPDATE leaf_worker_lease SET expires_at/
const RELEASE = /^UPDATE leaf_worker_lease SET owner = NULL/
const ALLOCATE = /^START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id \+/
const GIVE_BACK = /^UPDATE leaf_alloc SET max_id = '/
const PARK = /^INSERT INTO leaf_alloc_parked/

interface Case { write: string, held: number, delivered: number, note: string }

/**
 * 19. One chosen statement held past the query timeout, then delivered, for each write: the
 * db-lease claim, renewal and release, and the segment allocation, give-back and park. Every
 * KILL is held longer still, so each statement really runs late. MariaDB sits behind a proxy
 * that speaks enough of its protocol to pick the statement. Passes when no ID repeats across
 * all of it, every answer is within its bound (snowflake: the slack; segment: the wait timeout
 * plus the slack), each statement was held and delivered after its sender gave up, and the
 * state the late statement meets afterwards is safe: the next holder keeps its lease, max_id
 * stays above every ID served.
 */
export async function lateStatements (suite: Suite, report: Report): Promise<void> {
  const cases: Case[] = []
  report.expectedWhat = 'none'
  for (const run of [lateClaim, lateRenewal, lateRelease, lateAllocation, lateGiveBack, latePark]) {
    const proxy = await createProxy(suite.db.port, { protocol: 'mysql' })
    try {
      proxy.holdStatements({ match: /^KILL/i, holdMs: KILL_HOLD_MS, count: 1000 })
      cases.push(await run(suite, report, proxy))
    } finally {
      await proxy.close()
    }
  }
  report.note(`query timeout ${fmtMs(QUERY_TIMEOUT_MS)}, KILLs held ${fmtMs(KILL_HOLD_MS)}; ` +
    cases.map((c) => `${c.write}: ${c.held} held, ${c.delivered} delivered late; ${c.note}`).join('; '))
  report.recover = `${cases.length} writes, each delivered late`
}

/** Waits (at most `ms`) for a first statement to be held, and for each held by then to be delivered. */
async function heldAndDelivered (held: HeldStatement[], ms: number): Promise<void> {
  const until = performance.now() + ms
  while (held.length === 0 && performance.now() < until) await sleep(20)
  await Promise.race([Promise.all(held.map((h) => h.delivered)), sleep(Math.max(0, until - performance.now()))])
}

/** Checks the held statements were held, and delivered after their sender had given up. */
function delivered (report: Report, write: string, held: HeldStatement[]): number {
  report.check(held.length > 0, `${write}: no statement was held: the scenario did not attack it`)
  const late = held.filter((h) => h.deliveredAt !== undefined && h.clientGoneFirst && !h.serverGoneFirst).length
  report.check(late === held.length, `${write}: ${held.length - late} of ${held.length} held statements were not delivered to the server after their sender gave up: ` +
    held.map((h) => `${h.request.slice(0, 40)}: delivered ${h.deliveredAt === undefined ? 'never' : fmtMs(h.deliveredAt - h.heldAt)}, client gone first ${h.clientGoneFirst}, server gone first ${h.serverGoneFirst}`).join('; '))
  return late
}

function leaseArgs (proxy: TcpProxy): { storePort: number, args: string[] } {
  return { storePort: proxy.port, args: [`--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`] }
}

function leaseCommon (name: string, proxy: TcpProxy) {
  return { source: 'db-lease' as const, name, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS, min: 0, max: 0, ...leaseArgs(proxy) }
}

function snowflakeLoad (report: Report, leaf: Leaf, stream: string) {
  return steadyLoad(report, leaf, { mode: 'snowflake', key: 'k', stream, boundMs: SNOWFLAKE_BOUND_MS })
}

async function ownerOf (suite: Suite, name: string): Promise<string | null | undefined> {
  const rows = await suite.db.query<{ owner: string | null }[]>('SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = 0', [name])
  return rows[0]?.owner
}

/** The claim's answer is lost and the claim lands late: it holds the id for nobody, and is handed back. */
async function lateClaim (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const name = unique('fault-s19-claim')
  const held = proxy.holdStatements({ match: CLAIM, holdMs: HOLD_MS })
  const started = performance.now()
  const x = await startLeaseLeaf(suite, 'claim-X', { ...leaseCommon(name, proxy), port: 7931, cacheDir: cacheDirOf(suite, name, 'X') })
  const listening = performance.now() - started
  const load = snowflakeLoad(report, x, 'claim-X')
  await heldAndDelivered(held, HOLD_MS + 5000)
  await sleep(2 * HEARTBEAT_MS)
  const ids = await load.stop()
  const owner = await ownerOf(suite, name)
  report.check(typeof owner === 'string' && logLines(x, 'worker id leased')[0] !== undefined, `claim: X does not hold the id (${String(owner)})`)
  report.check(ids.length > 0, 'claim: X served no ID')
  await x.stop('SIGTERM')
  return { write: 'claim', held: held.length, delivered: delivered(report, 'claim', held), note: `X listening ${fmtMs(listening)} after its start, ${ids.length} IDs` }
}

/**
 * B, the next holder of `common.name`'s id once A stopped, serves while A's held write is
 * delivered (then two heartbeats more): how long B took to listen, its IDs, and whether the
 * owner of its claim stayed B's throughout.
 */
async function nextHolder (suite: Suite, report: Report, common: ReturnType<typeof leaseCommon>, kind: string, port: number, held: HeldStatement[]) {
  const started = performance.now()
  const b = await startLeaseLeaf(suite, `${kind}-B`, { ...common, port, cacheDir: cacheDirOf(suite, common.name, 'B') })
  const startMs = performance.now() - started
  const bOwner = await ownerOf(suite, common.name)
  const bLoad = snowflakeLoad(report, b, `${kind}-B`)
  await heldAndDelivered(held, LONG_HOLD_MS + 2000)
  await sleep(2 * HEARTBEAT_MS)
  const bIds = await bLoad.stop()
  return { b, startMs, bIds, ownerKept: await ownerOf(suite, common.name) === bOwner && bOwner !== null }
}

/** A renewal lands after its holder stopped and the next one claimed: it must not touch the new claim. */
async function lateRenewal (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const name = unique('fault-s19-renew')
  const common = leaseCommon(name, proxy)
  const a = await startLeaseLeaf(suite, 'renew-A', { ...common, port: 7932, cacheDir: cacheDirOf(suite, name, 'A') })
  const aLoad = snowflakeLoad(report, a, 'renew-A')
  const held = proxy.holdStatements({ match: RENEW, holdMs: LONG_HOLD_MS })
  while (held.length === 0) await sleep(20) // (a heartbeat away)
  // A stops while its renewal is held; its release goes by another pool connection.
  const aIds = await aLoad.stop()
  await a.stop('SIGTERM')
  const { b, bIds, ownerKept } = await nextHolder(suite, report, common, 'renew', 7933, held)
  report.check(ownerKept, 'renew: the late renewal of A changed the owner of B\'s claim')
  report.check(logLines(b, 'worker-id lease lost: snowflake issuing stopped').length === 0, 'renew: B lost its lease')
  report.check(decodeAll(bIds).minTs > decodeAll(aIds).maxTs, 'renew: B\'s first ID is not after A\'s last')
  await b.stop('SIGTERM')
  return { write: 'renewal', held: held.length, delivered: delivered(report, 'renewal', held), note: `A ${aIds.length} IDs, then B ${bIds.length}, B kept its claim` }
}

/** A release lands after the next holder took the id over: it must neither free nor lower anything. */
async function lateRelease (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const name = unique('fault-s19-release')
  const common = leaseCommon(name, proxy)
  const a = await startLeaseLeaf(suite, 'release-A', { ...common, port: 7934, cacheDir: cacheDirOf(suite, name, 'A') })
  const aLoad = snowflakeLoad(report, a, 'release-A')
  await sleep(500)
  const held = proxy.holdStatements({ match: RELEASE, holdMs: LONG_HOLD_MS })
  const aIds = await aLoad.stop()
  await a.stop('SIGTERM')
  report.check(logLines(a, 'worker-id lease not released: it expires after its TTL').length === 1, 'release: A did not report its release as unanswered')
  const { b, startMs: takeover, bIds, ownerKept } = await nextHolder(suite, report, common, 'release', 7935, held)
  report.check(ownerKept, 'release: the late release of A freed B\'s claim')
  report.check(decodeAll(bIds).minTs > decodeAll(aIds).maxTs, 'release: B\'s first ID is not after A\'s last')
  // B took over a holder that never released: it watched A's row for A's TTL first.
  report.check(takeover >= TTL_MS, `release: B took A's id over after ${fmtMs(takeover)}, less than A's TTL`)
  await b.stop('SIGTERM')
  return { write: 'release', held: held.length, delivered: delivered(report, 'release', held), note: `B took the id over ${fmtMs(takeover)} after its start; A ${aIds.length} IDs, B ${bIds.length}` }
}

function segmentArgs (): string[] {
  return [`--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`, '--leaf.segment.buffer-seconds=1']
}

function segmentLoad (report: Report, leaf: Leaf, tag: string, stream: string) {
  return steadyLoad(report, leaf, { mode: 'segment', key: tag, stream, boundMs: SEGMENT_BOUND_MS })
}

/** An allocation lands late: it reserves a range for nobody, a gap. */
async function lateAllocation (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const tag = unique('s19-alloc')
  await suite.db.addTag(tag, 2000)
  const url = suite.db.url(proxy.port)
  const s1 = await startLeaf(suite, 'alloc-1', { name: unique('fault-s19'), segment: url, args: segmentArgs() })
  const s2 = await startLeaf(suite, 'alloc-2', { name: unique('fault-s19'), segment: url, args: segmentArgs() })
  const loads = [segmentLoad(report, s1, tag, 'alloc-1'), segmentLoad(report, s2, tag, 'alloc-2')]
  await sleep(500)
  const held = proxy.holdStatements({ match: ALLOCATE, holdMs: HOLD_MS })
  await heldAndDelivered(held, HOLD_MS + 10_000)
  await sleep(1000)
  const ids = (await Promise.all(loads.map((l) => l.stop()))).flat()
  const maxId = await suite.db.maxId(tag)
  const top = ids.reduce((m, id) => id > m ? id : m, 0n)
  report.check(ids.length > 0 && top < maxId, `allocation: max_id ${maxId} is not above the largest ID served (${top})`)
  await Promise.all([s1.stop('SIGTERM'), s2.stop('SIGTERM')])
  return { write: 'allocation', held: held.length, delivered: delivered(report, 'allocation', held), note: `${ids.length} IDs from 2 instances, largest ${top}, max_id ${maxId}` }
}

/**
 * What the give-back and park cases start from: a new tag of `step` (`s19-<kind>`), and the
 * keys of an instance through the proxy that keeps its segments (a 5 s horizon) in a
 * warm-start file of the tag's across its lives.
 */
async function warmStartCase (suite: Suite, proxy: TcpProxy, kind: string, step: number): Promise<{ tag: string, url: string, name: string, args: string[] }> {
  const tag = unique(`s19-${kind}`)
  await suite.db.addTag(tag, step)
  const args = [...segmentArgs(), `--leaf.segment.state-file=${join(suite.dir, `${tag}.state.json`)}`, '--leaf.segment.buffer-seconds=5']
  return { tag, url: suite.db.url(proxy.port), name: unique('fault-s19'), args }
}

/**
 * A give-back lands late, with no load in between, so its compare-and-set matches and lowers
 * max_id: only to IDs its instance never served. Then the instance's next life and another
 * instance serve from there.
 */
async function lateGiveBack (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const { tag, url, name, args } = await warmStartCase(suite, proxy, 'give', 1000)
  const s1 = await startLeaf(suite, 'give-1', { name, segment: url, args })
  const load1 = segmentLoad(report, s1, tag, 'give-1')
  await sleep(1500)
  const first = await load1.stop()
  const before = await suite.db.maxId(tag)
  const held = proxy.holdStatements({ match: GIVE_BACK, holdMs: HOLD_MS })
  await s1.stop('SIGTERM')
  report.check(s1.output.some((l) => l.includes('outcome is unknown')), 'give-back: the stop did not report its compare-and-set as unanswered')
  await heldAndDelivered(held, HOLD_MS + 3000)
  await sleep(300)
  const after = await suite.db.maxId(tag)
  const top = first.reduce((m, id) => id > m ? id : m, 0n)
  report.check(after > top && after < before, `give-back: max_id went from ${before} to ${after}: not lowered by the late compare-and-set, or not above the largest ID served (${top})`)
  const again = await startLeaf(suite, 'give-1b', { name, segment: url, args })
  const other = await startLeaf(suite, 'give-2', { name: unique('fault-s19'), segment: url, args: segmentArgs() })
  const loads = [segmentLoad(report, again, tag, 'give-1b'), segmentLoad(report, other, tag, 'give-2')]
  await sleep(1500)
  const later = (await Promise.all(loads.map((l) => l.stop()))).flat()
  await Promise.all([again.stop('SIGTERM'), other.stop('SIGTERM')])
  return {
    write: 'give-back',
    held: held.length,
    delivered: delivered(report, 'give-back', held),
    note: `max_id ${before} before the stop, ${after} once the late compare-and-set had run (largest ID served ${top}); then ${later.length} IDs from the next life and a second instance`,
  }
}

/**
 * A park lands late: instance 1 stops holding segments interleaved with instance 2's, so what
 * it cannot give back is parked, and that INSERT is held past its timeout (the stop counts
 * those IDs lost). Its next life, started once the INSERT has run, takes the parked ranges:
 * IDs nobody else has.
 */
async function latePark (suite: Suite, report: Report, proxy: TcpProxy): Promise<Case> {
  const { tag, url, name, args } = await warmStartCase(suite, proxy, 'park', 500)
  const s1 = await startLeaf(suite, 'park-1', { name, segment: url, args })
  const s2 = await startLeaf(suite, 'park-2', { name: unique('fault-s19'), segment: url, args: segmentArgs() })
  const loads = [segmentLoad(report, s1, tag, 'park-1'), segmentLoad(report, s2, tag, 'park-2')]
  await sleep(2000)
  const first = await (loads[0] as ReturnType<typeof segmentLoad>).stop()
  const held = proxy.holdStatements({ match: PARK, holdMs: HOLD_MS })
  await s1.stop('SIGTERM')
  await heldAndDelivered(held, HOLD_MS + 3000)
  await sleep(300)
  const parked = await suite.db.query<{ n: number }[]>('SELECT COUNT(*) AS n FROM leaf_alloc_parked WHERE biz_tag = ?', [tag]).catch(() => [{ n: 0 }])
  const rows = Number(parked[0]?.n ?? 0)
  report.check(rows > 0, 'park: no parked row once the late INSERT had run')
  const again = await startLeaf(suite, 'park-1b', { name, segment: url, args })
  const load1b = segmentLoad(report, again, tag, 'park-1b')
  await sleep(1500)
  const later = [...await load1b.stop(), ...await (loads[1] as ReturnType<typeof segmentLoad>).stop()]
  report.check(again.output.some((l) => l.includes('took over the IDs the last stop parked')), 'park: the next life did not take the parked ranges')
  await Promise.all([again.stop('SIGTERM'), s2.stop('SIGTERM')])
  return { write: 'park', held: held.length, delivered: delivered(report, 'park', held), note: `${rows} rows parked late and taken by the next life; ${first.length + later.length} IDs` }
}
