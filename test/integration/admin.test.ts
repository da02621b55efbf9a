import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import pino from 'pino'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import type { SegmentGenerator } from '../../src/segment/segment-generator.js'
import { horizonSeconds } from '../../src/segment/rate-meter.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf, type Sample } from '../helpers/prometheus.js'
import { batchLines } from '../helpers/ids.js'
import { seedSqlite, withSqlite } from '../helpers/sqlite.js'
import { TEST_ZK, uniqueName, zookeeperProxy } from '../helpers/zookeeper.js'
import { until } from '../helpers/time.js'

const TOKEN = 'test-token-0123'
const AUTH = { authorization: `Bearer ${TOKEN}` }

async function app (values: Record<string, string | number | boolean> = {}) {
  const instance = await buildApp(testConfig({
    'leaf.segment.enable': true,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.cache.dir': tempDir(),
    ...values,
  }), { logger: silentLogger })
  t.teardown(() => instance.close())
  return instance
}

async function scrape (server: Awaited<ReturnType<typeof app>>): Promise<{ text: string, samples: Sample[] }> {
  const res = await server.inject('/metrics')
  return { text: res.body, samples: parseSamples(res.body) }
}

t.test('/metrics moves as IDs are issued and errors happen', async (t) => {
  const server = await app()
  let { samples } = await scrape(server)
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: 'order' }), undefined)
  t.equal(valueOf(samples, 'leaf_snowflake_worker_id'), 0)
  t.equal(valueOf(samples, 'leaf_zookeeper_connected'), 0)
  t.ok(valueOf(samples, 'process_cpu_user_seconds_total') !== undefined, 'default process metrics')
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'segment', code: 'SEGMENTS_NOT_READY' }), 0, 'the codes alerts watch are there from the start')
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'segment', code: 'STORE_UNCONFIRMED' }), 0)
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'snowflake', code: 'CLOCK_BACKWARDS' }), 0)
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: 'order' }), 0, 'and load failures for every tag')
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: 'leaf-segment-test' }), 0)

  await server.inject('/api/segment/get/order')
  await server.inject('/api/segment/get/order?count=10')
  await server.inject('/api/snowflake/get/a?count=5')
  await server.inject('/api/segment/get/nope')
  await server.inject('/api/segment/get/order?count=0')
  for (let i = 0; i < 120; i++) await server.inject(`/api/snowflake/get/key-${i}`)
  ;({ samples } = await scrape(server))
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'segment', key: 'order' }), 11)
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'snowflake', key: 'a' }), 5)
  t.equal(valueOf(samples, 'leaf_ids_issued_total', { mode: 'snowflake', key: '_other' }), 21, '101 keys in: the 20 past the first 100 (a + 99) count as _other')
  t.equal(samples.filter((m) => m.name === 'leaf_ids_issued_total' && m.labels.mode === 'snowflake').length, 101)
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'segment', code: 'KEY_NOT_FOUND' }), 1)
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'segment', code: 'INVALID_COUNT' }), 1)
  t.equal(valueOf(samples, 'leaf_segment_step', { key: 'order' }), 2000)
  t.equal(valueOf(samples, 'leaf_segment_remaining', { key: 'order' }), 2000 - 11)
  t.equal(valueOf(samples, 'leaf_segment_next_ready', { key: 'order' }), 0, '11 of 2000 used: no preload yet')
  t.equal(valueOf(samples, 'leaf_segment_db_load_seconds_count', { key: 'order' }), 1)
  t.equal(valueOf(samples, 'http_request_duration_seconds_count', { route: '/api/segment/get/:key', status_code: '404' }), 1)
  t.equal(valueOf(samples, 'http_request_duration_seconds_count', { route: '/api/snowflake/get/:key', status_code: '200' }), 121)
  await server.inject('/no/such/thing')
  ;({ samples } = await scrape(server))
  t.equal(valueOf(samples, 'http_request_duration_seconds_count', { route: 'not_found', status_code: '404' }), 1)
  const sum = valueOf(samples, 'http_request_duration_seconds_sum', { route: '/api/segment/get/:key', status_code: '200' }) as number
  const count = valueOf(samples, 'http_request_duration_seconds_count', { route: '/api/segment/get/:key', status_code: '200' }) as number
  t.ok(sum > 0 && sum < count * 0.05, `durations are measured: ${sum} s over ${count} requests, each well under 50 ms in process`)
  await server.inject('/api/segment/get/order?count=300')
  ;({ samples } = await scrape(server))
  t.equal(valueOf(samples, 'leaf_segment_next_ready', { key: 'order' }), 1, 'past 10% used: the next segment is loaded')
  t.equal(valueOf(samples, 'leaf_segment_db_load_seconds_count', { key: 'order' }), 2)
  t.ok(valueOf(samples, 'leaf_snowflake_last_heartbeat_timestamp_seconds') as number > Date.now() / 1000 - 60)
  t.notOk(samples.some((m) => m.labels.route?.includes('key-')), 'raw URLs never become labels')
})

t.test('promtool accepts the service\'s own metric families', async (t) => {
  const server = await app()
  await server.inject('/api/segment/get/order')
  await server.inject('/api/segment/get/nope')
  const { text } = await scrape(server)
  const own = text.split('\n# HELP ').filter((block, i) => i > 0 || block.startsWith('# HELP'))
    .map((block) => block.startsWith('# HELP') ? block : `# HELP ${block}`)
    .filter((block) => /^# HELP (leaf_|http_)/.test(block)).join('\n').trimEnd() + '\n'
  t.match(own, /leaf_ids_issued_total/)
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: own, encoding: 'utf8' })
  t.equal(lint.status, 0, `promtool: ${lint.stdout}${lint.stderr}`)
})

