// What a graceful stop does with the IDs a tag holds and never handed out: back to max_id
// when nobody reserved since, else parked for the next start of the same identity.

import { channels } from '../channels.js'
import type { Segment, SegmentBuffer } from './segment-buffer.js'
import type { SegmentStore, UnusedRange } from './store.js'
import { settlesWithin, withTimeout } from '../timers.js'
import type { MaxIdGuard } from './max-id-guard.js'

/** What shutdown() did for one tag. */
export interface GiveBack {
  key: string
  returned: bigint
  parked: bigint
  /** IDs held and not handed out: returned, parked, or lost. */
  unused: bigint
  /** Why not all of them went back, when some did not. */
  reason?: string
}

export interface GiveBackDeps {
  store: SegmentStore
  /** Monotonic ms, which `deadline` is in. */
  monotonic: () => number
  /** Where the rest is parked (the generator's handover); undefined: nowhere. */
  handover: { parkAs: string } | undefined
}

/**
 * Returns the gap-free run at the end of the chain to max_id, and parks the rest for the next
 * start. Why it is safe: docs/segment-mode.md#giving-the-remainder-back.
 */
export async function giveBackTail (buf: SegmentBuffer, deadline: number, { store, monotonic, handover }: GiveBackDeps): Promise<GiveBack> {
  const segs = buf.segments
  const result: GiveBack = { key: buf.key, returned: 0n, parked: 0n, unused: 0n }
  for (const seg of segs) result.unused += BigInt(seg.idle)
  const last = segs.at(-1)
  if (last === undefined || result.unused === 0n) return result
  const reasons: string[] = []
  const timeLeft = () => deadline - monotonic()
  let i = segs.length - 1
  while (i > 0 && (segs[i - 1] as Segment).max === (segs[i] as Segment).base && (segs[i - 1] as Segment).idle > 0) i--
  const first = segs[i] as Segment
  const firstUnused = first.base + BigInt(first.pos)
  let keep = segs.length // segments from here on are not parked
  // A load still out could reserve the returned IDs, below this tag's max_id mark: the guard
  // would take it for a failover. Parking the run is safe whatever the load does.
  if (firstUnused < last.max && buf.loading !== undefined) reasons.push('a load was still out')
  else if (firstUnused < last.max && timeLeft() > 0) {
    try {
      if (await withTimeout(store.giveBack(buf.key, last.max, firstUnused), timeLeft(), 'no answer in time')) {
        result.returned = last.max - firstUnused
        keep = i
      } else {
        reasons.push('another instance reserved a segment since')
      }
    } catch (err) {
      // With no answer the UPDATE may have committed; parking the run too could hand its IDs
      // out twice (parked rows and max_id), so they are lost instead.
      keep = i
      reasons.push(`database: ${(err as Error).message} (the compare-and-set's outcome is unknown: its IDs are lost, not parked)`)
    }
  }
  const rest = unusedRanges(segs.slice(0, keep))
  if (rest.length > 0) {
    if (handover === undefined) reasons.push('no warm-start file to park the rest under')
    else if (timeLeft() <= 0) reasons.push('no time left to park the rest')
    else {
      try {
        if (await withTimeout(store.park(buf.key, handover.parkAs, rest), timeLeft(), 'no answer in time')) {
          for (const r of rest) result.parked += r.end - r.first
        } else {
          reasons.push('no leaf_alloc_parked table (and no right to create it)')
        }
      } catch (err) {
        reasons.push(`database: ${(err as Error).message}`)
      }
    }
  }
  if (reasons.length > 0) result.reason = reasons.join('; ')
  return result
}

/** The unused part of each segment, adjacent ones merged. */
function unusedRanges (segs: readonly Segment[]): UnusedRange[] {
  const ranges: UnusedRange[] = []
  for (const seg of segs) {
    if (seg.idle === 0) continue
    const first = seg.base + BigInt(seg.pos)
    const prev = ranges.at(-1)
    if (prev !== undefined && prev.end === first) prev.end = seg.max
    else ranges.push({ first, end: seg.max })
  }
  return ranges
}

export interface GiveBackAllDeps extends GiveBackDeps {
  guard: MaxIdGuard | undefined
}

/** What shutdown() does once serving stopped: waits for the loads out (within the deadline), then gives back every tag. */
export async function giveBackAll (buffers: Map<string, SegmentBuffer>, deadline: number, deps: GiveBackAllDeps): Promise<GiveBack[]> {
  const { monotonic, guard } = deps
  // A load that lands now joins the chain and is given back with it.
  const inFlight = [...buffers.values()].flatMap((b) => b.loading === undefined ? [] : [b.loading])
  if (inFlight.length > 0) await settlesWithin(Promise.all(inFlight), Math.max(0, deadline - monotonic()))
  // Once a tag holds nothing any more (returned, parked for the next start, or lost), its
  // max_id mark is what was served: at once, before a late load of another tag is admitted.
  const giveBacks = await Promise.all([...buffers.values()].map(async (buf) => {
    if (buf.segments.length === 0) return guard?.released(buf.key, buf.servedEnd)
    const result = await giveBackTail(buf, deadline, deps)
    guard?.released(buf.key, buf.servedEnd)
    if (result.returned > 0n) channels.segmentGiveBack.publish({ key: buf.key, ids: result.returned, to: 'table' })
    if (result.parked > 0n) channels.segmentGiveBack.publish({ key: buf.key, ids: result.parked, to: 'successor' })
    return result
  }))
  return giveBacks.filter((g) => g !== undefined)
}
