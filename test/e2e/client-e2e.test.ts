import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { hostname } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { createLeafClient, LeafClientError, type LeafClient } from '@leaf-ts/client'
import { createUndiciTransport } from '../../client/src/transport.js'
import { tempDir } from '../helpers/config.js'
import { seedSqlite } from '../helpers/sqlite.js'
import { createTestDatabase, type TestDatabase } from '../helpers/mysql.js'
import { freePort } from '../helpers/ports.js'
import { withSqlite } from '../helpers/sqlite.js'
import { startServer, type ServerProcess } from '../helpers/server-process.js'

// The built client (`@leaf-ts/client` from the workspace, as a user imports it) against the
// built server (`dist/server.js` processes) on SQLite and on MariaDB. Every loop is bounded
// in IDs and in time (LOOP_LIMIT_MS); no figure here is a speed.

const CALLERS = 50
const LOOP_LIMIT_MS = 60_000

function mysqlEnv (db: TestDatabase): Record<string, string> {
  return { LEAF_JDBC_URL: db.jdbc.url, LEAF_JDBC_USERNAME: db.jdbc.username, LEAF_JDBC_PASSWORD: db.jdbc.password }
}

/** A server with both modes on, a static worker id and its own folders. */
function leafServer (env: Record<string, string>, workerId: number, jdbcUrl?: string): Promise<ServerProcess> {
  const dir = tempDir('leaf-client-')
  return startServer({
    cwd: dir,
    env,
    args: ['--server.port=0', '--leaf.segment.enable=true', '--leaf.snowflake.enable=true',
      `--leaf.snowflake.worker.id=${workerId}`, `--leaf.snowflake.cache.dir=${dir}`,
      ...(jdbcUrl === undefined ? [] : [`--leaf.jdbc.url=${jdbcUrl}`])],
  })
}

interface Run { ids: BigInt64Array, errors: unknown[], notIncreasing: number }

/**
 * `total` IDs of (mode, key) through CALLERS callers at once, each awaiting nextId in a loop;
 * `onProgress` is told the count as it grows. Records every ID, every error, and how many
 * times a caller's ID was not above its previous one.
 */
async function run (leaf: LeafClient, mode: 'segment' | 'snowflake', key: string, total: number, onProgress?: (n: number) => void): Promise<Run> {
  const ids = new BigInt64Array(total)
  const errors: unknown[] = []
  let taken = 0
  let notIncreasing = 0
  const stopAt = performance.now() + LOOP_LIMIT_MS
  await Promise.all(Array.from({ length: CALLERS }, async () => {
    let previous = -1n
    while (taken < total && performance.now() < stopAt) {
      const slot = taken++
      try {
        const id = await leaf.nextId(mode, key)
        ids[slot] = id
        if (id <= previous) notIncreasing++
        previous = id
      } catch (err) {
        errors.push(err)
      }
      onProgress?.(slot + 1)
    }
  }))
  if (taken < total) errors.push(new Error(`only ${taken} of ${total} IDs asked for within ${LOOP_LIMIT_MS} ms`))
  return { ids, errors, notIncreasing }
}

/** IDs that occur more than once (the array is sorted in place). */
function duplicates (ids: BigInt64Array): number {
  ids.sort()
  let n = 0
  for (let i = 1; i < ids.length; i++) if (ids[i] === ids[i - 1]) n++
  return n
}

const errorCodes = (errors: unknown[]) => errors.map((e) => (e as LeafClientError).code ?? String(e)).slice(0, 5)