t.test('a load that fails counts on the series that were at 0, and the request answers SEGMENTS_NOT_READY', async (t) => {
  const dbPath = join(tempDir(), 'leaf.db')
  const server = await app({ 'leaf.jdbc.url': `sqlite:${seedSqlite(dbPath)}`, 'leaf.admin.token': TOKEN, 'leaf.segment.wait-timeout-ms': 200 })
  const created = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: { key: 'broken', step: 1000 } })
  t.equal(created.statusCode, 201)
  // A step of 0, set by hand: the store refuses every load of the tag, and it is retried.
  withSqlite(dbPath, (db) => db.prepare('UPDATE leaf_alloc SET step = 0 WHERE biz_tag = ?').run('broken'))
  const res = await server.inject('/api/segment/get/broken')
  t.equal(res.statusCode, 503)
  t.equal(res.json().error, 'SEGMENTS_NOT_READY')
  const { samples } = await scrape(server)
  t.equal(valueOf(samples, 'leaf_id_errors_total', { mode: 'segment', code: 'SEGMENTS_NOT_READY' }), 1)
  t.ok((valueOf(samples, 'leaf_segment_db_load_failures_total', { key: 'broken' }) ?? 0) >= 1, 'the failed loads are counted')
  t.equal(valueOf(samples, 'leaf_segment_db_load_failures_total', { key: 'order' }), 0)
})

t.test('leaf_zookeeper_in_use tells an instance whose ZooKeeper is down from one without ZooKeeper', async (t) => {
  const zookeeper = (source: string, address: string) => ({
    'leaf.snowflake.worker-id.source': source,
    'leaf.snowflake.zk.address': address,
    'leaf.snowflake.zk.session-timeout-ms': 2000,
    'leaf.name': uniqueName(),
    'leaf.snowflake.ip': '127.0.0.1',
    'leaf.snowflake.port': 9001,
  })
  const gauges = async (server: Awaited<ReturnType<typeof buildApp>>) => {
    const { samples } = await scrape(server)
    return { inUse: valueOf(samples, 'leaf_zookeeper_in_use'), connected: valueOf(samples, 'leaf_zookeeper_connected') }
  }
  t.same(await gauges(await app()), { inUse: 0, connected: 0 }, 'static source')
  t.same(await gauges(await app({ 'leaf.snowflake.enable': false })), { inUse: 0, connected: 0 }, 'segment mode only')
  t.same(await gauges(await app({ 'leaf.snowflake.worker-id.source': 'db-lease' })), { inUse: 0, connected: 0 }, 'db-lease source')
  t.same(await gauges(await app(zookeeper('zookeeper-lease', TEST_ZK))), { inUse: 1, connected: 1 }, 'zookeeper-lease source')

  const proxy = await zookeeperProxy(t)
  // Closed here, not at the end of the file: an unconnected ZooKeeper client only closes once it connects.
  const server = await buildApp(testConfig({
    'leaf.snowflake.enable': true,
    'leaf.snowflake.cache.dir': tempDir(),
    ...zookeeper('zookeeper', `127.0.0.1:${proxy.port}`),
  }), { logger: silentLogger })
  const until = async (connected: number) => {
    let now = await gauges(server)
    for (let i = 0; now.connected !== connected && i < 100; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      now = await gauges(server)
    }
    return now
  }
  t.same(await gauges(server), { inUse: 1, connected: 1 }, 'zookeeper source')
  proxy.block()
  t.same(await until(0), { inUse: 1, connected: 0 }, 'zookeeper source, ZooKeeper unreachable: the case an alert is for')
  proxy.unblock()
  t.same(await until(1), { inUse: 1, connected: 1 }, 'connected again')
  await server.close()
})

