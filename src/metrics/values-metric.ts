import type { MetricValue } from './hot-metrics.js'

/** A metric prom-client's Registry can render from a list of values (the interface HotCounter implements). */
export function valuesMetric (name: string, help: string, type: 'counter' | 'gauge', values: () => MetricValue[]) {
  return { name, help, type, aggregator: 'sum', get: () => ({ name, help, type, values: values(), aggregator: 'sum' }) }
}
