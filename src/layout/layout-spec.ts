import { build, LAYOUT_PRESETS, layoutEnd, preset, type Layout, type LayoutContext, type LayoutField, type LayoutPreset, type LayoutSpec, type TimeUnit } from './layout.js'

/** The time field must outlast the start by this much (10 years of 365.25 days). */
export const MIN_YEARS_LEFT = 10
const YEAR_MS = 365.25 * 24 * 3600 * 1000
/** Worker ids are 32-bit signed integers in the lease pools (leaf_worker_lease.worker_id is an INT). */
const MAX_WORKER_BITS = 31
/** The last millisecond a JavaScript Date holds. */
const MAX_DATE_MS = 8.64e15

/** Thrown with what is wrong with a layout spec; the configuration names the key, the routes answer INVALID_LAYOUT. */
export class LayoutError extends Error {
  readonly code = 'LAYOUT_INVALID'
  constructor (message: string) {
    super(message)
    this.name = 'LayoutError'
  }
}

/** `leaf.snowflake.layout`: a preset, a preset with overrides, or a custom spec (docs/id-layouts.md). */
export function parseLayout (value: string, c: LayoutContext): Layout {
  const items = value.split(',').map((s) => s.trim()).filter((s) => s !== '')
  if (items.length === 0) items.push('leaf')
  const first = items[0] as string
  const presetName = (LAYOUT_PRESETS as readonly string[]).includes(first) ? first as LayoutPreset : undefined
  const spec: LayoutSpec = presetName !== undefined
    ? preset(presetName, c)
    : { fields: [], unit: 'ms', epoch: c.twepoch, maxBits: 63, randomSequenceStart: false }
  const seen = new Set<string>()
  let unitGiven = false
  for (const item of presetName !== undefined ? items.slice(1) : items) {
    const eq = item.indexOf('=')
    if (eq === -1) {
      const meant = item === first ? nearPreset(item) : undefined
      throw new LayoutError(`"${item}" is neither a preset (${LAYOUT_PRESETS.join(', ')}) nor name=value${meant === undefined ? '' : `: did you mean "${meant}"?`}`)
    }
    const name = item.slice(0, eq).trim()
    const raw = item.slice(eq + 1).trim()
    if (seen.has(name)) throw new LayoutError(`${name} is given twice`)
    seen.add(name)
    if (name === 'epoch') {
      spec.epoch = parseEpoch(raw)
      continue
    }
    if (name !== 'time' && name !== 'worker' && name !== 'sequence') {
      throw new LayoutError(`unknown field "${name}": a layout has time, worker and sequence fields, and an epoch`)
    }
    const match = /^(\d{1,2})(ms|s)?$/.exec(raw)
    if (match === null) throw new LayoutError(`${name}=${raw}: the width is a number of bits${name === 'time' ? ' followed by its unit, ms or s (time=41ms)' : ''}`)
    if (match[2] !== undefined && name !== 'time') throw new LayoutError(`${name}=${raw}: only the time field has a unit`)
    const bits = Number(match[1])
    if (name === 'time' && match[2] !== undefined) {
      spec.unit = match[2] as TimeUnit
      unitGiven = true
    }
    const existing = spec.fields.find((f) => f.name === name)
    if (existing !== undefined) existing.bits = bits
    else spec.fields.push({ name, bits })
  }
  if (presetName === undefined) {
    for (const name of ['time', 'worker', 'sequence'] as const) {
      if (!spec.fields.some((f) => f.name === name)) throw new LayoutError(`"${value}" has no ${name} field: a custom layout names time, worker and sequence (time=41ms,worker=10,sequence=12)`)
    }
    if (!unitGiven) throw new LayoutError('the time field needs its unit: time=<bits>ms or time=<bits>s')
  }
  const layout = build(presetName ?? 'custom', spec, Boolean(presetName !== undefined && items.length > 1))
  check(layout, spec, c)
  return layout
}

/** How many characters a misspelt preset may have inserted, deleted or changed and still be named. */
const PRESET_TYPOS = 2