t.test('/api/cache and /api/db match the generator and the table after known calls', async (t) => {
  const server = await app()
  await server.inject('/api/segment/get/order?count=250') // 1..250, past 10%: preload of [2001, 4001)
  await server.inject('/api/segment/get/order')
  const list = (await server.inject('/api/cache')).json() as ({ key: string } & Record<string, number>)[]
  t.same(list.map((v) => v.key), ['order', 'leaf-segment-test'], 'an array, the busiest first')
  const cache = Object.fromEntries(list.map((v) => [v.key, v])) as Record<string, Record<string, number>>
  t.same(cache.order, {
    key: 'order',
    initOk: true,
    nextReady: true,
    pos: 0,
    value0: '252',
    max0: '2001',
    step0: 2000,
    value1: '2001',
    max1: '4001',
    step1: 2000,
    step: 2000,
    minStep: 2000,
    updateTimestamp: cache.order?.updateTimestamp,
    segments: [{ value: '252', max: '2001', step: 2000 }, { value: '2001', max: '4001', step: 2000 }],
    bufferedIds: 1749 + 2000,
    idsPerSecond: cache.order?.idsPerSecond,
    idsPerSecondLastMinute: cache.order?.idsPerSecondLastMinute,
    bufferSeconds: cache.order?.bufferSeconds,
    nextSegment: 'ready',
    lastLoadSeconds: cache.order?.lastLoadSeconds,
    failedLoads: 0,
    ended: false,
  })
  const lastLoad = cache.order?.lastLoadSeconds ?? 0
  t.ok(lastLoad > 0 && lastLoad < 1, `the last load's time: ${lastLoad} s`)
  t.ok((cache.order?.updateTimestamp ?? 0) > Date.now() - 60_000, 'the second load started the step clock')
  t.match(cache['leaf-segment-test'], { initOk: false, nextReady: false, nextSegment: 'not_loaded', bufferSeconds: null })
  const db = (await server.inject('/api/db')).json()
  t.match(db, [{ key: 'order', maxId: '4001', step: 2000, description: 'Orders' }, { key: 'leaf-segment-test', maxId: '1', step: 1000 }])
  t.match(db[0].updateTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  const status = (await server.inject('/api/snowflake/status')).json()
  t.match(status, { workerId: 0, source: 'static', zookeeperConnected: false, paths: { forever: null, temporary: null }, twepoch: 1288834974657 })
})

t.test('/api/cache gives no bufferSeconds for a tag under 1 ID/s, and leaf_segment_buffer_seconds +Inf: the rule /cache follows', async (t) => {
  const server = await app()
  await server.inject('/api/segment/get/order')
  const generator = server.leaf.segment?.generator as SegmentGenerator
  const views = generator.views.bind(generator)
  const viewPage = generator.viewPage.bind(generator)
  // The rates a quiet tag reaches, which a test cannot wait for: what is left of a burst, and a
  // busy tag; the horizon computed from them as toView() computes it.
  let rate = 61_597 / 2160684850.9
  const at = (v: ReturnType<typeof views>[number]) => ({ ...v, idsPerSecond: rate, bufferSeconds: horizonSeconds(v.buffered, rate) })
  generator.views = () => views().map(at)
  generator.viewPage = (query) => { const page = viewPage(query); return { ...page, views: page.views.map(at) } }
  const order = async () => ((await server.inject('/api/cache')).json() as { key: string, bufferedIds: number }[]).find((v) => v.key === 'order')
  t.match(await order(), { idsPerSecond: 0, bufferSeconds: null })
  t.equal(valueOf((await scrape(server)).samples, 'leaf_segment_buffer_seconds', { key: 'order' }), Infinity, 'the gauge: +Inf, as while idle')
  rate = 40
  const busy = await order()
  t.match(busy, { idsPerSecond: 40, bufferSeconds: Math.round((busy?.bufferedIds ?? 0) / 40 * 100) / 100 })
  t.equal(valueOf((await scrape(server)).samples, 'leaf_segment_buffer_seconds', { key: 'order' }), (busy?.bufferedIds ?? 0) / 40, 'the gauge: the buffered IDs over the rate')
})

t.test('a tag never loaded: "not loaded yet", and no step or horizon sample (not 0 and +Inf)', async (t) => {
  const server = await app()
  await server.inject('/api/segment/get/order')
  const { samples } = await scrape(server)
  for (const name of ['leaf_segment_step', 'leaf_segment_buffer_seconds']) {
    t.equal(valueOf(samples, name, { key: 'leaf-segment-test' }), undefined, `${name}: no sample for a tag never loaded`)
    t.ok(valueOf(samples, name, { key: 'order' }) !== undefined, `${name}: a sample for the tag that loaded`)
  }
  t.equal(valueOf(samples, 'leaf_segment_step', { key: 'order' }), 2000)
  t.equal(valueOf(samples, 'leaf_segment_buffered_ids', { key: 'leaf-segment-test' }), 0, 'it holds no ID: that is a count, and 0')
  const html = (await server.inject('/cache')).body
  t.match(html, /Not loaded yet, never asked for since the start[^<]*<\/p><ul class="idle-tags"><li data-key="leaf-segment-test">/)
  t.match(html, /<section class="card tag" data-key="order"><div class="head"><h2>order<\/h2><span class="badge ok" data-next="not_due">next not needed yet<\/span>/, 'one ID of 2,000 used: nothing late, nothing amber')
  t.notMatch(html, /badge warn" data-next/)
})

t.test('/api/cache is an array, the busiest first: a tag named 42 comes after busier tags, and pages by the Link header', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  for (const key of ['42', '7', 'busy']) {
    t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: { key, step: 1000 } })).statusCode, 201)
  }
  const get = async (url: string) => {
    const res = await server.inject({ url, headers: AUTH })
    t.equal(res.statusCode, 200, url)
    return { body: res.json() as { key: string, idsPerSecond: number, initOk: boolean }[], link: res.headers.link }
  }
  const take = async (key: string, count: number) =>
    t.equal((await server.inject({ url: `/api/segment/get/${key}?count=${count}`, headers: AUTH })).statusCode, 200)
  const sampled = (key: string) => async () => ((await get('/api/cache')).body.find((v) => v.key === key)?.idsPerSecond ?? 0) > 0
  // A first ID each, for the generator's rate sample (once a second) to count from; then the
  // busiest the most: 'busy' 600 IDs, 'order' 300, '42' 5; '7' never asked for.
  for (const key of ['busy', 'order', '42']) await take(key, 1)
  t.ok(await until(async () => { await take('42', 1); return await sampled('42')() }, 5000, 100), 'a rate sample counted the first IDs')
  for (const [key, count] of [['busy', 600], ['order', 300], ['42', 5]] as const) await take(key, count)
  const generator = server.leaf.segment?.generator as SegmentGenerator
  const bulkAt = performance.now()
  t.ok(await until(() => generator.ratesAgeMs() < performance.now() - bulkAt, 5000, 50), 'a rate sample since')
  const all = (await get('/api/cache')).body
  t.ok(Array.isArray(all), 'an array')
  t.same(all.map((v) => v.key), ['busy', 'order', '42', '7', 'leaf-segment-test'], `busiest first, then those never loaded by name: ${all.map((v) => `${v.key} ${v.idsPerSecond}`).join(', ')}`)
  for (let i = 1; i < 3; i++) t.ok((all[i - 1]?.idsPerSecond ?? 0) >= (all[i]?.idsPerSecond ?? 0), `${all[i - 1]?.key} at least as busy as ${all[i]?.key}`)
  const walked: string[] = []
  let url: string | undefined = '/api/cache?limit=2'
  while (url !== undefined) {
    const page = await get(url)
    walked.push(...page.body.map((v) => v.key))
    url = /^<([^>]+)>; rel="next"$/.exec(String(page.link ?? ''))?.[1]
  }
  t.same(walked, all.map((v) => v.key), 'pages of 2 by the Link header give the same order, each tag once')
})

