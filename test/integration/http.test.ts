import t from 'tap'
import { buildApp } from '../../src/app.js'
import { formatLocal } from '../../src/http/decode-routes.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { batchLines } from '../helpers/ids.js'

async function app (values: Record<string, string | number | boolean> = { 'leaf.segment.enable': true }) {
  const instance = await buildApp(testConfig(values), { logger: silentLogger })
  t.teardown(() => instance.close())
  return instance
}

t.test('GET /api/segment/get/:key answers the ID as plain text', async (t) => {
  const server = await app()
  const first = await server.inject('/api/segment/get/order')
  t.equal(first.statusCode, 200)
  t.match(first.headers['content-type'], /^text\/plain/)
  t.equal(first.body, '1')
  t.equal((await server.inject('/api/segment/get/order')).body, '2')
  t.equal((await server.inject('/api/segment/get/leaf-segment-test')).body, '1')
})

t.test('?count=N answers N increasing IDs, one per line', async (t) => {
  const server = await app()
  const res = await server.inject('/api/segment/get/order?count=5000')
  t.equal(res.statusCode, 200)
  const ids = batchLines(res.body).map(BigInt)
  t.equal(ids.length, 5000, 'crosses into further segments (step 2000)')
  t.ok(ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint)))
  t.equal(ids[0], 1n)
})

t.test('a text batch ends with a newline, so every line is an ID; a single ID is the bare decimal', async (t) => {
  const server = await app({ 'leaf.segment.enable': true, 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir() })
  t.equal((await server.inject('/api/segment/get/order')).body, '1', 'single: Leaf\'s contract, no newline')
  t.equal((await server.inject('/api/segment/get/order?count=3')).body, '2\n3\n4\n')
  t.equal((await server.inject('/api/segment/get/order?count=1')).body, '5\n', 'a batch of one is a line too')
  const snowflake = (await server.inject('/api/snowflake/get/k?count=7')).body
  t.equal(snowflake.match(/\n/g)?.length, 7, 'as wc -l counts: 7 lines for 7 IDs')
  t.match(snowflake, /^([0-9]+\n){7}$/)
  t.notMatch((await server.inject('/api/snowflake/get/k')).body, /\n/, 'single snowflake ID: no newline')
  t.same((await server.inject({ url: '/api/segment/get/order?count=2', headers: { accept: 'application/vnd.leaf-ts+json' } })).json(), { ids: ['6', '7'] }, 'JSON with the opt-in')
  const json = await server.inject({ url: '/api/segment/get/order?count=2', headers: { accept: 'application/json' } })
  t.equal(json.body, '8\n9\n', 'a batch is lines whatever Accept names, but the opt-in')
  t.equal(json.headers['content-type'], 'text/plain; charset=utf-8')
})

t.test('Accept: application/json answers the bare digits, as leaf-server; application/vnd.leaf-ts+json answers {"id"} or {"ids"} with string IDs', async (t) => {
  const server = await app()
  const bare = await server.inject({ url: '/api/segment/get/order', headers: { accept: 'application/json' } })
  t.equal(bare.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(bare.body, '1')
  const one = await server.inject({ url: '/api/segment/get/order', headers: { accept: 'application/vnd.leaf-ts+json' } })
  t.equal(one.headers['content-type'], 'application/vnd.leaf-ts+json; charset=utf-8')
  t.same(one.json(), { id: '2' })
  const many = await server.inject({ url: '/api/segment/get/order?count=3', headers: { accept: 'application/vnd.leaf-ts+json' } })
  t.same(many.json(), { ids: ['3', '4', '5'] })
})

t.test('a key with a NUL character: 400 INVALID_KEY, on the ID routes and in tag creation', async (t) => {
  const server = await app({ 'leaf.segment.enable': true, 'leaf.admin.token': 'a-token-long-enough-0123456789' })
  const id = await server.inject('/api/segment/get/a%00b')
  t.equal(id.statusCode, 400)
  t.equal(id.json().error, 'INVALID_KEY')
  t.match(id.json().message, /NUL character \(U\+0000\)/)
  const created = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { authorization: 'Bearer a-token-long-enough-0123456789' }, payload: { key: 'a\u0000b', step: 10 } })
  t.equal(created.statusCode, 400)
  t.equal(created.json().error, 'INVALID_KEY')
})

t.test('count that is not an integer is echoed in the message', async (t) => {
  const server = await app()
  const res = await server.inject('/api/segment/get/order?count=abc')
  t.same(res.json(), { error: 'INVALID_COUNT', message: 'count "abc" is not an integer from 1 to 10000.' })
  t.match((await server.inject('/api/segment/get/order?count=1&count=2')).json(), { error: 'INVALID_COUNT', message: /given 2 times/ })
})

