import type { FastifyInstance } from 'fastify'
import { ERRORS } from '../errors.js'
import { describeLayout, explainId, fieldProblem, makeId, timeOf, type Layout, type LayoutContext } from '../layout/layout.js'
import { LayoutError, parseLayout } from '../layout/layout-spec.js'
import { timeLeftSeconds } from '../snowflake/time-left.js'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n

/** A decimal signed 64-bit integer, or undefined. */
export function parseInt64 (raw: unknown): bigint | undefined {
  if (typeof raw !== 'string' || !/^-?[0-9]{1,19}$/.test(raw)) return undefined
  const id = BigInt(raw)
  return id >= INT64_MIN && id <= INT64_MAX ? id : undefined
}

/** Java's `yyyy-MM-dd HH:mm:ss.SSS` in the server's time zone, as Leaf formats it. */
export function formatLocal (ms: number): string {
  const d = new Date(ms)
  const p = (n: number, w = 2) => String(n).padStart(w, '0')
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`
}

/** What a layout spec given to decode is read with: the instance's twepoch and Vesta values. */
export type DecodeContext = Omit<LayoutContext, 'now' | 'minYearsLeft' | 'decodeOnly'>

/**
 * Leaf's `/decodeSnowflakeId`, and the layout's own routes: explain an ID
 * (`/api/snowflake/decode/:id`, in the instance's layout or in the one `?layout=` gives, which
 * may have run out: old IDs are read in it), make the ID of a time (`/api/snowflake/make`) and
 * describe the layout (`/api/snowflake/layout`). None needs the generator: they work with the
 * mode off too.
 */
export function registerDecodeRoutes (app: FastifyInstance, layout: Layout, context: DecodeContext, clock: () => number = Date.now): void {
  // INVALID_ID, with Leaf's errorMsg beside the message; a value not given names the parameter.
  const invalid = (message: string = ERRORS.INVALID_ID.message) => ({ error: 'INVALID_ID', message, errorMsg: message })
  const noQueryId = invalid('snowflakeId is missing: give the ID to decode as ?snowflakeId=N.')
  const noPathId = invalid('id is missing: give the ID to decode in the path, /api/snowflake/decode/:id.')
  const description = describeLayout(layout)

  app.get<{ Querystring: { snowflakeId?: string } }>('/decodeSnowflakeId', async (request, reply) => {
    const raw = request.query.snowflakeId
    if (raw === undefined || raw === '') return reply.code(ERRORS.INVALID_ID.status).send(noQueryId)
    const id = parseInt64(raw)
    if (id === undefined) return reply.code(ERRORS.INVALID_ID.status).send(invalid())
    const { timestamp, workerId, sequence } = explainId(layout, id)
    return { timestamp: `${timestamp}(${formatLocal(timestamp)})`, sequenceId: String(sequence), workerId: String(workerId) }
  })

  app.get('/api/snowflake/decode', async (_request, reply) => reply.code(ERRORS.INVALID_ID.status).send(noPathId))
  const invalidLayout = (message: string) => ({ error: 'INVALID_LAYOUT', message })
  app.get<{ Params: { id: string }, Querystring: { layout?: string | string[] } }>('/api/snowflake/decode/:id', async (request, reply) => {
    if (request.params.id === '') return reply.code(ERRORS.INVALID_ID.status).send(noPathId)
    const id = parseInt64(request.params.id)
    if (id === undefined) return reply.code(ERRORS.INVALID_ID.status).send(invalid())
    let l = layout
    const spec = request.query.layout
    if (Array.isArray(spec)) return reply.code(ERRORS.INVALID_LAYOUT.status).send(invalidLayout('layout is given more than once: give one spec'))
    if (spec !== undefined && spec !== '') {
      try {
        l = parseLayout(spec, { ...context, now: clock(), decodeOnly: true })
      } catch (err) {
        if (!(err instanceof LayoutError)) throw err
        return reply.code(ERRORS.INVALID_LAYOUT.status).send(invalidLayout(`layout=${spec.slice(0, 200)}: ${err.message}`))
      }
    }
    const { time, timestamp, workerId, sequence, ...vesta } = explainId(l, id)
    const fields = Object.fromEntries(l.fields.map((f) => [f.name, f.name === 'time' ? time : f.name === 'worker' ? workerId : f.name === 'sequence' ? sequence : vesta[f.name as keyof typeof vesta]]))
    return { id: String(id), layout: l.name, ...(l === layout ? {} : { spec: l.spec }), timestamp, time: new Date(timestamp).toISOString(), workerId, sequence, ...vesta, fields }
  })

  app.get<{ Querystring: { time?: string, workerId?: string, sequence?: string } }>('/api/snowflake/make', async (request, reply) => {
    const q = request.query
    const ms = parseTime(q.time)
    const workerId = q.workerId === undefined ? 0 : parseField(q.workerId)
    const sequence = q.sequence === undefined ? 0 : parseField(q.sequence)
    const fields = { time: ms === undefined ? NaN : timeOf(layout, ms), workerId, sequence }
    const problem = ms === undefined
      ? { field: 'time', message: 'time must be ms since 1970 or an ISO-8601 time (2026-12-01T09:00:00+08:00)' }
      : fieldProblem(layout, fields)
    if (problem !== undefined) return reply.code(ERRORS.INVALID_FIELD.status).send({ error: 'INVALID_FIELD', message: problem.message, field: problem.field })
    return { id: String(makeId(layout, fields)) }
  })

  // runsOutAt, and the whole seconds left until then on the generators' clock (0 once past).
  app.get('/api/snowflake/layout', async () => ({ ...description, timeLeftSeconds: Math.floor(timeLeftSeconds(layout, clock())) }))
}

/** `1764579600000` or an ISO-8601 time; undefined when it is neither. */
function parseTime (raw: string | undefined): number | undefined {
  if (raw === undefined || raw === '') return undefined
  const ms = /^\d{1,16}$/.test(raw) ? Number(raw) : /^\d{4}-\d{2}-\d{2}/.test(raw) ? Date.parse(raw) : NaN
  return Number.isSafeInteger(ms) ? ms : undefined
}

/** A decimal integer, or NaN (which fieldProblem names). */
function parseField (raw: string): number {
  return /^\d{1,16}$/.test(raw) ? Number(raw) : NaN
}
