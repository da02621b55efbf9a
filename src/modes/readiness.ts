import { describeCause } from '../database/driver-errors.js'
import { withTimeout } from '../timers.js'
import type { GuardView } from '../segment/max-id-guard.js'
import type { SegmentMode } from './segment-mode.js'
import type { SnowflakeMode } from './snowflake-mode.js'

/** Readiness never waits on the database longer than this. */
export const READY_DB_TIMEOUT_MS = 1000

export interface ModeReadiness { ready: boolean, reason?: string }

export interface Readiness {
  /** Every enabled mode can serve now, and at least one is enabled. */
  ready: boolean
  /** Why not, when no mode is to blame (none is enabled). */
  reason?: string
  modes: Record<string, ModeReadiness>
}

export const NO_MODE_ENABLED = 'no mode enabled'

/**
 * What `/readyz` answers and `leaf_ready` reports: one function, so the alert and the probe
 * never disagree. Each mode says why it is not ready in words an operator can act on.
 */
export async function checkReadiness ({ segment, snowflake }: { segment: SegmentMode | undefined, snowflake: SnowflakeMode | undefined }): Promise<Readiness> {
  if (segment === undefined && snowflake === undefined) return { ready: false, reason: NO_MODE_ENABLED, modes: {} }
  const modes: Record<string, ModeReadiness> = {}
  if (segment !== undefined) modes.segment = await segmentReadiness(segment)
  if (snowflake !== undefined) modes.snowflake = snowflakeReadiness(snowflake)
  return { ready: Object.values(modes).every((m) => m.ready), modes }
}

export interface ReadinessAnswer {
  status: 200 | 503
  body: { status: 'ready' | 'not ready', reason?: string, modes: Record<string, ModeReadiness> }
}

/**
 * `/readyz`'s answer: 200 when every enabled mode can serve. With `mode` (`/readyz?mode=segment`),
 * that mode's alone, for a balancer that routes one mode's traffic: a segment route may stay
 * in while snowflake waits for ZooKeeper. A mode that is not enabled is not ready.
 */
export function readinessAnswer ({ ready, reason, modes }: Readiness, mode?: 'segment' | 'snowflake'): ReadinessAnswer {
  if (mode === undefined) return { status: ready ? 200 : 503, body: { status: ready ? 'ready' : 'not ready', ...(reason === undefined ? {} : { reason }), modes } }
  const one = modes[mode]
  if (one === undefined) return { status: 503, body: { status: 'not ready', reason: `${mode} mode is disabled on this instance`, modes } }
  return { status: one.ready ? 200 : 503, body: { status: one.ready ? 'ready' : 'not ready', ...(one.reason === undefined ? {} : { reason: one.reason }), modes } }
}

async function segmentReadiness ({ store, generator, guard, hosts }: SegmentMode): Promise<ModeReadiness> {
  // Two writable hosts: another instance may be allocating on the other one. Not ready, even
  // with IDs buffered: a balancer should send no new client here until the operator fences one.
  const split = hosts?.view().split
  if (split !== undefined) {
    return { ready: false, reason: `STORE_SPLIT: more than one host of leaf.jdbc.url answers writable (${split.hosts.join(', ')}): nothing is allocated until all but one are read-only` }
  }
  const dbError = await withTimeout(store.ping(), READY_DB_TIMEOUT_MS, `no answer within ${READY_DB_TIMEOUT_MS} ms`)
    .then(() => undefined, describeCause)
  if (!generator.initialized) {
    return {
      ready: false,
      reason: dbError === undefined
        ? 'the tag list is not loaded yet (the database answers again: loading)'
        : `database unreachable: ${dbError}; the tag list is not loaded yet`,
    }
  }
  if (generator.warming) return { ready: false, reason: 'warm start: loading the first segments of the tags that served before the last stop' }
  // Every instance shares the table, so a tag at the end of its ID space is not a reason to
  // route elsewhere: ready, with the tags named.
  const ended = generator.endedTags()
  const endedNote = ended.length === 0 ? undefined : `ID space ended (ID_SPACE_EXHAUSTED) for ${ended.length} tag(s): ${ended.slice(0, 10).join(', ')}`
  const unconfirmed = unconfirmedNote(guard.view())
  if (unconfirmed !== undefined) return { ready: false, reason: dbError === undefined ? unconfirmed : `${unconfirmed}; database unreachable: ${dbError}` }
  const failover = failoverNote(guard.view())
  if (failover !== undefined) {
    const exhausted = generator.exhaustedTags()
    return exhausted.length === 0
      ? { ready: true, reason: `${failover}; serving buffered IDs` }
      : { ready: false, reason: `${failover}, and ${exhausted.length} tag(s) have no buffered IDs left: ${exhausted.slice(0, 10).join(', ')}` }
  }
  if (dbError === undefined) return endedNote === undefined ? { ready: true } : { ready: true, reason: endedNote }
  const exhausted = generator.exhaustedTags()
  if (exhausted.length === 0) return { ready: true, reason: `database unreachable: ${dbError}; serving buffered IDs` }
  return { ready: false, reason: `database unreachable: ${dbError}, and ${exhausted.length} tag(s) have no buffered IDs left: ${exhausted.slice(0, 10).join(', ')}` }
}

/** While a store failover holds allocations (max-id-guard.ts): what happened, and for how long. */
function failoverNote (v: GuardView): string | undefined {
  if (v.holdingMs === 0 && v.raisesOwed === 0) return undefined
  const what = v.last === undefined ? 'store failover' : `store failover (${v.last.cause}${v.last.key === undefined ? '' : ` at "${v.last.key}"`}${v.last.to === undefined ? '' : `, now ${v.last.to}`})`
  const until = v.holdEndsAt === undefined ? '' : `, until ${new Date(v.holdEndsAt).toISOString()}`
  return v.raisesOwed > 0
    ? `${what}: ${v.raisesOwed} tag(s) still to be raised above the IDs served, new allocations held`
    : `${what}: new allocations held for ${Math.ceil(v.holdingMs / 1000)} s more${until}`
}

/** Past the bound on serving without the store (max-id-guard.ts boundServing): no buffered ID is served. */
function unconfirmedNote (v: GuardView): string | undefined {
  const u = v.unconfirmed
  if (u === undefined || !(u.sinceMs > u.boundMs)) return undefined
  const since = Number.isFinite(u.sinceMs) ? `for ${Math.round(u.sinceMs / 1000)} s` : 'since the start'
  return `the segment store not confirmed ${since}, past the bound of ${Math.round(u.boundMs / 1000)} s (leaf.segment.failover-hold-ms) on a replication that can lose allocations: no buffered ID is served (STORE_UNCONFIRMED) until a refresh reaches it`
}

function snowflakeReadiness (snowflake: SnowflakeMode): ModeReadiness {
  const starting = snowflake.notReady()
  if (starting !== undefined) return { ready: false, reason: `SNOWFLAKE_NOT_READY: ${starting}` }
  const { unavailable, issuedUntil } = snowflake.lease.status()
  if (unavailable !== undefined) {
    return {
      ready: false,
      reason: issuedUntil !== undefined
        ? `no snowflake ID from the worker-id lease now: ${unavailable}`
        : 'another instance may hold this worker id: no snowflake ID until it is ours alone (details in the log and /api/snowflake/status)',
    }
  }
  const wait = snowflake.lease.notBefore - snowflake.clock()
  return wait > 0 ? { ready: false, reason: `restart window: first ID in ${wait} ms` } : { ready: true }
}
