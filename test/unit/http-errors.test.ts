import Fastify from 'fastify'
import t from 'tap'
import { ERRORS, LeafError, type ErrorCode } from '../../src/errors.js'
import { errorsPlugin, retryAfterSeconds, schemaErrorFormatter } from '../../src/http/errors.js'
import { silentLogger } from '../helpers/logger.js'

// The one error handler and the one schemaErrorFormatter, on a bare Fastify app as app.ts sets
// them up: Retry-After per code, and schema failures as the project's codes.

async function appWith (retryAfter = retryAfterSeconds({ waitTimeoutMs: 3000, queryTimeoutMs: 2000, heartbeatIntervalMs: 3000 })) {
  const app = Fastify({ schemaErrorFormatter, ajv: { customOptions: { coerceTypes: false, removeAdditional: false, verbose: true, allowUnionTypes: true, keywords: ['errorCode'] } } })
  await app.register(errorsPlugin, { logger: silentLogger, notFound: { start: (_request, _reply, done) => done(), done: () => {} }, retryAfter })
  app.get<{ Params: { code: ErrorCode } }>('/throw/:code', async (request) => { throw new LeafError(request.params.code) })
  app.post('/body', {
    schema: {
      body: {
        type: 'object',
        description: 'a JSON object with n',
        required: ['n'],
        additionalProperties: false,
        properties: {
          n: { type: 'integer', minimum: 1, maximum: 9, description: 'an integer from 1 to 9' },
          key: { type: 'string', maxLength: 3, errorCode: 'INVALID_KEY', description: 'a key of at most 3 characters' },
        },
      },
    },
  }, async () => 'ok')
  app.get('/query', { schema: { querystring: { type: 'object', properties: { f: { type: 'string', pattern: '^[0-9]+$', errorCode: 'INVALID_FIELD', description: 'digits' }, q: { type: 'string', description: 'one word' } } } } }, async () => 'ok')
  t.teardown(() => app.close())
  return app
}

t.test('retryable 503s carry Retry-After from the setting that bounds their wait; the others none', async (t) => {
  const app = await appWith(retryAfterSeconds({ waitTimeoutMs: 4500, queryTimeoutMs: 2000, heartbeatIntervalMs: 250 }))
  const expected: Partial<Record<ErrorCode, string>> = {
    NOT_READY: '1',
    SHUTTING_DOWN: '1',
    SEGMENTS_NOT_READY: '5',
    STORE_SPLIT: '5',
    STORE_NOT_MOVED: '5',
    STORE_UNCONFIRMED: '5',
    STORE_UNAVAILABLE: '2',
    CLOCK_BACKWARDS: '1',
    SEQUENCE_EXHAUSTED: '1',
    WORKER_ID_UNAVAILABLE: '1',
    WORKER_LEASE_LOST: '1',
    SNOWFLAKE_NOT_READY: '1',
  }
  for (const [code, { status }] of Object.entries(ERRORS) as [ErrorCode, { status: number }][]) {
    const res = await app.inject(`/throw/${code}`)
    t.equal(res.statusCode, status, code)
    t.same(res.json(), { error: code, message: ERRORS[code].message })
    t.equal(res.headers['retry-after'], expected[code], `${code}: Retry-After ${expected[code] ?? 'none'}`)
  }
  t.same(Object.keys(expected).sort(), Object.entries(ERRORS).filter(([code, e]) => e.status === 503 && code !== 'MODE_DISABLED' && code !== 'ID_SPACE_EXHAUSTED').map(([code]) => code).sort(),
    'every 503 but the two no retry helps')
})

t.test('schema failures answer the project\'s codes, naming the field and the value', async (t) => {
  const app = await appWith()
  const post = async (payload: unknown) => (await app.inject({ method: 'POST', url: '/body', payload: payload as Record<string, unknown> })).json()
  t.same(await post({ n: 10 }), { error: 'INVALID_BODY', message: 'n must be an integer from 1 to 9; got 10.' })
  t.same(await post({ n: '5' }), { error: 'INVALID_BODY', message: 'n must be an integer from 1 to 9; got "5".' }, 'no coercion: a string is not a number')
  t.same(await post({}), { error: 'INVALID_BODY', message: 'n is missing: give an integer from 1 to 9.' })
  t.same(await post({ n: 1, m: 2 }), { error: 'INVALID_BODY', message: 'Unknown field "m": the fields are n, key.' }, 'refused, not dropped')
  t.same(await post([1]), { error: 'INVALID_BODY', message: 'The request body must be a JSON object with n.' })
  t.same(await post({ n: 1, key: 'abcd' }), { error: 'INVALID_KEY', message: 'key must be a key of at most 3 characters; got "abcd".' }, 'the field\'s own code')
  t.same(await post({ n: 1, key: 'x'.repeat(50) }), { error: 'INVALID_KEY', message: `key must be a key of at most 3 characters; got "${'x'.repeat(40)}"... (50 characters).` }, 'a long value is cut')

  const query = async (q: string) => (await app.inject(`/query?${q}`)).json()
  t.same(await query('f=x1'), { error: 'INVALID_FIELD', message: 'f must be digits; got "x1".', field: 'f' }, 'INVALID_FIELD names its field in the body too')
  t.same(await query('q=a&q=b'), { error: 'BAD_REQUEST', message: 'q is given more than once: give one.' })
  t.same(await query('f='), { error: 'INVALID_FIELD', message: 'f is empty: give digits.', field: 'f' })
  t.equal((await app.inject('/query?f=12&q=w')).statusCode, 200)
})

t.test('a body of another type is 415 naming application/json; invalid JSON is 400 saying so', async (t) => {
  const app = await appWith()
  const xml = await app.inject({ method: 'POST', url: '/body', headers: { 'content-type': 'application/xml' }, payload: '<n>1</n>' })
  t.equal(xml.statusCode, 415)
  t.same(xml.json(), { error: 'UNSUPPORTED_MEDIA_TYPE', message: 'The request body is application/xml; it must be JSON: send Content-Type: application/json.' })
  const broken = await app.inject({ method: 'POST', url: '/body', headers: { 'content-type': 'application/json' }, payload: '{"n":' })
  t.same(broken.json(), { error: 'BAD_REQUEST', message: 'The request body is not valid JSON.' })
})
