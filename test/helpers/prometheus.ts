// A reader of the Prometheus text exposition format, sample by sample. (The npm parser we
// tried flattens labelled histograms into one sample, losing their labels.) promtool checks
// the format itself in test/integration/admin.test.ts.

export interface Sample { name: string, labels: Record<string, string>, value: number }

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

/** A sample's value: a Go float, `+Inf` and `-Inf` spelled as the format spells them. */
function valueIn (text: string): number {
  return text === '+Inf' ? Infinity : text === '-Inf' ? -Infinity : Number(text)
}

export function parseSamples (text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = SAMPLE.exec(line)
    if (m === null) throw new Error(`not a sample line: ${line}`)
    const labels: Record<string, string> = {}
    for (const [, k, v] of (m[2] ?? '').matchAll(LABEL)) {
      labels[k as string] = (v as string).replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
    }
    samples.push({ name: m[1] as string, labels, value: valueIn(m[3] as string) })
  }
  return samples
}

/** The value of the one sample with this name whose labels include `labels`, or undefined. */
export function valueOf (samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`)
  return found[0]?.value
}
