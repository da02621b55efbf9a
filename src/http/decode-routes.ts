import fp from 'fastify-plugin'
import { LeafError } from '../errors.js'
import { describeLayout, explainId, fieldProblem, makeId, msOf, timeOf, type Layout, type LayoutContext } from '../layout/layout.js'
import { LayoutError, parseLayout } from '../layout/layout-spec.js'
import { timeLeftSeconds } from '../snowflake/time-left.js'
import { show } from './errors.js'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n

/** leaf-server's `errorMsg` for a value Long.parseLong refuses, word for word ("an error decoding the snowflake ID!"). */
export const LEAF_DECODE_ERROR = 'snowflake Id反解析发生异常!'

/** A decimal signed 64-bit integer, or undefined. */
export function parseInt64 (raw: unknown): bigint | undefined {
  if (typeof raw !== 'string' || !/^-?[0-9]{1,19}$/.test(raw)) return undefined
  const id = BigInt(raw)
  return id >= INT64_MIN && id <= INT64_MAX ? id : undefined
}

const DECIMAL_DIGIT = /^\p{Nd}$/u

/**
 * Java's `Long.parseLong(s)`: an optional `+` or `-`, then decimal digits of any script
 * (Character.digit), each a UTF-16 unit (a digit beyond the BMP is two units, neither a digit),
 * leading zeros allowed, within the signed 64-bit range; undefined where Java throws.
 */
export function parseJavaLong (raw: string): bigint | undefined {
  const start = raw[0] === '-' || raw[0] === '+' ? 1 : 0
  if (raw.length === start) return undefined
  let value = 0n
  for (let i = start; i < raw.length; i++) {
    const digit = digitValue(raw.charCodeAt(i))
    if (digit === undefined) return undefined
    value = value * 10n + BigInt(digit)
    if (value > INT64_MAX + 1n) return undefined
  }
  const signed = raw[0] === '-' ? -value : value
  return signed >= INT64_MIN && signed <= INT64_MAX ? signed : undefined
}

/** Unicode encodes each script's decimal digits as one run of ten, 0 to 9: the place in the run. */
function digitValue (unit: number): number | undefined {
  if (unit >= 0x30 && unit <= 0x39) return unit - 0x30
  if (!DECIMAL_DIGIT.test(String.fromCharCode(unit))) return undefined
  let first = unit
  while (DECIMAL_DIGIT.test(String.fromCharCode(first - 1))) first--
  return (unit - first) % 10
}

