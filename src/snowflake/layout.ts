// An ID layout: which fields a snowflake ID holds, how wide each is and where it sits, the
// epoch and the time unit (leaf.snowflake.layout). Plain data and arithmetic: the generator,
// the make/explain routes and the worker-id sources all read it.

export type FieldName = 'version' | 'type' | 'genMethod' | 'time' | 'worker' | 'sequence'
export type TimeUnit = 'ms' | 's'

export interface LayoutField {
  name: FieldName
  bits: number
  /** The field's lowest bit. */
  shift: number
  /** Fields every ID carries the same value in (Vesta's version, type and genMethod). */
  value?: number
}

export interface Layout {
  /** A preset's name, or `custom`. */
  name: string
  /** The canonical spec: what leaf.snowflake.layout would give this layout back. */
  spec: string
  /** Ms since 1970 at time 0. */
  epoch: number
  unit: TimeUnit
  unitMs: number
  /** From the most significant bit down. */
  fields: readonly LayoutField[]
  time: LayoutField
  worker: LayoutField
  sequence: LayoutField
  maxWorkerId: number
  maxSequence: number
  /** The largest time value (units since the epoch). */
  maxTime: number
  /** The fields' total width: every ID with a zero top field is below 2^bits. */
  bits: number
  /** Leaf starts each millisecond's sequence at a random value below 100; the others at 0. */
  randomSequenceStart: boolean
  /** The bits every ID carries whatever its time, worker and sequence (a signed 64-bit value). */
  fixedBits: bigint
  /** What a worker-id pool records: two instances under one name must agree on it. */
  signature: string
}

export const LAYOUT_PRESETS = ['leaf', 'js-safe', 'uid-generator', 'vesta-max-peak', 'vesta-min-granularity'] as const
export type LayoutPreset = typeof LAYOUT_PRESETS[number]

/** 2026-01-01T00:00:00Z: the js-safe layout's epoch. */
export const JS_SAFE_EPOCH = 1767225600000
/** 2016-05-20 00:00 China Standard Time: UidGenerator's default epochStr as its JVMs read it. */
export const UID_GENERATOR_EPOCH = 1463673600000
/** 2015-01-01 00:00 China Standard Time: Vesta's epoch. */
export const VESTA_EPOCH = 1420041600000
/** The time field must outlast the start by this much (10 years of 365.25 days). */
export const MIN_YEARS_LEFT = 10
const YEAR_MS = 365.25 * 24 * 3600 * 1000
/** Worker ids are 32-bit signed integers in the lease pools (leaf_worker_lease.worker_id is an INT). */
const MAX_WORKER_BITS = 31
/** The last millisecond a JavaScript Date holds. */
const MAX_DATE_MS = 8.64e15

interface FieldSpec { name: FieldName, bits: number, value?: number }
interface LayoutSpec { fields: FieldSpec[], unit: TimeUnit, epoch: number, maxBits: number, randomSequenceStart: boolean }

export interface LayoutContext {
  /** leaf.snowflake.twepoch: the `leaf` layout's epoch, and a custom spec's without one. */
  twepoch: number
  /** Vesta's version and genMethod values. */
  vestaVersion: number
  vestaGenMethod: number
  /** Now, for the epoch and lifetime checks. */
  now: number
  /** The years the time field must have left; MIN_YEARS_LEFT unless a test says otherwise. */
  minYearsLeft?: number
  /** For reading IDs only (decode): a time field that has run out, or soon will, is accepted. */
  decodeOnly?: boolean
}

/** The Vesta presets: version 1, type 1, genMethod 2, then time, sequence and machine. */
function vesta (type: number, unit: TimeUnit, timeBits: number, sequenceBits: number, c: LayoutContext): LayoutSpec {
  return {
    fields: [
      { name: 'version', bits: 1, value: c.vestaVersion },
      { name: 'type', bits: 1, value: type },
      { name: 'genMethod', bits: 2, value: c.vestaGenMethod },
      { name: 'time', bits: timeBits },
      { name: 'sequence', bits: sequenceBits },
      { name: 'worker', bits: 10 },
    ],
    unit,
    epoch: VESTA_EPOCH,
    maxBits: 64,
    randomSequenceStart: false,
  }
}

function preset (name: LayoutPreset, c: LayoutContext): LayoutSpec {
  const plain = (time: number, unit: TimeUnit, worker: number, sequence: number, epoch: number, maxBits: number, random: boolean): LayoutSpec => ({
    fields: [{ name: 'time', bits: time }, { name: 'worker', bits: worker }, { name: 'sequence', bits: sequence }],
    unit,
    epoch,
    maxBits,
    randomSequenceStart: random,
  })
  switch (name) {
    case 'leaf': return plain(41, 'ms', 10, 12, c.twepoch, 63, true)
    // 40 bits of ms: 34.8 years (to 2060); 8 bits: 256 workers; 5 bits: 32 IDs per ms, 32,000 per second.
    case 'js-safe': return plain(40, 'ms', 8, 5, JS_SAFE_EPOCH, 53, false)
    case 'uid-generator': return plain(28, 's', 22, 13, UID_GENERATOR_EPOCH, 63, false)
    case 'vesta-max-peak': return vesta(0, 's', 30, 20, c)
    case 'vesta-min-granularity': return vesta(1, 'ms', 40, 10, c)
  }
}

/** Leaf's layout with `twepoch`, unchecked (the generator checks the clock against it). */
export function leafLayout (twepoch: number): Layout {
  return build('leaf', preset('leaf', { twepoch, vestaVersion: 0, vestaGenMethod: 0, now: 0 }), false)
}

/** Thrown with what is wrong; the configuration names the key. */
export class LayoutError extends Error {}

