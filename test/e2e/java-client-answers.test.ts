import { request } from 'node:http'
import { join } from 'node:path'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { startServer } from '../helpers/server-process.js'
import { seedSqlite } from '../helpers/sqlite.js'

// The built server answers what leaf-server answers a Java client (LEAF-REFERENCE, "What
// leaf-server answers on the wire"): the bare digits for every Accept header, the content type
// taken from it; POST like GET. Leaf-TS's JSON only for its own media type.

interface Raw { status: number, contentType: string | undefined, body: string, headers: Record<string, string | string[] | undefined> }

/** One request with exactly these headers (Node's client adds no Accept of its own). */
function send (url: string, method: string, headers: Record<string, string>, body?: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], body: Buffer.concat(chunks).toString('latin1'), headers: res.headers }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

t.test('the ID routes answer the bare digits for every Accept header, in the content type it picks', async (t) => {
  const dir = tempDir()
  const server = await startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(dir, 'leaf.db'))}`,
      '--leaf.snowflake.enable=true', '--leaf.snowflake.worker.id=3', `--leaf.snowflake.cache.dir=${dir}`],
    cwd: dir,
  })
  t.teardown(() => server.stop())
  const url = `${server.url}/api/segment/get/order`
  const cases: [string, Record<string, string>, string][] = [
    ['no Accept', {}, 'text/plain; charset=utf-8'],
    ['axios\'s default', { accept: 'application/json, text/plain, */*' }, 'application/json; charset=utf-8'],
    ['RestTemplate\'s', { accept: 'application/json' }, 'application/json; charset=utf-8'],
    ['a browser\'s', { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' }, 'text/html; charset=utf-8'],
    ['text/html', { accept: 'text/html' }, 'text/html; charset=utf-8'],
    ['application/xml', { accept: 'application/xml' }, 'application/xml; charset=utf-8'],
    ['*/*', { accept: '*/*' }, 'text/plain; charset=utf-8'],
  ]
  let expected = 1
  for (const [name, headers, contentType] of cases) {
    const answer = await send(url, 'GET', headers)
    t.equal(answer.status, 200, name)
    t.equal(answer.body, String(expected++), `${name}: the bare digits`)
    t.equal(answer.contentType, contentType, `${name}: ${contentType}`)
  }

  const snowflake = await send(`${server.url}/api/snowflake/get/k`, 'GET', { accept: 'application/json, text/plain, */*' })
  t.match(snowflake.body, /^[0-9]{18,19}$/, 'snowflake: the bare digits too')
  t.equal(snowflake.contentType, 'application/json; charset=utf-8')

  const vendor = await send(url, 'GET', { accept: 'application/vnd.leaf-ts+json' })
  t.equal(vendor.body, `{"id":"${expected++}"}`, 'the opt-in: Leaf-TS\'s JSON object')
  t.equal(vendor.contentType, 'application/vnd.leaf-ts+json; charset=utf-8')
  const batch = await send(`${url}?count=2`, 'GET', { accept: 'application/vnd.leaf-ts+json' })
  t.equal(batch.body, `{"ids":["${expected}","${expected + 1}"]}`)
  expected += 2
  const lines = await send(`${url}?count=2`, 'GET', { accept: 'application/json, text/plain, */*' })
  t.equal(lines.body, `${expected}\n${expected + 1}\n`, 'a batch without the opt-in: lines')
  t.equal(lines.contentType, 'text/plain; charset=utf-8')
  expected += 2

  const posts: [string, Record<string, string>, string | undefined][] = [
    ['POST without a body', {}, undefined],
    ['POST with a form body', { 'content-type': 'application/x-www-form-urlencoded' }, 'a=1'],
    ['POST with a body that is not JSON, typed JSON', { 'content-type': 'application/json' }, '{not json'],
  ]
  for (const [name, headers, body] of posts) {
    const answer = await send(url, 'POST', { accept: 'application/json', ...headers }, body)
    t.equal(answer.status, 200, name)
    t.equal(answer.body, String(expected++), `${name}: the next ID`)
    t.equal(answer.contentType, 'application/json; charset=utf-8')
    t.ok(answer.headers['leaf-instance'], `${name}: Leaf-Instance`)
  }

  const large = await send(url, 'POST', { 'content-type': 'application/octet-stream' }, 'x'.repeat(16 * 1024 + 1))
  t.equal(large.status, 413, 'a POST body past 16 KiB: 413, the body is never read anyway')
  t.match(JSON.parse(large.body), { error: 'PAYLOAD_TOO_LARGE' })
  t.equal((await send(url, 'GET', {})).body, String(expected++), 'the refused POST used up no ID')

  const head = await send(url, 'HEAD', {})
  t.equal(head.status, 405, 'HEAD: refused, a difference on purpose (docs/migrating.md)')
  t.equal(head.headers.allow, 'GET, POST')
  t.equal((await send(url, 'GET', {})).body, String(expected), 'the HEAD used up no ID')
})
