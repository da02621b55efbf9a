// The ID hot path's metrics as plain numbers, read by prom-client's Registry only at scrape,
// through the undocumented part of its metric interface (test/unit/hot-metrics.test.ts pins
// prom-client 15). Why: docs/performance.md#the-hot-metrics-srcmetricshot-metricsts

type Labels = Record<string, string | number>

export interface MetricValue { labels: Labels, value: number, metricName?: string }

export class HotCounter {
  readonly type = 'counter'
  private readonly children: { labels: Labels, value: number }[] = []

  /** `more`: further values rendered with the children's (segment tags' folded series, tag-series.ts). */
  constructor (readonly name: string, readonly help: string, private readonly more?: () => MetricValue[]) {}

  /** A child to keep: `child.value += n` is the whole cost of counting. */
  child (labels: Labels): { value: number } {
    const child = { labels, value: 0 }
    this.children.push(child)
    return child
  }

  get () {
    const values: MetricValue[] = this.children.map((c) => ({ labels: c.labels, value: c.value }))
    if (this.more !== undefined) values.push(...this.more())
    return { name: this.name, help: this.help, type: this.type, values, aggregator: 'sum' }
  }
}

export interface HistogramChild { observe (value: number): void }

export class HotHistogram {
  readonly type = 'histogram'
  private readonly children: { labels: Labels, counts: Float64Array, sum: number }[] = []

  constructor (readonly name: string, readonly help: string, private readonly buckets: number[]) {}

  child (labels: Labels): HistogramChild {
    const bounds = this.buckets
    const state = { labels, counts: new Float64Array(bounds.length + 1), sum: 0 }
    this.children.push(state)
    return {
      observe (value: number) {
        let i = 0
        while (i < bounds.length && value > (bounds[i] as number)) i++
        state.counts[i] = (state.counts[i] as number) + 1 // counts[bounds.length]: the +Inf overflow
        state.sum += value
      },
    }
  }

  get () {
    const values: MetricValue[] = []
    for (const c of this.children) {
      let cumulative = 0
      this.buckets.forEach((le, i) => {
        cumulative += c.counts[i] as number
        values.push({ metricName: `${this.name}_bucket`, labels: { le, ...c.labels }, value: cumulative })
      })
      cumulative += c.counts[this.buckets.length] as number
      values.push({ metricName: `${this.name}_bucket`, labels: { le: '+Inf', ...c.labels }, value: cumulative })
      values.push({ metricName: `${this.name}_sum`, labels: c.labels, value: c.sum })
      values.push({ metricName: `${this.name}_count`, labels: c.labels, value: cumulative })
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: 'sum' }
  }
}
