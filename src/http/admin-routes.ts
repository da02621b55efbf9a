import fp from 'fastify-plugin'
import { LeafError } from '../errors.js'
import { MAX_ID } from '../id-range.js'
import type { Logger } from '../logger.js'
import type { SegmentMode } from '../modes/segment-mode.js'
import { viewJson, type ViewQuery } from '../segment/segment-views.js'
import type { LeafAllocRow, TagChanges } from '../segment/store.js'
import { MAX_STEP } from '../segment/segment-loader.js'
import { requireToken, type AdminTokens } from './auth.js'
import { MAX_KEY_LENGTH } from './id-routes.js'
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

export interface AdminRoutesOptions {
  tokens: AdminTokens
  logger: Logger
}

/**
 * The views (`/api/cache`, `/api/db`, `/api/snowflake/status` and Leaf's `/cache`, `/db` pages),
 * behind the tokens when either is set, and tag management, which exists only with the admin
 * token and answers it alone. Input is checked by the routes' schemas.
 */
export const adminRoutes = fp<AdminRoutesOptions>(async (app, { tokens, logger }) => {
  // Route-level hooks on the root rather than an encapsulated plugin, which would give Fastify
  // request and reply classes of its own next to the ID routes' on the hot paths they share.
  const guarded = tokens.admin === '' && tokens.view === '' ? {} : { onRequest: [requireToken(tokens, 'view')] }
  const { segment, snowflake } = app.leaf
  const { layout } = app.leaf.config.snowflake
  const twepoch = layout.epoch

  // A page of the tags, the busiest first: the whole map for a few tags, the busiest hundred of
  // 100,000 (`?limit=`, `?cursor=` from the Link header, `?search=`).
  app.get<{ Querystring: ViewQuerystring }>('/api/cache', { ...guarded, schema: { querystring: viewQuery(API_CACHE_LIMIT) } }, async (request, reply) => {
    const query = viewQueryOf(request.query, API_CACHE_LIMIT)
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
  app.get<{ Querystring: ViewQuerystring }>('/cache', { ...guarded, schema: { querystring: viewQuery(CACHE_PAGE_SIZE) } }, async (request, reply) => {
    const query = viewQueryOf(request.query, CACHE_PAGE_SIZE)
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

  if (tokens.admin === '') {
    // Absent, and the 404 says why: a client sees no route, an operator the key to set.
    const off = (request: { method: string, url: string }) => {
      throw new LeafError('NOT_FOUND', `No route ${request.method} ${request.url.slice(0, 200)}: tag management is off on this instance; set leaf.admin.token to turn it on (docs/operations.md#tag-management).`)
    }
    app.post('/api/segment/tags', off)
    app.patch('/api/segment/tags/:key', off)
    return
  }
  const managing = { onRequest: [requireToken(tokens, 'manage')], bodyLimit: BODY_LIMIT }
  app.post<{ Body: NewTagBody }>('/api/segment/tags', { ...managing, schema: { body: newTagBody } }, async (request, reply) => {
    const mode = enabled(segment)
    const tag = newTag(request.body)
    const row = await storeCall(() => mode.store.createTag(tag))
    if (row === undefined) throw new LeafError('KEY_EXISTS', `Tag "${tag.key}" is already in the leaf_alloc table.`)
    mode.generator.addTag(row.key)
    logger.info({ key: row.key, step: row.step, maxId: String(row.maxId) }, 'segment tag created')
    return reply.code(201).send(rowJson(row))
  })
  app.patch<{ Params: { key: string }, Body: TagChanges }>('/api/segment/tags/:key', { ...managing, schema: { params: tagParams, body: tagChangesBody } }, async (request) => {
    const mode = enabled(segment)
    const { key } = request.params
    const changes: TagChanges = request.body
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
}, { name: 'leaf-admin', fastify: '5.x', dependencies: ['leaf-errors'] })

interface ViewQuerystring {
  search?: string
  limit?: string
  cursor?: string
}

/** `?search=`, `?cursor=` (an offset, as the Link header gives it) and `?limit=` of the cache views. */
function viewQuery (defaultLimit: number) {
  return {
    type: 'object',
    properties: {
      search: { type: 'string', maxLength: 128, description: 'a part of a tag name: at most 128 characters, as a tag name is' },
      // 1 to MAX_LIMIT
      limit: { type: 'string', pattern: '^0*([1-9][0-9]{0,2}|1000)$', description: `an integer from 1 to ${MAX_LIMIT} (${defaultLimit} when not given)` },
      cursor: { type: 'string', pattern: '^[0-9]{1,9}$', description: 'a cursor from the Link header of the page before' },
    },
  }
}

function viewQueryOf (query: ViewQuerystring, defaultLimit: number): ViewQuery {
  return {
    search: query.search ?? '',
    limit: query.limit === undefined ? defaultLimit : Number(query.limit),
    offset: query.cursor === undefined ? 0 : Number(query.cursor),
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

// Without U+0000, as validKey (id-routes.ts) has it: PostgreSQL cannot store the byte.
const KEY = { type: 'string', minLength: 1, maxLength: MAX_KEY_LENGTH, pattern: '^[^\\u0000]*$', errorCode: 'INVALID_KEY', description: `a tag name of 1 to ${MAX_KEY_LENGTH} characters, without U+0000 (no store can hold it)` }
const STEP = { type: 'integer', minimum: 1, maximum: MAX_STEP, description: `an integer from 1 to ${MAX_STEP}` }
const DESCRIPTION = { type: ['string', 'null'], maxLength: MAX_DESCRIPTION, description: `a string of at most ${MAX_DESCRIPTION} characters, or null` }

interface NewTagBody {
  key: string
  step: number
  maxId?: string | number
  description?: string | null
}

const newTagBody = {
  type: 'object',
  description: 'a JSON object: {"key", "step", "maxId", "description"}',
  required: ['key', 'step'],
  additionalProperties: false,
  properties: {
    key: KEY,
    step: STEP,
    // pattern holds for a string, minimum and maximum for a number: 19 digits may still pass
    // 2^63 - 1, which checkIdSpace refuses with the step.
    maxId: { type: ['string', 'integer'], pattern: '^[0-9]{1,19}$', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'a non-negative 64-bit integer: a decimal string, or a JSON number up to 2^53 - 1' },
    description: DESCRIPTION,
  },
}

const tagChangesBody = {
  type: 'object',
  description: 'a JSON object with step and/or description',
  minProperties: 1,
  additionalProperties: false,
  properties: { step: STEP, description: DESCRIPTION },
}

const tagParams = { type: 'object', properties: { key: KEY } }

function newTag ({ key, step, maxId: given, description = null }: NewTagBody) {
  const maxId = given === undefined ? 1n : BigInt(given)
  checkIdSpace('maxId', maxId, step)
  return { key, step, maxId, description }
}

/**
 * A load moves max_id to max_id + step and serves [max_id, max_id + step): a sum past 2^63 - 1
 * fits no BIGINT, so the tag would never serve that segment. `field` is the one named.
 */
function checkIdSpace (field: 'maxId' | 'step', maxId: bigint, step: number): void {
  if (maxId + BigInt(step) > MAX_ID) {
    throw new LeafError('INVALID_BODY', `${field}: maxId ${maxId} + step ${step} passes 2^63 - 1 (${MAX_ID}): the next segment would pass the largest 64-bit ID.`)
  }
}