/** Java's `yyyy-MM-dd HH:mm:ss.SSS` in the server's time zone, as Leaf formats it. */
export function formatLocal (ms: number): string {
  const d = new Date(ms)
  const p = (n: number, w = 2) => String(n).padStart(w, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`
}

/**
 * leaf-server's decode of any signed 64-bit value: `(id >> 22) + twepoch` on a Java long, so
 * the time of a negative value is negative too (-1 is 1 ms before twepoch, worker 1023,
 * sequence 4095). Read in the instance's layout when the time is its top field; otherwise
 * (a Vesta layout) as its bits lie.
 */
export function decodeAsLeaf (layout: Layout, id: bigint): { timestamp: number, workerId: number, sequence: number } {
  const { timestamp, workerId, sequence } = explainId(layout, id)
  if (id >= 0n || layout.fields[0] !== layout.time) return { timestamp, workerId, sequence }
  return { timestamp: msOf(layout, Number(id >> BigInt(layout.time.shift))), workerId, sequence }
}

/** What a layout spec given to decode is read with: the instance's twepoch and Vesta values. */
export type DecodeContext = Omit<LayoutContext, 'now' | 'minYearsLeft' | 'decodeOnly'>

export interface DecodeRoutesOptions {
  layout: Layout
  context: DecodeContext
  clock?: () => number
}

const ID_PATTERN = '^-?[0-9]{1,19}$'
const DIGITS = '^[0-9]{1,16}$'

const decodeQuery = {
  type: 'object',
  required: ['snowflakeId'],
  // No type: Java reads the value as it comes (two values are one, "1,2"), then parses it.
  properties: { snowflakeId: { errorCode: 'INVALID_ID', description: 'the ID to decode as ?snowflakeId=N' } },
}
const decodeParams = {
  type: 'object',
  properties: { id: { type: 'string', pattern: ID_PATTERN, errorCode: 'INVALID_ID', description: 'a decimal signed 64-bit integer, the ID to decode in the path: /api/snowflake/decode/:id' } },
}
const layoutQuery = {
  type: 'object',
  properties: { layout: { type: 'string', maxLength: 1024, errorCode: 'INVALID_LAYOUT', description: 'layout spec (as leaf.snowflake.layout takes it)' } },
}
const makeQuery = {
  type: 'object',
  required: ['time'],
  properties: {
    time: { type: 'string', pattern: '^([0-9]{1,16}|[0-9]{4}-[0-9]{2}-[0-9]{2}.*)$', errorCode: 'INVALID_FIELD', description: 'ms since 1970 or an ISO-8601 time (2026-12-01T09:00:00+08:00)' },
    workerId: { type: 'string', pattern: DIGITS, errorCode: 'INVALID_FIELD', description: 'a worker id: a decimal integer' },
    sequence: { type: 'string', pattern: DIGITS, errorCode: 'INVALID_FIELD', description: 'a sequence: a decimal integer' },
  },
}

/**
 * Leaf's `/decodeSnowflakeId`, and the layout's own routes: explain an ID
 * (`/api/snowflake/decode/:id`, in the instance's layout or in the one `?layout=` gives, which
 * may have run out: old IDs are read in it), make the ID of a time (`/api/snowflake/make`) and
 * describe the layout (`/api/snowflake/layout`). None needs the generator: they work with the
 * mode off too. Their input is checked by schemas (the one schemaErrorFormatter names the
 * field); what they refuse is thrown, for the one error handler.
 */
export const decodeRoutes = fp<DecodeRoutesOptions>(async (app, { layout, context, clock = Date.now }) => {
  const description = describeLayout(layout)

  app.get<{ Querystring: { snowflakeId: string | string[] } }>('/decodeSnowflakeId', { schema: { querystring: decodeQuery } }, async (request) => {
    const given = request.query.snowflakeId
    // Spring joins a repeated parameter with commas, which Long.parseLong refuses.
    const raw = Array.isArray(given) ? given.join(',') : given
    const id = parseJavaLong(raw)
    if (id === undefined) {
      const why = raw === '' ? 'snowflakeId is empty: give the ID to decode as ?snowflakeId=N.' : `snowflakeId ${show(raw)} is not a decimal signed 64-bit integer (-9223372036854775808 to 9223372036854775807).`
      throw new LeafError('INVALID_ID', why, { fields: { errorMsg: LEAF_DECODE_ERROR } })
    }
    const { timestamp, workerId, sequence } = decodeAsLeaf(layout, id)
    return { timestamp: `${timestamp}(${formatLocal(timestamp)})`, sequenceId: String(sequence), workerId: String(workerId) }
  })

  app.get('/api/snowflake/decode', async () => {
    throw new LeafError('INVALID_ID', 'id is missing: give the ID to decode in the path, /api/snowflake/decode/:id.')
  })
  app.get<{ Params: { id: string }, Querystring: { layout?: string } }>('/api/snowflake/decode/:id', { schema: { params: decodeParams, querystring: layoutQuery } }, async (request) => {
    const id = parseInt64(request.params.id)
    if (id === undefined) throw new LeafError('INVALID_ID', `id ${request.params.id} is outside the signed 64-bit range (-9223372036854775808 to 9223372036854775807).`)
    let l = layout
    const spec = request.query.layout
    if (spec !== undefined && spec !== '') {
      try {
        l = parseLayout(spec, { ...context, now: clock(), decodeOnly: true })
      } catch (err) {
        if (!(err instanceof LayoutError)) throw err
        throw new LeafError('INVALID_LAYOUT', `layout=${spec.slice(0, 200)}: ${err.message}`)
      }
    }
    const { time, timestamp, workerId, sequence, ...vesta } = explainId(l, id)
    const fields = Object.fromEntries(l.fields.map((f) => [f.name, f.name === 'time' ? time : f.name === 'worker' ? workerId : f.name === 'sequence' ? sequence : vesta[f.name as keyof typeof vesta]]))
    return { id: String(id), layout: l.name, ...(l === layout ? {} : { spec: l.spec }), timestamp, time: new Date(timestamp).toISOString(), workerId, sequence, ...vesta, fields }
  })

  app.get<{ Querystring: { time: string, workerId?: string, sequence?: string } }>('/api/snowflake/make', { schema: { querystring: makeQuery } }, async (request) => {
    const q = request.query
    const ms = /^[0-9]+$/.test(q.time) ? Number(q.time) : Date.parse(q.time)
    if (!Number.isSafeInteger(ms)) {
      throw new LeafError('INVALID_FIELD', `time must be ms since 1970 or an ISO-8601 time (2026-12-01T09:00:00+08:00); got ${show(q.time)}.`, { fields: { field: 'time' } })
    }
    const fields = { time: timeOf(layout, ms), workerId: Number(q.workerId ?? 0), sequence: Number(q.sequence ?? 0) }
    const problem = fieldProblem(layout, fields)
    if (problem !== undefined) throw new LeafError('INVALID_FIELD', problem.message, { fields: { field: problem.field } })
    return { id: String(makeId(layout, fields)) }
  })

  // runsOutAt, and the whole seconds left until then on the generators' clock (0 once past).
  app.get('/api/snowflake/layout', { schema: { response: { 200: layoutResponse } } }, async () => ({ ...description, timeLeftSeconds: Math.floor(timeLeftSeconds(layout, clock())) }))
}, { name: 'leaf-decode', fastify: '5.x', dependencies: ['leaf-errors'] })

const layoutResponse = {
  type: 'object',
  // Fields describeLayout adds later are answered too, not dropped by the serializer.
  additionalProperties: true,
  properties: {
    name: { type: 'string' },
    spec: { type: 'string' },
    fields: { type: 'array', items: { type: 'object', additionalProperties: true, properties: { name: { type: 'string' }, bits: { type: 'integer' }, shift: { type: 'integer' } } } },
    epoch: { type: 'integer' },
    epochIso: { type: 'string' },
    timeUnit: { type: 'string' },
    maxWorkerId: { type: 'integer' },
    idsPerSecondPerWorker: { type: 'number' },
    bits: { type: 'integer' },
    jsSafe: { type: 'boolean' },
    runsOutAt: { type: 'string' },
    timeLeftSeconds: { type: 'integer' },
  },
}