t.test('a disabled mode answers 503 MODE_DISABLED, never ID 0', async (t) => {
  const server = await app({ 'leaf.segment.enable': false })
  for (const mode of ['segment', 'snowflake']) {
    const res = await server.inject(`/api/${mode}/get/order`)
    t.equal(res.statusCode, 503)
    t.same(res.json(), { error: 'MODE_DISABLED', message: `${mode} mode is disabled on this instance.` })
  }
})

t.test('bad input gets its documented status and JSON body, and the server stays up', async (t) => {
  const server = await app()
  const cases: [string, number, string][] = [
    ['/api/segment/get/', 400, 'INVALID_KEY'],
    [`/api/segment/get/${'k'.repeat(129)}`, 400, 'INVALID_KEY'],
    [`/api/segment/get/${'k'.repeat(4096)}`, 400, 'INVALID_KEY'],
    [`/api/segment/get/${'é'.repeat(128)}`, 404, 'KEY_NOT_FOUND'],
    [`/api/segment/get/${encodeURIComponent('😀'.repeat(128))}`, 404, 'KEY_NOT_FOUND'],
    [`/api/segment/get/${encodeURIComponent('😀'.repeat(129))}`, 400, 'INVALID_KEY'],
    ['/api/segment/get/a/b', 404, 'NOT_FOUND'],
    ['/api/segment/get/a%2Fb', 404, 'KEY_NOT_FOUND'],
    ['/api/segment/get/%00', 400, 'INVALID_KEY'], // PostgreSQL cannot store U+0000: no store takes it
    ['/api/segment/get/%zz', 400, 'BAD_REQUEST'],
    ['/api/segment/get/..', 404, 'NOT_FOUND'], // URL parsing resolves it to /api/segment/
    [`/api/segment/get/${encodeURIComponent("o' OR '1'='1")}`, 404, 'KEY_NOT_FOUND'],
    [`/api/segment/get/${encodeURIComponent('order"; DROP TABLE leaf_alloc; --')}`, 404, 'KEY_NOT_FOUND'],
    ['/api/segment/get/order?count=0', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=-1', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=1.5', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=10001', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=abc', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=1&count=2', 400, 'INVALID_COUNT'],
    ['/api/segment/get/order?count=99999999999999999999', 400, 'INVALID_COUNT'],
    ['/no/such/route', 404, 'NOT_FOUND'],
  ]
  for (const [url, status, code] of cases) {
    const res = await server.inject(url)
    t.equal(res.statusCode, status, `${url.slice(0, 60)} -> ${status}`)
    t.match(res.headers['content-type'], /^application\/json/)
    const body = res.json()
    t.equal(body.error, code, `${url.slice(0, 60)} -> ${code}`)
    t.type(body.message, 'string')
    t.notMatch(res.body, /at .*\.(js|ts):\d+/, 'no stack trace')
  }
  const put = await server.inject({ method: 'PUT', url: '/api/segment/get/order' })
  t.equal(put.statusCode, 404, 'PUT: no route (POST is served, as leaf-server serves it)')
  t.equal(put.json().error, 'NOT_FOUND')
  t.equal(batchLines((await server.inject('/api/segment/get/order?count=10000')).body).length, 10000, 'count at the maximum is fine')
  t.equal((await server.inject('/api/segment/get/order')).statusCode, 200, 'still serving')
})

t.test('snowflake: the same contract as segment; any valid key', async (t) => {
  const server = await app({ 'leaf.snowflake.enable': true, 'leaf.snowflake.worker.id': 5, 'leaf.snowflake.cache.dir': tempDir() })
  const res = await server.inject('/api/snowflake/get/anything')
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain/)
  t.match(res.body, /^\d{18,19}$/)
  const json = await server.inject({ url: '/api/snowflake/get/x?count=3', headers: { accept: 'application/vnd.leaf-ts+json' } })
  t.equal(json.json().ids.length, 3)
  t.equal((await server.inject(`/api/snowflake/get/${'k'.repeat(129)}`)).json().error, 'INVALID_KEY')
  t.equal((await server.inject('/api/snowflake/get/x?count=0')).json().error, 'INVALID_COUNT')
  t.equal((await server.inject('/api/segment/get/order')).json().error, 'MODE_DISABLED')
})