t.test('/api/cache and /cache show a page of the tags, the busiest first: ?limit=, ?cursor= from the Link header, ?search=; a tag never asked for is a line', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  const names = Array.from({ length: 120 }, (_, i) => `t${String(i).padStart(3, '0')}`)
  for (const key of names) {
    t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: { key, step: 1000 } })).statusCode, 201)
  }
  // Three tags asked for, one batch each.
  for (const [key, count] of [['t050', 600], ['t007', 300], ['t099', 5]] as const) {
    t.equal((await server.inject({ url: `/api/segment/get/${key}?count=${count}`, headers: AUTH })).statusCode, 200)
  }
  const get = (url: string) => server.inject({ url, headers: AUTH })
  const first = await get('/api/cache?limit=4')
  t.equal(first.statusCode, 200)
  t.equal(first.headers['x-total-count'], '122', '120 tags made, and the two of the test table')
  const top = first.json() as { key: string, idsPerSecond: number, initOk: boolean }[]
  t.same(top.slice(0, 3).map((v) => v.key).sort(), ['t007', 't050', 't099'], 'the tags asked for first')
  t.same(top.slice(0, 3).map((v) => v.idsPerSecond), top.slice(0, 3).map((v) => v.idsPerSecond).sort((a, b) => b - a), `by their rates: ${top.map((v) => `${v.key} ${v.idsPerSecond}`).join(', ')}`)
  t.match(top[3], { key: 'leaf-segment-test', initOk: false }, 'then the never-loaded, by name')
  t.equal(first.headers.link, '</api/cache?limit=4&cursor=4>; rel="next"')
  const seen = new Set<string>()
  let url: string | undefined = '/api/cache?limit=50'
  let pages = 0
  while (url !== undefined) {
    const res = await get(url)
    for (const { key } of res.json() as { key: string }[]) {
      t.notOk(seen.has(key), `${key} once`)
      seen.add(key)
    }
    url = /^<([^>]+)>; rel="next"$/.exec(String(res.headers.link ?? ''))?.[1]
    pages++
  }
  t.equal(pages, 3, '122 tags in pages of 50')
  t.equal(seen.size, 122, 'the walk by Link headers meets every tag once')
  t.equal(((await get('/api/cache')).json() as unknown[]).length, 100, 'a hundred by default')
  const found = await get('/api/cache?search=T09')
  t.same((found.json() as { key: string }[]).map((v) => v.key), ['t099', 't090', 't091', 't092', 't093', 't094', 't095', 't096', 't097', 't098'], 'any case; the one loaded first')
  t.equal(found.headers['x-total-count'], '10')
  t.equal(found.headers.link, undefined, 'no next page')
  for (const bad of ['limit=0', 'limit=1001', 'limit=x', 'cursor=-1', 'cursor=1e3', 'limit=5&limit=6', `search=${'a'.repeat(129)}`]) {
    const res = await get(`/api/cache?${bad}`)
    t.equal(res.statusCode, 400, bad)
    t.match(res.json(), { error: 'BAD_REQUEST', message: /^(limit|cursor|search) / }, bad)
  }

  const html = (await get('/cache')).body
  t.match(html, /122 tags · 1–50 shown, the busiest first, tags never asked for last · <a href="\/cache\?cursor=50">next 50 →<\/a>/)
  t.equal((html.match(/<section class="card tag"/g) ?? []).length, 3, 'a card for each tag asked for')
  t.equal((html.match(/<li data-key=/g) ?? []).length, 47, 'a line for each of the rest of the page')
  t.ok(html.indexOf('<li data-key="leaf-segment-test"') > html.lastIndexOf('<section class="card tag"'), 'the lines after the cards')
  const last = (await get('/cache?cursor=100')).body
  t.match(last, /1(01)–122 shown/)
  t.match(last, /<a href="\/cache\?cursor=50">← busier<\/a>/)
  t.notMatch(last, /next \d+ →/)
  const search = (await get('/cache?search=%3Cb%3E')).body
  t.match(search, /0 of 122 tags matching “&lt;b&gt;” · none shown/, 'the search echoed, escaped')
  t.match(search, /<input type="search" name="search" value="&lt;b&gt;"/)
  t.equal((await get('/cache?limit=0')).statusCode, 400)
  const wide = (await get('/cache?limit=100&cursor=20')).body
  t.match(wide, /21–120 shown/)
  t.match(wide, /<a href="\/cache\?limit=100">← busier<\/a> · <a href="\/cache\?cursor=120&amp;limit=100">next 2 →<\/a>/, 'the links keep the page size asked for')
})

t.test('/healthz and /readyz', async (t) => {
  const server = await app()
  t.same((await server.inject('/healthz')).json(), { status: 'ok' })
  const ready = await server.inject('/readyz')
  t.equal(ready.statusCode, 200)
  t.same(ready.json(), { status: 'ready', modes: { segment: { ready: true }, snowflake: { ready: true } } })
  t.equal(valueOf((await scrape(server)).samples, 'leaf_ready'), 1, 'leaf_ready 1 while /readyz is 200')
  t.equal((await server.inject('/readyz?mode=segment')).statusCode, 200)
  const unknown = await server.inject('/readyz?mode=segmnt')
  t.equal(unknown.statusCode, 400, 'a mode that is none: refused by the route\'s schema')
  t.same(unknown.json(), { error: 'BAD_REQUEST', message: 'mode must be segment or snowflake; got "segmnt".' })
  t.equal((await server.inject('/readyz?mode=segment&mode=snowflake')).json().message, 'mode is given more than once: give one.')
})

