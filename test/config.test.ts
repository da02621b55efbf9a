import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { parseJdbcUrl } from '../src/config/jdbc-url.js'
import { KEYS, envName } from '../src/config/keys.js'
import { ConfigError, loadConfig } from '../src/config/load-config.js'

function dirWith (properties?: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-config-'))
  if (properties !== undefined) {
    writeFileSync(join(dir, 'leaf.properties'), properties)
  }
  return dir
}

t.test('built-in defaults when there is no file', async (t) => {
  const { config, file } = loadConfig({ cwd: dirWith() })
  t.equal(file, undefined)
  t.match(config, {
    server: { host: '0.0.0.0', port: 8080 },
    batchMax: 10000,
    segment: { enabled: false, waitTimeoutMs: 3000, refreshIntervalMs: 60000, store: { kind: 'sqlite', path: './data/leaf.db' } },
    snowflake: { enabled: false, zkAddress: '', port: 8080, twepoch: 1288834974657 },
  })
})

t.test('Java Leaf\'s leaf.properties works unchanged', async (t) => {
  const dir = dirWith([
    'leaf.name=com.sankuai.leaf.opensource.test',
    'leaf.segment.enable=true',
    'leaf.jdbc.url=jdbc:mysql://db.local:3307/leaf?useUnicode=true&characterEncoding=utf8',
    'leaf.jdbc.username=root',
    'leaf.jdbc.password=secret',
    '',
    'leaf.snowflake.enable=false',
    '#leaf.snowflake.zk.address=',
    'leaf.snowflake.port=9090',
  ].join('\n'))
  const { config } = loadConfig({ argv: ['--config', join(dir, 'leaf.properties')] })
  t.equal(config.name, 'com.sankuai.leaf.opensource.test')
  t.equal(config.segment.enabled, true)
  t.same(config.segment.store, { kind: 'mysql', host: 'db.local', port: 3307, user: 'root', password: 'secret', database: 'leaf' })
  t.equal(config.snowflake.port, 9090)
})

t.test('precedence: defaults < file < environment < command line', async (t) => {
  const dir = dirWith('server.port=1111\nleaf.snowflake.zk.address=zk:2181\nleaf.batch.max=50\nleaf.segment.wait-timeout-ms=700\n')
  const env = { LEAF_CONFIG: join(dir, 'leaf.properties'), SERVER_PORT: '2222', LEAF_SNOWFLAKE_ZK_ADDRESS: '', LEAF_BATCH_MAX: '60' }
  const { config } = loadConfig({ env, argv: ['--server.port=3333'] })
  t.equal(config.server.port, 3333, 'command line beats environment')
  t.equal(config.batchMax, 60, 'environment beats file')
  t.equal(config.snowflake.zkAddress, '', 'an empty variable overrides the file with an empty value')
  t.equal(config.segment.waitTimeoutMs, 700, 'file beats default')
  t.equal(config.snowflake.port, 3333, 'snowflake port follows server.port when unset')
})

t.test('environment names follow Spring Boot: dots and dashes to underscores, upper case', async (t) => {
  t.equal(envName('leaf.jdbc.url'), 'LEAF_JDBC_URL')
  t.equal(envName('leaf.segment.wait-timeout-ms'), 'LEAF_SEGMENT_WAIT_TIMEOUT_MS')
  t.equal(envName('log.level'), 'LOG_LEVEL')
  for (const key of Object.keys(KEYS)) {
    const { config } = loadConfig({ cwd: dirWith(), env: { [envName(key)]: KEYS[key as keyof typeof KEYS].default } })
    t.ok(config, `${key} takes its default from ${envName(key)}`)
  }
})

