import type { FastifyInstance } from 'fastify'
import { LeafError } from '../errors.js'
import { MAX_ID } from '../id-range.js'
import type { Logger } from '../logger.js'
import type { SegmentMode } from '../modes/segment-mode.js'
import { viewJson, type ViewQuery } from '../segment/segment-views.js'
import type { LeafAllocRow, TagChanges } from '../segment/store.js'
import { MAX_STEP } from '../segment/segment-loader.js'
import { requireToken, type AdminTokens } from './auth.js'
import { parseInt64 } from './decode-routes.js'
import { validKey } from './id-routes.js'
import { CACHE_PAGE_SIZE, renderCachePage, renderDbPage } from './pages.js'
import { checkReadiness } from '../modes/readiness.js'
import { storeTls } from '../modes/segment-mode.js'
import { describeStore } from '../database/describe-store.js'
import { layoutEnd } from '../layout/layout.js'
import { timeLeftSeconds } from '../snowflake/time-left.js'
import { VERSION } from '../version.js'

const MAX_DESCRIPTION = 256
/** Tags per page of /api/cache unless ?limit= says (/cache: CACHE_PAGE_SIZE), and the most it may ask for. */
const API_CACHE_LIMIT = 100
const MAX_LIMIT = 1000
/** Admin bodies are a few fields: anything larger is refused (413). */
const BODY_LIMIT = 16 * 1024

/**
 * The views (`/api/cache`, `/api/db`, `/api/snowflake/status` and Leaf's `/cache`, `/db` pages),
 * behind the tokens when either is set, and tag management, which exists only with the admin
 * token and answers it alone.
 */