for (const store of ['SQLite', 'MariaDB'] as const) {
  t.test(`${store}: 1,000,000 segment IDs through ${CALLERS} concurrent callers, unique and increasing per caller`, async (t) => {
    let server: ServerProcess
    if (store === 'MariaDB') {
      const db = await createTestDatabase()
      t.teardown(() => db.drop())
      server = await leafServer(mysqlEnv(db), 1)
    } else {
      server = await leafServer({}, 1, `sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`)
    }
    t.teardown(() => server.stop())
    const leaf = createLeafClient({ servers: [server.url] })
    t.teardown(() => leaf.close())

    const r = await run(leaf, 'segment', 'order', 1_000_000)
    t.same(errorCodes(r.errors), [], 'no error')
    t.equal(r.notIncreasing, 0, 'each caller\'s IDs increase')
    t.equal(r.ids.every((id) => id >= 1n), true, 'every ID from the server\'s ranges')
    t.equal(duplicates(r.ids), 0, 'no duplicate')
    const stats = leaf.stats()
    t.ok(stats.requests <= 1000, `${stats.requests} requests for 1,000,000 IDs: batches, not one request per ID`)
    t.equal(stats.keys['segment/order']?.batchSize, 10_000, 'the batch grew to maxBatch under load')

    if (store === 'SQLite') {
      const sf = await run(leaf, 'snowflake', 'order', 200_000)
      t.same(errorCodes(sf.errors), [], 'snowflake: no error')
      t.equal(sf.notIncreasing, 0, 'snowflake: each caller\'s IDs increase')
      t.equal(duplicates(sf.ids), 0, 'snowflake: no duplicate')
      t.ok(sf.ids[0] as bigint > 2n ** 53n, 'snowflake IDs past 2^53 arrive exact')
    }
  })

  t.test(`${store}: two servers, one SIGKILLed mid-run: 0 errors, 0 duplicates`, async (t) => {
    let servers: ServerProcess[]
    if (store === 'MariaDB') {
      const db = await createTestDatabase()
      t.teardown(() => db.drop())
      servers = await Promise.all([1, 2].map((w) => leafServer(mysqlEnv(db), w)))
    } else {
      const file = seedSqlite(join(tempDir(), 'shared.db'))
      servers = [await leafServer({}, 1, `sqlite:${file}`)]
      servers.push(await leafServer({}, 2, `sqlite:${file}`))
    }
    t.teardown(() => Promise.all(servers.map((s) => s.stop('SIGKILL'))))
    const [victim, survivor] = servers as [ServerProcess, ServerProcess]
    // Small batches, so that many fetches go to both servers before and after the kill.
    const leaf = createLeafClient({ servers: servers.map((s) => s.url), maxBatch: 2000 })
    t.teardown(() => leaf.close())

    const total = 400_000
    let killedAt = 0
    let beforeKill = leaf.stats()
    const kill = (n: number) => {
      if (killedAt === 0 && n >= total / 4) {
        killedAt = n
        beforeKill = leaf.stats()
        victim.proc.kill('SIGKILL')
      }
    }
    const [segment, snowflake] = await Promise.all([
      run(leaf, 'segment', 'order', total, kill),
      run(leaf, 'snowflake', 'order', total / 4),
    ])
    t.ok(killedAt > 0, `killed after ${killedAt} IDs`)
    t.equal(victim.proc.signalCode, 'SIGKILL', 'the first server was killed')
    t.same(errorCodes(segment.errors), [], 'segment: no error reached a caller')
    t.same(errorCodes(snowflake.errors), [], 'snowflake: no error reached a caller')
    t.equal(duplicates(segment.ids), 0, 'segment: no duplicate')
    t.equal(duplicates(snowflake.ids), 0, 'snowflake: no duplicate')
    const after = leaf.stats()
    const [v0, s0] = beforeKill.servers
    const [v1, s1] = after.servers
    t.ok((v0?.ids ?? 0) > 0 && (s0?.ids ?? 0) > 0, `both served before the kill (${v0?.ids} and ${s0?.ids} IDs)`)
    t.ok((s1?.ids ?? 0) > (s0?.ids ?? 0), 'the survivor served after it')
    t.ok((v1?.failures ?? 0) >= 1, `requests to the killed server failed (${v1?.failures}) and went to the other`)
    t.equal(survivor.proc.exitCode, null, 'the survivor still runs')
  })
}

t.test('a bad key gives KEY_NOT_FOUND, asked once', async (t) => {
  const server = await leafServer({}, 1, `sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`)
  t.teardown(() => server.stop())
  const leaf = createLeafClient({ servers: [server.url] })
  t.teardown(() => leaf.close())
  const err = await leaf.nextId('segment', 'no-such-tag').catch((e: unknown) => e)
  t.ok(err instanceof LeafClientError, 'a LeafClientError')
  t.match(err, { code: 'KEY_NOT_FOUND', status: 404, server: server.url, attempts: 1 })
  await t.rejects(leaf.nextIds('segment', 'x'.repeat(129), 3), { code: 'INVALID_KEY', status: 400 })
  t.equal(leaf.stats().requests, 2, 'neither retried')
  t.equal(await leaf.nextId('segment', 'order'), 1n, 'a good key still works')
})

