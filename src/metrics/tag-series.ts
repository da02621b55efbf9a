// Which segment tags have series of their own in /metrics, decided once per scrape; the rest
// are summed under key="_other". Nothing here runs per request: the ID path adds to a kept
// child's `value`, and a value that moved between two scrapes is the tag's sign of activity.

import type { MetricValue } from './hot-metrics.js'

export const OTHER_KEY = '_other'

/**
 * A tag that issued IDs or loaded a segment this recently keeps its series (while there is
 * room). Five minutes is Prometheus' lookback and the window LeafSegmentLoadFailing reads, and
 * outlasts a few missed scrapes, so a tag in steady use does not flap in and out of _other.
 */
export const ACTIVE_MS = 5 * 60_000

type Labels = Record<string, string | number>

/** What a scrape knows of a tag before the plan: an alert condition now, and which of its counters moved. */
export interface TagSignal { alert: boolean, moved: boolean, failed: boolean }

interface TagState {
  kept: boolean
  /** At the previous scrape: kept, folded, or not known yet. */
  was: 'kept' | 'folded' | 'new'
  activeAt: number
  failedAt: number
}

/**
 * The plan of one scrape. With at most `maxTags` tags, every tag keeps its series, as without a
 * cap. Past it, the room goes to tags with an alert condition (their buffer under a minute, their
 * segment used up with none after it, a load failed within ACTIVE_MS), then to tags active within
 * ACTIVE_MS, the most recent first and, among equals, those that already had a series; idle tags
 * fold into _other.
 */
export class TagPlan {
  private readonly states = new Map<string, TagState>()
  /** Tags without series of their own at the last scrape (leaf_segment_folded_tags). */
  folded = 0

  constructor (readonly maxTags: number, private readonly now: () => number) {}

  /**
   * `idle`: tags that are known but not in `tags`, with no signal at all (segment tags never
   * loaded, past the cap): they count towards the cap and fold, without a state each.
   */
  decide (tags: ReadonlyMap<string, TagSignal>, idle = 0): void {
    const now = this.now()
    const total = tags.size + idle
    for (const key of this.states.keys()) if (!tags.has(key)) this.states.delete(key)
    const candidates: [string, TagState, boolean][] = []
    for (const [key, signal] of tags) {
      let s = this.states.get(key)
      if (s === undefined) this.states.set(key, s = { kept: false, was: 'new', activeAt: -Infinity, failedAt: -Infinity })
      else s.was = s.kept ? 'kept' : 'folded'
      if (signal.moved) s.activeAt = now
      if (signal.failed) s.failedAt = now
      s.kept = total <= this.maxTags
      const alert = signal.alert || now - s.failedAt < ACTIVE_MS
      if (!s.kept && (alert || now - s.activeAt < ACTIVE_MS)) candidates.push([key, s, alert])
    }
    if (total > this.maxTags) {
      candidates.sort(([ka, a, alertA], [kb, b, alertB]) =>
        Number(alertB) - Number(alertA) || compare(b.activeAt, a.activeAt) ||
        Number(b.was === 'kept') - Number(a.was === 'kept') || compare(ka, kb))
      for (const [, s] of candidates.slice(0, this.maxTags)) s.kept = true
    }
    this.folded = total <= this.maxTags ? 0 : total - Math.min(candidates.length, this.maxTags)
  }

  kept (key: string): boolean {
    return this.states.get(key)?.kept ?? false
  }

  /**
   * Whether what the tag counted since the previous scrape goes to its own series. Only when it
   * had one then, or was not known then (a new tag's series starts as any new series does):
   * what a tag counts while it moves out of _other, or into it, goes to _other, whose series
   * has been there all along, so Prometheus sees every increment as an increase of a series it
   * already had.
   */
  ownsDelta (key: string): boolean {
    const s = this.states.get(key)
    return s !== undefined && s.kept && s.was !== 'folded'
  }

  keptKeys (): string[] {
    const keys: string[] = []
    for (const [key, s] of this.states) if (s.kept) keys.push(key)
    return keys
  }
}

/** -Infinity (never active) compares equal to itself, where a subtraction gives NaN. */
function compare<T extends number | string> (a: T, b: T): number {
  return a < b ? -1 : a > b ? 1 : 0
}

interface CounterChild { value: number, seen: number, own: number }

/**
 * A per-tag counter folded by a TagPlan. `value` is the tag's true count, written by the
 * caller; at each scrape the increase since the last one is added to the tag's exported series
 * or to _other's, as the plan says. So no exported series ever goes down, and every increment
 * is in exactly one series: summed over every series ever exported (a folded tag's last value
 * included), the counts are the true total, and rate() and increase() over all series are right.
 */
