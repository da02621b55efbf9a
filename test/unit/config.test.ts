import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { parseJdbcUrl } from '../../src/config/jdbc-url.js'
import { CONFIG_KEYS, KEYS, envName, type ConfigKey } from '../../src/config/keys.js'
import type { ConfigErrorCode } from '../../src/config/config-error.js'
import { ConfigError, ConfigErrors, loadConfig, type Config, ForeignKeyError, SECRET_FILE_KEYS, UnknownKeyError } from '../../src/config/load-config.js'
import { editDistance, nearestKey } from '../../src/config/unknown-keys.js'
import { resolveSnowflakeSettings } from '../../src/config/resolve-config.js'
import { FIXED_PAIRS, writePair } from '../helpers/tls.js'

function dirWith (properties?: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-config-'))
  if (properties !== undefined) {
    writeFileSync(join(dir, 'leaf.properties'), properties)
  }
  return dir
}

t.test('built-in defaults when there is no file', async (t) => {
  const { config, file } = loadConfig({ cwd: dirWith(), installDir: '/opt/leaf' })
  t.equal(file, undefined)
  t.match(config, {
    server: { host: '0.0.0.0', port: 8080 },
    batchMax: 10000,
    // Both on, as Java Leaf reads a missing enable key; snowflake with no worker-id source named.
    segment: { enabled: true, waitTimeoutMs: 3000, refreshIntervalMs: 60000, store: { kind: 'sqlite', path: '/opt/leaf/data/leaf.db', embeddedDefault: true } },
    snowflake: { enabled: true, zkAddress: '', port: 8080, twepoch: 1288834974657, workerIdSourceNamed: false },
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
  t.same(config.segment.store, { kind: 'mysql', hosts: [{ host: 'db.local', port: 3307 }], user: 'root', password: 'secret', database: 'leaf', tls: PREFER })
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

t.test('the warm-start file: beside the SQLite file, in the install folder\'s data/ with MySQL, none on port 0 or when off', async (t) => {
  const installDir = '/opt/leaf'
  const at = (argv: string[]) => loadConfig({ cwd: dirWith(), argv, installDir }).config.segment.stateFile
  t.equal(at(['--leaf.jdbc.url=sqlite:/srv/leaf/leaf.db', '--server.port=8080']), '/srv/leaf/segment-state-8080.json')
  t.equal(at(['--server.port=8081']), '/opt/leaf/data/segment-state-8081.json', 'the embedded default: the install folder\'s data/leaf.db')
  t.equal(at(['--leaf.jdbc.url=mysql://u:p@db:3306/leaf', '--server.port=8080']), '/opt/leaf/data/segment-state-8080.json')
  t.equal(at(['--server.port=0']), undefined, 'a new port at every start: nothing to warm')
  t.equal(at(['--server.port=8080', '--leaf.segment.state-file=off']), undefined)
  t.equal(at(['--server.port=8080', '--leaf.segment.state-file=state/s.json']), '/opt/leaf/state/s.json', 'relative, no file: from the install folder')
})

t.test('a relative sqlite: path or state file is read from the config file\'s folder, else the install folder; never the working folder', async (t) => {
  const installDir = '/opt/leaf'
  const cwd = dirWith()
  const file = dirWith('leaf.jdbc.url=sqlite:db/leaf.db\nleaf.segment.state-file=state.json\n')
  const fromFile = loadConfig({ cwd, argv: ['--config', join(file, 'leaf.properties')], installDir })
  t.same(fromFile.config.segment.store, { kind: 'sqlite', path: join(file, 'db/leaf.db') }, 'named in the file: the file\'s folder')
  t.equal(fromFile.config.segment.stateFile, join(file, 'state.json'))
  t.equal(fromFile.relativeTo, file)
  const fromEnv = loadConfig({ cwd, argv: ['--config', join(file, 'leaf.properties')], env: { LEAF_JDBC_URL: 'sqlite:./other.db' }, installDir })
  t.same(fromEnv.config.segment.store, { kind: 'sqlite', path: join(file, 'other.db') }, 'from the environment, with a file: the file\'s folder')
  const noFile = loadConfig({ cwd, argv: ['--leaf.jdbc.url=sqlite:./data/other.db'], installDir })
  t.same(noFile.config.segment.store, { kind: 'sqlite', path: '/opt/leaf/data/other.db' }, 'no file: the install folder')
  t.equal(noFile.relativeTo, installDir)
  const embedded = loadConfig({ cwd, argv: ['--config', join(file, 'leaf.properties'), '--leaf.jdbc.url='], installDir })
  t.same(embedded.config.segment.store, { kind: 'sqlite', path: '/opt/leaf/data/leaf.db', embeddedDefault: true }, 'the embedded default: always the install folder')
  t.same(loadConfig({ cwd, argv: ['--leaf.jdbc.url=sqlite:/abs/x.db'], installDir }).config.segment.store, { kind: 'sqlite', path: '/abs/x.db' })
  t.same(loadConfig({ cwd, argv: ['--leaf.jdbc.url=sqlite::memory:'], installDir }).config.segment.store, { kind: 'sqlite', path: ':memory:' })
})

t.test('environment names follow Spring Boot: dots and dashes to underscores, upper case', async (t) => {
  t.equal(envName('leaf.jdbc.url'), 'LEAF_JDBC_URL')
  t.equal(envName('leaf.segment.wait-timeout-ms'), 'LEAF_SEGMENT_WAIT_TIMEOUT_MS')
  t.equal(envName('log.level'), 'LOG_LEVEL')
})

/**
 * Where each key lands in the Config, with two valid values and what each becomes: `a` is not
 * the default, `b` differs from `a`. A key added to the table without a line here fails the
 * type check and the tests below. A secret's `-file` key lands where its key does, and cannot
 * be set beside it: the secret-file tests below cover those.
 */
interface Landing { read: (c: Config) => unknown, a: [string, unknown], b: [string, unknown] }

type FileKey = keyof typeof SECRET_FILE_KEYS
const isFileKey = (key: ConfigKey): key is FileKey => key in SECRET_FILE_KEYS
/** The keys set directly, the secret files' keys aside. */
const VALUE_KEYS = CONFIG_KEYS.filter((k) => !isFileKey(k))

/** A URL without TLS parameters, and no leaf.jdbc.ssl.* key: TLS when offered. */
const PREFER = { mode: 'prefer', modeFrom: 'default' }

const mysql = (c: Config) => c.segment.store.kind === 'mysql' ? c.segment.store : undefined

/** The two test pairs as files: server.tls.cert and server.tls.key land as their PEM text. */
const tlsFiles = [writePair(FIXED_PAIRS[0]), writePair(FIXED_PAIRS[1])] as const

const LANDINGS: Record<Exclude<ConfigKey, FileKey>, Landing> = {
  'leaf.name': { read: (c) => c.name, a: ['ids-a', 'ids-a'], b: ['ids-b', 'ids-b'] },
  'server.host': { read: (c) => c.server.host, a: ['127.0.0.2', '127.0.0.2'], b: ['::1', '::1'] },
  'server.port': { read: (c) => c.server.port, a: ['8181', 8181], b: ['8282', 8282] },
  'server.headers-timeout-ms': { read: (c) => c.server.headersTimeoutMs, a: ['5000', 5000], b: ['2000', 2000] },
  'server.request-timeout-ms': { read: (c) => c.server.requestTimeoutMs, a: ['40000', 40000], b: ['0', 0] },
  'server.keep-alive-timeout-ms': { read: (c) => c.server.keepAliveTimeoutMs, a: ['65000', 65000], b: ['620000', 620000] },
  'server.idle-timeout-ms': { read: (c) => c.server.idleTimeoutMs, a: ['120000', 120000], b: ['0', 0] },
  'server.max-connections': { read: (c) => c.server.maxConnections, a: ['4096', 4096], b: ['0', 0] },
  'server.tls.cert': { read: (c) => c.server.tls?.cert, a: [tlsFiles[0].cert, FIXED_PAIRS[0].cert], b: [tlsFiles[1].cert, FIXED_PAIRS[1].cert] },
  'server.tls.key': { read: (c) => c.server.tls?.key, a: [tlsFiles[0].key, FIXED_PAIRS[0].key], b: [tlsFiles[1].key, FIXED_PAIRS[1].key] },
  'leaf.instance.name': { read: (c) => c.instanceName, a: ['leaf-a:8080', 'leaf-a:8080'], b: ['leaf-b', 'leaf-b'] },
  'log.level': { read: (c) => c.logLevel, a: ['debug', 'debug'], b: ['warn', 'warn'] },
  'leaf.segment.enable': { read: (c) => c.segment.enabled, a: ['false', false], b: ['true', true] },
  'leaf.jdbc.url': {
    read: (c) => [mysql(c)?.hosts[0]?.host, mysql(c)?.hosts[0]?.port, mysql(c)?.database],
    a: ['jdbc:mysql://db-a:3307/leaf_a?useUnicode=true', ['db-a', 3307, 'leaf_a']],
    b: ['mysql://db-b/leaf_b', ['db-b', 3306, 'leaf_b']],
  },
  'leaf.jdbc.username': { read: (c) => mysql(c)?.user, a: ['user-a', 'user-a'], b: ['user-b', 'user-b'] },
  'leaf.jdbc.password': { read: (c) => mysql(c)?.password, a: ['pw-a', 'pw-a'], b: ['pw-b', 'pw-b'] },
  // A CA alone makes the URL's mode verify-full; a pair's certificate serves as the CA.
  'leaf.jdbc.ssl.ca': { read: (c) => mysql(c)?.tls?.ca, a: [tlsFiles[0].cert, FIXED_PAIRS[0].cert], b: [tlsFiles[1].cert, FIXED_PAIRS[1].cert] },
  'leaf.jdbc.ssl.cert': { read: (c) => mysql(c)?.tls?.cert, a: [tlsFiles[0].cert, FIXED_PAIRS[0].cert], b: [tlsFiles[1].cert, FIXED_PAIRS[1].cert] },
  'leaf.jdbc.ssl.key': { read: (c) => mysql(c)?.tls?.key, a: [tlsFiles[0].key, FIXED_PAIRS[0].key], b: [tlsFiles[1].key, FIXED_PAIRS[1].key] },
  'leaf.jdbc.connect-timeout-ms': { read: (c) => c.segment.connectTimeoutMs, a: ['2500', 2500], b: ['3500', 3500] },
  'leaf.jdbc.pool-size': { read: (c) => c.segment.poolSize, a: ['4', 4], b: ['5', 5] },
  'leaf.jdbc.query-timeout-ms': { read: (c) => c.segment.queryTimeoutMs, a: ['2500', 2500], b: ['3500', 3500] },
  'leaf.segment.wait-timeout-ms': { read: (c) => c.segment.waitTimeoutMs, a: ['4000', 4000], b: ['5000', 5000] },
  'leaf.segment.refresh-interval-ms': { read: (c) => c.segment.refreshIntervalMs, a: ['30000', 30000], b: ['45000', 45000] },
  'leaf.segment.failover-hold-ms': { read: (c) => c.segment.failoverHoldMs, a: ['7000', 7000], b: ['9000', 9000] },
  'leaf.segment.buffer-seconds': { read: (c) => c.segment.bufferSeconds, a: ['30', 30], b: ['0', 0] },
  'leaf.segment.max-buffered-segments': { read: (c) => c.segment.maxBufferedSegments, a: ['2', 2], b: ['16', 16] },
  'leaf.segment.trusted-stores': { read: (c) => c.segment.trustedStores, a: ['server_id 1', ['server_id 1']], b: ['server_id  2, galera cluster 0f3c-77ab', ['server_id 2', 'galera cluster 0f3c-77ab']] },
  'leaf.segment.state-file': { read: (c) => c.segment.stateFile, a: ['/var/lib/leaf/state.json', '/var/lib/leaf/state.json'], b: ['off', undefined] },
  'leaf.batch.max': { read: (c) => c.batchMax, a: ['500', 500], b: ['600', 600] },
  'leaf.snowflake.enable': { read: (c) => c.snowflake.enabled, a: ['false', false], b: ['true', true] },
  'leaf.snowflake.zk.address': { read: (c) => c.snowflake.zkAddress, a: ['zk-a:2181', 'zk-a:2181'], b: ['zk-b:2181,zk-c:2181', 'zk-b:2181,zk-c:2181'] },
  'leaf.snowflake.port': { read: (c) => c.snowflake.port, a: ['9091', 9091], b: ['9092', 9092] },
  'leaf.snowflake.ip': { read: (c) => c.snowflake.ip, a: ['10.0.0.1', '10.0.0.1'], b: ['10.0.0.2', '10.0.0.2'] },
  'leaf.snowflake.worker.id': { read: (c) => c.snowflake.workerId, a: ['7', 7], b: ['8', 8] },
  'leaf.snowflake.worker-id.source': { read: (c) => c.snowflake.workerIdSource, a: ['db-lease', 'db-lease'], b: ['statefulset', 'statefulset'] },
  'leaf.snowflake.worker-id.min': { read: (c) => c.snowflake.workerIdMin, a: ['5', 5], b: ['6', 6] },
  'leaf.snowflake.worker-id.max': { read: (c) => c.snowflake.workerIdMax, a: ['900', 900], b: ['800', 800] },
  'leaf.snowflake.worker-id.hostname': { read: (c) => c.snowflake.hostname, a: ['leaf-3', 'leaf-3'], b: ['leaf-4', 'leaf-4'] },
  'leaf.snowflake.lease.ttl-ms': { read: (c) => c.snowflake.leaseTtlMs, a: ['20000', 20000], b: ['40000', 40000] },
  'leaf.snowflake.layout': {
    read: (c) => c.snowflake.layoutSpec,
    a: ['uid-generator,time=31s,worker=22,sequence=10', 'uid-generator,time=31s,worker=22,sequence=10'],
    b: ['time=42ms,worker=12,sequence=9,epoch=1600000000000', 'time=42ms,worker=12,sequence=9,epoch=1600000000000'],
  },
  'leaf.snowflake.vesta.version': { read: (c) => c.snowflake.vesta.version, a: ['1', 1], b: ['0', 0] },
  'leaf.snowflake.vesta.gen-method': { read: (c) => c.snowflake.vesta.genMethod, a: ['1', 1], b: ['3', 3] },
  'leaf.snowflake.borrow-ahead-ms': { read: (c) => c.snowflake.borrowAheadMs, a: ['5', 5], b: ['7', 7] },
  'leaf.snowflake.twepoch': { read: (c) => c.snowflake.twepoch, a: ['1500000000000', 1500000000000], b: ['1600000000000', 1600000000000] },
  'leaf.snowflake.cache.dir': { read: (c) => c.snowflake.cacheDir, a: ['/var/cache/leaf-a', '/var/cache/leaf-a'], b: ['/var/cache/leaf-b', '/var/cache/leaf-b'] },
  'leaf.snowflake.max-clock-drift-ms': { read: (c) => c.snowflake.maxClockDriftMs, a: ['1000', 1000], b: ['2000', 2000] },
  'leaf.snowflake.heartbeat-interval-ms': { read: (c) => c.snowflake.heartbeatIntervalMs, a: ['1500', 1500], b: ['2500', 2500] },
  'leaf.snowflake.zk.connect-timeout-ms': { read: (c) => c.snowflake.zkConnectTimeoutMs, a: ['6000', 6000], b: ['7000', 7000] },
  'leaf.snowflake.zk.session-timeout-ms': { read: (c) => c.snowflake.zkSessionTimeoutMs, a: ['20000', 20000], b: ['30000', 30000] },
  'leaf.metrics.max-tag-series': { read: (c) => c.metrics.maxTagSeries, a: ['500', 500], b: ['0', 0] },
  'leaf.admin.token': { read: (c) => c.adminToken, a: ['tok-a', 'tok-a'], b: ['tok-b', 'tok-b'] },
  'leaf.admin.view-token': { read: (c) => c.adminViewToken, a: ['view-a', 'view-a'], b: ['view-b', 'view-b'] },
  'leaf.snowflake.zk.auth': { read: (c) => c.snowflake.zkAuth, a: ['digest:leaf-a:pw-a', 'digest:leaf-a:pw-a'], b: ['digest:leaf-b:pw:b', 'digest:leaf-b:pw:b'] },
}

/** The landing of a key, failing loudly for a key the table above does not know. */
function landing (key: string): Landing {
  const found = (LANDINGS as Record<string, Landing | undefined>)[key]
  if (found === undefined) throw new Error(`${key} is in the key table but not in LANDINGS (test/unit/config.test.ts): say where it lands in the Config`)
  return found
}

type Source = 'file' | 'environment' | 'command line'

/** Loads a config with every key set by the given sources, each to the value the picker gives. */
function loadFrom (sources: Partial<Record<Source, (l: Landing) => [string, unknown]>>): Config {
  const lines: string[] = []
  const env: Record<string, string> = {}
  const argv: string[] = []
  for (const key of VALUE_KEYS) {
    const l = landing(key)
    if (sources.file !== undefined) lines.push(`${key}=${sources.file(l)[0]}`)
    if (sources.environment !== undefined) env[envName(key)] = sources.environment(l)[0]
    if (sources['command line'] !== undefined) argv.push(`--${key}=${sources['command line'](l)[0]}`)
  }
  const dir = dirWith(lines.join('\n') + '\n')
  return loadConfig({ cwd: dir, env, argv: sources.file === undefined ? argv : ['--config', join(dir, 'leaf.properties'), ...argv] }).config
}

t.test('each key\'s target is a field of Config, and a key landing as parsed has its own', async (t) => {
  const config = loadConfig({ cwd: dirWith() }).config
  /** Whether the dotted path names a field of the config (set or undefined). */
  const has = (path: string) => {
    const names = path.split('.')
    const last = names.pop() as string
    const section = names.reduce<unknown>((at, name) => (at as Record<string, unknown> | undefined)?.[name], config)
    return typeof section === 'object' && section !== null && last in section
  }
  const landing = new Map<string, string>()
  for (const key of CONFIG_KEYS) {
    const { target, resolved } = KEYS[key]
    t.ok(has(target), `${key}: ${target} is in Config`)
    if (resolved) continue
    t.equal(landing.get(target), undefined, `${key}: ${target} is no other landing key's`)
    landing.set(target, key)
  }
})

t.test('every key of the table has a landing, and its value `a` is not the default\'s', async (t) => {
  t.same(Object.keys(LANDINGS).sort(), [...VALUE_KEYS].sort(), 'LANDINGS lists exactly the keys of the table, the secret files\' aside')
  const defaults = loadConfig({ cwd: dirWith() }).config
  for (const key of VALUE_KEYS) {
    const l = landing(key)
    t.notSame(l.a[1], l.read(defaults), `${key}: a is not the default`)
    t.notSame(l.a[1], l.b[1], `${key}: a and b differ`)
  }
})

for (const source of ['file', 'environment', 'command line'] as const) {
  t.test(`every key set through the ${source} lands in the config`, async (t) => {
    const config = loadFrom({ [source]: (l: Landing) => l.a })
    for (const key of VALUE_KEYS) t.same(landing(key).read(config), landing(key).a[1], key)
  })
}

t.test('for every key: environment over file, command line over environment', async (t) => {
  const envOverFile = loadFrom({ file: (l) => l.a, environment: (l) => l.b })
  const cliOverEnv = loadFrom({ file: (l) => l.b, environment: (l) => l.b, 'command line': (l) => l.a })
  const cliOverFile = loadFrom({ file: (l) => l.b, 'command line': (l) => l.a })
  for (const key of VALUE_KEYS) {
    t.same(landing(key).read(envOverFile), landing(key).b[1], `${key}: environment over file`)
    t.same(landing(key).read(cliOverEnv), landing(key).a[1], `${key}: command line over environment`)
    t.same(landing(key).read(cliOverFile), landing(key).a[1], `${key}: command line over file`)
  }
})

t.test('bad values stop the start, naming the key', async (t) => {
  const cwd = dirWith()
  const cases: [Record<string, string>, string[], string, RegExp, ConfigErrorCode][] = [
    [{ SERVER_PORT: 'abc' }, [], 'server.port', /not an integer/, 'CONFIG_INVALID_VALUE'],
    [{}, ['--server.port=70000'], 'server.port', /out of range/, 'CONFIG_INVALID_VALUE'],
    [{ LEAF_JDBC_URL: 'redis://x/y' }, [], 'leaf.jdbc.url', /unknown scheme "redis" \(use jdbc:mysql:\/\/, mysql:\/\/, jdbc:postgresql:\/\/, postgres:\/\/ or sqlite:\)/, 'CONFIG_INVALID_VALUE'],
    [{ LEAF_JDBC_URL: 'postgres://db' }, [], 'leaf.jdbc.url', /must name one database/, 'CONFIG_INVALID_VALUE'],
    [{ LEAF_JDBC_URL: 'jdbc:mysql:loadbalance://h1,h2/leaf' }, [], 'leaf.jdbc.url', /uses the mysql:loadbalance:\/\/ form, which Leaf-TS does not read/, 'CONFIG_INVALID_VALUE'],
    [{}, ['--leaf.segment.trusted-stores=server_id 1,db1:3306'], 'leaf.segment.trusted-stores', /"db1:3306" is not a store identity/, 'CONFIG_INVALID_VALUE'],
    [{ LEAF_SEGMENT_ENABLE: 'yes' }, [], 'leaf.segment.enable', /not true or false/, 'CONFIG_INVALID_VALUE'],
    [{ LEAF_CONFIG: '/nonexistent/leaf.properties' }, [], 'LEAF_CONFIG', /cannot read \/nonexistent\/leaf\.properties \(ENOENT\)/, 'CONFIG_FILE_UNREADABLE'],
    [{}, ['--config=/nonexistent/leaf.properties'], '--config', /cannot read/, 'CONFIG_FILE_UNREADABLE'],
    [{ LEAF_CONFIG: '/nonexistent/a.properties' }, ['--config', '/nonexistent/b.properties'], '--config', /b\.properties/, 'CONFIG_FILE_UNREADABLE'],
    [{}, ['--no.such.key=1'], 'no.such.key', /not a configuration key/, 'UNKNOWN_KEY'],
    [{}, ['--server.port'], 'server.port', /no value/, 'CONFIG_BAD_ARGUMENT'],
    [{}, ['stray'], 'command line', /unexpected argument/, 'CONFIG_BAD_ARGUMENT'],
    [{ LEAF_BATCH_MAX: '0' }, [], 'leaf.batch.max', /out of range/, 'CONFIG_INVALID_VALUE'],
    [{ LOG_LEVEL: 'loud' }, [], 'log.level', /not a pino log level/, 'CONFIG_INVALID_VALUE'],
  ]
  for (const [env, argv, key, problem, code] of cases) {
    const err = t.throws(() => loadConfig({ cwd, env, argv })) as ConfigError
    t.ok(err instanceof ConfigError, `${key}: a ConfigError`)
    t.equal(err.key, key)
    t.equal(err.code, code, `${key}: ${code}`)
    t.match(err.message, problem)
  }
})

t.test('a start reports every configuration error at once, each on its own line', async (t) => {
  const dir = dirWith('leaf.segement.enable=true\nserver.port=80\n')
  const env = { SERVER_PORT: 'abc', LEAF_SNOWFLAKE_ZK_ADRESS: 'zk:2181' }
  const argv = ['--config', join(dir, 'leaf.properties'), '--leaf.batch.max=0', 'stray', '--leaf.admin.token-file=/nonexistent/token']
  const err = t.throws(() => loadConfig({ cwd: dir, env, argv })) as ConfigErrors
  t.ok(err instanceof ConfigErrors, 'a ConfigErrors')
  t.match(err, { name: 'ConfigErrors', code: 'CONFIG_ERRORS', key: 'command line' }, 'named by its first error')
  t.same(err.errors.map((e) => [e.key, e.code]), [
    ['command line', 'CONFIG_BAD_ARGUMENT'],
    ['leaf.segement.enable', 'UNKNOWN_KEY'],
    ['LEAF_SNOWFLAKE_ZK_ADRESS', 'UNKNOWN_KEY'],
    ['leaf.admin.token-file', 'CONFIG_FILE_UNREADABLE'],
    ['server.port', 'CONFIG_INVALID_VALUE'],
    ['leaf.batch.max', 'CONFIG_INVALID_VALUE'],
  ], 'the command line, the file\'s names, the environment\'s, the secret files, then each key\'s value')
  t.equal(err.message, err.errors.map((e) => e.message).join('\n'))
  t.type(err.errors[3]?.cause, Error, 'the file\'s error as the cause')

  // The rules between keys, once every key reads: each broken one named.
  const rules = t.throws(() => loadConfig({
    cwd: dirWith(),
    argv: ['--leaf.jdbc.url=redis://x', '--server.headers-timeout-ms=5000', '--server.request-timeout-ms=1000', '--leaf.admin.token=same', '--leaf.admin.view-token=same', '--leaf.snowflake.worker-id.source=zookeeper'],
  })) as ConfigErrors
  t.same(rules.errors.map((e) => [e.key, e.code]), [
    ['leaf.jdbc.url', 'CONFIG_INVALID_VALUE'],
    ['leaf.snowflake.worker-id.source', 'CONFIG_CONFLICT'],
    ['server.request-timeout-ms', 'CONFIG_CONFLICT'],
    ['leaf.admin.view-token', 'CONFIG_CONFLICT'],
  ])
  const values = t.throws(() => loadConfig({ cwd: dirWith(), argv: ['--server.port=x', '--server.headers-timeout-ms=5000', '--server.request-timeout-ms=1000'] })) as ConfigError
  t.match(values, { key: 'server.port', code: 'CONFIG_INVALID_VALUE' }, 'a bad value alone: the rules wait for every key to read')
})

t.test('the command line: --key=value and --key value, each key and --config; nothing else', async (t) => {
  const cwd = dirWith()
  const file = join(dirWith('server.port=1111\n'), 'leaf.properties')
  const port = (...argv: string[]) => loadConfig({ cwd, argv }).config.server.port
  t.equal(port('--server.port=81'), 81)
  t.equal(port('--server.port', '82'), 82)
  t.equal(port('--server.port=81', '--server.port', '83'), 83, 'the last one wins')
  t.equal(port('--config', file), 1111)
  t.equal(port(`--config=${file}`, '--server.port=84'), 84)
  t.equal(loadConfig({ cwd, argv: ['--leaf.name', '--x'] }).config.name, '--x', 'the next argument is the value, whatever it looks like')
  t.equal(loadConfig({ cwd, argv: ['--spring.application.name', 'leaf'] }).config.server.port, 8080, 'a foreign key with its value, passed over')
  t.equal(port('--spring.x', '-1', '--server.port=85'), 85, 'a name that is not a key takes the next argument, even one like an option')
  t.equal(port('--spring.x', '--y', '--server.port', '86'), 86, 'and one that looks like a name')
  for (const argv of [['-p', '80'], ['-xy'], ['--', '--server.port=80']]) {
    const err = t.throws(() => loadConfig({ cwd, argv })) as ConfigError
    t.match(err, { code: /^CONFIG_BAD_ARGUMENT|CONFIG_ERRORS$/, key: 'command line', message: new RegExp(`^command line: unexpected argument "${(argv[0] as string).replace('-', '\\-')}"`) }, argv.join(' '))
  }
})

/** A folder holding the given files; returns the folder. */
function filesIn (files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-secrets-'))
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content)
  return dir
}

t.test('a secret from its -file key: the content without its final newline, landing where the key does', async (t) => {
  const dir = filesIn({ token: 'adm1n-s3cret\n', view: 'v1ew-s3cret\r\n', password: 'pass word \n', zk: 'digest:leaf:zk-pw', kept: 'two-newlines\n\n' })
  const { config } = loadConfig({
    cwd: dirWith(),
    env: { LEAF_JDBC_URL: 'jdbc:mysql://db/leaf', LEAF_ADMIN_TOKEN_FILE: join(dir, 'token'), LEAF_JDBC_PASSWORD_FILE: join(dir, 'password') },
    argv: [`--leaf.admin.view-token-file=${join(dir, 'view')}`, `--leaf.snowflake.zk.auth-file=${join(dir, 'zk')}`],
  })
  t.equal(config.adminToken, 'adm1n-s3cret', 'the final newline dropped')
  t.equal(config.adminViewToken, 'v1ew-s3cret', 'a final CRLF too')
  t.match(config.segment.store, { kind: 'mysql', password: 'pass word ' }, 'the rest kept as written, spaces too')
  t.equal(config.snowflake.zkAuth, 'digest:leaf:zk-pw', 'a file without a final newline is read whole')
  const kept = loadConfig({ cwd: dirWith(), env: { LEAF_JDBC_URL: 'jdbc:mysql://db/leaf' }, argv: [`--leaf.jdbc.password-file=${join(dir, 'kept')}`] }).config
  t.match(kept.segment.store, { password: 'two-newlines\n' }, 'one final newline dropped, not every one')
  t.equal(loadConfig({ cwd: dirWith(), argv: [`--leaf.admin.token-file=  ${join(dir, 'token')}  `] }).config.adminToken, 'adm1n-s3cret', 'the path is trimmed')
  t.equal(loadConfig({ cwd: dirWith(), argv: ['--leaf.admin.token-file='] }).config.adminToken, '', 'an empty -file key is not set')
})

t.test('an unreadable or empty secret file refuses the start, naming the file key and the file', async (t) => {
  const dir = filesIn({ empty: '', newline: '\n' })
  mkdirSync(join(dir, 'folder'))
  const cases: [string, RegExp][] = [
    [join(dir, 'missing'), new RegExp(`cannot read ${join(dir, 'missing')} \\(ENOENT\\)`)],
    [join(dir, 'folder'), /cannot read .*folder \(EISDIR\)/],
    [join(dir, 'empty'), /empty\/?.* is empty: write the secret in it, or unset leaf\.admin\.view-token-file/],
    [join(dir, 'newline'), /newline is empty/],
  ]
  for (const [path, problem] of cases) {
    const err = t.throws(() => loadConfig({ cwd: dirWith(), argv: [`--leaf.admin.view-token-file=${path}`] })) as ConfigError
    t.ok(err instanceof ConfigError, `${path}: a ConfigError`)
    t.equal(err.key, 'leaf.admin.view-token-file', 'named by the file key')
    t.match(err.message, problem)
  }
})

t.test('a secret file beside a value for its key is refused: the secret is given one way', async (t) => {
  const dir = filesIn({ token: 'from-the-file' })
  const both: [Record<string, string>, string[], string][] = [
    [{ LEAF_ADMIN_TOKEN: 'from-the-env' }, [`--leaf.admin.token-file=${join(dir, 'token')}`], 'leaf.admin.token-file'],
    [{}, [`--leaf.admin.view-token-file=${join(dir, 'token')}`, '--leaf.admin.view-token=from-argv'], 'leaf.admin.view-token-file'],
    [{ LEAF_JDBC_PASSWORD: 'pw', LEAF_JDBC_PASSWORD_FILE: join(dir, 'token') }, [], 'leaf.jdbc.password-file'],
    [{ LEAF_SNOWFLAKE_ZK_AUTH: 'digest:a:b' }, [`--leaf.snowflake.zk.auth-file=${join(dir, 'token')}`], 'leaf.snowflake.zk.auth-file'],
  ]
  for (const [env, argv, fileKey] of both) {
    const key = SECRET_FILE_KEYS[fileKey as FileKey]
    const err = t.throws(() => loadConfig({ cwd: dirWith(), env, argv })) as ConfigError
    t.equal(err.key, fileKey)
    t.equal(err.message, `${fileKey}: is set, and so is ${key}: give the secret one way`)
  }
  const fileDir = dirWith(`leaf.admin.token=in-the-properties\nleaf.admin.token-file=${join(dir, 'token')}\n`)
  t.throws(() => loadConfig({ argv: ['--config', join(fileDir, 'leaf.properties')] }), { name: 'ConfigError', code: 'CONFIG_CONFLICT', message: /^leaf\.admin\.token-file: is set, and so is leaf\.admin\.token/ }, 'both in the file')
  const overridden = loadConfig({ argv: ['--config', join(fileDir, 'leaf.properties'), '--leaf.admin.token='] }).config
  t.equal(overridden.adminToken, 'from-the-file', 'the key emptied by a later source: the file alone gives it')
})

t.test('a password file beside a password in leaf.jdbc.url is refused: the URL\'s would win', async (t) => {
  const dir = filesIn({ pw: 'from-the-file\n' })
  for (const url of ['jdbc:mysql://db/leaf?user=u&password=old', 'mysql://u:old@db/leaf', 'jdbc:postgresql://db/leaf?Password=old']) {
    t.throws(() => loadConfig({ cwd: dirWith(), argv: [`--leaf.jdbc.url=${url}`, `--leaf.jdbc.password-file=${join(dir, 'pw')}`] }),
      { name: 'ConfigError', code: 'CONFIG_CONFLICT', message: 'leaf.jdbc.password-file: is set, and leaf.jdbc.url carries a password too, which would win: give the password one way (remove it from the URL)' }, url)
  }
  const store = loadConfig({ cwd: dirWith(), argv: ['--leaf.jdbc.url=jdbc:mysql://db/leaf?user=u', `--leaf.jdbc.password-file=${join(dir, 'pw')}`] }).config.segment.store
  t.match(store, { kind: 'mysql', user: 'u', password: 'from-the-file' }, 'a user in the URL and the password from the file')
})

t.test('a relative secret file is read from the config file\'s folder, else the install folder; never the working folder', async (t) => {
  const config = filesIn({ 'view.txt': 'beside-the-config\n' })
  writeFileSync(join(config, 'leaf.properties'), 'leaf.admin.view-token-file=view.txt\n')
  mkdirSync(join(config, 'secrets'))
  writeFileSync(join(config, 'secrets', 'admin'), 'in-a-subfolder\n')
  const install = filesIn({ 'view.txt': 'in-the-install-folder\n' })
  const cwd = filesIn({ 'view.txt': 'in-the-working-folder\n' })
  const fromFile = loadConfig({ cwd, installDir: install, argv: ['--config', join(config, 'leaf.properties'), '--leaf.admin.token-file=secrets/admin'] }).config
  t.equal(fromFile.adminViewToken, 'beside-the-config', 'named in the file: the file\'s folder')
  t.equal(fromFile.adminToken, 'in-a-subfolder', 'named on the command line, with a file: the file\'s folder too')
  const noFile = loadConfig({ cwd, installDir: install, argv: ['--leaf.admin.view-token-file=./view.txt'] }).config
  t.equal(noFile.adminViewToken, 'in-the-install-folder', 'no config file: the install folder')
})

t.test('a secret never appears in an error message', async (t) => {
  const SECRET = 'Sup3r-S3cret-Value'
  const dir = filesIn({ spaced: ` ${SECRET}\n`, twice: `${SECRET}\n\n`, zk: `digest-${SECRET}`, same: `${SECRET}\n` })
  const failures: [Record<string, string>, string[], string, RegExp][] = [
    [{}, [`--leaf.admin.token-file=${join(dir, 'spaced')}`], 'leaf.admin.token-file', /the file's content: starts or ends with white space/],
    [{}, [`--leaf.admin.view-token-file=${join(dir, 'twice')}`], 'leaf.admin.view-token-file', /the file's content: starts or ends with white space/],
    [{}, [`--leaf.snowflake.zk.auth-file=${join(dir, 'zk')}`], 'leaf.snowflake.zk.auth-file', /the file's content: is not digest:user:password/],
    [{}, [`--leaf.admin.token=${SECRET} `], 'leaf.admin.token', /starts or ends with white space/],
    [{ LEAF_ADMIN_TOKEN: SECRET }, [`--leaf.admin.view-token=${SECRET}`], 'leaf.admin.view-token', /is the same as leaf\.admin\.token/],
    [{ LEAF_ADMIN_TOKEN: SECRET }, [`--leaf.admin.view-token-file=${join(dir, 'same')}`], 'leaf.admin.view-token-file', /is the same as leaf\.admin\.token/],
    [{ LEAF_ADMIN_TOKEN: SECRET }, [`--leaf.admin.token-file=${join(dir, 'same')}`], 'leaf.admin.token-file', /is set, and so is leaf\.admin\.token/],
  ]
  for (const [env, argv, key, problem] of failures) {
    const err = t.throws(() => loadConfig({ cwd: dirWith(), env, argv })) as ConfigError
    t.equal(err.key, key, `${key}: named`)
    t.match(err.message, problem)
    t.notMatch(err.message, SECRET, `${key}: the secret is not in "${err.message}"`)
  }
})

t.test('the view token must differ from the admin token: the start is refused in one line naming the key', async (t) => {
  const err = t.throws(() => loadConfig({ cwd: dirWith(), argv: ['--leaf.admin.token=same-token', '--leaf.admin.view-token=same-token'] })) as ConfigError
  t.equal(err.message, 'leaf.admin.view-token: is the same as leaf.admin.token, so it would manage tags too: give the viewers a token of their own, or unset it')
  const both = loadConfig({ cwd: dirWith(), argv: ['--leaf.admin.token=admin-token', '--leaf.admin.view-token=view-token'] }).config
  t.same([both.adminToken, both.adminViewToken], ['admin-token', 'view-token'], 'two different tokens')
  t.same(loadConfig({ cwd: dirWith(), argv: ['--leaf.admin.view-token=view-token'] }).config.adminViewToken, 'view-token', 'the view token alone')
})

t.test('the file: --config, then LEAF_CONFIG, then ./config/leaf.properties, then the shipped one', async (t) => {
  const fileWith = (port: number) => join(dirWith(`server.port=${port}\n`), 'leaf.properties')
  const cli = fileWith(1001)
  const env = fileWith(1002)
  const shipped = fileWith(1004)
  const cwd = dirWith()
  mkdirSync(join(cwd, 'config'))
  writeFileSync(join(cwd, 'config/leaf.properties'), 'server.port=1003\n')
  const load = (o: { argv?: string[], env?: Record<string, string>, cwd?: string }) => {
    const { config, file, fileFrom } = loadConfig({ cwd, shippedPath: shipped, ...o })
    return { port: config.server.port, file, fileFrom }
  }
  t.same(load({ argv: ['--config', cli], env: { LEAF_CONFIG: env } }), { port: 1001, file: cli, fileFrom: '--config' }, '--config first')
  t.same(load({ env: { LEAF_CONFIG: env } }), { port: 1002, file: env, fileFrom: 'LEAF_CONFIG' }, 'then LEAF_CONFIG')
  t.same(load({}), { port: 1003, file: join(cwd, 'config/leaf.properties'), fileFrom: 'config/leaf.properties' }, 'then ./config/leaf.properties')
  t.same(load({ cwd: dirWith() }), { port: 1004, file: shipped, fileFrom: 'shipped' }, 'then the shipped file, from a folder without one')
  t.same(load({ env: { LEAF_CONFIG: '' }, argv: ['--config='] }), { port: 1003, file: join(cwd, 'config/leaf.properties'), fileFrom: 'config/leaf.properties' }, 'empty names count as unset')
  const none = loadConfig({ cwd: dirWith(), shippedPath: join(dirWith(), 'missing.properties') })
  t.same([none.file, none.fileFrom, none.config.server.port], [undefined, undefined, 8080], 'no file anywhere: the built-in defaults')

  const unreadable = dirWith()
  mkdirSync(join(unreadable, 'config/leaf.properties'), { recursive: true })
  const err = t.throws(() => loadConfig({ cwd: unreadable, shippedPath: shipped })) as ConfigError
  t.equal(err.key, 'config/leaf.properties', 'a ./config/leaf.properties that cannot be read is an error, not passed over')
  t.match(err.message, /cannot read .*config\/leaf\.properties \(EISDIR\)/)
})

// --- Names that are not keys -----------------------------------------------------------

/** The UnknownKeyError or ForeignKeyError a load throws. */
function refusal (t: Test, options: Parameters<typeof loadConfig>[0], what: string): UnknownKeyError | ForeignKeyError {
  const err: unknown = t.throws(() => loadConfig(options), what)
  t.ok(err instanceof UnknownKeyError || err instanceof ForeignKeyError, `${what}: an UnknownKeyError or ForeignKeyError`)
  t.ok(err instanceof ConfigError, `${what}: a ConfigError, so server.ts exits 1 before anything runs`)
  return err as UnknownKeyError | ForeignKeyError
}

t.test('a mistyped key in the file refuses the start, naming the file, the line and the key meant', async (t) => {
  const text = [
    '# Java Leaf style',
    'leaf.name=typos',
    '',
    'leaf.snowflake.enable=true',
    'leaf.snowflake.zk.adress=127.0.0.1:2181',
    'leaf.segement.enable=true',
  ].join('\n')
  const dir = dirWith(text)
  const path = join(dir, 'leaf.properties')
  const all = t.throws(() => loadConfig({ cwd: dir, argv: ['--config', path] })) as ConfigErrors
  t.ok(all instanceof ConfigErrors && all instanceof ConfigError, 'both mistyped keys at once, still a ConfigError')
  t.equal(all.code, 'CONFIG_ERRORS')
  const [err, second] = all.errors
  t.match(err, { code: 'UNKNOWN_KEY', key: 'leaf.snowflake.zk.adress', where: `${path}:5`, suggestion: 'leaf.snowflake.zk.address' }, 'the first in file order')
  t.equal(err?.message, `leaf.snowflake.zk.adress: not a configuration key (${path}:5); did you mean leaf.snowflake.zk.address?`)
  t.match(second, { code: 'UNKNOWN_KEY', key: 'leaf.segement.enable', where: `${path}:6`, suggestion: 'leaf.segment.enable' }, 'then the next')
  t.equal(all.message, `${err?.message}\n${second?.message}`, 'one line each')

  const segement = refusal(t, { cwd: dir, argv: ['--config', join(dirWith('leaf.segement.enable=true\n'), 'leaf.properties')] }, 'leaf.segement.enable')
  t.match(segement, { code: 'UNKNOWN_KEY', key: 'leaf.segement.enable', suggestion: 'leaf.segment.enable', where: /leaf\.properties:1$/ })
  t.match(segement.message, /did you mean leaf\.segment\.enable\?$/)

  // Lines as Java counts them: a continued value is one logical line, \r\n and \r end a line.
  const continued = dirWith('leaf.name=a \\\n  b\r\n! comment\rserver.port=80\n\n  leaf.snowflake.workerId = 3\n')
  t.match(refusal(t, { cwd: continued, argv: ['--config=leaf.properties'] }, 'continued lines'),
    { key: 'leaf.snowflake.workerId', where: `${join(continued, 'leaf.properties')}:6`, suggestion: 'leaf.snowflake.worker.id' })

  const far = refusal(t, { cwd: dirWith('leaf.unknown=1\n'), argv: ['--config=leaf.properties'] }, 'leaf.unknown')
  t.match(far, { code: 'UNKNOWN_KEY', key: 'leaf.unknown', suggestion: undefined, message: /leaf\.unknown: not a configuration key \(.*:1\); remove it \(docs\/configuration\.md lists the keys\)$/ },
    'in leaf. with no key near: refused all the same')
  t.match(refusal(t, { cwd: dirWith('server.prot=80\n'), argv: ['--config=leaf.properties'] }, 'server.prot'), { code: 'UNKNOWN_KEY', suggestion: 'server.port' })
})

t.test('outside leaf. and server., a name a slip from a key is refused; any other is a warning naming its line', async (t) => {
  t.match(refusal(t, { cwd: dirWith('log.levle=debug\n'), argv: ['--config=leaf.properties'] }, 'log.levle'), { code: 'UNKNOWN_KEY', suggestion: 'log.level' })
  t.match(refusal(t, { cwd: dirWith('leaf-segment.enable=true\n'), argv: ['--config=leaf.properties'] }, 'leaf-segment.enable'), { suggestion: 'leaf.segment.enable' })
  const dir = dirWith('server.port=81\nmy.own.setting=1\n')
  const { config, warnings } = loadConfig({ cwd: dir, argv: ['--config=leaf.properties'] })
  t.equal(config.server.port, 81)
  t.same(warnings, [`${join(dir, 'leaf.properties')}:2: unknown key my.own.setting ignored`])
})

t.test('a mistyped key on the command line or in the environment: the same refusal and suggestion', async (t) => {
  const cwd = dirWith()
  t.match(refusal(t, { cwd, argv: ['--leaf.segement.enable=true'] }, 'argv'),
    { code: 'UNKNOWN_KEY', key: 'leaf.segement.enable', where: 'command line', suggestion: 'leaf.segment.enable', message: /^leaf\.segement\.enable: not a configuration key \(command line\); did you mean leaf\.segment\.enable\?$/ })
  t.match(refusal(t, { cwd, argv: ['--leaf.snowflake.zk.adress', 'zk:2181'] }, 'argv, two words'), { suggestion: 'leaf.snowflake.zk.address' })
  t.match(refusal(t, { cwd, argv: ['--nothing-like-a-key=1'] }, 'argv, far from every key'), { code: 'UNKNOWN_KEY', suggestion: undefined })

  const env = refusal(t, { cwd, env: { LEAF_SNOWFLAKE_ZK_ADRESS: '127.0.0.1:2181' } }, 'env')
  t.match(env, { code: 'UNKNOWN_KEY', key: 'LEAF_SNOWFLAKE_ZK_ADRESS', where: 'environment', suggestion: 'LEAF_SNOWFLAKE_ZK_ADDRESS' })
  t.equal(env.message, 'LEAF_SNOWFLAKE_ZK_ADRESS: not a configuration key (environment); did you mean LEAF_SNOWFLAKE_ZK_ADDRESS (leaf.snowflake.zk.address)?')
  t.match(refusal(t, { cwd, env: { LEAF_SEGEMENT_ENABLE: 'true' } }, 'LEAF_SEGEMENT_ENABLE'), { suggestion: 'LEAF_SEGMENT_ENABLE' })
  t.match(refusal(t, { cwd, env: { LEAF_SNOWFLAKE_ZOOKEEPER: 'zk:2181' } }, 'LEAF_ is Leaf-TS\'s: refused however far'), { code: 'UNKNOWN_KEY' })
  t.match(refusal(t, { cwd, env: { leaf_jdbc_url: 'sqlite:x.db' } }, 'lower case'), { key: 'leaf_jdbc_url', suggestion: 'LEAF_JDBC_URL' })
  t.match(refusal(t, { cwd, env: { SERVER_PROT: '80' } }, 'SERVER_PROT'), { suggestion: 'SERVER_PORT' })
  t.match(refusal(t, { cwd, env: { SERVER_HOTS: '127.0.0.1' } }, 'SERVER_HOTS'), { suggestion: 'SERVER_HOST' })
  t.match(refusal(t, { cwd, env: { LEAF_PORT: '8080' } }, 'a _PORT that is no service link'), { code: 'UNKNOWN_KEY', key: 'LEAF_PORT' })
})

t.test('variables that are not keys: the project\'s own, service links, and SERVER_ names of other programs', async (t) => {
  const env = {
    LEAF_CONFIG: '',
    LEAF_PG_BIN: '/usr/lib/postgresql/16/bin',
    LEAF_TEST_MYSQL_URL: 'mysql://leaf:leaf@127.0.0.1:3306',
    LEAF_TEST_SOMETHING_NEW: 'x',
    // Kubernetes, for the Services `leaf` and `leaf-ids` of config/kubernetes/.
    LEAF_SERVICE_HOST: '10.0.0.7',
    LEAF_SERVICE_PORT: '8080',
    LEAF_SERVICE_PORT_HTTP: '8080',
    LEAF_PORT: 'tcp://10.0.0.7:8080',
    LEAF_PORT_8080_TCP: 'tcp://10.0.0.7:8080',
    LEAF_PORT_8080_TCP_PROTO: 'tcp',
    LEAF_PORT_8080_TCP_PORT: '8080',
    LEAF_PORT_8080_TCP_ADDR: '10.0.0.7',
    LEAF_IDS_SERVICE_HOST: '10.0.0.8',
    LEAF_IDS_PORT: 'tcp://10.0.0.8:80',
    // CGI and others; Spring Boot's server keys Leaf-TS passes over.
    SERVER_SOFTWARE: 'Apache',
    SERVER_NAME: 'ci',
    SERVER_ADDR: '10.0.0.1',
    SERVER_PROTOCOL: 'HTTP/1.1',
    SERVER_HOME: '/srv',
    SERVER_URL: 'http://x',
    SERVER_TOMCAT_MAX_THREADS: '200',
    SERVER_SERVLET_CONTEXT_PATH: '/',
    HOME: '/root',
    LEAF: 'x',
    LEAFY_GREEN: 'x',
  }
  const { config } = loadConfig({ cwd: dirWith(), env })
  t.equal(config.server.port, 8080, 'none of them read')
  t.equal(config.snowflake.port, 8080)
})

t.test('Java Leaf\'s and Spring Boot\'s keys Leaf-TS does not use are passed over silently', async (t) => {
  const dir = dirWith([
    // leaf-server's leaf.properties, with its worker-id mode keys
    'leaf.name=com.sankuai.leaf.opensource.test',
    'leaf.segment.enable=false',
    'leaf.snowflake.enable=false',
    'leaf.snowflake.mode=zk',
    'leaf.snowflake.local.workIdMap={"10.1.46.33:8080":1}',
    // leaf-server's application.properties, and Spring Boot keys such a file may add
    'spring.freemarker.cache=false',
    'spring.freemarker.request-context-attribute=request',
    'server.port=8091',
    'server.tomcat.max-threads=400',
    'server.servlet.context-path=/',
    'server.ssl.enabled=false',
    'server.compression.enabled=true',
    'logging.level.root=info',
    'management.endpoints.web.exposure.include=health',
  ].join('\n'))
  const { config, warnings } = loadConfig({ cwd: dir, argv: ['--config=leaf.properties', '--server.tomcat.accept-count=100'], env: { SERVER_TOMCAT_MAX_THREADS: '400' } })
  t.equal(config.server.port, 8091)
  t.same(warnings, [], 'not even a warning')
})

t.test('Java Leaf\'s and Spring Boot\'s keys whose meaning Leaf-TS would lose are refused with the fix', async (t) => {
  const cases: [string, RegExp][] = [
    ['leaf.snowflake.mode=local', /^leaf\.snowflake\.mode: "local", a Java Leaf worker-id mode Leaf-TS does not read \(.*:1\); remove it and set leaf\.snowflake\.worker-id\.source/],
    ['leaf.snowflake.mode=mysql', /"mysql", a Java Leaf worker-id mode/],
    ['server.address=127.0.0.1', /^server\.address: Spring Boot's listen address, which Leaf-TS does not read .*; set server\.host instead$/],
    ['server.servlet.context-path=/leaf', /path prefix; Leaf-TS serves its routes at the root/],
    ['server.context-path=/leaf', /path prefix/],
    ['server.ssl.key-store=keystore.p12', /Spring Boot's TLS, from a Java key store, .* \(.*\); remove it, and give server\.tls\.cert and server\.tls\.key/],
  ]
  for (const [line, message] of cases) {
    const err = refusal(t, { cwd: dirWith(`${line}\n`), argv: ['--config=leaf.properties'] }, line)
    t.match(err, { code: 'UNSUPPORTED_KEY', key: line.split('=')[0], message }, line)
  }
  t.match(refusal(t, { cwd: dirWith(), env: { SERVER_ADDRESS: '127.0.0.1' } }, 'SERVER_ADDRESS'), { code: 'UNSUPPORTED_KEY', where: 'environment' })
  t.match(refusal(t, { cwd: dirWith(), argv: ['--leaf.snowflake.mode=local'] }, '--leaf.snowflake.mode=local'), { code: 'UNSUPPORTED_KEY', where: 'command line' })
})

t.test('a Java leaf.properties without the enable keys: both modes on, as leaf-server reads it', async (t) => {
  const java = (extra: string) => dirWith(`leaf.name=com.sankuai.leaf.opensource.test\nleaf.jdbc.url=jdbc:mysql://db.local:3306/leaf\nleaf.jdbc.username=root\n${extra}`)
  const { config } = loadConfig({ argv: ['--config', join(java('leaf.snowflake.zk.address=zk.local:2181\nleaf.snowflake.port=9090\n'), 'leaf.properties')] })
  t.equal(config.segment.enabled, true, 'leaf.segment.enable missing: on')
  t.equal(config.snowflake.enabled, true, 'leaf.snowflake.enable missing: on')
  t.equal(config.snowflake.workerIdSource, 'zookeeper')
  t.doesNotThrow(() => resolveSnowflakeSettings(config.snowflake), 'ZooKeeper named: it starts')
  const off = loadConfig({ argv: ['--config', join(java(''), 'leaf.properties')], env: { LEAF_SNOWFLAKE_ENABLE: 'false' } }).config
  t.equal(off.snowflake.enabled, false, 'the environment still turns it off')
  t.doesNotThrow(() => resolveSnowflakeSettings(off.snowflake))
})

t.test('snowflake on with no worker-id source named: refused, naming leaf.snowflake.zk.address, as leaf-server refuses', async (t) => {
  const refused = (options: Parameters<typeof loadConfig>[0]) => t.throws(() => resolveSnowflakeSettings(loadConfig({ cwd: dirWith(), ...options }).config.snowflake),
    { code: 'CONFIG_CONFLICT', key: 'leaf.snowflake.zk.address', message: /^leaf\.snowflake\.zk\.address: is not set and snowflake mode is on .*or set leaf\.snowflake\.enable=false$/ })
  refused({})
  refused({ argv: ['--config=leaf.properties'], cwd: dirWith('leaf.segment.enable=true\n') })
  refused({ argv: ['--leaf.snowflake.enable=true'], env: { LEAF_SNOWFLAKE_WORKER_ID_SOURCE: '' } })
  const starts = (options: Parameters<typeof loadConfig>[0], why: string) => t.doesNotThrow(() => resolveSnowflakeSettings(loadConfig({ cwd: dirWith(), ...options }).config.snowflake), why)
  starts({ argv: ['--leaf.snowflake.worker-id.source=static'] }, 'the static source chosen')
  starts({ env: { LEAF_SNOWFLAKE_WORKER_ID: '0' } }, 'a worker id given, 0 included')
  starts({ argv: ['--config=leaf.properties'], cwd: dirWith('leaf.snowflake.worker.id=4\n') }, 'a worker id given in the file')
  starts({ argv: ['--leaf.snowflake.zk.address=127.0.0.1:2181'] }, 'ZooKeeper')
  starts({ argv: ['--leaf.snowflake.worker-id.source=statefulset'] }, 'another source')
  starts({ argv: ['--leaf.snowflake.enable=false'] }, 'snowflake mode off')
})

t.test('the shipped file\'s static worker id 0: it starts, with a warning that a fleet needs a source', async (t) => {
  const shippedPath = join(import.meta.dirname, '../../config/leaf.properties')
  const warned = (options: Parameters<typeof loadConfig>[0]) => loadConfig({ cwd: dirWith(), shippedPath, ...options }).warnings.filter((w) => /a fleet needs a worker-id source/.test(w))
  const fleet = warned({})
  t.equal(fleet.length, 1, 'the shipped file, found as the shipped one')
  t.match(fleet[0], /static worker id 0 of the shipped config file, .*every instance started so issues the same IDs/)
  const installDir = join(import.meta.dirname, '../..')
  t.equal(warned({ cwd: installDir }).length, 1, 'the shipped file, found as ./config/leaf.properties of the install folder (npm start, the image)')
  t.same(warned({ env: { LEAF_SNOWFLAKE_WORKER_ID: '0' } }), [], 'a worker id given, 0 included')
  t.same(warned({ argv: ['--leaf.snowflake.worker-id.source=static'] }), [], 'the static source chosen')
  t.same(warned({ argv: ['--leaf.snowflake.zk.address=127.0.0.1:2181'] }), [], 'ZooKeeper')
  t.same(warned({ argv: ['--config=leaf.properties'], cwd: dirWith('leaf.snowflake.worker.id=0\n') }), [], 'a worker id in a file of the user\'s')
  t.same(warned({ argv: ['--leaf.snowflake.enable=false'] }), [], 'snowflake mode off')
})

t.test('edit distance: insertions, deletions, substitutions and swaps of neighbours count 1', async (t) => {
  t.equal(editDistance('leaf.segement.enable', 'leaf.segment.enable'), 1)
  t.equal(editDistance('leaf.snowflake.zk.adress', 'leaf.snowflake.zk.address'), 1)
  t.equal(editDistance('SERVER_PROT', 'SERVER_PORT'), 1, 'a swap')
  t.equal(editDistance('abc', 'abc'), 0)
  t.equal(editDistance('', 'abc'), 3)
  t.equal(editDistance('kitten', 'sitting'), 3)
  t.equal(nearestKey('leaf.snowflake.zookeeper.address'), 'leaf.snowflake.zk.address')
  t.equal(nearestKey('something.else.entirely'), undefined)
})

t.test('JDBC URLs in every accepted form', async (t) => {
  t.same(parseJdbcUrl('', '', ''), { kind: 'sqlite', path: './data/leaf.db', embeddedDefault: true })
  t.same(parseJdbcUrl('sqlite:/tmp/x.db', '', ''), { kind: 'sqlite', path: '/tmp/x.db' })
  t.same(parseJdbcUrl('jdbc:mysql://localhost:3306/leaf?useUnicode=true&characterEncoding=utf8', 'u', 'p'),
    { kind: 'mysql', hosts: [{ host: 'localhost', port: 3306 }], user: 'u', password: 'p', database: 'leaf', tls: PREFER })
  t.same(parseJdbcUrl('jdbc:mysql://db/leaf', 'u', 'p'), { kind: 'mysql', hosts: [{ host: 'db', port: 3306 }], user: 'u', password: 'p', database: 'leaf', tls: PREFER })
  t.same(parseJdbcUrl('mysql://me:p%40ss@127.0.0.1:3307/ids', 'u', 'p'),
    { kind: 'mysql', hosts: [{ host: '127.0.0.1', port: 3307 }], user: 'me', password: 'p@ss', database: 'ids', tls: PREFER })
  t.same(parseJdbcUrl('jdbc:mysql://h:1/d?user=a&password=b', '', ''), { kind: 'mysql', hosts: [{ host: 'h', port: 1 }], user: 'a', password: 'b', database: 'd', tls: PREFER })
  t.throws(() => parseJdbcUrl('sqlite:', '', ''), /needs a file path/)
  t.throws(() => parseJdbcUrl('mysql://host', '', ''), /must name one database/)
  t.throws(() => parseJdbcUrl('redis://x', '', ''), /unknown scheme "redis"/)
  t.throws(() => parseJdbcUrl('mysql://leaf:50%off@db/leaf', '', ''), { name: 'ConfigError', message: /malformed percent-encoding in its password/ })
  // Connector/J's failover list, in either form; each host with its own port or 3306.
  t.same(parseJdbcUrl('jdbc:mysql://h1:3307,h2,[::1]:3308/leaf?useUnicode=true&characterEncoding=utf8', 'u', 'p'),
    { kind: 'mysql', hosts: [{ host: 'h1', port: 3307 }, { host: 'h2', port: 3306 }, { host: '::1', port: 3308 }], user: 'u', password: 'p', database: 'leaf', tls: PREFER })
  t.same(parseJdbcUrl('mysql://me:p%40ss,x@a:1,b:2/ids', '', ''),
    { kind: 'mysql', hosts: [{ host: 'a', port: 1 }, { host: 'b', port: 2 }], user: 'me', password: 'p@ss,x', database: 'ids', tls: PREFER }, 'a comma in the password is not a host')
  t.throws(() => parseJdbcUrl('mysql://a,,b/leaf', '', ''), { name: 'ConfigError', message: 'leaf.jdbc.url: host "" is not a host or host:port' })
  t.throws(() => parseJdbcUrl('jdbc:mysql://a:3306,b:x/leaf', '', ''), { message: 'leaf.jdbc.url: host "b:x" is not a host or host:port' })
  t.throws(() => parseJdbcUrl('mysql://a,b:0/leaf', '', ''), { message: 'leaf.jdbc.url: host "b:0" has port 0' })
  t.throws(() => parseJdbcUrl('mysql://a,b:70000/leaf', '', ''), { message: 'leaf.jdbc.url: host "b:70000" is not a host or host:port' })
  t.throws(() => parseJdbcUrl('mysql:///leaf', '', ''), { message: 'leaf.jdbc.url: has no host' })
  // A password with an unencoded '/' ends the host list inside it: the error names no part of it.
  t.throws(() => parseJdbcUrl('mysql://leaf:s3cr/et@db/leaf', '', ''), { message: 'leaf.jdbc.url: has a host list that cannot be read: a user or password with \'/\', \'?\' or \'#\' must be percent-encoded' })
  t.match(parseJdbcUrl('jdbc:mysql://db/leaf?user=leaf@server', '', ''), { hosts: [{ host: 'db' }], user: 'leaf@server' }, 'an \'@\' in a query parameter is no credential')
})

t.test('Connector/J and MariaDB Connector/J host-list forms: read, or refused in one line naming the form', async (t) => {
  const two = [{ host: 'h1', port: 3306 }, { host: 'h2', port: 3307 }]
  t.same(parseJdbcUrl('jdbc:mysql:replication://h1,h2:3307/leaf', 'u', 'p'), { kind: 'mysql', hosts: two, user: 'u', password: 'p', database: 'leaf', replication: true, tls: PREFER },
    'replication: the source first, written alone')
  t.same(parseJdbcUrl('jdbc:mariadb:replication://h1,h2:3307/leaf', 'u', 'p'), { kind: 'mysql', hosts: two, user: 'u', password: 'p', database: 'leaf', replication: true, tls: PREFER })
  for (const form of ['jdbc:mariadb:sequential', 'jdbc:mariadb:failover', 'jdbc:mariadb', 'jdbc:mysql']) {
    t.same(parseJdbcUrl(`${form}://h1,h2:3307/leaf`, 'u', 'p'), { kind: 'mysql', hosts: two, user: 'u', password: 'p', database: 'leaf', tls: PREFER }, `${form}: a failover list`)
  }
  for (const [url, form] of [
    ['jdbc:mysql:loadbalance://h1,h2/leaf', 'mysql:loadbalance'],
    ['jdbc:mariadb:loadbalance://h1,h2/leaf', 'mariadb:loadbalance'],
    ['jdbc:mariadb:aurora://cluster/leaf', 'mariadb:aurora'],
    ['jdbc:mysql:srv://_mysql._tcp.example/leaf', 'mysql:srv'],
    ['jdbc:mysql:fabric://h/leaf', 'mysql:fabric'],
  ] as const) {
    const err = t.throws(() => parseJdbcUrl(url, '', '')) as Error
    t.equal(err.name, 'ConfigError', url)
    t.match(err.message, new RegExp(`^leaf\\.jdbc\\.url: uses the ${form}:// form, which Leaf-TS does not read: `), url)
    t.notMatch(err.message, /unknown scheme|\n/, url)
  }
  t.match((t.throws(() => parseJdbcUrl('jdbc:mysql:loadbalance://h1,h2/leaf', '', '')) as Error).message, /split brain by design/)
})

t.test('PostgreSQL URLs: Java\'s jdbc:postgresql:// with the user and password keys, and libpq\'s postgres:// and postgresql://', async (t) => {
  t.same(parseJdbcUrl('jdbc:postgresql://db.local:5433/leaf?ssl=false&ApplicationName=x', 'u', 'p'),
    { kind: 'postgres', host: 'db.local', port: 5433, user: 'u', password: 'p', database: 'leaf', tls: { mode: 'prefer', modeFrom: 'ssl=false' }, applicationName: 'x' })
  t.same(parseJdbcUrl('jdbc:postgresql://db/leaf', 'u', 'p'), { kind: 'postgres', host: 'db', port: 5432, user: 'u', password: 'p', database: 'leaf', tls: PREFER }, 'port 5432 by default')
  t.same(parseJdbcUrl('jdbc:postgresql://db/leaf?user=a&password=b', 'u', 'p'), { kind: 'postgres', host: 'db', port: 5432, user: 'a', password: 'b', database: 'leaf', tls: PREFER }, 'PgJDBC\'s user and password parameters')
  t.same(parseJdbcUrl('postgres://me:p%40ss@127.0.0.1:25432/ids', 'u', 'p'), { kind: 'postgres', host: '127.0.0.1', port: 25432, user: 'me', password: 'p@ss', database: 'ids', tls: PREFER })
  t.same(parseJdbcUrl('postgresql://me@[::1]/ids', '', 'pw'), { kind: 'postgres', host: '::1', port: 5432, user: 'me', password: 'pw', database: 'ids', tls: PREFER })
  t.throws(() => parseJdbcUrl('postgres://a,b/leaf', '', ''), { name: 'ConfigError', message: 'leaf.jdbc.url: names several PostgreSQL hosts: give one (a proxy or virtual IP in front of a failover pair)' })
  t.throws(() => parseJdbcUrl('jdbc:postgresql://db:0/leaf', '', ''), { name: 'ConfigError', message: 'leaf.jdbc.url: host "db:0" has port 0' })
  t.throws(() => parseJdbcUrl('postgresql:///leaf', '', ''), { name: 'ConfigError', message: 'leaf.jdbc.url: has no host' })
  t.throws(() => parseJdbcUrl('postgres://db/', '', ''), { name: 'ConfigError', message: /must name one database/ })
  t.throws(() => parseJdbcUrl('postgres://leaf:50%off@db/leaf', '', ''), { name: 'ConfigError', message: /malformed percent-encoding in its password/ })
  t.throws(() => parseJdbcUrl('jdbc:postgres://db/leaf', '', ''), { name: 'ConfigError', message: /unknown scheme "jdbc"/ }, 'PgJDBC spells it postgresql')
})

t.test('string values are kept as Java\'s Properties reads them: an escaped trailing space stays', async (t) => {
  const dir = dirWith([
    'leaf.jdbc.url=jdbc:mysql://db/leaf',
    'leaf.jdbc.username=\\ leaf',
    'leaf.jdbc.password=pass\\ ',
    'leaf.admin.token=  tok\\tx',
    'server.port = 81  ',
    'leaf.segment.enable = true ',
    'log.level = debug ',
  ].join('\n'))
  const { config } = loadConfig({ argv: ['--config', join(dir, 'leaf.properties')] })
  t.match(config.segment.store, { kind: 'mysql', user: ' leaf', password: 'pass ' })
  t.equal(config.adminToken, 'tok\tx', 'leading separator space dropped, escaped characters kept')
  t.equal(config.server.port, 81, 'numbers still read leniently')
  t.equal(config.segment.enabled, true, 'booleans still read leniently')
  t.equal(config.logLevel, 'debug', 'the log level is one of a set: read leniently')
  const fromEnv = loadConfig({ cwd: dirWith(), env: { LEAF_JDBC_URL: 'jdbc:mysql://db/leaf', LEAF_JDBC_PASSWORD: ' p ' }, argv: ['--leaf.jdbc.username=u '] })
  t.match(fromEnv.config.segment.store, { user: 'u ', password: ' p ' }, 'environment and command line values kept as given')
  t.throws(() => loadConfig({ cwd: dirWith(), argv: ['--leaf.admin.token=tok '] }), { name: 'ConfigError', message: /leaf.admin.token: starts or ends with white space/ },
    'a token no header can carry is refused')
  const named = loadConfig({ cwd: dirWith(), env: { LEAF_NAME: 'leaf ', LEAF_SNOWFLAKE_ZK_ADDRESS: ' 127.0.0.1:2181' } }).config
  t.same([named.name, named.snowflake.zkAddress], ['leaf', '127.0.0.1:2181'], 'names and addresses trimmed: a stray space must not move the instance to another ZooKeeper tree')
})

t.test('layout: a preset or a spec, one clear error naming the key when bad; the worker-id range follows its worker bits', async (t) => {
  const raw = loadConfig({ cwd: dirWith(), argv: ['--leaf.snowflake.layout= js-safe'] }).config.snowflake
  t.same([raw.layoutSpec, raw.workerIdMax], ['js-safe', undefined], 'the loader keeps the spec and the max as given')
  // As server.ts: loaded, then the snowflake section resolved (config/resolve-config.ts).
  const load = (...argv: string[]) => resolveSnowflakeSettings(loadConfig({ cwd: dirWith(), argv: ['--leaf.snowflake.worker-id.source=static', ...argv] }).config.snowflake)
  const leaf = load()
  t.equal(leaf.layout.name, 'leaf')
  t.equal(leaf.workerIdMax, 1023, 'the leaf layout: worker ids up to 1023')
  t.equal(leaf.layout.epoch, 1288834974657, 'with twepoch')
  t.equal(load('--leaf.snowflake.twepoch=1500000000000').layout.epoch, 1500000000000, 'twepoch moves the leaf layout\'s epoch')
  const js = load('--leaf.snowflake.layout=js-safe')
  t.equal(js.workerIdMax, 255, 'js-safe: worker ids up to 255 by default')
  t.equal(load('--leaf.snowflake.layout=uid-generator,time=31s,worker=22,sequence=10').workerIdMax, 4194303, '22 worker bits')
  t.equal(load('--leaf.snowflake.layout=vesta-max-peak', '--leaf.snowflake.vesta.version=1').layout.fixedBits < 0n, true, 'Vesta version 1 sets the top bit')
  const bad: [string[], RegExp][] = [
    [['--leaf.snowflake.layout=leaf2'], /leaf\.snowflake\.layout: "leaf2" is neither a preset/],
    [['--leaf.snowflake.layout=time=41ms,worker=12,sequence=12'], /leaf\.snowflake\.layout: the fields take 65 bits, more than the 63/],
    [['--leaf.snowflake.layout=uid-generator'], /leaf\.snowflake\.layout: the 28-bit time field in seconds .* ran out on 2024/],
    [['--leaf.snowflake.layout=js-safe,epoch=2999-01-01T00:00:00Z'], /leaf\.snowflake\.layout: the epoch 2999-01-01T00:00:00.000Z lies in the future/],
    [['--leaf.snowflake.layout=js-safe', '--leaf.snowflake.worker-id.max=256'], /leaf\.snowflake\.worker-id\.max: 256 is above 255, the largest worker id of the js-safe layout's 8 worker bits/],
    [['--leaf.snowflake.layout=js-safe', '--leaf.snowflake.worker-id.min=300'], /leaf\.snowflake\.worker-id\.min: 300 is above 255/],
    [['--leaf.snowflake.layout=js-safe', '--leaf.snowflake.worker.id=256'], /leaf\.snowflake\.worker\.id: 256 is above 255/],
    [['--leaf.snowflake.worker-id.source=disposable'], /leaf\.snowflake\.worker-id\.source: disposable .* at least 16 worker bits/],
  ]
  for (const [argv, message] of bad) t.throws(() => load(...argv), { name: 'ConfigError', message }, argv.join(' '))
  t.equal(load('--leaf.snowflake.layout=uid-generator,time=31s,worker=22,sequence=10', '--leaf.snowflake.worker-id.source=disposable').workerIdSource, 'disposable',
    'disposable with 22 worker bits')
})