export function registerAdminRoutes (app: FastifyInstance, tokens: AdminTokens, logger: Logger): void {
  // Route-level hooks on the root rather than an encapsulated plugin, which would give Fastify
  // request and reply classes of its own next to the ID routes' on the hot paths they share.
  const guarded = tokens.admin === '' && tokens.view === '' ? {} : { onRequest: [requireToken(tokens, 'view')] }
  const { segment, snowflake } = app.leaf
  const { layout } = app.leaf.config.snowflake
  const twepoch = layout.epoch

  // A page of the tags, the busiest first: the whole map for a few tags, the busiest hundred of
  // 100,000 (`?limit=`, `?cursor=` from the Link header, `?search=`).
  app.get<{ Querystring: Record<string, unknown> }>('/api/cache', guarded, async (request, reply) => {
    const query = parseViewQuery(request.query, API_CACHE_LIMIT)
    const page = enabled(segment).generator.viewPage(query)
    const end = page.offset + page.views.length
    reply.header('x-total-count', page.matched)
    if (end < page.matched) {
      const next = new URLSearchParams({ ...(query.search === '' ? {} : { search: query.search }), limit: String(query.limit), cursor: String(end) })
      reply.header('link', `</api/cache?${next.toString()}>; rel="next"`)
    }
    // An array: an object keyed by tag would list integer-like tags ("42") first, whatever their rate.
    return page.views.map(viewJson)
  })
  app.get('/api/db', guarded, async () => (await rows(enabled(segment))).map(rowJson))
  app.get('/api/snowflake/status', guarded, async () => {
    if (snowflake === undefined) throw new LeafError('MODE_DISABLED', 'snowflake mode is disabled on this instance.')
    const s = snowflake.lease.status()
    return {
      workerId: s.workerId,
      source: s.source,
      zookeeperConnected: s.zookeeperConnected,
      issuing: s.unavailable === undefined,
      unavailable: s.unavailable ?? null,
      paths: { forever: s.foreverPath ?? null, temporary: s.temporaryPath ?? null, cacheFile: s.cacheFile },
      lastHeartbeat: s.lastHeartbeat === undefined ? null : new Date(s.lastHeartbeat).toISOString(),
      ...(s.issuedUntil === undefined
        ? {}
        : {
            lease: {
              pool: s.pool ?? null,
              range: s.range ?? null,
              expiresAt: s.leaseExpiresAt === undefined ? null : new Date(s.leaseExpiresAt).toISOString(),
              issuedUntil: s.issuedUntil,
            },
          }),
      twepoch,
      layout: layout.spec,
      borrowedMs: snowflake.generator.borrowedMs(),
    }
  })
  app.get<{ Querystring: Record<string, unknown> }>('/cache', guarded, async (request, reply) => {
    const query = parseViewQuery(request.query, CACHE_PAGE_SIZE)
    reply.type('text/html; charset=utf-8')
    return renderCachePage({
      version: VERSION,
      node: process.versions.node,
      uptimeSeconds: process.uptime(),
      renderedAt: Date.now(),
      ratesAgeMs: segment?.generator.ratesAgeMs(),
      store: segment === undefined ? undefined : describeStore(app.leaf.config.segment.store),
      storeTls: segment === undefined ? undefined : storeTls(app.leaf.config.segment.store, segment.store),
      failover: segment?.guard.view(),
      hosts: segment?.hosts?.view(),
      readiness: await checkReadiness(app.leaf),
      errors: app.leaf.metrics.errorCounts(),
    }, segment === undefined ? undefined : { ...segment.generator.viewPage(query), ...query }, snowflake?.lease.status(), twepoch, snowflake === undefined
      ? undefined
      : { spec: layout.spec, runsOutAt: layoutEnd(layout), secondsLeft: timeLeftSeconds(layout, snowflake.clock()) })
  })
  app.get('/db', guarded, async (_request, reply) => {
    reply.type('text/html; charset=utf-8')
    return renderDbPage(await rows(enabled(segment)))
  })

  if (tokens.admin === '') return
  const managing = { onRequest: [requireToken(tokens, 'manage')], bodyLimit: BODY_LIMIT }
  app.post<{ Body: unknown }>('/api/segment/tags', managing, async (request, reply) => {
    const mode = enabled(segment)
    const tag = parseNewTag(request.body)
    const row = await storeCall(() => mode.store.createTag(tag))
    if (row === undefined) throw new LeafError('KEY_EXISTS', `Tag "${tag.key}" is already in the leaf_alloc table.`)
    mode.generator.addTag(row.key)
    logger.info({ key: row.key, step: row.step, maxId: String(row.maxId) }, 'segment tag created')
    return reply.code(201).send(rowJson(row))
  })
  app.patch<{ Params: { key: string }, Body: unknown }>('/api/segment/tags/:key', managing, async (request) => {
    const mode = enabled(segment)
    const key = validKey(request.params.key)
    const changes = parseTagChanges(request.body)
    if (changes.step !== undefined) {
      const current = await storeCall(() => mode.store.getTag(key))
      if (current === undefined) throw new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
      checkIdSpace('step', current.maxId, changes.step)
    }
    const row = await storeCall(() => mode.store.updateTag(key, changes))
    if (row === undefined) throw new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
    mode.generator.addTag(row.key)
    logger.info({ key, ...changes }, 'segment tag changed')
    return rowJson(row)
  })
}

/** `?search=`, `?cursor=` (an offset, as the Link header gives it) and `?limit=` of the cache views. */
function parseViewQuery (query: Record<string, unknown>, defaultLimit: number): ViewQuery {
  const one = (name: string): string | undefined => {
    const value = query[name]
    if (value === undefined) return undefined
    if (typeof value !== 'string') throw new LeafError('BAD_REQUEST', `${name} is given more than once.`)
    return value
  }
  const count = (name: string, min: number, max: number, what: string): number | undefined => {
    const value = one(name)
    if (value === undefined) return undefined
    const n = /^\d{1,10}$/.test(value) ? Number(value) : NaN
    if (!(n >= min && n <= max)) throw new LeafError('BAD_REQUEST', `${name} must be ${what}.`)
    return n
  }
  const search = one('search') ?? ''
  if (search.length > 128) throw new LeafError('BAD_REQUEST', 'search must be at most 128 characters long (a tag name is).')
  return {
    search,
    limit: count('limit', 1, MAX_LIMIT, `an integer from 1 to ${MAX_LIMIT}`) ?? defaultLimit,
    offset: count('cursor', 0, 2 ** 31, 'a cursor from the Link header of the page before') ?? 0,
  }
}

