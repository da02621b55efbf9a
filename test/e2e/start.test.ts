import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { tempDir } from '../helpers/config.js'
import { TEST_MYSQL, TEST_MYSQL_HOST, TEST_MYSQL_PORT, createTestDatabase } from '../helpers/mysql.js'
import { SERVER_JS, emptyConfigFile, get, logLines, startServer, tempInstall } from '../helpers/server-process.js'
import { TEST_PG, createTestPgDatabase } from '../helpers/postgres.js'
import { seedSqlite, withSqlite } from '../helpers/sqlite.js'
import { createProxy } from '../helpers/tcp-proxy.js'
import { freePort } from '../helpers/ports.js'

// The first hour: how `node dist/server.js` starts, or refuses to, as an operator sees it.

t.test('started from another folder, the server finds the shipped config/leaf.properties and logs its path, and keeps its store', async (t) => {
  // A copy of the install: its embedded default store is its own, made at this first start.
  const install = tempInstall()
  const start = (cwd: string) => startServer({ cwd, script: install.script, shippedConfig: true, args: ['--server.port=0', `--leaf.snowflake.cache.dir=${tempDir()}`] })
  const server = await start(tempDir())
  const shipped = join(install.dir, 'config/leaf.properties')
  const loaded = logLines(server.output).find((l) => typeof l.msg === 'string' && l.msg.startsWith('configuration loaded'))
  t.match(loaded, { level: 30, file: shipped, from: 'shipped', msg: `configuration loaded from ${shipped}` })
  const store = join(install.dir, 'data/leaf.db')
  t.match(logLines(server.output).find((l) => l.msg === 'segment mode enabled'), { store: `sqlite:${store}` }, 'the absolute path, in the install folder')
  t.match(logLines(server.output).find((l) => typeof l.msg === 'string' && l.msg.startsWith('new embedded store')), { file: store, tags: ['order', 'leaf-segment-test'] })
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '1' }, 'segment mode on, as the shipped file says')
  t.equal((await get(`${server.url}/api/snowflake/get/x`)).status, 200, 'snowflake mode on, as the shipped file says')
  t.notOk(logLines(server.output).some((l) => (l.level as number) >= 50), 'the shipped file names worker id 0: snowflake starts, no error')
  t.ok(logLines(server.output).some((l) => l.level === 40 && /static worker id 0 of the shipped config file.*a fleet needs a worker-id source/.test(l.msg as string)),
    'the shipped file\'s worker id is nobody\'s choice: a warning that a fleet needs a source')
  t.equal(await server.stop(), 0)

  // Another working folder: the same store, not a new one at 1.
  const again = await start(tempDir())
  t.teardown(() => again.stop())
  t.match(logLines(again.output).find((l) => l.msg === 'segment mode enabled'), { store: `sqlite:${store}` })
  t.notOk(logLines(again.output).some((l) => typeof l.msg === 'string' && /^new (embedded|SQLite) store/.test(l.msg)), 'no store made')
  t.match(await get(`${again.url}/api/segment/get/order`), { status: 200, body: '2' }, 'order goes on where it was (the stop gave back the rest of its segment)')
})

// --- The database at start --------------------------------------------------------------

const mysqlServer = new URL(TEST_MYSQL)

/** Runs the server to its exit (it must refuse to start): its exit code and output lines. */
function runToExit (args: string[]): { status: number | null, lines: string[] } {
  const run = spawnSync(process.execPath, [SERVER_JS, '--server.host=127.0.0.1', '--server.port=0', '--config', emptyConfigFile(), ...args], {
    cwd: tempDir(), env: { PATH: process.env.PATH, LOG_LEVEL: 'info' }, encoding: 'utf8', timeout: 30_000,
  })
  return { status: run.status, lines: `${run.stdout}${run.stderr}`.split('\n').filter((l) => l !== '') }
}

