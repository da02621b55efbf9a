import type { FastifyInstance } from 'fastify'
import { withTimeout } from '../timers.js'

/** Readiness never waits on the database longer than this. */
export const READY_DB_TIMEOUT_MS = 1000

interface ModeReadiness { ready: boolean, reason?: string }

/** `/healthz` (the process runs) and `/readyz` (every enabled mode can serve now). */
export function registerHealthRoutes (app: FastifyInstance): void {
  app.get('/healthz', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    const { segment, snowflake } = app.leaf
    const modes: Record<string, ModeReadiness> = {}
    if (segment !== undefined) modes.segment = await segmentReadiness(segment)
    if (snowflake !== undefined) {
      const { unavailable, issuedUntil } = snowflake.lease.status()
      const wait = snowflake.lease.notBefore - snowflake.clock()
      modes.snowflake = unavailable !== undefined
        ? {
            ready: false,
            reason: issuedUntil !== undefined
              ? `worker-id lease lost (${unavailable}): no snowflake ID until it leases one again`
              : 'another instance may hold this worker id: no snowflake ID until it is ours alone (details in the log and /api/snowflake/status)',
          }
        : wait > 0 ? { ready: false, reason: `restart window: first ID in ${wait} ms` } : { ready: true }
    }
    const ready = Object.values(modes).every((m) => m.ready)
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready', modes })
  })
}

async function segmentReadiness ({ store, generator }: NonNullable<FastifyInstance['leaf']['segment']>): Promise<ModeReadiness> {
  if (!generator.initialized) return { ready: false, reason: 'the tag list is not loaded yet (database unreachable since start)' }
  if (generator.warming) return { ready: false, reason: 'warm start: loading the first segments of the tags that served before the last stop' }
  // Every instance shares the table, so a tag at the end of its ID space is not a reason to
  // route elsewhere: ready, with the tags named.
  const ended = generator.endedTags()
  const endedNote = ended.length === 0 ? undefined : `ID space ended (ID_SPACE_EXHAUSTED) for ${ended.length} tag(s): ${ended.slice(0, 10).join(', ')}`
  const dbError = await withTimeout(store.ping(), READY_DB_TIMEOUT_MS, `no answer within ${READY_DB_TIMEOUT_MS} ms`)
    .then(() => undefined, (err: { code?: string, message: string }) => err.code ?? err.message)
  if (dbError === undefined) return endedNote === undefined ? { ready: true } : { ready: true, reason: endedNote }
  const exhausted = generator.exhaustedTags()
  if (exhausted.length === 0) return { ready: true, reason: `database unreachable (${dbError}); serving buffered IDs` }
  return { ready: false, reason: `database unreachable (${dbError}) and ${exhausted.length} tag(s) have no buffered IDs left: ${exhausted.slice(0, 10).join(', ')}` }
}