function enabled (segment: SegmentMode | undefined): SegmentMode {
  if (segment === undefined) throw new LeafError('MODE_DISABLED', 'segment mode is disabled on this instance.')
  return segment
}

async function storeCall<T> (fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    throw new LeafError('STORE_UNAVAILABLE', undefined, { cause: err })
  }
}

function rows (segment: SegmentMode): Promise<LeafAllocRow[]> {
  return storeCall(() => segment.store.getAllRows())
}

function rowJson (r: LeafAllocRow) {
  return { key: r.key, maxId: String(r.maxId), step: r.step, description: r.description, updateTime: r.updateTime.toISOString() }
}

function invalid (message: string): LeafError {
  return new LeafError('INVALID_BODY', message)
}

function asObject (body: unknown, allowed: string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('The body must be a JSON object.')
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k))
  if (unknown.length > 0) throw invalid(`Unknown field(s): ${unknown.slice(0, 5).join(', ')}.`)
  return body as Record<string, unknown>
}

function parseStep (step: unknown): number {
  if (typeof step !== 'number' || !Number.isInteger(step) || step < 1 || step > MAX_STEP) {
    throw invalid(`step must be an integer from 1 to ${MAX_STEP}.`)
  }
  return step
}

function parseDescription (description: unknown): string | null {
  if (description === null) return null
  if (typeof description !== 'string' || Array.from(description).length > MAX_DESCRIPTION) {
    throw invalid(`description must be a string of at most ${MAX_DESCRIPTION} characters, or null.`)
  }
  return description
}

function parseNewTag (body: unknown) {
  const b = asObject(body, ['key', 'step', 'maxId', 'description'])
  if (typeof b.key !== 'string') throw new LeafError('INVALID_KEY')
  const key = validKey(b.key)
  const step = parseStep(b.step)
  let maxId = 1n
  if (b.maxId !== undefined) {
    const parsed = typeof b.maxId === 'number'
      ? (Number.isSafeInteger(b.maxId) ? BigInt(b.maxId) : undefined)
      : parseInt64(b.maxId)
    if (parsed === undefined || parsed < 0n) {
      throw invalid('maxId must be a non-negative 64-bit integer: a decimal string, or a JSON number up to 2^53 - 1.')
    }
    maxId = parsed
  }
  const description = b.description === undefined ? null : parseDescription(b.description)
  checkIdSpace('maxId', maxId, step)
  return { key, step, maxId, description }
}

/**
 * A load moves max_id to max_id + step and serves [max_id, max_id + step): a sum past 2^63 - 1
 * fits no BIGINT, so the tag would never serve that segment. `field` is the one named.
 */
function checkIdSpace (field: 'maxId' | 'step', maxId: bigint, step: number): void {
  if (maxId + BigInt(step) > MAX_ID) {
    throw invalid(`${field}: maxId ${maxId} + step ${step} passes 2^63 - 1 (${MAX_ID}): the next segment would pass the largest 64-bit ID.`)
  }
}

function parseTagChanges (body: unknown): TagChanges {
  const b = asObject(body, ['step', 'description'])
  const changes: TagChanges = {}
  if (b.step !== undefined) changes.step = parseStep(b.step)
  if (b.description !== undefined) changes.description = parseDescription(b.description)
  if (Object.keys(changes).length === 0) throw invalid('Give step and/or description.')
  return changes
}