/** Exit 1, one line at error level or above, no stack: a refusal an orchestrator shows as it is. */
function refusesInOneLine (t: Test, args: string[], expected: RegExp): void {
  const { status, lines } = runToExit(args)
  t.equal(status, 1, 'exit 1')
  const errors = logLines(lines).filter((l) => (l.level as number) >= 50)
  t.equal(errors.length, 1, `one error line (${errors.map((l) => l.msg).join(' | ')})`)
  t.match(errors[0], { level: 60, msg: expected })
  t.notMatch(lines.join('\n'), /\n\s+at |"stack"/, 'no stack trace')
  t.notOk(lines.some((l) => /Server listening/.test(l)), 'never listened')
}

const mysqlUrl = (user: string, password: string, database: string) =>
  `mysql://${encodeURIComponent(user)}:${encodeURIComponent(password)}@${mysqlServer.host}/${database}`

t.test('snowflake on (its enable key unset, as Java Leaf reads it) with no worker-id source: exit 1 with one line naming leaf.snowflake.zk.address', async (t) => {
  const dir = tempDir()
  writeFileSync(join(dir, 'java.properties'), 'leaf.name=com.sankuai.leaf.opensource.test\nleaf.segment.enable=false\n')
  const run = spawnSync(process.execPath, [SERVER_JS, '--server.host=127.0.0.1', '--server.port=0', '--config', join(dir, 'java.properties')], {
    cwd: dir, env: { PATH: process.env.PATH, LOG_LEVEL: 'info' }, encoding: 'utf8', timeout: 30_000,
  })
  t.equal(run.status, 1)
  const lines = `${run.stdout}${run.stderr}`.split('\n').filter((l) => l !== '')
  t.equal(lines.length, 1, `one line (${lines.join(' | ')})`)
  t.match(lines[0], /^leaf-ts: configuration error: leaf\.snowflake\.zk\.address: is not set and snowflake mode is on .*or set leaf\.snowflake\.enable=false$/)
})

t.test('MySQL with a wrong password: exit 1 with one line', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=jdbc:mysql://${mysqlServer.host}/${db.name}`, `--leaf.jdbc.username=${db.jdbc.username}`, '--leaf.jdbc.password=not-the-password'],
    /^start refused: segment store mysql:\/\/[^@]+@[^ ]+: ER_ACCESS_DENIED_ERROR: Access denied .*: check leaf\.jdbc\.username and leaf\.jdbc\.password/)
  const { lines } = runToExit(['--leaf.segment.enable=true', `--leaf.jdbc.url=jdbc:mysql://${mysqlServer.host}/${db.name}`, '--leaf.jdbc.username=leaf', '--leaf.jdbc.password=not-the-password'])
  t.notOk(lines.some((l) => l.includes('not-the-password')), 'the password is not in the output')
})

t.test('MySQL with a database that does not exist: exit 1 with one line', async (t) => {
  const user = decodeURIComponent(mysqlServer.username)
  const password = decodeURIComponent(mysqlServer.password)
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=${mysqlUrl(user, password, 'leaf_test_no_such_database')}`],
    /^start refused: segment store .*: ER_BAD_DB_ERROR: .*leaf_test_no_such_database.*: create the database/)
})

t.test('MySQL without the leaf_alloc table: exit 1 with one line', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  await db.query('DROP TABLE leaf_alloc')
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=${db.url}`],
    /^start refused: segment store .*: ER_NO_SUCH_TABLE: .*leaf_alloc.*: create the table with sql\/leaf_alloc\.sql/)
})

const pgServer = new URL(TEST_PG)

