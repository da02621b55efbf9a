// The errors the segment generator answers with.

import { LeafError } from '../errors.js'
import type { GuardView } from './max-id-guard.js'
import { TAG_LOOKUPS_PER_SECOND } from './tag-lookup.js'

/** What to do about a missing tag, in every KEY_NOT_FOUND. */
const ADD_TAG = 'insert a row into leaf_alloc (biz_tag, max_id, step) or POST /api/segment/tags'

/**
 * A tag not in the tag list. `skipped`: it was not looked up now (segment/tag-lookup.ts), so
 * the message says when a row inserted meanwhile serves.
 */
export function missingKey (key: string, initialized: boolean, skipped?: 'recent' | 'rate'): LeafError {
  if (!initialized) return new LeafError('NOT_READY', 'The segment generator has not loaded its tags yet.')
  if (skipped === 'recent') return new LeafError('KEY_NOT_FOUND', `Tag "${key}" was not in the leaf_alloc table when looked up less than a second ago: ${ADD_TAG}; a request a second later serves it.`)
  if (skipped === 'rate') {
    return new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in this instance's tag list, and it was not looked up now (unknown tags are looked up at most ${TAG_LOOKUPS_PER_SECOND} a second): ${ADD_TAG}; a later request, or the next tag refresh, serves it.`)
  }
  return new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table: ${ADD_TAG}; the next request serves it.`)
}

export function lookupFailed (key: string, cause: unknown): LeafError {
  return new LeafError('STORE_UNAVAILABLE', `Tag "${key}" is not in this instance's tag list, and its lookup in the database failed or was not answered in time.`, { cause })
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
