// How far ahead a tag loads: Leaf's 10% rule, or the IDs its recent rate uses within
// bufferSeconds, whichever asks more; never more than maxBufferedSegments held.

import { PRELOAD_USED_FRACTION, type SegmentBuffer } from './segment-buffer.js'

export interface BufferHorizonOptions {
  /** Seconds of the tag's recent issue rate kept buffered; 0: Leaf's double buffer alone. */
  bufferSeconds: number
  /** Most segments a tag holds, the current one included. */
  maxBufferedSegments: number
  /** Monotonic ms, which the rate is read at. */
  monotonic: () => number
}

export interface BufferHorizon {
  wantsLoad (buf: SegmentBuffer): boolean
  plan (buf: SegmentBuffer): void
}

export function createBufferHorizon ({ bufferSeconds, maxBufferedSegments, monotonic }: BufferHorizonOptions): BufferHorizon {
  /** IDs the tag should hold at its current rate: the horizon. */
  function horizonIds (buf: SegmentBuffer): number {
    return bufferSeconds === 0 ? 0 : buf.rate.current(buf.issued, monotonic()) * bufferSeconds
  }

  /**
   * Whether the tag should load another segment now: Leaf's rule (the current segment is
   * more than 10% used and none is loaded behind it), or fewer IDs held than the horizon
   * asks for; never more than maxBufferedSegments held.
   */
  function wantsLoad (buf: SegmentBuffer): boolean {
    if (!buf.serving) return true
    const held = buf.segments.length
    if (held >= maxBufferedSegments) return false
    const cur = buf.currentSegment
    if (held === 1 && cur.pos > cur.step * PRELOAD_USED_FRACTION) return true
    return buf.buffered < horizonIds(buf)
  }

  /**
   * Sets the current segment's preloadAfter: the position past which wantsLoad turns true at
   * the rate known now, so the hot path compares one number. Planned again when a load lands,
   * when the current segment changes and at every rate sample.
   */
  function plan (buf: SegmentBuffer): void {
    const cur = buf.currentSegment
    const held = buf.segments.length
    if (held === 0) return
    if (held >= maxBufferedSegments || buf.supply !== 'open') {
      cur.planPreload(Infinity)
      return
    }
    const leaf = held === 1 ? cur.step * PRELOAD_USED_FRACTION : Infinity
    const ahead = buf.buffered - cur.idle
    const horizon = horizonIds(buf)
    // buffered < horizon once cur.idle < horizon - ahead, that is past pos = step + ahead - horizon.
    const byHorizon = horizon > 0 ? cur.step + ahead - horizon : Infinity
    cur.planPreload(Math.min(leaf, byHorizon))
  }

  return { wantsLoad, plan }
}