t.test('decode routes: Leaf\'s strings in the server\'s zone, and the JSON form', async (t) => {
  const server = await app({ 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir() })
  // Leaf's README example: worker 39, sequence 3448 at 1567733700834.
  const id = ((1567733700834n - 1288834974657n) << 22n) | (39n << 12n) | 3448n
  const leaf = await server.inject(`/decodeSnowflakeId?snowflakeId=${id}`)
  t.equal(leaf.statusCode, 200)
  t.same(leaf.json(), { timestamp: `1567733700834(${formatLocal(1567733700834)})`, sequenceId: '3448', workerId: '39' })
  t.match(formatLocal(1567733700834), /^2019-09-0[56] \d\d:\d\d:00\.834$/)
  const ours = await server.inject(`/api/snowflake/decode/${id}`)
  t.same(ours.json(), {
    id: String(id),
    layout: 'leaf',
    timestamp: 1567733700834,
    time: '2019-09-06T01:35:00.834Z',
    workerId: 39,
    sequence: 3448,
    // 1567733700834 - 1288834974657 = 278898726177 ms since twepoch
    fields: { time: 278898726177, worker: 39, sequence: 3448 },
  })
  for (const bad of ['abc', '', '1.5', '9223372036854775808', '99999999999999999999', '0x10']) {
    const a = await server.inject(`/decodeSnowflakeId?snowflakeId=${encodeURIComponent(bad)}`)
    t.equal(a.statusCode, 400, `decodeSnowflakeId ${bad || '(empty)'} -> 400`)
    t.match(a.json(), { error: 'INVALID_ID', errorMsg: String })
    if (bad !== '') t.equal((await server.inject(`/api/snowflake/decode/${encodeURIComponent(bad)}`)).statusCode, 400)
  }
  t.equal((await server.inject('/decodeSnowflakeId')).statusCode, 400, 'missing parameter')
})

t.test('a decode with no ID names the missing parameter, still as INVALID_ID', async (t) => {
  const server = await app({ 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir() })
  const query = 'snowflakeId is missing: give the ID to decode as ?snowflakeId=N.'
  const path = 'id is missing: give the ID to decode in the path, /api/snowflake/decode/:id.'
  for (const [url, message] of [
    ['/decodeSnowflakeId', query],
    ['/decodeSnowflakeId?other=1', query],
    ['/api/snowflake/decode', path],
    ['/api/snowflake/decode?snowflakeId=1', path],
  ] as const) {
    const a = await server.inject(url)
    t.equal(a.statusCode, 400, `${url} -> 400`)
    t.same(a.json(), { error: 'INVALID_ID', message }, `${url}: leaf-server has no errorMsg for a missing parameter either (Spring's 400)`)
  }
  const empty = await server.inject('/api/snowflake/decode/')
  t.same(empty.json(), { error: 'INVALID_ID', message: 'id is empty: give a decimal signed 64-bit integer, the ID to decode in the path: /api/snowflake/decode/:id.' })
  t.equal((await server.inject('/api/snowflake/decode/9223372036854775807')).statusCode, 200, 'the largest int64 decodes')
  const past = await server.inject('/api/snowflake/decode/9223372036854775808')
  t.same(past.json(), { error: 'INVALID_ID', message: 'id 9223372036854775808 is outside the signed 64-bit range (-9223372036854775808 to 9223372036854775807).' })
  const word = await server.inject('/api/snowflake/decode/abc')
  t.same(word.json(), { error: 'INVALID_ID', message: 'id must be a decimal signed 64-bit integer, the ID to decode in the path: /api/snowflake/decode/:id; got "abc".' }, 'the schema names the field and the value')
})

t.test('/decodeSnowflakeId answers every value as leaf-server does: Java\'s signed arithmetic, Long.parseLong\'s refusals', async (t) => {
  const server = await app({ 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir() })
  const decode = async (value: string) => (await server.inject(`/decodeSnowflakeId?snowflakeId=${encodeURIComponent(value)}`)).json()
  const leaf = (timestamp: number, workerId: number, sequenceId: number) => ({ timestamp: `${timestamp}(${formatLocal(timestamp)})`, sequenceId: String(sequenceId), workerId: String(workerId) })
  // Java: (id >> 22) + twepoch, (id >> 12) ^ (id >> 22 << 10), id ^ (id >> 12 << 12) on a long.
  t.same(await decode('-1'), leaf(1288834974656, 1023, 4095), '-1: 1 ms before twepoch, as the Java issue measured')
  t.same(await decode('-9223372036854775808'), leaf(1288834974657 - 2 ** 41, 0, 0), 'Long.MIN_VALUE')
  t.same(await decode('9223372036854775807'), leaf(1288834974657 + 2 ** 41 - 1, 1023, 4095), 'Long.MAX_VALUE')
  t.same(await decode('-4194304'), leaf(1288834974656, 0, 0), '-2^22')
  t.same(await decode('+4198400'), leaf(1288834974658, 1, 0), 'a leading + (Long.parseLong takes it)')
  t.same(await decode('0000000000000000000000004198400'), leaf(1288834974658, 1, 0), 'leading zeros, past 19 digits')
  t.same(await decode('٤١٩٨٤٠٠'), leaf(1288834974658, 1, 0), 'Arabic-Indic digits: Character.digit reads any script\'s')
  t.same(await decode('４１９８４００'), leaf(1288834974658, 1, 0), 'fullwidth digits')

  for (const bad of ['abc', '', '1.5', '9223372036854775808', '-9223372036854775809', '99999999999999999999', '0x10', ' 1', '1 ', '-', '+', '--1', '1e3', '𝟏']) {
    const a = await server.inject(`/decodeSnowflakeId?snowflakeId=${encodeURIComponent(bad)}`)
    t.equal(a.statusCode, 400, `${JSON.stringify(bad)} -> 400`)
    t.match(a.json(), { error: 'INVALID_ID', message: /^snowflakeId /, errorMsg: 'snowflake Id反解析发生异常!' }, `${JSON.stringify(bad)}: Leaf's errorMsg, word for word`)
  }
  const repeated = await server.inject('/decodeSnowflakeId?snowflakeId=1&snowflakeId=2')
  t.match(repeated.json(), { error: 'INVALID_ID', message: 'snowflakeId "1,2" is not a decimal signed 64-bit integer (-9223372036854775808 to 9223372036854775807).', errorMsg: 'snowflake Id反解析发生异常!' }, 'Spring joins a repeated parameter with a comma')
  t.match((await server.inject('/decodeSnowflakeId?snowflakeId=')).json(), { message: 'snowflakeId is empty: give the ID to decode as ?snowflakeId=N.' })
  const metrics = (await server.inject('/metrics')).body
  t.match(metrics, /http_request_duration_seconds_count\{method="GET",route="\/decodeSnowflakeId",status_code="400"\} 16/, 'the refusals are timed and counted as any answer')
})