t.test('/readyz: a database down with nothing buffered is 503, saying which mode and why; leaf_ready 0', async (t) => {
  const server = await app({ 'leaf.jdbc.url': 'mysql://leaf:leaf@127.0.0.1:1/leaf', 'leaf.jdbc.connect-timeout-ms': 300 })
  const started = Date.now()
  const res = await server.inject('/readyz')
  t.ok(Date.now() - started < 1500, 'answers within the one-second bound')
  t.equal(res.statusCode, 503)
  t.same(res.json(), {
    status: 'not ready',
    modes: { segment: { ready: false, reason: 'database unreachable: ECONNREFUSED (connection refused); the tag list is not loaded yet' }, snowflake: { ready: true } },
  })
  t.notMatch(res.body, /127\.0\.0\.1/, 'the cause\'s code, not the driver\'s message with its address')
  t.equal(valueOf((await scrape(server)).samples, 'leaf_ready'), 0, 'leaf_ready 0 while /readyz is 503')
  t.equal((await server.inject('/api/segment/get/order')).json().error, 'NOT_READY')
  t.equal((await server.inject('/api/db')).json().error, 'STORE_UNAVAILABLE')
})

t.test('no mode enabled: a warning naming the keys at start, /readyz 503 "no mode enabled", leaf_ready 0', async (t) => {
  const lines: { level: number, msg: string, keys?: string[] }[] = []
  const logger = pino({ level: 'info' }, new Writable({
    write (chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as (typeof lines)[number])
      done()
    },
  }))
  const server = await buildApp(testConfig(), { logger })
  t.teardown(() => server.close())
  const warning = lines.find((l) => l.level === 40 && /no mode enabled/.test(l.msg))
  t.match(warning, { keys: ['leaf.segment.enable', 'leaf.snowflake.enable'], msg: /leaf\.segment\.enable=true and\/or leaf\.snowflake\.enable=true/ })
  const res = await server.inject('/readyz')
  t.equal(res.statusCode, 503)
  t.same(res.json(), { status: 'not ready', reason: 'no mode enabled', modes: {} })
  t.equal(valueOf((await scrape(server)).samples, 'leaf_ready'), 0)
  t.equal((await server.inject('/api/segment/get/order')).json().error, 'MODE_DISABLED')
})