t.test('PostgreSQL: a wrong password (28P01), a database that does not exist (3D000), no leaf_alloc table (42P01): exit 1 with one line each', async (t) => {
  const db = await createTestPgDatabase()
  t.teardown(() => db.drop())
  const jdbc = `--leaf.jdbc.url=jdbc:postgresql://${pgServer.host}/${db.name}`
  refusesInOneLine(t, ['--leaf.segment.enable=true', jdbc, `--leaf.jdbc.username=${db.jdbc.username}`, '--leaf.jdbc.password=not-the-password'],
    /^start refused: segment store postgres:\/\/[^@:]+@[^ ]+: 28P01: password authentication failed for user .*: check leaf\.jdbc\.username and leaf\.jdbc\.password/)
  const { lines } = runToExit(['--leaf.segment.enable=true', jdbc, `--leaf.jdbc.username=${db.jdbc.username}`, '--leaf.jdbc.password=not-the-password'])
  t.notOk(lines.some((l) => l.includes('not-the-password')), 'the password is not in the output')
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=${TEST_PG}/leaf_test_no_such_database`],
    /^start refused: segment store postgres:.*: 3D000: database "leaf_test_no_such_database" does not exist: create the database/)
  await db.query('DROP TABLE leaf_alloc')
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=${db.url}`],
    /^start refused: segment store postgres:.*: 42P01: relation "leaf_alloc" does not exist: create the table with sql\/leaf_alloc\.postgres\.sql/)
})

t.test('PostgreSQL refusing connections: the server starts and answers NOT_READY with the cause', async (t) => {
  const port = await freePort()
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=postgres://leaf:leaf@127.0.0.1:${port}/leaf`, '--leaf.jdbc.connect-timeout-ms=500'] })
  t.teardown(() => server.stop())
  t.match(logLines(server.output).find((l) => l.level === 40 && /database unreachable at start/.test(l.msg as string)), { code: 'ECONNREFUSED' })
  const ready = await get(`${server.url}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { status: 'not ready', modes: { segment: { ready: false, reason: /^database unreachable: ECONNREFUSED \(connection refused\)/ } } })
  t.match(JSON.parse((await get(`${server.url}/api/segment/get/order`)).body), { error: 'NOT_READY' })
})

t.test('SQLite: a leaf_alloc without Leaf\'s columns, a file that is not a database, a folder: exit 1 with one line', async (t) => {
  // (A new or empty file gets leaf_alloc, with no tags: a table it cannot use, or a file it
  // cannot open, is what stops it.)
  const dir = tempDir()
  const other = join(dir, 'other.db')
  withSqlite(other, (db) => db.exec('CREATE TABLE leaf_alloc (biz_tag TEXT PRIMARY KEY, max_id BIGINT)'))
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${other}`], /^start refused: segment store sqlite:.*other\.db: SQLITE_ERROR: no such column: step/)
  const text = join(dir, 'leaf.properties.db')
  writeFileSync(text, 'leaf.segment.enable=true\n'.repeat(100))
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${text}`], /^start refused: segment store sqlite:.*: SQLITE_NOTADB: file is not a database/)
  const folder = join(dir, 'folder.db')
  mkdirSync(folder)
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${folder}`], /^start refused: segment store sqlite:.*: SQLITE_CANTOPEN: /)
})

t.test('SQLite: a path in a folder that does not exist, or another program\'s file: exit 1 with one line, nothing written', async (t) => {
  const dir = tempDir()
  const missing = join(dir, 'no-such-folder')
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${join(missing, 'leaf.db')}`],
    new RegExp(`^start refused: segment store sqlite:${join(missing, 'leaf.db')}: the folder ${missing} does not exist: correct leaf\\.jdbc\\.url`))
  t.notOk(existsSync(missing), 'no folder made')
  refusesInOneLine(t, ['--leaf.snowflake.enable=true', '--leaf.snowflake.worker-id.source=db-lease', `--leaf.snowflake.cache.dir=${dir}`, `--leaf.jdbc.url=sqlite:${join(missing, 'leaf.db')}`],
    new RegExp(`^start refused: worker-id lease pool sqlite:${join(missing, 'leaf.db')}: the folder ${missing} does not exist: correct leaf\\.jdbc\\.url`))
  t.notOk(existsSync(missing), 'no folder made for the worker-id lease pool either')
  const theirs = join(dir, 'theirs.db')
  withSqlite(theirs, (db) => db.exec('CREATE TABLE invoices (id INTEGER PRIMARY KEY)'))
  const before = readFileSync(theirs)
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${theirs}`],
    /^start refused: segment store sqlite:.*theirs\.db: the file has tables \(invoices\) and no leaf_alloc: it is another program's database; .*sql\/leaf_alloc\.sql/)
  t.ok(readFileSync(theirs).equals(before), 'their file unchanged')
  t.same(readdirSync(dir).sort(), ['theirs.db'], 'nothing else written in the folder')
})

