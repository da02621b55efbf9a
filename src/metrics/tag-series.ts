// Which segment tags keep series of their own, decided once per scrape; the rest are summed
// under key="_other". Rules and why: docs/monitoring.md#the-series-cap-one-series-per-active-tag

import type { MetricValue } from './hot-metrics.js'

export const OTHER_KEY = '_other'

/** Prometheus' lookback, and LeafSegmentLoadFailing's window: a tag in steady use does not flap. */
export const ACTIVE_MS = 5 * 60_000

type Labels = Record<string, string | number>

export interface TagSignal { alert: boolean, moved: boolean, failed: boolean }

interface TagState {
  kept: boolean
  /** At the previous scrape: kept, folded, or not known yet. */
  was: 'kept' | 'folded' | 'new'
  activeAt: number
  failedAt: number
}

/** Past `maxTags`: tags with an alert condition first, then the most recently active; the rest fold. */
export class TagPlan {
  private readonly states = new Map<string, TagState>()
  /** Tags without series of their own at the last scrape (leaf_segment_folded_tags). */
  folded = 0

  constructor (readonly maxTags: number, private readonly now: () => number) {}

  /** `idle`: tags never loaded, past the cap: they count and fold without a state each. */
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
   * Only when it had its own series then (or is new): while a tag moves in or out of _other its
   * counts go to _other, so every increment lands on a series Prometheus already had.
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
 * `value` is the tag's true count; each scrape adds its increase to the tag's series or _other's,
 * so no series goes down and every increment is in exactly one series.
 */
export class TagCounter {
  private readonly children = new Map<string, CounterChild>()
  private other = 0

  /** Exported at 0 from the start, so the first increments show in increase() (LeafSegmentLoadFailing). */
  constructor (private readonly labels: Labels, private readonly options: { otherFromStart?: boolean, zeroForKept?: boolean } = {}) {}

  /** The tag's child, to keep: `child.value += n` is the whole cost of counting. */
  child (key: string): { value: number } {
    let c = this.children.get(key)
    if (c === undefined) this.children.set(key, c = { value: 0, seen: 0, own: 0 })
    return c
  }

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

/** Folded as TagCounter folds; a series appears at its first observation, as prom-client's do. */
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
