// How far ahead a tag loads: Leaf's 10% rule, or the IDs its recent rate uses within
// bufferSeconds, whichever asks more; never more than maxBufferedSegments held.

import { PRELOAD_USED_FRACTION, type SegmentBuffer } from './segment-buffer.js'

export interface BufferHorizonOptions {
  /** 0: Leaf's double buffer alone. */
  bufferSeconds: number
  /** The current one included. */
  maxBufferedSegments: number
  monotonic: () => number
}

export interface BufferHorizon {
  wantsLoad (buf: SegmentBuffer): boolean
  plan (buf: SegmentBuffer): void
}

export function createBufferHorizon ({ bufferSeconds, maxBufferedSegments, monotonic }: BufferHorizonOptions): BufferHorizon {
  function horizonIds (buf: SegmentBuffer): number {
    return bufferSeconds === 0 ? 0 : buf.rate.current(buf.issued, monotonic()) * bufferSeconds
  }

  function wantsLoad (buf: SegmentBuffer): boolean {
    if (!buf.serving) return true
    const held = buf.segments.length
    if (held >= maxBufferedSegments) return false
    const cur = buf.currentSegment
    if (held === 1 && cur.pos > cur.step * PRELOAD_USED_FRACTION) return true
    return buf.buffered < horizonIds(buf)
  }

  /** The position past which wantsLoad turns true at the current rate, so the hot path compares one number. */
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