t.test('SQLite: a relative path is read from the configuration file\'s folder, not the working folder', async (t) => {
  const dir = tempDir()
  withSqlite(seedSqlite(join(dir, 'ids.db')), (db) => db.exec("UPDATE leaf_alloc SET max_id = 37001 WHERE biz_tag = 'order'"))
  writeFileSync(join(dir, 'leaf.properties'), 'leaf.segment.enable=true\nleaf.snowflake.enable=false\nleaf.jdbc.url=sqlite:ids.db\n')
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--config', join(dir, 'leaf.properties')] })
  t.teardown(() => server.stop())
  t.match(logLines(server.output).find((l) => l.msg === 'segment mode enabled'), { store: `sqlite:${join(dir, 'ids.db')}` })
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '37001' })
})

/** Each file of a folder: its bytes and modification time. */
function snapshot (dir: string): Record<string, string> {
  return Object.fromEntries(readdirSync(dir).sort().map((f) => [f, `${statSync(join(dir, f)).mtimeMs} ${readFileSync(join(dir, f)).toString('base64')}`]))
}

t.test('a port in use: the second process exits 1 with one line naming server.port, and writes nothing', async (t) => {
  const dir = tempDir()
  const port = await freePort()
  const args = [`--server.port=${port}`, '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(dir, 'leaf.db'))}`]
  // A first life, so that the running instance has a warm-start file the second could overwrite.
  const first = await startServer({ cwd: tempDir(), args })
  t.equal((await get(`${first.url}/api/segment/get/order`)).status, 200)
  t.equal(await first.stop(), 0)
  const running = await startServer({ cwd: tempDir(), args })
  t.teardown(() => running.stop())
  t.equal((await get(`${running.url}/api/segment/get/order`)).status, 200)
  t.ok(existsSync(join(dir, `segment-state-${port}.json`)), 'the running instance\'s warm-start file')
  const before = snapshot(dir)

  refusesInOneLine(t, args, new RegExp(`^start refused: server\\.port ${port}: 127\\.0\\.0\\.1:${port} is already in use \\(EADDRINUSE\\): .*set server\\.port`))
  t.same(snapshot(dir), before, 'the store and the warm-start file: bytes and times unchanged')
  t.equal((await get(`${running.url}/api/segment/get/order`)).status, 200, 'the running instance serves on')
  t.equal(await running.stop(), 0)
  t.match(JSON.parse(readFileSync(join(dir, `segment-state-${port}.json`), 'utf8')), { tags: ['order'] }, 'written by the instance that served')
})

t.test('a start refused after segment mode started (snowflake\'s worker id): the warm-start file is left as it was', async (t) => {
  const dir = tempDir()
  const state = join(dir, 'state.json')
  const segment = ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(dir, 'leaf.db'))}`, `--leaf.segment.state-file=${state}`]
  const first = await startServer({ cwd: tempDir(), args: ['--server.port=0', ...segment] })
  t.equal((await get(`${first.url}/api/segment/get/order`)).status, 200)
  t.equal(await first.stop(), 0)
  const before = `${statSync(state).mtimeMs} ${readFileSync(state, 'utf8')}`
  t.match(JSON.parse(readFileSync(state, 'utf8')), { tags: ['order'] })
  refusesInOneLine(t, [...segment, `--leaf.snowflake.cache.dir=${dir}`, '--leaf.snowflake.enable=true', '--leaf.snowflake.worker-id.source=statefulset', '--leaf.snowflake.worker-id.hostname=no-ordinal'],
    /^start refused: .*statefulset source .*"no-ordinal" has none/)
  t.equal(`${statSync(state).mtimeMs} ${readFileSync(state, 'utf8')}`, before, 'not rewritten by the start that failed')
})

t.test('an unwritable warm-start folder: exit 1 with one line naming leaf.segment.state-file, nothing written', async (t) => {
  const dir = tempDir()
  writeFileSync(join(dir, 'a-file'), '')
  refusesInOneLine(t, ['--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${join(dir, 'leaf.db')}`, `--leaf.segment.state-file=${join(dir, 'a-file', 'state.json')}`],
    /^start refused: leaf\.segment\.state-file: .*a-file is not a folder .*: make the folder writable, or set leaf\.segment\.state-file to a file in a writable folder/)
  t.same(readdirSync(dir), ['a-file'], 'no store made')
})