t.test('the token is sent as a bearer token', async (t) => {
  const server = await leafServer({}, 1, `sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`)
  t.teardown(() => server.stop())
  // A gateway in front of the server, as a deployment puts one: it lets only the token through.
  const seen: (string | undefined)[] = []
  const gateway = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(req.headers.authorization)
    if (req.headers.authorization !== 'Bearer s3cret token') {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' })
      res.end('{"error":"UNAUTHORIZED","message":"This route needs an Authorization: Bearer token."}')
      return
    }
    const upstream = request(`${server.url}${req.url?.replace(/^\/leaf/, '')}`, { headers: { accept: req.headers.accept ?? '' } }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    upstream.on('error', () => { res.writeHead(502); res.end() })
    upstream.end()
  })
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => gateway.close(resolve)))
  const url = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}/leaf`

  const withToken = createLeafClient({ servers: [url], token: 's3cret token' })
  t.teardown(() => withToken.close())
  t.same(await withToken.nextIds('segment', 'order', 3), [1n, 2n, 3n], 'through the gateway, under its path prefix')
  t.equal(seen[0], 'Bearer s3cret token')

  const without = createLeafClient({ servers: [url] })
  t.teardown(() => without.close())
  await t.rejects(without.nextId('segment', 'order'), { code: 'UNAUTHORIZED', status: 401, server: url })
  t.equal(seen.length, 2, 'the 401 is not retried')
  t.equal(seen[1], undefined, 'no token: no header')
})

t.test('the server\'s text batches end with a newline; the client reads them whole, none lost or invented', async (t) => {
  const server = await leafServer({}, 2, `sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`)
  t.teardown(() => server.stop())
  const raw = await fetch(`${server.url}/api/segment/get/order?count=5`)
  t.equal(await raw.text(), '1\n2\n3\n4\n5\n', 'every ID on a line of its own, the last one ended too')

  const transport = createUndiciTransport({ servers: [server.url] })
  t.teardown(() => transport.close())
  const segment = await transport.fetchIds(server.url, 'segment', 'order', 5, 5000)
  t.same(segment.ranges, [{ first: 6n, last: 10n }], 'the transport\'s parser: one run, no empty sixth line')
  t.equal(segment.instance, `${hostname()}:${server.port}`, 'the server names itself: its host name and port')
  const snowflake = await transport.fetchIds(server.url, 'snowflake', 'k', 50, 5000)
  t.equal(snowflake.ranges.reduce((n, r) => n + Number(r.last - r.first) + 1, 0), 50, '50 snowflake IDs in its runs')
  t.equal(snowflake.instance, segment.instance, 'snowflake answers too')

  const leaf = createLeafClient({ servers: [server.url] })
  t.teardown(() => leaf.close())
  const ids = await leaf.nextIds('segment', 'order', 3)
  t.same(ids, [11n, 12n, 13n], 'the client goes on from there')
})

/** A SQLite store made here with Leaf's table and `tag` at max_id 1: a server seeding new files or not runs on it alike. */
function storeWithTag (tag: string): string {
  const file = join(tempDir(), 'leaf.db')
  withSqlite(file, (db) => {
    db.exec(`CREATE TABLE leaf_alloc (
      biz_tag VARCHAR(128) NOT NULL DEFAULT '' PRIMARY KEY, max_id BIGINT NOT NULL DEFAULT 1, step INT NOT NULL,
      description VARCHAR(256) DEFAULT NULL, update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`)
    db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES (?, 1, 1000)').run(tag)
  })
  return file
}

t.test('the only server comes back on a fresh store: ID_REGRESSION, never one of its repeated IDs', async (t) => {
  const port = await freePort()
  const start = (file: string) => startServer({
    cwd: tempDir('leaf-client-'),
    args: [`--server.port=${port}`, '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${file}`],
  })
  let server = await start(storeWithTag('t'))
  t.teardown(() => server.stop('SIGKILL'))
  const leaf = createLeafClient({ servers: [server.url], timeoutMs: 1500, minBatch: 100, maxBatch: 100 })
  t.teardown(() => leaf.close())
  const before = await leaf.nextIds('segment', 't', 250)
  t.same([before[0], before.at(-1)], [1n, 250n])
  await server.stop('SIGKILL')
  server = await start(storeWithTag('t')) // same port, so the same instance name; max_id 1 again
  const after: bigint[] = []
  let failed: LeafClientError | undefined
  while (failed === undefined && after.length < 1000) {
    try {
      after.push(await leaf.nextId('segment', 't'))
    } catch (err) {
      failed = err as LeafClientError
    }
  }
  t.ok(after.every((id) => id > 250n), `only IDs above what the first life gave were served (${after.length}, buffered before the kill)`)
  t.match(failed, { code: 'ID_REGRESSION', status: 200, server: server.url, retryable: true }, 'then the caller gets ID_REGRESSION')
  const stats = leaf.stats().servers[0]
  t.ok((stats?.refused ?? 0) >= 1, `refused answers counted (${stats?.refused})`)
  t.same(stats?.instances, [`${hostname()}:${port}`], 'both lives named themselves alike: host name and port')
})

t.test('a 503\'s code and message come to the caller as the server wrote them', async (t) => {
  const server = await startServer({ cwd: tempDir('leaf-client-'), args: ['--server.port=0', '--leaf.segment.enable=false'] })
  t.teardown(() => server.stop())
  const raw = await (await fetch(`${server.url}/api/segment/get/order?count=5`)).json() as { error: string, message: string }
  const leaf = createLeafClient({ servers: [server.url], timeoutMs: 500 })
  t.teardown(() => leaf.close())
  const err = await leaf.nextId('segment', 'order').catch((e: unknown) => e) as LeafClientError
  t.match(err, { code: raw.error, status: 503, server: server.url })
  t.ok(err.message.includes(raw.message), `the server's message, unchanged: ${err.message}`)
})