t.test('5xx answers are logged at error once per code per 30 s; MODE_DISABLED, the operator\'s choice, at debug only', async (t) => {
  const { logger, lines } = captureLogger()
  const token = 'log-test-token-0123'
  const server = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.admin.token': token }), { logger })
  t.teardown(() => server.close())
  const last = 2n ** 63n - 1n
  const created = await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { authorization: `Bearer ${token}` }, payload: { key: 'end', step: 10, maxId: String(last - 10n) } })
  t.equal(created.statusCode, 201)
  t.equal((await server.inject('/api/segment/get/end?count=10')).statusCode, 200, 'the last segment of the ID space')
  for (let i = 0; i < 50; i++) t.equal((await server.inject('/api/segment/get/end')).json().error, 'ID_SPACE_EXHAUSTED')
  // (The generator logs the end of the space once, itself; these are the answers' lines.)
  const errors = () => lines.filter((l) => l.level === 50 && l.error !== undefined)
  t.equal(errors().length, 1, '50 ID_SPACE_EXHAUSTED answers: one error line')
  t.match(errors()[0], { error: 'ID_SPACE_EXHAUSTED', url: '/api/segment/get/end' })

  for (let i = 0; i < 50; i++) t.equal((await server.inject(`/api/snowflake/get/k${i}`)).statusCode, 503)
  t.equal(errors().length, 1, '50 MODE_DISABLED answers: no error line')
  t.notOk(lines.some((l) => l.error === 'MODE_DISABLED' && (l.level as number) > 20), 'nor a warning')
  t.equal(lines.filter((l) => l.error === 'MODE_DISABLED' && l.level === 20).length, 50, 'one debug line each, for who looks')
})

t.test('HEAD on an ID route: 405 with Allow: GET, POST, and no ID is used up', async (t) => {
  const server = await app({ 'leaf.segment.enable': true, 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir() })
  for (const url of ['/api/segment/get/order', '/api/segment/get/order?count=5', '/api/snowflake/get/k', '/api/snowflake/get/k?count=5', '/api/segment/get/nope']) {
    const head = await server.inject({ method: 'HEAD', url })
    t.equal(head.statusCode, 405, `HEAD ${url}`)
    t.equal(head.headers.allow, 'GET, POST')
    t.match(head.headers['content-type'], /^application\/json/)
    t.equal(head.body, '', 'no body, as HEAD has none')
  }
  t.equal((await server.inject('/api/segment/get/order')).body, '1', 'the next GET gives the first ID: the HEADs took none')
  const metrics = (await server.inject('/metrics')).body
  t.notMatch(metrics, /leaf_ids_issued_total\{mode="snowflake"/, 'no snowflake ID was issued')
  t.match(metrics, /http_request_duration_seconds_count\{method="HEAD",route="\/api\/segment\/get\/:key",status_code="405"\} 3/, 'counted under the route pattern')
  const get = await server.inject({ method: 'GET', url: '/api/segment/get/order', headers: { accept: 'application/vnd.leaf-ts+json' } })
  t.same(get.json(), { id: '2' }, 'GET unchanged')
  t.equal((await server.inject({ method: 'HEAD', url: '/healthz' })).statusCode, 200, 'HEAD elsewhere still answers as GET would')
})