t.test('MySQL refusing connections: the server starts, answers NOT_READY with the cause, and serves once the database is there', async (t) => {
  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  const port = await freePort()
  const url = `mysql://${mysqlServer.username}:${mysqlServer.password}@127.0.0.1:${port}/${db.name}`
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=${url}`, '--leaf.jdbc.connect-timeout-ms=500'] })
  t.teardown(() => server.stop())
  t.match(logLines(server.output).find((l) => l.level === 40 && /database unreachable at start/.test(l.msg as string)), { code: 'ECONNREFUSED' })
  const ready = await get(`${server.url}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { status: 'not ready', modes: { segment: { ready: false, reason: /^database unreachable: ECONNREFUSED \(connection refused\)/ } } })
  t.match(JSON.parse((await get(`${server.url}/api/segment/get/order`)).body), { error: 'NOT_READY' })

  // The database appears on that port: the background retry loads the tags.
  const proxy = await createProxy(TEST_MYSQL_PORT, { targetHost: TEST_MYSQL_HOST, port })
  t.teardown(() => proxy.close())
  let answer = await get(`${server.url}/api/segment/get/order`)
  for (let i = 0; i < 100 && answer.status !== 200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    answer = await get(`${server.url}/api/segment/get/order`)
  }
  t.match(answer, { status: 200, body: '1' }, 'serving within 10 s of the database')
  t.equal((await get(`${server.url}/readyz`)).status, 200)
})