t.test('bad values stop the start, naming the key', async (t) => {
  const cwd = dirWith()
  const cases: [Record<string, string>, string[], string, RegExp][] = [
    [{ SERVER_PORT: 'abc' }, [], 'server.port', /not an integer/],
    [{}, ['--server.port=70000'], 'server.port', /out of range/],
    [{ LEAF_JDBC_URL: 'postgres://x/y' }, [], 'leaf.jdbc.url', /unknown scheme "postgres"/],
    [{ LEAF_SEGMENT_ENABLE: 'yes' }, [], 'leaf.segment.enable', /not true or false/],
    [{ LEAF_CONFIG: '/nonexistent/leaf.properties' }, [], '--config', /cannot read/],
    [{}, ['--no.such.key=1'], 'no.such.key', /not a configuration key/],
    [{}, ['--server.port'], 'server.port', /no value/],
    [{}, ['stray'], 'command line', /unexpected argument/],
    [{ LEAF_BATCH_MAX: '0' }, [], 'leaf.batch.max', /out of range/],
    [{ LOG_LEVEL: 'loud' }, [], 'log.level', /not a pino log level/],
  ]
  for (const [env, argv, key, problem] of cases) {
    const err = t.throws(() => loadConfig({ cwd, env, argv })) as ConfigError
    t.ok(err instanceof ConfigError, `${key}: a ConfigError`)
    t.equal(err.key, key)
    t.match(err.message, problem)
  }
})

t.test('unknown keys in the file are warnings, not errors', async (t) => {
  const dir = dirWith('leaf.unknown=1\nserver.port=81\n')
  const { config, warnings } = loadConfig({ cwd: dir, argv: ['--config=leaf.properties'] })
  t.equal(config.server.port, 81)
  t.match(warnings, [/unknown key leaf.unknown/])
})

t.test('JDBC URLs in every accepted form', async (t) => {
  t.same(parseJdbcUrl('', '', ''), { kind: 'sqlite', path: './data/leaf.db' })
  t.same(parseJdbcUrl('sqlite:/tmp/x.db', '', ''), { kind: 'sqlite', path: '/tmp/x.db' })
  t.same(parseJdbcUrl('jdbc:mysql://localhost:3306/leaf?useUnicode=true&characterEncoding=utf8', 'u', 'p'),
    { kind: 'mysql', host: 'localhost', port: 3306, user: 'u', password: 'p', database: 'leaf' })
  t.same(parseJdbcUrl('jdbc:mysql://db/leaf', 'u', 'p'), { kind: 'mysql', host: 'db', port: 3306, user: 'u', password: 'p', database: 'leaf' })
  t.same(parseJdbcUrl('mysql://me:p%40ss@127.0.0.1:3307/ids', 'u', 'p'),
    { kind: 'mysql', host: '127.0.0.1', port: 3307, user: 'me', password: 'p@ss', database: 'ids' })
  t.same(parseJdbcUrl('jdbc:mysql://h:1/d?user=a&password=b', '', ''), { kind: 'mysql', host: 'h', port: 1, user: 'a', password: 'b', database: 'd' })
  t.throws(() => parseJdbcUrl('sqlite:', '', ''), /needs a file path/)
  t.throws(() => parseJdbcUrl('mysql://host', '', ''), /must name one database/)
  t.throws(() => parseJdbcUrl('redis://x', '', ''), /unknown scheme "redis"/)
  t.throws(() => parseJdbcUrl('mysql://leaf:50%off@db/leaf', '', ''), { name: 'ConfigError', message: /malformed percent-encoding in its password/ })
})

t.test('string values are kept as Java\'s Properties reads them: an escaped trailing space stays', async (t) => {
  const dir = dirWith([
    'leaf.jdbc.url=jdbc:mysql://db/leaf',
    'leaf.jdbc.username=\\ leaf',
    'leaf.jdbc.password=pass\\ ',
    'leaf.admin.token=  tok\\t\\ ',
    'server.port = 81  ',
    'leaf.segment.enable = true ',
    'log.level = debug ',
  ].join('\n'))
  const { config } = loadConfig({ argv: ['--config', join(dir, 'leaf.properties')] })
  t.match(config.segment.store, { kind: 'mysql', user: ' leaf', password: 'pass ' })
  t.equal(config.adminToken, 'tok\t ', 'leading separator space dropped, escaped characters kept')
  t.equal(config.server.port, 81, 'numbers still read leniently')
  t.equal(config.segment.enabled, true, 'booleans still read leniently')
  t.equal(config.logLevel, 'debug', 'the log level is one of a set: read leniently')
  const fromEnv = loadConfig({ cwd: dirWith(), env: { LEAF_JDBC_URL: 'jdbc:mysql://db/leaf', LEAF_JDBC_PASSWORD: ' p ' }, argv: ['--leaf.jdbc.username=u '] })
  t.match(fromEnv.config.segment.store, { user: 'u ', password: ' p ' }, 'environment and command line values kept as given')
})