/** The preset a misspelt name likely meant (`JS_SAFE`, `uidgenerator`), if exactly one is that near. */
function nearPreset (name: string): LayoutPreset | undefined {
  const norm = name.toLowerCase().replace(/[_\s]/g, '-')
  let nearest: LayoutPreset | undefined
  let least = PRESET_TYPOS + 1
  let tied = false
  for (const preset of LAYOUT_PRESETS) {
    const d = editDistance(norm, preset)
    if (d < least) [nearest, least, tied] = [preset, d, false]
    else if (d === least) tied = true
  }
  return tied ? undefined : nearest
}

/** Levenshtein's distance: the fewest characters inserted, deleted or changed to turn a into b. */
function editDistance (a: string, b: string): number {
  let above = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      const change = (above[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1)
      row.push(Math.min(change, (above[j] as number) + 1, (row[j - 1] as number) + 1))
    }
    above = row
  }
  return above[b.length] as number
}

function parseEpoch (raw: string): number {
  const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw)
  if (!Number.isSafeInteger(ms) || ms < 0) throw new LayoutError(`epoch=${raw} is neither ms since 1970 nor an ISO-8601 time`)
  return ms
}

function check (layout: Layout, spec: LayoutSpec, c: LayoutContext): void {
  for (const f of layout.fields) {
    if (f.bits < 1) throw new LayoutError(`the ${f.name} field has ${f.bits} bits: every field needs at least 1`)
    if (f.value !== undefined && (f.value < 0 || f.value > 2 ** f.bits - 1)) {
      throw new LayoutError(`${f.name} ${f.value} does not fit its ${f.bits} bit${f.bits === 1 ? '' : 's'} (0..${2 ** f.bits - 1})`)
    }
  }
  const at = (f: LayoutField) => layout.fields.indexOf(f)
  if (at(layout.time) > at(layout.worker) || at(layout.time) > at(layout.sequence)) {
    // Below them, a new unit's first ID would be smaller than the last unit's later ones.
    throw new LayoutError('the time field must come before the worker and sequence fields (they are given from the most significant bit down): ' +
      'otherwise IDs would not increase with time')
  }
  if (layout.worker.bits > MAX_WORKER_BITS) {
    throw new LayoutError(`the worker field has ${layout.worker.bits} bits; at most ${MAX_WORKER_BITS}: worker-id pools store worker ids as 32-bit signed integers`)
  }
  if (layout.bits > spec.maxBits) {
    throw new LayoutError(`the fields take ${layout.bits} bits, more than the ${spec.maxBits} ${spec.maxBits === 53 ? 'a JavaScript number holds exactly' : 'of a positive signed 64-bit ID'}`)
  }
  if (layout.epoch > c.now) throw new LayoutError(`the epoch ${new Date(layout.epoch).toISOString()} lies in the future`)
  const end = layoutEnd(layout)
  if (end > MAX_DATE_MS) throw new LayoutError(`the ${layout.time.bits}-bit time field in ${layout.unit === 'ms' ? 'milliseconds' : 'seconds'} outlasts the dates JavaScript can hold: give it fewer bits`)
  const minYears = c.minYearsLeft ?? MIN_YEARS_LEFT
  if (c.decodeOnly !== true && end - c.now < minYears * YEAR_MS) {
    const what = `the ${layout.time.bits}-bit time field in ${layout.unit === 'ms' ? 'milliseconds' : 'seconds'} from ${new Date(layout.epoch).toISOString()}`
    throw new LayoutError(`${what} ${end <= c.now ? 'ran out' : 'runs out'} on ${new Date(end).toISOString()}; a layout needs at least ${minYears} years left: ` +
      'set more time bits (time=<bits>' + layout.unit + ') or a later epoch (epoch=<ms or ISO-8601>)' +
      (layout.name === 'uid-generator' ? '. UidGenerator\'s default 28 bits of seconds last 8.5 years from any epoch: give the time bits and epochStr your deployment uses (uid-generator,time=31s,worker=22,sequence=10,epoch=...)' : ''))
  }
}
