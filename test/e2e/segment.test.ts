import { spawnSync } from 'node:child_process'
import { connect } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import Database from 'better-sqlite3'
import { createSqliteStore } from '../../src/segment/stores/sqlite-store.js'
import { tempDir } from '../helpers/config.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { SERVER_JS, get, pool, startServer, tempInstall, type Answer } from '../helpers/server-process.js'
import { seedSqlite } from '../helpers/sqlite.js'
import { batchLines, textIds } from '../helpers/ids.js'

t.test('a bad configuration stops the start with exit 1 and one line naming the key', async (t) => {
  const cases: [string[], Record<string, string>, RegExp][] = [
    [['--server.port=abc'], {}, /server\.port: "abc" is not an integer/],
    [[], { LEAF_JDBC_URL: 'oracle:thin:@x' }, /leaf\.jdbc\.url: unknown scheme "oracle"/],
    [['--config', '/nonexistent.properties'], {}, /--config: cannot read \/nonexistent\.properties/],
    [[], { LEAF_CONFIG: '/nonexistent.properties' }, /LEAF_CONFIG: cannot read \/nonexistent\.properties/],
  ]
  for (const [args, env, line] of cases) {
    const run = spawnSync(process.execPath, [SERVER_JS, ...args], { cwd: tempDir(), env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' })
    t.equal(run.status, 1, `${args.join(' ')}${JSON.stringify(env)}: exit 1`)
    const lines = run.stderr.trim().split('\n')
    t.equal(lines.length, 1, 'one line')
    t.match(lines[0], line)
    t.notMatch(run.stderr + run.stdout, /\n\s+at /, 'no stack trace')
    t.equal(run.stdout, '', 'nothing started')
  }
})

t.test('the shipped config serves segment IDs from the embedded store', async (t) => {
  const cwd = tempDir()
  const install = tempInstall() // its first start: the embedded default is made, with the demo tags
  const server = await startServer({ cwd, script: install.script, args: ['--config', join(install.dir, 'config/leaf.properties'), '--server.port=0', `--leaf.snowflake.cache.dir=${cwd}`] })
  t.teardown(() => server.stop())
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '1' })
})

t.test('HEAD on an ID route through the built server: 405, Allow: GET, POST, no ID used up', async (t) => {
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`] })
  t.teardown(() => server.stop())
  for (const url of ['/api/segment/get/order', '/api/segment/get/order?count=100']) {
    const head = await fetch(`${server.url}${url}`, { method: 'HEAD' })
    t.equal(head.status, 405, `HEAD ${url}`)
    t.equal(head.headers.get('allow'), 'GET, POST')
    t.equal(await head.text(), '')
  }
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '1' }, 'the next GET gives the next ID')
})

t.test('three instances on one MariaDB hand out 30,000 IDs with no duplicate', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await db.query("INSERT INTO leaf_alloc (biz_tag, step, description) VALUES ('e2e', 100, 'e2e test')")
  const servers = await Promise.all([0, 1, 2].map(() => startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true', '--leaf.snowflake.enable=false'],
    env: { LEAF_JDBC_URL: db.jdbc.url, LEAF_JDBC_USERNAME: db.jdbc.username, LEAF_JDBC_PASSWORD: db.jdbc.password },
  })))
  t.teardown(() => Promise.all(servers.map((s) => s.stop())))

  const perServer = await Promise.all(servers.map(async (server) => {
    // 4,000 single IDs and 60 batches of 100, 16 requests at a time, interleaved.
    const answers = await pool(4060, 16, (i) => get(i % 67 === 0 && i < 60 * 67
      ? `${server.url}/api/segment/get/e2e?count=100`
      : `${server.url}/api/segment/get/e2e`))
    return answers
  }))
  const all: bigint[] = []
  let failed = 0
  for (const answers of perServer) {
    for (const a of answers) {
      if (a.status !== 200) failed++
      else all.push(...textIds(a.body).map(BigInt))
    }
  }
  t.equal(failed, 0, 'no failed request')
  t.equal(all.length, 30_000)
  t.equal(new Set(all).size, all.length, 'no duplicate ID')
  const [row] = await db.query<{ max_id: string }[]>("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'e2e'")
  const maxId = BigInt(row?.max_id ?? 0)
  t.ok(all.every((id) => id >= 1n && id < maxId), 'every ID inside a reserved range')
})

t.test('SIGTERM drains and exits 0', async (t) => {
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`] })
  t.equal((await get(`${server.url}/api/segment/get/order`)).status, 200)
  t.equal(await server.stop('SIGTERM'), 0)
})

