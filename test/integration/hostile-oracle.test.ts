import t from 'tap'
import { buildApp } from '../../src/app.js'
import { BODIES, CONTENT_TYPES, PRINTABLE, badKeyField, documentedAnswers } from '../fault/hostile.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'

// Fault scenario 8 judges each answer against the codes test/fault/hostile.ts works out for the
// request. Its tag-management bodies are few, so every one of them, with every content type a
// header can carry, is sent here to the real routes: an answer the oracle does not allow fails
// here, in seconds, instead of in the one fault run in a hundred that draws that request.
t.test('the fault suite\'s oracle allows what tag management answers to each of its bodies', async (t) => {
  const token = 'oracle-token'
  const app = await buildApp(testConfig({
    'leaf.segment.enable': true,
    'leaf.snowflake.enable': false,
    'leaf.snowflake.cache.dir': tempDir(),
    'leaf.admin.token': token,
  }), { logger: silentLogger })
  t.teardown(() => app.close())
  const seen = new Set<string>()
  for (const [method, url] of [['POST', '/api/segment/tags'], ['PATCH', '/api/segment/tags/order']] as const) {
    for (const body of BODIES) {
      for (const contentType of CONTENT_TYPES.filter((c) => PRINTABLE.test(c))) {
        const res = await app.inject({
          method,
          url,
          headers: { authorization: `Bearer ${token}`, ...(contentType === '' ? {} : { 'content-type': contentType }) },
          payload: body,
        })
        const answer = res.statusCode < 300 ? String(res.statusCode) : `${res.statusCode} ${(res.json() as { error: string }).error}`
        const { allowed } = documentedAnswers({
          method,
          target: url,
          version: 'HTTP/1.1',
          oddHeaders: false,
          headLength: 200,
          body: { bytes: Buffer.byteLength(body, 'latin1'), contentType, badKey: badKeyField(body) },
          authorized: true,
          tag: 'order',
        })
        seen.add(answer)
        if (!allowed.has(answer)) t.fail(`${method} ${url} ${JSON.stringify(body.slice(0, 40))} as ${JSON.stringify(contentType)}: ${answer} where only ${[...allowed].sort().join(' / ')} fit`)
      }
    }
  }
  // The bodies reach every rule of these routes (none is a valid PATCH, so no 200): the oracle
  // is tested on each answer it has to tell apart.
  t.same([...seen].sort(), ['201', '400 BAD_REQUEST', '400 INVALID_BODY', '400 INVALID_KEY', '409 KEY_EXISTS', '413 PAYLOAD_TOO_LARGE', '415 UNSUPPORTED_MEDIA_TYPE'])
})

t.test('the oracle allows what /decodeSnowflakeId answers, and the admin views to a wrong token', async (t) => {
  const token = 'oracle-token'
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.admin.token': token }), { logger: silentLogger })
  t.teardown(() => app.close())
  const facts = { method: 'GET', version: 'HTTP/1.1', oddHeaders: false, headLength: 200, body: undefined, authorized: false, tag: 'order' }
  const seen = new Set<string>()
  for (const value of ['1', '+1', '-1', '00001', '٣', '𝟏', ' 1', '1e3', '', '9223372036854775808', '-9223372036854775808']) {
    const target = `/decodeSnowflakeId?snowflakeId=${encodeURIComponent(value)}`
    const res = await app.inject(target)
    const answer = res.statusCode === 200 ? '200' : `${res.statusCode} ${(res.json() as { error: string }).error}`
    seen.add(answer)
    t.ok(documentedAnswers({ ...facts, target }).allowed.has(answer), `${JSON.stringify(value)}: ${answer}`)
  }
  const twice = await app.inject('/decodeSnowflakeId?snowflakeId=1&snowflakeId=2')
  t.ok(documentedAnswers({ ...facts, target: '/decodeSnowflakeId?snowflakeId=1&snowflakeId=2' }).allowed.has(`400 ${(twice.json() as { error: string }).error}`), 'two values')
  for (const authorization of [`Bearer ${token}x`, 'Basic', undefined]) {
    const res = await app.inject({ url: '/api/cache', headers: authorization === undefined ? {} : { authorization } })
    const answer = `${res.statusCode} ${(res.json() as { error: string }).error}`
    seen.add(answer)
    t.ok(documentedAnswers({ ...facts, target: '/api/cache' }).allowed.has(answer), `${authorization ?? 'no token'}: ${answer}`)
  }
  t.same([...seen].sort(), ['200', '400 INVALID_ID', '401 INVALID_TOKEN', '401 UNAUTHORIZED'], 'each kind of answer met')
})