t.test('a bad layout, or a worker id past its bits, refuses the start in one configuration-error line before anything runs, snowflake mode off too', async (t) => {
  const cases: [string[], RegExp][] = [
    [['--leaf.snowflake.layout=leaf2'], /^leaf-ts: configuration error: leaf\.snowflake\.layout: "leaf2" is neither a preset \(.*\) nor name=value: did you mean "leaf"\?$/],
    [['--leaf.snowflake.layout=js-safe', '--leaf.snowflake.worker-id.max=256'],
      /^leaf-ts: configuration error: leaf\.snowflake\.worker-id\.max: 256 is above 255, the largest worker id of the js-safe layout's 8 worker bits$/],
  ]
  for (const [args, expected] of cases) {
    for (const enable of ['false', 'true']) {
      const { status, lines } = runToExit([`--leaf.snowflake.enable=${enable}`, '--leaf.snowflake.worker.id=0', ...args])
      t.equal(status, 1, `${args.join(' ')}, snowflake ${enable}: exit 1`)
      t.equal(lines.length, 1, `${args.join(' ')}, snowflake ${enable}: one line, no log before it (${lines.join(' | ')})`)
      t.match(lines[0], expected)
    }
  }
})

t.test('several configuration errors: exit 1 with one line each, in the order found', async (t) => {
  const { status, lines } = runToExit(['--server.port=abc', '--leaf.segement.enable=true', '--leaf.batch.max=0'])
  t.equal(status, 1)
  t.match(lines, [
    /^leaf-ts: configuration error: leaf\.segement\.enable: not a configuration key \(command line\); did you mean leaf\.segment\.enable\?$/,
    /^leaf-ts: configuration error: server\.port: "abc" is not an integer$/,
    /^leaf-ts: configuration error: leaf\.batch\.max: 0 is out of range/,
  ])
  t.equal(lines.length, 3, `three lines, no log (${lines.join(' | ')})`)
})

t.test('a mistyped key in the file or the environment: exit 1 with one line naming it and the key meant, and nothing written', async (t) => {
  // A file that would have the server write its store, warm-start file and worker-id cache in
  // its working folder, were it to start.
  const port = await freePort()
  const good = ['leaf.segment.enable=true', 'leaf.snowflake.enable=true', 'leaf.snowflake.worker-id.source=static', 'leaf.snowflake.cache.dir=./cache', `server.port=${port}`]
  const cases: [string, string[], Record<string, string>, RegExp][] = [
    ['leaf.snowflake.zk.adress in the file', [...good.slice(0, 2), 'leaf.snowflake.zk.adress=127.0.0.1:2181', ...good.slice(3)], {},
      /^leaf-ts: configuration error: leaf\.snowflake\.zk\.adress: not a configuration key \(\/.*\/config\/leaf\.properties:3\); did you mean leaf\.snowflake\.zk\.address\?$/],
    ['leaf.segement.enable in the file', ['leaf.segement.enable=true', ...good.slice(1)], {},
      /^leaf-ts: configuration error: leaf\.segement\.enable: not a configuration key \(\/.*\/config\/leaf\.properties:1\); did you mean leaf\.segment\.enable\?$/],
    ['LEAF_SEGEMENT_ENABLE in the environment', good, { LEAF_SEGEMENT_ENABLE: 'true' },
      /^leaf-ts: configuration error: LEAF_SEGEMENT_ENABLE: not a configuration key \(environment\); did you mean LEAF_SEGMENT_ENABLE \(leaf\.segment\.enable\)\?$/],
  ]
  for (const [what, lines, env, expected] of cases) {
    const cwd = tempDir()
    mkdirSync(join(cwd, 'config'))
    writeFileSync(join(cwd, 'config/leaf.properties'), `${lines.join('\n')}\n`)
    // Were the typo passed over, the server would listen until this timeout ends it.
    const run = spawnSync(process.execPath, [SERVER_JS], { cwd, env: { PATH: process.env.PATH, LOG_LEVEL: 'info', ...env }, encoding: 'utf8', timeout: 5_000, killSignal: 'SIGKILL' })
    const output = `${run.stdout}${run.stderr}`.split('\n').filter((l) => l !== '')
    t.equal(run.status, 1, `${what}: exit 1`)
    t.equal(output.length, 1, `${what}: one line (${output.join(' | ')})`)
    t.match(output[0], expected, what)
    t.same(readdirSync(cwd, { recursive: true }).sort(), ['config', join('config', 'leaf.properties')], `${what}: nothing written`)
  }
})

t.test('no mode enabled: the server starts, warns naming the keys, /readyz 503 "no mode enabled"', async (t) => {
  const server = await startServer({ cwd: tempDir(), args: ['--server.port=0'] })
  t.teardown(() => server.stop())
  t.match(logLines(server.output).find((l) => l.level === 40 && /no mode enabled/.test(l.msg as string)),
    { keys: ['leaf.segment.enable', 'leaf.snowflake.enable'], msg: /set leaf\.segment\.enable=true and\/or leaf\.snowflake\.enable=true/ })
  const ready = await get(`${server.url}/readyz`)
  t.equal(ready.status, 503)
  t.same(JSON.parse(ready.body), { status: 'not ready', reason: 'no mode enabled', modes: {} })
  t.match((await get(`${server.url}/metrics`)).body, /\nleaf_ready 0\n/)
})