t.test('requests rejected before any route get the documented JSON shape', async (t) => {
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`] })
  t.teardown(() => server.stop())
  const raw = (text: string) => new Promise<string>((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1', () => socket.end(text))
    let answer = ''
    socket.setEncoding('utf8')
    socket.on('data', (c: string) => { answer += c })
    socket.on('close', () => resolve(answer))
    socket.on('error', reject)
  })
  const huge = await raw(`GET /api/segment/get/order HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`)
  t.match(huge, /^HTTP\/1\.1 431 /)
  t.match(huge, /\r\n\r\n\{"error":"HEADERS_TOO_LARGE","message":"[^"]+"\}$/)
  const bad = await raw('GARBAGE\r\n\r\n')
  t.match(bad, /^HTTP\/1\.1 400 [\s\S]*\{"error":"BAD_REQUEST","message":"[^"]+"\}$/)
  const tunnel = await raw('CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n')
  t.match(tunnel, /^HTTP\/1\.1 404 [\s\S]*\{"error":"NOT_FOUND","message":"CONNECT is not supported\."\}$/)
  const noHost = await raw('GET /api/segment/get/order HTTP/1.1\r\nConnection: close\r\n\r\n')
  t.match(noHost, /^HTTP\/1\.1 200 [\s\S]*\r\n\r\n\d+$/, 'no Host header: served, not a bare 400 from Node')
  t.equal((await get(`${server.url}/api/segment/get/order`)).status, 200, 'still serving')
})

t.test('SIGTERM with a keep-alive client: the request in flight completes and the process exits 0 at once', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await db.query("INSERT INTO leaf_alloc (biz_tag, step) VALUES ('slow', 1)")
  const server = await startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true'],
    env: { LEAF_JDBC_URL: db.jdbc.url, LEAF_JDBC_USERNAME: db.jdbc.username, LEAF_JDBC_PASSWORD: db.jdbc.password },
  })
  t.equal((await get(`${server.url}/api/segment/get/slow`)).status, 200, 'a keep-alive connection is open')
  const inFlight = get(`${server.url}/api/segment/get/slow?count=200`) // 200 loads of step 1: takes a while
  await new Promise((resolve) => setTimeout(resolve, 30))
  const signalled = Date.now()
  server.proc.kill('SIGTERM')
  const answer = await inFlight
  t.equal(answer.status, 200, 'the request in flight completed')
  t.equal(batchLines(answer.body).length, 200)
  t.equal(await server.exited, 0, 'exit 0')
  t.ok(Date.now() - signalled < 5000, `exited ${Date.now() - signalled} ms after SIGTERM, not at the 10 s grace limit`)
})

t.test('two instances on one SQLite file hand out IDs under concurrent load with no duplicate', async (t) => {
  const path = join(tempDir(), 'shared.db')
  const setup = createSqliteStore(path)
  await setup.createTag({ key: 'shared', step: 20, maxId: 1n, description: null })
  await setup.close()
  const servers = await Promise.all([0, 1].map(() => startServer({
    cwd: tempDir(),
    args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${path}`],
  })))
  t.teardown(() => Promise.all(servers.map((s) => s.stop())))

  // Per instance 2,000 requests, every 10th a batch of 25, 16 at a time, both at once.
  const perServer = await Promise.all(servers.map((server) => pool(2000, 16, (i) =>
    get(`${server.url}/api/segment/get/shared${i % 10 === 0 ? '?count=25' : ''}`))))
  const all: bigint[] = []
  const failed: Answer[] = []
  for (const answers of perServer) {
    for (const a of answers) {
      if (a.status !== 200) failed.push(a)
      else all.push(...textIds(a.body).map(BigInt))
    }
  }
  t.same(failed.map((a) => `${a.status} ${a.body}`), [], 'no failed request')
  t.equal(all.length, 2 * (1800 + 200 * 25))
  t.equal(new Set(all).size, all.length, 'no duplicate ID across the two instances')
  const db = new Database(path, { readonly: true })
  const maxId = BigInt(db.prepare("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'shared'").pluck().get() as number)
  db.close()
  t.ok(all.every((id) => id >= 1n && id < maxId), 'every ID inside a reserved range')
})

