// An ID layout (leaf.snowflake.layout) as plain data and arithmetic: the one place that knows the bits.

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

interface FieldSpec { name: FieldName, bits: number, value?: number }
export interface LayoutSpec { fields: FieldSpec[], unit: TimeUnit, epoch: number, maxBits: number, randomSequenceStart: boolean }

export interface LayoutContext {
  /** leaf.snowflake.twepoch: the `leaf` layout's epoch, and a custom spec's without one. */
  twepoch: number
  /** Vesta's version and genMethod values. */
  vestaVersion: number
  vestaGenMethod: number
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

export function preset (name: LayoutPreset, c: LayoutContext): LayoutSpec {
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

export function build (name: string, spec: LayoutSpec, overridden: boolean): Layout {
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
