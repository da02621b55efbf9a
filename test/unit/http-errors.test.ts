import Fastify, { type FastifyError } from 'fastify'
import t from 'tap'
import { ERRORS, LeafError, type ErrorCode } from '../../src/errors.js'
import { PassThrough } from 'node:stream'
import { clientErrorHandler, errorsPlugin, frameworkErrors, retryAfterSeconds, schemaErrorFormatter } from '../../src/http/errors.js'
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

t.test('schemaErrorFormatter on Ajv errors without the words a schema may give: still the field, the value and a code', async (t) => {
  const failure = (err: Error) => ({ code: (err as LeafError).code, message: err.message })
  t.same(failure(schemaErrorFormatter([], 'querystring')), { code: 'BAD_REQUEST', message: ERRORS.BAD_REQUEST.message }, 'no error at all')
  const bare = (e: Record<string, unknown>, part = 'querystring') => failure(schemaErrorFormatter([{ keyword: 'type', instancePath: '', schemaPath: '', params: {}, message: '', ...e }], part))
  t.same(bare({ keyword: 'additionalProperties', params: { additionalProperty: 'x' } }), { code: 'BAD_REQUEST', message: 'Unknown field "x": the fields are .' })
  t.same(bare({ keyword: 'required', params: { missingProperty: 'n' } }), { code: 'BAD_REQUEST', message: 'n is missing: give it.' })
  t.same(bare({}), { code: 'BAD_REQUEST', message: 'The querystring must be valid.' })
  t.same(bare({}, 'body'), { code: 'INVALID_BODY', message: 'The request body must be valid.' })
  t.same(bare({ instancePath: '/a~1b~0c', data: ['1', '2'] }), { code: 'BAD_REQUEST', message: 'a/b~c is given more than once: give one.' })
  t.same(bare({ instancePath: '/f', data: '' }), { code: 'BAD_REQUEST', message: 'f is empty: give a value.' })
  t.same(bare({ instancePath: '/f', data: { deep: true } }), { code: 'BAD_REQUEST', message: 'f must be valid; got {"deep":true}.' })
  t.same(bare({ instancePath: '/f', data: 'x'.repeat(41) }), { code: 'BAD_REQUEST', message: `f must be valid; got "${'x'.repeat(40)}"... (41 characters).` })
  t.same(bare({ instancePath: '/f', data: 7, parentSchema: { errorCode: 'INVALID_FIELD', description: 'digits' } }), { code: 'INVALID_FIELD', message: 'f must be digits; got 7.' })
  t.same((schemaErrorFormatter([{ keyword: 'type', instancePath: '/f', schemaPath: '', params: {}, message: '', data: 7, parentSchema: { errorCode: 'INVALID_FIELD' } } as never], 'querystring') as LeafError & { fields?: unknown }).fields,
    { field: 'f' }, 'INVALID_FIELD names its field in the body')
})

t.test('requests that never reach a route: the parser\'s errors answered on the socket, any other error just closes it', async (t) => {
  const answered = (code: string, writable = true) => {
    const socket = new PassThrough()
    let written = ''
    socket.on('data', (chunk: Buffer) => { written += chunk.toString() })
    if (!writable) socket.end()
    clientErrorHandler(Object.assign(new Error('x'), { code }), socket)
    return { written, destroyed: socket.destroyed }
  }
  t.match(answered('HPE_HEADER_OVERFLOW').written, /^HTTP\/1\.1 431 [^]*"error":"HEADERS_TOO_LARGE"/)
  t.match(answered('HPE_INVALID_METHOD').written, /^HTTP\/1\.1 400 [^]*"error":"BAD_REQUEST"/)
  t.match(answered('ERR_HTTP_REQUEST_TIMEOUT').written, /^HTTP\/1\.1 408 [^]*"error":"REQUEST_TIMEOUT"/)
  t.same(answered('ECONNRESET'), { written: '', destroyed: true }, 'not the parser\'s (a TLS or socket error): closed, nothing written')
  t.same(answered('HPE_INVALID_METHOD', false), { written: '', destroyed: true }, 'a socket no longer writable: closed')
})

t.test('frameworkErrors: a malformed URL is 400 in the documented shape; another status keeps its code', async (t) => {
  const app = Fastify({ frameworkErrors })
  t.teardown(() => app.close())
  app.get('/x', async () => 'ok')
  const bad = await app.inject('/x%')
  t.equal(bad.statusCode, 400)
  t.same(bad.json(), { error: 'BAD_REQUEST', message: 'The URL is malformed.' })
  const sent: { code?: number, body?: unknown } = {}
  const reply = { code (c: number) { sent.code = c; return reply }, type () { return reply }, header () { return reply }, send (b: unknown) { sent.body = b; return reply } }
  frameworkErrors(Object.assign(new Error('too long'), { statusCode: 414 }) as FastifyError, {} as never, reply as never)
  t.equal(sent.code, 400, 'a status without a code of its own: BAD_REQUEST')
  frameworkErrors(Object.assign(new Error('big'), { statusCode: 413 }) as FastifyError, {} as never, reply as never)
  t.equal(sent.code, 413, 'PAYLOAD_TOO_LARGE keeps its status')
})
