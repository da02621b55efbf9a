// The bench's "without hot-metrics.ts" build: src/metrics/hot-metrics.ts's classes, with the
// same interface, over prom-client's own Counter and Histogram, their labels() children created
// once and kept, as a service would use prom-client without the hot metrics. bench/variants.ts
// bundles the server with this file in place of src/metrics/hot-metrics.ts.
import { Counter, Histogram } from 'prom-client'

export class HotCounter {
  type = 'counter'
  #inner
  #more

  constructor (name, help, more) {
    this.name = name
    this.help = help
    this.#more = more
  }

  /** `child.value += n` goes through prom-client: its inc() validates and hashes the labels. */
  child (labels) {
    this.#inner ??= new Counter({ name: this.name, help: this.help, labelNames: Object.keys(labels), registers: [] })
    const counter = this.#inner.labels(labels)
    let value = 0
    return {
      get value () { return value },
      set value (next) {
        counter.inc(next - value)
        value = next
      },
    }
  }

  async get () {
    const values = this.#inner === undefined ? [] : (await this.#inner.get()).values
    return { name: this.name, help: this.help, type: this.type, values: [...values, ...(this.#more?.() ?? [])], aggregator: 'sum' }
  }
}

export class HotHistogram {
  type = 'histogram'
  #inner
  #buckets

  constructor (name, help, buckets) {
    this.name = name
    this.help = help
    this.#buckets = buckets
  }

  child (labels) {
    this.#inner ??= new Histogram({ name: this.name, help: this.help, labelNames: Object.keys(labels), buckets: this.#buckets, registers: [] })
    return this.#inner.labels(labels)
  }

  async get () {
    const values = this.#inner === undefined ? [] : (await this.#inner.get()).values
    return { name: this.name, help: this.help, type: this.type, values, aggregator: 'sum' }
  }
}