export class TagCounter {
  private readonly children = new Map<string, CounterChild>()
  private other = 0

  /**
   * `otherFromStart`: _other is exported at 0 before anything is folded into it, so that the
   * first increments folded show in increase(). `zeroForKept`: so is every kept tag without a
   * count (LeafSegmentLoadFailing reads increase() of the load failures).
   */
  constructor (private readonly labels: Labels, private readonly options: { otherFromStart?: boolean, zeroForKept?: boolean } = {}) {}

  /** The tag's child, to keep: `child.value += n` is the whole cost of counting. */
  child (key: string): { value: number } {
    let c = this.children.get(key)
    if (c === undefined) this.children.set(key, c = { value: 0, seen: 0, own: 0 })
    return c
  }

  /** Every tag with a child, and whether its count moved since the last fold. */
  signals (into: (key: string, moved: boolean) => void): void {
    for (const [key, c] of this.children) into(key, c.value !== c.seen)
  }

  fold (plan: TagPlan): void {
    for (const [key, c] of this.children) {
      const delta = c.value - c.seen
      c.seen = c.value
      if (plan.ownsDelta(key)) c.own += delta
      else this.other += delta
    }
  }

  values (plan: TagPlan): MetricValue[] {
    const out: MetricValue[] = []
    if (this.options.zeroForKept === true) {
      for (const key of plan.keptKeys()) out.push({ labels: { ...this.labels, key }, value: this.children.get(key)?.own ?? 0 })
    } else {
      for (const [key, c] of this.children) if (plan.kept(key)) out.push({ labels: { ...this.labels, key }, value: c.own })
    }
    if (this.options.otherFromStart === true || this.other > 0) out.push({ labels: { ...this.labels, key: OTHER_KEY }, value: this.other })
    return out
  }
}

interface HistogramChild { raw: Float64Array, seen: Float64Array, own: Float64Array }

/**
 * A per-tag histogram folded as TagCounter folds: each bucket, the count and the sum are
 * counters. A series appears at its first observation, as prom-client's own do.
 */
export class TagHistogram {
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  private readonly children = new Map<string, HistogramChild>()
  /** Per bucket counts (the last one +Inf's overflow), then the sum. */
  private readonly other: Float64Array

  constructor (readonly name: string, readonly help: string, private readonly buckets: number[], private readonly plan: TagPlan) {
    this.other = new Float64Array(buckets.length + 2)
  }

  observe (key: string, value: number): void {
    let c = this.children.get(key)
    if (c === undefined) {
      const n = this.buckets.length + 2
      this.children.set(key, c = { raw: new Float64Array(n), seen: new Float64Array(n), own: new Float64Array(n) })
    }
    let i = 0
    while (i < this.buckets.length && value > (this.buckets[i] as number)) i++
    c.raw[i] = (c.raw[i] as number) + 1
    c.raw[this.buckets.length + 1] = (c.raw[this.buckets.length + 1] as number) + value
  }

  signals (into: (key: string, moved: boolean) => void): void {
    for (const [key, c] of this.children) into(key, c.raw.some((v, i) => v !== c.seen[i]))
  }

  fold (): void {
    for (const [key, c] of this.children) {
      const to = this.plan.ownsDelta(key) ? c.own : this.other
      for (let i = 0; i < c.raw.length; i++) {
        to[i] = (to[i] as number) + (c.raw[i] as number) - (c.seen[i] as number)
        c.seen[i] = c.raw[i] as number
      }
    }
  }

  get () {
    const values: MetricValue[] = []
    for (const [key, c] of this.children) if (this.plan.kept(key)) this.render(values, key, c.own)
    if (this.other.some((v) => v > 0)) this.render(values, OTHER_KEY, this.other)
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator }
  }

  private render (values: MetricValue[], key: string, counts: Float64Array): void {
    let cumulative = 0
    this.buckets.forEach((le, i) => {
      cumulative += counts[i] as number
      values.push({ metricName: `${this.name}_bucket`, labels: { le, key }, value: cumulative })
    })
    cumulative += counts[this.buckets.length] as number
    values.push({ metricName: `${this.name}_bucket`, labels: { le: '+Inf', key }, value: cumulative })
    values.push({ metricName: `${this.name}_sum`, labels: { key }, value: counts[this.buckets.length + 1] as number })
    values.push({ metricName: `${this.name}_count`, labels: { key }, value: cumulative })
  }
}