/**
 * `leaf.snowflake.layout`: a preset (`js-safe`), a preset with overrides
 * (`uid-generator,epoch=2022-01-01T00:00:00+08:00`, `uid-generator,time=31s,worker=23,sequence=9`),
 * or a custom spec, its fields from the most significant bit down
 * (`time=41ms,worker=10,sequence=12,epoch=1288834974657`).
 */
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

/**
 * The preset a name that is none was likely meant to be: compared in lower case with `_` and
 * spaces read as `-` (`JS_SAFE` is js-safe), the one within PRESET_TYPOS edits (`uidgenerator`,
 * `leaf2`) when no other is as near; undefined for a name further from all (`snowflake`).
 */
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

function build (name: string, spec: LayoutSpec, overridden: boolean): Layout {
  let shift = spec.fields.reduce((n, f) => n + f.bits, 0)
  const fields: LayoutField[] = spec.fields.map((f) => {
    shift -= f.bits
    return { ...f, shift }
  })
  const field = (n: FieldName) => fields.find((f) => f.name === n) as LayoutField
  const time = field('time')
  const worker = field('worker')
  const sequence = field('sequence')
  let fixed = 0n
  for (const f of fields) if (f.value !== undefined) fixed |= BigInt(f.value) << BigInt(f.shift)
  const unitMs = spec.unit === 'ms' ? 1 : 1000
  const describe = fields.map((f) => `${f.name}=${f.bits}${f.name === 'time' ? spec.unit : ''}${f.value !== undefined ? `:${f.value}` : ''}`).join(',')
  const canonical = fields.filter((f) => f.value === undefined).map((f) => `${f.name}=${f.bits}${f.name === 'time' ? spec.unit : ''}`).join(',')
  return {
    name,
    spec: name === 'custom' || overridden ? `${name === 'custom' ? '' : `${name},`}${canonical},epoch=${spec.epoch}` : name,
    epoch: spec.epoch,
    unit: spec.unit,
    unitMs,
    fields,
    time,
    worker,
    sequence,
    maxWorkerId: 2 ** worker.bits - 1,
    maxSequence: 2 ** sequence.bits - 1,
    maxTime: 2 ** time.bits - 1,
    bits: fields.reduce((n, f) => n + f.bits, 0),
    randomSequenceStart: spec.randomSequenceStart,
    fixedBits: BigInt.asIntN(64, fixed),
    signature: `${describe},epoch=${spec.epoch}`,
  }
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

/** The first millisecond the time field can no longer hold. */
export function layoutEnd (layout: Layout): number {
  return layout.epoch + (layout.maxTime + 1) * layout.unitMs
}

/** The time value of a millisecond (units since the epoch, rounded down). */
export function timeOf (layout: Layout, ms: number): number {
  return Math.floor((ms - layout.epoch) / layout.unitMs)
}

/** The first millisecond of a time value. */
export function msOf (layout: Layout, time: number): number {
  return layout.epoch + time * layout.unitMs
}

export interface IdFields {
  time: number
  workerId: number
  sequence: number
}

export interface ExplainedId extends IdFields {
  /** The first millisecond of the ID's time unit. */
  timestamp: number
  version?: number
  type?: number
  genMethod?: number
}

/** The ID with these fields; they must be in range (see fieldProblem). */
export function makeId (layout: Layout, f: IdFields): bigint {
  return layout.fixedBits |
    (BigInt(f.time) << BigInt(layout.time.shift)) |
    (BigInt(f.workerId) << BigInt(layout.worker.shift)) |
    (BigInt(f.sequence) << BigInt(layout.sequence.shift))
}

/** Why a field cannot be encoded, naming it; undefined when all fit. */
export function fieldProblem (layout: Layout, f: IdFields): { field: string, message: string } | undefined {
  const bounds: [string, number, number][] = [['time', f.time, layout.maxTime], ['workerId', f.workerId, layout.maxWorkerId], ['sequence', f.sequence, layout.maxSequence]]
  for (const [field, v, max] of bounds) {
    if (!Number.isSafeInteger(v) || v < 0 || v > max) {
      const range = field === 'time'
        ? `${new Date(layout.epoch).toISOString()} to ${new Date(layoutEnd(layout) - 1).toISOString()}`
        : `0 to ${max}`
      return { field, message: `${field} must lie in ${range} for the ${layout.name} layout` }
    }
  }
  return undefined
}

/** Every field of an ID (any signed 64-bit value: its bits are read as the layout places them). */
export function explainId (layout: Layout, id: bigint): ExplainedId {
  const bits = BigInt.asUintN(64, id)
  const read = (f: LayoutField) => Number((bits >> BigInt(f.shift)) & ((1n << BigInt(f.bits)) - 1n))
  const time = read(layout.time)
  const out: ExplainedId = { time, timestamp: msOf(layout, time), workerId: read(layout.worker), sequence: read(layout.sequence) }
  for (const f of layout.fields) {
    if (f.name === 'version' || f.name === 'type' || f.name === 'genMethod') out[f.name] = read(f)
  }
  return out
}

/** The layout route's body: what clients and people need instead of guessing. */
export function describeLayout (layout: Layout): Record<string, unknown> {
  return {
    name: layout.name,
    spec: layout.spec,
    fields: layout.fields.map((f) => ({ name: f.name, bits: f.bits, shift: f.shift, ...(f.value !== undefined ? { value: f.value } : {}) })),
    epoch: layout.epoch,
    epochIso: new Date(layout.epoch).toISOString(),
    timeUnit: layout.unit,
    maxWorkerId: layout.maxWorkerId,
    idsPerSecondPerWorker: (layout.maxSequence + 1) * (1000 / layout.unitMs),
    bits: layout.bits,
    jsSafe: layout.bits <= 53,
    runsOutAt: new Date(layoutEnd(layout)).toISOString(),
  }
}