t.test('tag changes reach a running instance: a PATCHed step at the next load, an SQL insert at the next refresh', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await db.query("INSERT INTO leaf_alloc (biz_tag, step) VALUES ('patched', 10)")
  const token = 'e2e-token'
  const auth = { authorization: `Bearer ${token}` }
  const server = await startServer({
    // Leaf's double buffer (no horizon), so the test knows which loads happen.
    args: ['--server.port=0', '--leaf.segment.enable=true', '--leaf.segment.refresh-interval-ms=200', '--leaf.segment.buffer-seconds=0'],
    env: { LEAF_JDBC_URL: db.jdbc.url, LEAF_JDBC_USERNAME: db.jdbc.username, LEAF_JDBC_PASSWORD: db.jdbc.password, LEAF_ADMIN_TOKEN: token },
  })
  t.teardown(() => server.stop())
  const cache = async () => (JSON.parse((await get(`${server.url}/api/cache`, auth)).body) as Record<string, string | number | boolean>[]).find((v) => v.key === 'patched') ?? {}
  const maxId = async () => BigInt((await db.query<{ max_id: string }[]>("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'patched'"))[0]?.max_id ?? 0)
  /** Polls until `check` holds, for at most `ms`; the caller asserts what it returns. */
  const until = async <T>(read: () => Promise<T>, check: (v: T) => boolean, ms = 5000): Promise<T> => {
    const end = performance.now() + ms
    let value = await read()
    while (!check(value) && performance.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, 20))
      value = await read()
    }
    return value
  }

  // Past the two loads at the table's step: the step now adapts (doubles, loads being quick).
  t.equal((await get(`${server.url}/api/segment/get/patched?count=35`)).status, 200)
  const settled = await until(cache, (c) => c.nextReady === true)
  t.equal(settled.nextReady, true, 'the preload landed')
  const [current, next] = settled.pos === 0 ? ['0', '1'] : ['1', '0']
  const buffered = Number(settled[`max${current}`]) - Number(settled[`value${current}`]) + Number(settled[`max${next}`]) - Number(settled[`value${next}`])
  const before = await maxId()

  const patch = await fetch(`${server.url}/api/segment/tags/patched`, { method: 'PATCH', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ step: 1000 }) })
  t.equal(patch.status, 200)
  // Everything buffered and one more ID: exactly one load, which must use the new step.
  const answer = await get(`${server.url}/api/segment/get/patched?count=${buffered + 1}`)
  t.equal(answer.status, 200)
  t.equal(await maxId() - before, 1000n, 'the load after the PATCH reserved the new step')
  t.equal((await cache()).step, 1000, 'and the buffer adapts from it')

  const late = () => get(`${server.url}/api/segment/get/late`)
  t.equal((await late()).status, 404, 'a tag not in the table yet')
  await db.query("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('late', 500, 10)")
  const found = await until(late, (a) => a.status === 200)
  t.match(found, { status: 200, body: '500' }, 'served after a timer-driven refresh, no restart')
})
