import type { MetricValue } from './hot-metrics.js'
import { OTHER_KEY } from './tag-series.js'
import { valuesMetric } from './values-metric.js'
import { neverLoaded, type SegmentBufferView } from '../segment/segment-views.js'

/**
 * One series per kept tag, and _other over the folded ones. A tag never loaded has no step and
 * no horizon yet: those two gauges have no sample for it (rather than 0 and +Inf), nor an _other
 * made of such tags alone.
 */
export function createSegmentTagGauges (views: () => { kept: readonly SegmentBufferView[], folded: readonly SegmentBufferView[] }, folded: () => number) {
  /** `_other` is the folded tags' sum or worst, as `fold` says. */
  const tagGauge = (name: string, help: string, read: (v: SegmentBufferView) => number, fold: (a: number, b: number) => number,
    { has = () => true, inOther = has }: { has?: (v: SegmentBufferView) => boolean, inOther?: (v: SegmentBufferView) => boolean } = {}) =>
    valuesMetric(name, help, 'gauge', () => {
      const out: MetricValue[] = []
      let other: number | undefined
      for (const v of views().kept) if (has(v)) out.push({ labels: { key: v.key }, value: read(v) })
      for (const v of views().folded) if (inOther(v)) other = other === undefined ? read(v) : fold(other, read(v))
      if (other !== undefined) out.push({ labels: { key: OTHER_KEY }, value: other })
      return out
    })
  const sum = (a: number, b: number) => a + b
  const loaded = (v: SegmentBufferView) => !neverLoaded(v)
  return [
    tagGauge('leaf_segment_step', 'Current (adapted) step per tag, from its first load on; _other: the largest.', (v) => v.step, Math.max,
      { has: (v) => v.step > 0 }),
    tagGauge('leaf_segment_remaining', 'IDs left in the current segment per tag; _other: their sum.', (v) => Number(v.max0 - v.value0), sum),
    tagGauge('leaf_segment_buffered_ids', 'IDs held and not handed out yet, in every loaded segment of the tag; _other: their sum.', (v) => v.buffered, sum),
    // _other: the lowest, so LeafSegmentBufferLow still fires when tags under a minute outnumber the cap.
    tagGauge('leaf_segment_buffer_seconds', 'How long the buffered IDs of the tag last at its current issue rate; +Inf while it is idle (under 1 ID/s), no sample before its first load; _other: the lowest.',
      (v) => v.bufferSeconds ?? Infinity, Math.min, { has: loaded }),
    tagGauge('leaf_segment_loaded_segments', 'Segments the tag holds, the current one included; _other: their sum.', (v) => v.segments.length, sum),
    // A tag that never loaded has no segment to follow: _other is the lowest among those that did.
    tagGauge('leaf_segment_next_ready', '1 when the next segment of the tag is loaded; _other: 0 when any loaded folded tag lacks it.',
      (v) => v.nextReady ? 1 : 0, Math.min, { inOther: (v) => v.initOk }),
    valuesMetric('leaf_segment_folded_tags', `Segment tags without series of their own, summed under key="${OTHER_KEY}" (past leaf.metrics.max-tag-series, for idle tags).`,
      'gauge', () => [{ labels: {}, value: folded() }]),
  ]
}
