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
