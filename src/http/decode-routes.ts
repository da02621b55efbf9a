import type { FastifyInstance } from 'fastify'
import { ERRORS } from '../errors.js'
import { decodeSnowflakeId } from '../snowflake/snowflake-generator.js'

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

/** Leaf's `/decodeSnowflakeId` and the JSON-typed `/api/snowflake/decode/:id`. */
export function registerDecodeRoutes (app: FastifyInstance, twepoch: number): void {
  const invalid = { error: 'INVALID_ID', message: ERRORS.INVALID_ID.message, errorMsg: ERRORS.INVALID_ID.message }

  app.get<{ Querystring: { snowflakeId?: string } }>('/decodeSnowflakeId', async (request, reply) => {
    const id = parseInt64(request.query.snowflakeId)
    if (id === undefined) return reply.code(ERRORS.INVALID_ID.status).send(invalid)
    const { timestamp, workerId, sequence } = decodeSnowflakeId(id, twepoch)
    return { timestamp: `${timestamp}(${formatLocal(timestamp)})`, sequenceId: String(sequence), workerId: String(workerId) }
  })

  app.get<{ Params: { id: string } }>('/api/snowflake/decode/:id', async (request, reply) => {
    const id = parseInt64(request.params.id)
    if (id === undefined) return reply.code(ERRORS.INVALID_ID.status).send(invalid)
    const { timestamp, workerId, sequence } = decodeSnowflakeId(id, twepoch)
    return { id: String(id), timestamp, time: new Date(timestamp).toISOString(), workerId, sequence }
  })
}