const VIEWS = ['/cache', '/db', '/api/cache', '/api/db', '/api/snowflake/status']
// Separate challenges, one header line each: a browser prompts for the Basic one.
const CHALLENGES = ['Basic realm="leaf-ts", charset="UTF-8"', 'Bearer realm="leaf-ts"']
const basic = (user: string, password: string) => ({ authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` })

t.test('the token guards the views: missing, wrong, right', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  for (const url of VIEWS) {
    const missing = await server.inject(url)
    t.equal(missing.statusCode, 401, `${url} without a token`)
    t.same(missing.json(), { error: 'UNAUTHORIZED', message: 'This route needs a token: Authorization: Bearer <token>, or Basic with the token as the password.' })
    t.same(missing.headers['www-authenticate'], CHALLENGES)
    t.equal((await server.inject({ url, headers: { authorization: `Bearer ${TOKEN}x` } })).statusCode, 401, `${url} wrong token`)
    t.equal((await server.inject({ url, headers: { authorization: TOKEN } })).statusCode, 401, `${url} not a bearer`)
    t.equal((await server.inject({ url, headers: AUTH })).statusCode, 200, `${url} right token`)
  }
  t.equal((await server.inject('/api/segment/get/order')).statusCode, 200, 'ID routes stay open')
  t.equal((await server.inject('/metrics')).statusCode, 200, 'metrics stay open')
})

t.test('HTTP Basic, as a browser\'s login prompt sends it: the token as the password, any user name', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  for (const url of VIEWS) {
    for (const user of ['admin', '', 'someone else']) {
      t.equal((await server.inject({ url, headers: basic(user, TOKEN) })).statusCode, 200, `${url} Basic as "${user}"`)
    }
    t.equal((await server.inject({ url, headers: AUTH })).statusCode, 200, `${url} Bearer still`)
    const wrong = await server.inject({ url, headers: basic('admin', `${TOKEN}x`) })
    t.equal(wrong.statusCode, 401, `${url} Basic, wrong password`)
    t.equal(wrong.json().error, 'INVALID_TOKEN', 'a wrong token is told apart from none')
    t.same(wrong.headers['www-authenticate'], [CHALLENGES[0], 'Bearer realm="leaf-ts", error="invalid_token"'], 'the browser asks again; RFC 6750 names the error')
    t.equal((await server.inject({ url, headers: basic(TOKEN, 'x') })).statusCode, 401, `${url} the token as the user name is not the password`)
    for (const authorization of ['Basic', 'Basic %%%%', 'Basic Zm9v', `Basic ${Buffer.from(`admin${TOKEN}`).toString('base64')}`, 'Basic /w==', `Basic ${Buffer.from(`a:${TOKEN}`).toString('base64')}x`]) {
      const malformed = await server.inject({ url, headers: { authorization } })
      t.equal(malformed.statusCode, 401, `${url} malformed: ${authorization.slice(0, 40)}`)
      t.equal(malformed.json().error, 'UNAUTHORIZED', 'in the JSON shape, no stack')
      t.same(malformed.headers['www-authenticate'], CHALLENGES)
    }
  }
  const created = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: basic('admin', TOKEN), payload: { key: 'by-basic', step: 10 } })
  t.equal(created.statusCode, 201, 'tag management takes Basic too')
  t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', headers: basic('admin', 'nope'), payload: { key: 'x', step: 10 } })).statusCode, 401)
})

t.test('the view token opens the views, never tag management (403 FORBIDDEN); the admin token opens both', async (t) => {
  const VIEW = 'viewer-token-8910'
  const server = await app({ 'leaf.admin.token': TOKEN, 'leaf.admin.view-token': VIEW })
  for (const url of VIEWS) {
    t.equal((await server.inject({ url, headers: { authorization: `Bearer ${VIEW}` } })).statusCode, 200, `${url} view token, Bearer`)
    t.equal((await server.inject({ url, headers: basic('viewer', VIEW) })).statusCode, 200, `${url} view token, Basic`)
    t.equal((await server.inject({ url, headers: AUTH })).statusCode, 200, `${url} admin token`)
    t.equal((await server.inject(url)).statusCode, 401, `${url} no token`)
  }
  const forbidden = { error: 'FORBIDDEN', message: 'The view token opens the views only: tag management needs leaf.admin.token.' }
  for (const headers of [{ authorization: `Bearer ${VIEW}` }, basic('viewer', VIEW)]) {
    const post = await server.inject({ method: 'POST', url: '/api/segment/tags', headers, payload: { key: 'viewed', step: 10 } })
    t.equal(post.statusCode, 403, `POST with the view token (${headers.authorization.split(' ')[0]})`)
    t.same(post.json(), forbidden)
    t.equal(post.headers['www-authenticate'], undefined, 'a 403 asks for no other login')
    const patch = await server.inject({ method: 'PATCH', url: '/api/segment/tags/order', headers, payload: { step: 7 } })
    t.equal(patch.statusCode, 403, 'PATCH with the view token')
    t.same(patch.json(), forbidden)
  }
  const rows = (await server.inject({ url: '/api/db', headers: AUTH })).json() as { key: string, step: number }[]
  t.notOk(rows.some((r) => r.key === 'viewed'), 'nothing created')
  t.match(rows.find((r) => r.key === 'order'), { step: 2000 }, 'nothing changed')
  t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: { key: 'managed', step: 10 } })).statusCode, 201, 'the admin token creates')
  t.equal((await server.inject({ method: 'PATCH', url: '/api/segment/tags/managed', headers: AUTH, payload: { step: 7 } })).statusCode, 200, 'and changes')
  t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', payload: { key: 'x', step: 10 } })).statusCode, 401, 'no token: 401')
})

t.test('the view token set alone guards the views; tag management does not exist', async (t) => {
  const VIEW = 'viewer-token-8910'
  const server = await app({ 'leaf.admin.view-token': VIEW })
  for (const url of VIEWS) {
    t.equal((await server.inject(url)).statusCode, 401, `${url} no token`)
    t.equal((await server.inject({ url, headers: basic('viewer', VIEW) })).statusCode, 200, `${url} view token`)
  }
  const post = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: basic('viewer', VIEW), payload: { key: 'x', step: 10 } })
  t.equal(post.statusCode, 404)
  t.equal(post.json().error, 'NOT_FOUND')
})

t.test('the start log says which guards are on, and never a token', async (t) => {
  const VIEW = 'viewer-token-8910'
  const started = async (values: Record<string, string>) => {
    const lines: string[] = []
    const logger = pino({ level: 'info' }, new Writable({
      write (chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString('utf8'))
        done()
      },
    }))
    const server = await buildApp(testConfig({ 'leaf.segment.enable': true, ...values }), { logger })
    await server.close()
    t.notOk(lines.some((l) => l.includes(TOKEN) || l.includes(VIEW)), 'no token in the log')
    return lines.map((l) => (JSON.parse(l) as { msg: string }).msg).filter((m) => m.startsWith('leaf.admin.'))
  }
  t.same(await started({}), ['leaf.admin.token and leaf.admin.view-token are not set: /cache, /db and the /api views are open, tag management is off'])
  t.same(await started({ 'leaf.admin.token': TOKEN }), ['leaf.admin.token is set: /cache, /db and the /api views need it, tag management is on'])
  t.same(await started({ 'leaf.admin.view-token': VIEW }), ['leaf.admin.view-token is set, leaf.admin.token is not: /cache, /db and the /api views need the view token, tag management is off'])
  t.same(await started({ 'leaf.admin.token': TOKEN, 'leaf.admin.view-token': VIEW }), ['leaf.admin.token and leaf.admin.view-token are set: /cache, /db and the /api views need either, tag management is on for leaf.admin.token alone'])
})

t.test('without a token the views are open and management does not exist', async (t) => {
  const server = await app()
  t.equal((await server.inject('/api/cache')).statusCode, 200)
  const post = await server.inject({ method: 'POST', url: '/api/segment/tags', payload: { key: 'x', step: 10 } })
  t.equal(post.statusCode, 404)
  t.equal(post.json().error, 'NOT_FOUND')
  t.equal((await server.inject({ method: 'PATCH', url: '/api/segment/tags/order', payload: { step: 10 } })).statusCode, 404)
})

t.test('tag management: create serves at once, 409, 400s, patch, 404', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  const post = (payload: unknown, headers: Record<string, string> = AUTH) =>
    server.inject({ method: 'POST', url: '/api/segment/tags', headers, payload: payload as Record<string, unknown> })
  const created = await post({ key: 'invoice', step: 50, maxId: '9007199254740990', description: 'Invoices' })
  t.equal(created.statusCode, 201)
  t.match(created.json(), { key: 'invoice', maxId: '9007199254740990', step: 50, description: 'Invoices', updateTime: String })
  t.equal((await server.inject('/api/segment/get/invoice?count=3')).body, '9007199254740990\n9007199254740991\n9007199254740992\n', 'serves at once, exact past 2^53')
  t.equal((await post({ key: 'numeric', step: 5, maxId: 100 })).statusCode, 201, 'maxId as a JSON number')
  t.equal((await server.inject('/api/segment/get/numeric')).body, '100')

  const exists = await post({ key: 'invoice', step: 10 })
  t.equal(exists.statusCode, 409)
  t.equal(exists.json().error, 'KEY_EXISTS')

  const bad: [unknown, string][] = [
    [{ step: 10 }, 'INVALID_KEY'],
    [{ key: '', step: 10 }, 'INVALID_KEY'],
    [{ key: 'k'.repeat(129), step: 10 }, 'INVALID_KEY'],
    [{ key: 'a' }, 'INVALID_BODY'],
    [{ key: 'a', step: 0 }, 'INVALID_BODY'],
    [{ key: 'a', step: 1.5 }, 'INVALID_BODY'],
    [{ key: 'a', step: 1_000_001 }, 'INVALID_BODY'],
    [{ key: 'a', step: '10' }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, maxId: -1 }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, maxId: '-1' }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, maxId: 2 ** 53 }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, maxId: '9223372036854775808' }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, maxId: '1e5' }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, description: 5 }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, description: 'd'.repeat(257) }, 'INVALID_BODY'],
    [{ key: 'a', step: 10, stpe: 1 }, 'INVALID_BODY'],
    [[1, 2], 'INVALID_BODY'],
  ]
  for (const [payload, code] of bad) {
    const res = await post(payload)
    t.equal(res.statusCode, 400, `${JSON.stringify(payload).slice(0, 60)} -> 400`)
    t.equal(res.json().error, code)
  }
  const notJson = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { ...AUTH, 'content-type': 'application/json' }, payload: '{"key":' })
  t.equal(notJson.statusCode, 400)
  t.equal(notJson.json().error, 'BAD_REQUEST')
  for (const type of ['application/xml', 'text/plain']) {
    const other = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { ...AUTH, 'content-type': type }, payload: '<x/>' })
    t.equal(other.statusCode, 415, `${type} -> 415`)
    t.equal(other.json().error, 'UNSUPPORTED_MEDIA_TYPE')
  }
  const huge = await post({ key: 'a', step: 10, description: 'x'.repeat(20_000) })
  t.equal(huge.statusCode, 413)
  t.equal(huge.json().error, 'PAYLOAD_TOO_LARGE')
  t.equal((await post({ key: 'a', step: 10 }, {})).statusCode, 401, 'management needs the token too')

  const before = (await server.inject({ url: '/api/db', headers: AUTH })).json().find((r: { key: string }) => r.key === 'invoice')
  const patched = await server.inject({ method: 'PATCH', url: '/api/segment/tags/invoice', headers: AUTH, payload: { step: 7, description: null } })
  t.equal(patched.statusCode, 200)
  t.match(patched.json(), { key: 'invoice', step: 7, description: null, maxId: before.maxId })
  t.equal((await server.inject({ method: 'PATCH', url: '/api/segment/tags/nope', headers: AUTH, payload: { step: 7 } })).json().error, 'KEY_NOT_FOUND')
  t.equal((await server.inject({ method: 'PATCH', url: '/api/segment/tags/invoice', headers: AUTH, payload: {} })).json().error, 'INVALID_BODY')
  const next = BigInt(batchLines((await server.inject('/api/segment/get/invoice?count=100')).body).at(-1) as string)
  t.ok(next > 9007199254740992n, 'max_id never moved backwards: IDs go on increasing')
})

t.test('tag management says what to fix: the field and the value given, the content type to send', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  const post = async (payload: unknown) => (await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: payload as Record<string, unknown> })).json()
  const patch = async (key: string, payload: unknown) => (await server.inject({ method: 'PATCH', url: `/api/segment/tags/${key}`, headers: AUTH, payload: payload as Record<string, unknown> })).json()
  t.same(await post({ key: 'a', step: '10' }), { error: 'INVALID_BODY', message: 'step must be an integer from 1 to 1000000; got "10".' })
  t.same(await post({ key: 'a', step: 0 }), { error: 'INVALID_BODY', message: 'step must be an integer from 1 to 1000000; got 0.' })
  t.same(await post({ key: 'a' }), { error: 'INVALID_BODY', message: 'step is missing: give an integer from 1 to 1000000.' })
  t.same(await post({ step: 10 }), { error: 'INVALID_KEY', message: 'key is missing: give a tag name of 1 to 128 characters, without U+0000 (no store can hold it).' })
  t.same(await post({ key: 'k'.repeat(129), step: 10 }), { error: 'INVALID_KEY', message: `key must be a tag name of 1 to 128 characters, without U+0000 (no store can hold it); got "${'k'.repeat(40)}"... (129 characters).` })
  t.same(await post({ key: 'a', step: 10, maxId: '1e5' }), { error: 'INVALID_BODY', message: 'maxId must be a non-negative 64-bit integer: a decimal string, or a JSON number up to 2^53 - 1; got "1e5".' })
  t.same(await post({ key: 'a', step: 10, stpe: 1 }), { error: 'INVALID_BODY', message: 'Unknown field "stpe": the fields are key, step, maxId, description.' })
  t.same(await post([1, 2]), { error: 'INVALID_BODY', message: 'The request body must be a JSON object: {"key", "step", "maxId", "description"}.' })
  t.same(await patch('order', {}), { error: 'INVALID_BODY', message: 'The request body must be a JSON object with step and/or description.' })
  t.same(await patch('order', { description: 7 }), { error: 'INVALID_BODY', message: 'description must be a string of at most 256 characters, or null; got 7.' })
  t.same(await patch('k'.repeat(129), { step: 7 }), { error: 'INVALID_KEY', message: `key must be a tag name of 1 to 128 characters, without U+0000 (no store can hold it); got "${'k'.repeat(40)}"... (129 characters).` }, 'the key in the path, by the same schema')
  const text = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { ...AUTH, 'content-type': 'text/plain' }, payload: 'key=a' })
  t.equal(text.statusCode, 415)
  t.same(text.json(), { error: 'UNSUPPORTED_MEDIA_TYPE', message: 'The request body is text/plain; it must be JSON: send Content-Type: application/json.' })
  const none = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH })
  t.same(none.json(), { error: 'INVALID_BODY', message: 'The request body must be a JSON object: {"key", "step", "maxId", "description"}.' }, 'no body at all')
  t.equal((await post({ key: 'fine', step: 10 })).key, 'fine', 'and a good body still creates')
})

t.test('without leaf.admin.token the management routes are absent, and their 404 names the key to set', async (t) => {
  for (const values of [{}, { 'leaf.admin.view-token': 'viewer-token-8910' }] as Record<string, string>[]) {
    const server = await app(values)
    const hint = (method: string, url: string) => ({ error: 'NOT_FOUND', message: `No route ${method} ${url}: tag management is off on this instance; set leaf.admin.token to turn it on (docs/operations.md#tag-management).` })
    const post = await server.inject({ method: 'POST', url: '/api/segment/tags', payload: { key: 'x', step: 10 } })
    t.equal(post.statusCode, 404)
    t.same(post.json(), hint('POST', '/api/segment/tags'))
    const patch = await server.inject({ method: 'PATCH', url: '/api/segment/tags/order', payload: { step: 10 } })
    t.same(patch.json(), hint('PATCH', '/api/segment/tags/order'))
    t.same((await server.inject('/api/segment/tags')).json(), { error: 'NOT_FOUND', message: 'No route GET /api/segment/tags.' }, 'a route that never exists: the plain 404')
  }
})

