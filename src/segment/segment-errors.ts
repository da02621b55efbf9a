// The errors the segment generator answers with.

import { LeafError } from '../errors.js'
import type { GuardView } from './max-id-guard.js'

export function missingKey (key: string, initialized: boolean): LeafError {
  return initialized
    ? new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
    : new LeafError('NOT_READY', 'The segment generator has not loaded its tags yet.')
}

export function spaceEnded (key: string): LeafError {
  return new LeafError('ID_SPACE_EXHAUSTED', `The ID space of "${key}" has ended: its max_id cannot move by its step without passing 2^63 - 1.`)
}

export function shuttingDown (): LeafError {
  return new LeafError('SHUTTING_DOWN', 'This instance is shutting down: send the request to another one.')
}

/** Past the bound on serving without the store (max-id-guard.ts boundServing): no buffered ID. */
export function storeUnconfirmed (sinceMs: number, boundMs: number): LeafError {
  const since = Number.isFinite(sinceMs) ? `for ${Math.round(sinceMs)} ms` : 'since the start'
  return new LeafError('STORE_UNCONFIRMED', `The segment store has not been confirmed ${since}, past the bound of ${boundMs} ms (leaf.segment.failover-hold-ms): its replication can lose allocations in a promotion this instance cannot see, so buffered IDs are not served until a database host answers a refresh.`)
}

/**
 * Why a tag with no buffered ID gets none, when the max_id guard holds allocations after a
 * store failover (the database answered): undefined when no hold lasts.
 */
export function holdCause (v: GuardView): string | undefined {
  if (v.holdingMs === 0 && v.raisesOwed === 0) return undefined
  const what = `a store failover (${v.last?.cause ?? 'seen at start'}${v.last?.key === undefined ? '' : ` at "${v.last.key}"`})`
  if (v.raisesOwed > 0) return `new allocations are held after ${what} until ${v.raisesOwed} tag(s) are raised above the IDs served (the raise is retried before each allocation)`
  const end = v.holdEndsAt === undefined ? '' : ` until ${new Date(v.holdEndsAt).toISOString()}`
  return `new allocations are held after ${what}${end} (${v.holdingMs} ms more: leaf.segment.failover-hold-ms), for every instance to raise max_id above what it served`
}
