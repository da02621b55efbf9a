import t from 'tap'
import { buildApp } from '../../src/app.js'
import type { SegmentGenerator } from '../../src/segment/segment-generator.js'
import { testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { withSqlite } from '../helpers/sqlite.js'

// Issue 30's scale: 100,000 tags in leaf_alloc, 200 of them in use. The views and the metrics
// cost what is used, not what exists: each answer stays under 1 MB (the bench times them).

const TAGS = 100_000
const BUSY = 200
const MB = 1024 * 1024

t.test(`${TAGS.toLocaleString('en-US')} tags, ${BUSY} in use: /cache, /api/cache and /metrics each under 1 MB`, async (t) => {
  const config = testConfig({ 'leaf.segment.enable': true, 'leaf.snowflake.enable': false })
  const server = await buildApp(config, { logger: silentLogger })
  t.teardown(() => server.close())
  const path = config.segment.store.kind === 'sqlite' ? config.segment.store.path : ''
  withSqlite(path, (db) => {
    const insert = db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, 1, 1000, NULL)')
    db.transaction(() => { for (let i = 0; i < TAGS; i++) insert.run(`tenant-${String(i).padStart(6, '0')}`) })()
  })
  const generator = server.leaf.segment?.generator as SegmentGenerator
  await generator.refreshTags()
  t.equal(generator.views().length, TAGS + 2, 'every tag in memory (and the two the store seeds)')
  for (let i = 0; i < BUSY; i++) {
    const key = `tenant-${String(i * 497).padStart(6, '0')}`
    t.equal((await server.inject(`/api/segment/get/${key}?count=${1 + (i % 7)}`)).statusCode, 200, key)
  }

  const cache = await server.inject('/cache')
  t.equal(cache.statusCode, 200)
  t.ok(cache.body.length < MB, `/cache: ${cache.body.length.toLocaleString('en-US')} bytes`)
  t.match(cache.body, /100,002 tags · 1–50 shown/)
  t.equal((cache.body.match(/<section class="card tag"/g) ?? []).length, 50, 'the busiest 50 as cards')
  const api = await server.inject('/api/cache')
  t.ok(api.body.length < MB, `/api/cache: ${api.body.length.toLocaleString('en-US')} bytes`)
  t.equal(api.headers['x-total-count'], String(TAGS + 2))
  t.equal((api.json() as { initOk: boolean }[]).filter((v) => v.initOk).length, 100, 'the 100 shown are tags in use')
  const found = await server.inject('/api/cache?search=TENANT-09940&limit=1000')
  t.same((found.json() as { key: string }[]).map((v) => v.key).sort(), Array.from({ length: 10 }, (_, i) => `tenant-09940${i}`), 'a search, in any case, finds among them all')
  const metrics = await server.inject('/metrics')
  t.equal(metrics.statusCode, 200)
  t.ok(metrics.body.length < MB, `/metrics: ${metrics.body.length.toLocaleString('en-US')} bytes`)
})