t.test('tag management refuses a maxId and step whose next segment would pass 2^63 - 1, naming the field', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  const post = (payload: Record<string, unknown>) => server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload })
  const patch = (key: string, payload: Record<string, unknown>) => server.inject({ method: 'PATCH', url: `/api/segment/tags/${key}`, headers: AUTH, payload })
  const MAX = 2n ** 63n - 1n

  const over = await post({ key: 'end', step: 10, maxId: String(MAX - 9n) })
  t.equal(over.statusCode, 400)
  t.same(over.json(), { error: 'INVALID_BODY', message: `maxId: maxId ${MAX - 9n} + step 10 passes 2^63 - 1 (${MAX}): the next segment would pass the largest 64-bit ID.` })
  t.equal((await post({ key: 'end', step: 1, maxId: String(MAX) })).json().error, 'INVALID_BODY', 'maxId 2^63 - 1 itself: no segment fits')
  t.equal((await server.inject({ url: '/api/db', headers: AUTH })).json().some((r: { key: string }) => r.key === 'end'), false, 'nothing inserted')

  const fits = await post({ key: 'end', step: 10, maxId: String(MAX - 10n) })
  t.equal(fits.statusCode, 201, 'maxId + step = 2^63 - 1 fits: the row ends at the largest BIGINT')
  t.same(batchLines((await server.inject('/api/segment/get/end?count=10')).body).map(BigInt).at(-1), MAX - 1n, 'its last ID is 2^63 - 2')

  t.equal((await post({ key: 'near', step: 5, maxId: String(MAX - 1000n) })).statusCode, 201)
  const widened = await patch('near', { step: 1001 })
  t.equal(widened.statusCode, 400)
  t.same(widened.json(), { error: 'INVALID_BODY', message: `step: maxId ${MAX - 1000n} + step 1001 passes 2^63 - 1 (${MAX}): the next segment would pass the largest 64-bit ID.` }, 'PATCH reads max_id from the row')
  t.match((await server.inject({ url: '/api/db', headers: AUTH })).json().find((r: { key: string }) => r.key === 'near'), { step: 5 }, 'the step is unchanged')
  t.equal((await patch('near', { step: 1000 })).statusCode, 200, 'a step that still fits')
  t.equal((await patch('near', { description: 'only the description' })).statusCode, 200, 'no step: nothing to check')
  t.equal((await patch('nope', { step: 1000 })).json().error, 'KEY_NOT_FOUND')
})

t.test('the pages escape tags with <, & and quotes', async (t) => {
  const server = await app({ 'leaf.admin.token': TOKEN })
  const evil = '<img src=x onerror="alert(1)">&\'"'
  t.equal((await server.inject({ method: 'POST', url: '/api/segment/tags', headers: AUTH, payload: { key: evil, step: 10, description: '<script>x</script>' } })).statusCode, 201)
  await server.inject(`/api/segment/get/${encodeURIComponent(evil)}`)
  for (const url of ['/cache', '/db']) {
    const res = await server.inject({ url, headers: AUTH })
    t.equal(res.statusCode, 200)
    t.match(res.headers['content-type'], /^text\/html/)
    t.notMatch(res.body, /<img|<script>x/, `${url}: nothing from the data becomes markup`)
    t.match(res.body, /&lt;img src=x onerror=&quot;alert\(1\)&quot;&gt;&amp;&#39;&quot;/)
  }
})
