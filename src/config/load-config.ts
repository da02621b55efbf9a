import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parse as parseProperties } from 'dot-properties'
import { CONFIG_KEYS, ConfigError, KEYS, envName, isConfigKey, type ConfigKey, type ParsedConfig, type RawConfig, type WorkerIdSource } from './keys.js'
import { parseJdbcUrl, type StoreConfig } from './jdbc-url.js'
import { resolveServerTls, type ServerTls } from './server-tls.js'
import { checkCommandLineKey, checkEnvironment, checkFileKeys } from './unknown-keys.js'

export { ConfigError } from './keys.js'
export { ForeignKeyError, UnknownKeyError } from './unknown-keys.js'
export type { StoreConfig } from './jdbc-url.js'

export const DEFAULT_CONFIG_PATH = 'config/leaf.properties'
/**
 * The package's folder, two up from src/config/: the default of LoadOptions.installDir when this
 * file runs unbundled (tests). The bundled server (dist/server.js) passes its own.
 */
export const INSTALL_DIR = fileURLToPath(new URL('../../', import.meta.url))

export interface Config {
  name: string
  server: ServerConfig
  /** leaf.instance.name as given; empty: `<host name>:<port>` (http/instance-name.ts). */
  instanceName: string
  logLevel: string
  batchMax: number
  adminToken: string
  /** leaf.admin.view-token: opens the views, not tag management; empty: none. */
  adminViewToken: string
  metrics: {
    /** leaf.metrics.max-tag-series: src/metrics/tag-series.ts. */
    maxTagSeries: number
  }
  segment: {
    enabled: boolean
    store: StoreConfig
    connectTimeoutMs: number
    poolSize: number
    queryTimeoutMs: number
    waitTimeoutMs: number
    refreshIntervalMs: number
    /** leaf.segment.failover-hold-ms, resolved: max-id-guard.ts. */
    failoverHoldMs: number
    bufferSeconds: number
    maxBufferedSegments: number
    /** The warm-start file's path; undefined: no warm start. */
    stateFile: string | undefined
    /** leaf.segment.trusted-stores: stores left in a failover that may be written again (segment/host-fence.ts). */
    trustedStores: string[]
  }
  snowflake: SnowflakeConfig
}

/** The HTTP server's keys (server.*): http/bound-server.ts makes the server from them. */
export interface ServerConfig {
  host: string
  port: number
  headersTimeoutMs: number
  requestTimeoutMs: number
  keepAliveTimeoutMs: number
  idleTimeoutMs: number
  /** 0: no bound. */
  maxConnections: number
  /** server.tls.cert and server.tls.key, read; undefined: plain HTTP. */
  tls: ServerTls | undefined
}

/** The snowflake keys' values as given (snowflake/settings.ts resolves the layout from them). */
export interface SnowflakeConfig {
  enabled: boolean
  zkAddress: string
  /** leaf.snowflake.zk.auth: `digest:user:password`, or empty for none. */
  zkAuth: string
  ip: string
  port: number
  workerId: number
  workerIdSource: WorkerIdSource
  workerIdMin: number
  /** As given; undefined: the layout's largest (resolved with the layout, snowflake/settings.ts). */
  workerIdMax: number | undefined
  /** Empty: the HOSTNAME variable. */
  hostname: string
  leaseTtlMs: number
  twepoch: number
  /** leaf.snowflake.layout as given: snowflake/settings.ts parses it. */
  layoutSpec: string
  /** Vesta's version and genMethod values (carried in the Vesta layouts' IDs). */
  vesta: { version: number, genMethod: number }
  borrowAheadMs: number
  cacheDir: string
  maxClockDriftMs: number
  heartbeatIntervalMs: number
  zkConnectTimeoutMs: number
  zkSessionTimeoutMs: number
}

/** What picked the file: the command line, the environment, the working directory, or the package. */
export type ConfigFileSource = '--config' | 'LEAF_CONFIG' | typeof DEFAULT_CONFIG_PATH | 'shipped'

export interface LoadedConfig {
  config: Config
  /** Where the file came from, or undefined when none was read. */
  file: string | undefined
  /** What named that file. */
  fileFrom: ConfigFileSource | undefined
  /** Things worth a log line that do not stop the start (unknown keys, ...). */
  warnings: string[]
  /** The folder relative paths (a `sqlite:` file, the warm-start file) were read from: the file's, else the install folder. */
  relativeTo: string
}

export interface LoadOptions {
  argv?: string[]
  env?: Record<string, string | undefined>
  cwd?: string
  /**
   * The package's own config/leaf.properties (server.ts passes the one beside dist/): read
   * when neither `--config`, `LEAF_CONFIG` nor `./config/leaf.properties` names a file.
   */
  shippedPath?: string
  /** The install folder (INSTALL_DIR unless given): the embedded store's, and relative paths' when no file is read. */
  installDir?: string
}

/**
 * Builds the configuration: built-in defaults < properties file < environment < command line.
 * The file is the first of: `--config PATH`, `LEAF_CONFIG`, `./config/leaf.properties` (from
 * `cwd`), the shipped one. Throws ConfigError naming the key on the first bad value.
 * leaf.snowflake.layout and leaf.snowflake.worker-id.max are kept as given: resolveConfig
 * (snowflake/settings.ts) parses the layout and checks the worker-id range against it.
 */
export function loadConfig ({ argv = [], env = {}, cwd = process.cwd(), shippedPath, installDir = INSTALL_DIR }: LoadOptions = {}): LoadedConfig {
  const warnings: string[] = []
  const cli = parseArgv(argv)
  const file = findPropertiesFile(cli.configPath, env.LEAF_CONFIG, cwd, shippedPath)

  if (file !== undefined) warnings.push(...checkFileKeys(file.path, file.text, file.values))
  checkEnvironment(env)

  const raw = Object.fromEntries(CONFIG_KEYS.map((k) => [k, KEYS[k].default])) as RawConfig
  for (const [k, v] of Object.entries(file?.values ?? {})) {
    if (isConfigKey(k)) raw[k] = v
  }
  for (const k of CONFIG_KEYS) {
    const v = env[envName(k)]
    if (v !== undefined) raw[k] = v // an empty variable overrides the file with an empty value
  }
  Object.assign(raw, cli.values)

  const bases = { relative: file === undefined ? installDir : dirname(file.path), install: installDir }
  const fromFile = readSecretFiles(raw, bases.relative)
  const parsed = {} as Record<ConfigKey, unknown>
  for (const k of CONFIG_KEYS) {
    try {
      parsed[k] = KEYS[k].parse(raw[k], k)
    } catch (err) {
      // A value read from a file is named by the key that named the file.
      const fileKey = fromFile.get(k)
      if (fileKey === undefined || !(err instanceof ConfigError)) throw err
      throw new ConfigError(fileKey, `the file's content: ${err.message.slice(k.length + 2)}`)
    }
  }
  const config = toConfig(parsed as ParsedConfig, bases)
  checkUrlPassword(config.segment.store, parsed as ParsedConfig, fromFile.has('leaf.jdbc.password'))
  checkWorkerIdSource(config.snowflake)
  checkServerTimeouts(config.server)
  checkAdminTokens(config, fromFile)
  // An empty value is the default, not a choice.
  const given = (k: ConfigKey) => [file?.values[k], env[envName(k)], cli.values[k]].some((v) => v !== undefined && v.trim() !== '')
  warnings.push(...staticWorkerIdWarning(config.snowflake, given))
  return { config, file: file?.path, fileFrom: file?.from, warnings, relativeTo: bases.relative }
}

/**
 * A password in leaf.jdbc.url wins over leaf.jdbc.password; beside leaf.jdbc.password-file it
 * would silently keep the one in the URL, which a move to a mounted secret means to retire.
 */
function checkUrlPassword (store: StoreConfig, p: ParsedConfig, passwordFromFile: boolean): void {
  if (!passwordFromFile || store.kind === 'sqlite' || store.password === p['leaf.jdbc.password']) return
  throw new ConfigError('leaf.jdbc.password-file', 'is set, and leaf.jdbc.url carries a password too, which would win: give the password one way (remove it from the URL)')
}

/** The keys whose value may come from a file (a Kubernetes or Docker secret), by their file key. */
export const SECRET_FILE_KEYS = {
  'leaf.jdbc.password-file': 'leaf.jdbc.password',
  'leaf.admin.token-file': 'leaf.admin.token',
  'leaf.admin.view-token-file': 'leaf.admin.view-token',
  'leaf.snowflake.zk.auth-file': 'leaf.snowflake.zk.auth',
} as const satisfies Partial<Record<ConfigKey, ConfigKey>>

/**
 * Puts each secret file's content (without its final newline) in `raw` under the key it stands
 * for; a relative path is read from `relativeTo`. Returns the keys so filled, by their file key.
 * An unreadable or empty file, or a file beside a value given for the key itself, is refused.
 */
function readSecretFiles (raw: RawConfig, relativeTo: string): Map<ConfigKey, ConfigKey> {
  const filled = new Map<ConfigKey, ConfigKey>()
  for (const [fileKey, key] of Object.entries(SECRET_FILE_KEYS) as [keyof typeof SECRET_FILE_KEYS, ConfigKey][]) {
    const given = raw[fileKey].trim()
    if (given === '') continue
    if (raw[key] !== '') throw new ConfigError(fileKey, `is set, and so is ${key}: give the secret one way`)
    const path = resolve(relativeTo, given)
    let content: string
    try {
      content = readFileSync(path, 'utf8')
    } catch (err) {
      throw new ConfigError(fileKey, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'}): give a file this process may read`)
    }
    content = content.replace(/\r?\n$/, '')
    if (content === '') throw new ConfigError(fileKey, `${path} is empty: write the secret in it, or unset ${fileKey}`)
    raw[key] = content
    filled.set(key, fileKey)
  }
  return filled
}

/**
 * The view token is read-only only while it differs from the admin token: the same secret given
 * for both would open tag management to everyone given it to view. Named by the key (or the file
 * key) it came from; the message never holds the secret.
 */
function checkAdminTokens (config: Config, fromFile: Map<ConfigKey, ConfigKey>): void {
  if (config.adminViewToken !== '' && config.adminViewToken === config.adminToken) {
    const key = fromFile.get('leaf.admin.view-token') ?? 'leaf.admin.view-token'
    throw new ConfigError(key, 'is the same as leaf.admin.token, so it would manage tags too: give the viewers a token of their own, or unset it')
  }
}

/** Node's own rule (its constructor throws on it): a request's headers are part of the request. */
function checkServerTimeouts (s: ServerConfig): void {
  if (s.requestTimeoutMs > 0 && s.headersTimeoutMs > s.requestTimeoutMs) {
    throw new ConfigError('server.request-timeout-ms', `${s.requestTimeoutMs} is less than server.headers-timeout-ms (${s.headersTimeoutMs}): receiving a request includes its headers; raise it, or lower server.headers-timeout-ms`)
  }
}

/**
 * Rules between the worker-id source and the keys it needs that no single key's parser can see.
 * The rules that need the layout (the worker-id range against its worker bits) are
 * snowflake/settings.ts's.
 */
function checkWorkerIdSource (s: SnowflakeConfig): void {
  if ((s.workerIdSource === 'zookeeper' || s.workerIdSource === 'zookeeper-lease') && s.zkAddress === '') {
    throw new ConfigError('leaf.snowflake.worker-id.source', `${s.workerIdSource} needs leaf.snowflake.zk.address`)
  }
  if (s.workerIdSource.endsWith('-lease') && s.leaseTtlMs < 3 * s.heartbeatIntervalMs) {
    throw new ConfigError('leaf.snowflake.lease.ttl-ms', `${s.leaseTtlMs} is less than 3 heartbeat intervals (leaf.snowflake.heartbeat-interval-ms is ${s.heartbeatIntervalMs}): one late renewal would stop issuing`)
  }
}

/**
 * Snowflake mode on the static worker id by default (no source, no ZooKeeper address, no
 * worker id given): right for one instance, but every instance of a fleet started so issues
 * the same IDs, and nothing else would say so.
 */
function staticWorkerIdWarning (s: SnowflakeConfig, given: (key: ConfigKey) => boolean): string[] {
  if (!s.enabled || s.workerIdSource !== 'static' || given('leaf.snowflake.worker-id.source') || given('leaf.snowflake.worker.id')) return []
  return [`snowflake mode on the static worker id ${s.workerId}, since neither leaf.snowflake.worker-id.source, leaf.snowflake.zk.address nor leaf.snowflake.worker.id is set: ` +
    'every instance started so issues the same IDs; a fleet needs a worker-id source (leaf.snowflake.worker-id.source=zookeeper, zookeeper-lease, db-lease or statefulset), ' +
    'or a leaf.snowflake.worker.id of its own for each instance']
}

/**
 * Two refresh intervals, since every peer reads the store's identity at least that often, plus
 * how long a peer's refresh may take to reach the new store: for each host of the URL, a
 * connection, its first round trip, the statement and the kill of an unanswered one.
 */
function defaultFailoverHoldMs (p: ParsedConfig, store: StoreConfig, connectTimeoutMs: number, queryTimeoutMs: number): number {
  const hosts = store.kind === 'mysql' ? store.hosts.length : 1 // postgres: one host
  return 2 * p['leaf.segment.refresh-interval-ms'] + hosts * (connectTimeoutMs + 3 * queryTimeoutMs)
}

/** Where relative paths are read from (never the working folder): see resolveSqlitePath. */
interface PathBases { relative: string, install: string }

function toConfig (p: ParsedConfig, bases: PathBases): Config {
  const tlsKeys = { ca: p['leaf.jdbc.ssl.ca'], cert: p['leaf.jdbc.ssl.cert'], key: p['leaf.jdbc.ssl.key'] }
  const store = resolveSqlitePath(parseJdbcUrl(p['leaf.jdbc.url'], p['leaf.jdbc.username'], p['leaf.jdbc.password'], { keys: tlsKeys, relativeTo: bases.relative }), bases)
  // The URL's connectTimeout and socketTimeout win over the keys, as its user and password do.
  const urlTimeouts = store.kind === 'sqlite' ? undefined : store.urlTimeouts
  const connectTimeoutMs = urlTimeouts?.connectMs ?? p['leaf.jdbc.connect-timeout-ms']
  const queryTimeoutMs = urlTimeouts?.queryMs ?? p['leaf.jdbc.query-timeout-ms']
  return {
    name: p['leaf.name'],
    server: {
      host: p['server.host'],
      port: p['server.port'],
      headersTimeoutMs: p['server.headers-timeout-ms'],
      requestTimeoutMs: p['server.request-timeout-ms'],
      keepAliveTimeoutMs: p['server.keep-alive-timeout-ms'],
      idleTimeoutMs: p['server.idle-timeout-ms'],
      maxConnections: p['server.max-connections'],
      tls: resolveServerTls(p['server.tls.cert'], p['server.tls.key'], bases.relative),
    },
    instanceName: p['leaf.instance.name'],
    logLevel: p['log.level'],
    batchMax: p['leaf.batch.max'],
    adminToken: p['leaf.admin.token'],
    adminViewToken: p['leaf.admin.view-token'],
    metrics: { maxTagSeries: p['leaf.metrics.max-tag-series'] },
    segment: {
      enabled: p['leaf.segment.enable'],
      store,
      connectTimeoutMs,
      poolSize: p['leaf.jdbc.pool-size'],
      queryTimeoutMs,
      waitTimeoutMs: p['leaf.segment.wait-timeout-ms'],
      refreshIntervalMs: p['leaf.segment.refresh-interval-ms'],
      failoverHoldMs: p['leaf.segment.failover-hold-ms'] ?? defaultFailoverHoldMs(p, store, connectTimeoutMs, queryTimeoutMs),
      bufferSeconds: p['leaf.segment.buffer-seconds'],
      maxBufferedSegments: p['leaf.segment.max-buffered-segments'],
      stateFile: stateFile(p, store, bases),
      trustedStores: p['leaf.segment.trusted-stores'],
    },
    snowflake: {
      enabled: p['leaf.snowflake.enable'],
      zkAddress: p['leaf.snowflake.zk.address'],
      zkAuth: p['leaf.snowflake.zk.auth'],
      ip: p['leaf.snowflake.ip'],
      port: p['leaf.snowflake.port'] ?? p['server.port'],
      workerId: p['leaf.snowflake.worker.id'],
      workerIdSource: p['leaf.snowflake.worker-id.source'] || (p['leaf.snowflake.zk.address'] === '' ? 'static' : 'zookeeper'),
      workerIdMin: p['leaf.snowflake.worker-id.min'],
      workerIdMax: p['leaf.snowflake.worker-id.max'],
      hostname: p['leaf.snowflake.worker-id.hostname'],
      leaseTtlMs: p['leaf.snowflake.lease.ttl-ms'],
      twepoch: p['leaf.snowflake.twepoch'],
      layoutSpec: p['leaf.snowflake.layout'],
      vesta: { version: p['leaf.snowflake.vesta.version'], genMethod: p['leaf.snowflake.vesta.gen-method'] },
      borrowAheadMs: p['leaf.snowflake.borrow-ahead-ms'],
      cacheDir: p['leaf.snowflake.cache.dir'],
      maxClockDriftMs: p['leaf.snowflake.max-clock-drift-ms'],
      heartbeatIntervalMs: p['leaf.snowflake.heartbeat-interval-ms'],
      zkConnectTimeoutMs: p['leaf.snowflake.zk.connect-timeout-ms'],
      zkSessionTimeoutMs: p['leaf.snowflake.zk.session-timeout-ms'],
    },
  }
}

interface PropertiesFile { path: string, from: ConfigFileSource, values: Record<string, string>, text: string }

/** The file the precedence names; a named file that cannot be read is an error naming what named it. */
function findPropertiesFile (cliPath: string | undefined, envPath: string | undefined, cwd: string, shippedPath: string | undefined): PropertiesFile | undefined {
  if (cliPath) return readPropertiesFile(resolve(cwd, cliPath), '--config')
  if (envPath) return readPropertiesFile(resolve(cwd, envPath), 'LEAF_CONFIG')
  const local = readPropertiesFile(resolve(cwd, DEFAULT_CONFIG_PATH), DEFAULT_CONFIG_PATH, { optional: true })
  if (local !== undefined || shippedPath === undefined) return local
  return readPropertiesFile(resolve(shippedPath), 'shipped', { optional: true })
}

/** `from` is what the error names: `--config`, `LEAF_CONFIG` or where it looked. An optional file may be missing. */
function readPropertiesFile (path: string, from: ConfigFileSource, { optional = false } = {}): PropertiesFile | undefined {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (optional && code === 'ENOENT') return undefined
    throw new ConfigError(from === 'shipped' ? 'the shipped config file' : from, `cannot read ${path} (${code ?? 'error'})`)
  }
  return { path, from, values: parseProperties(text) as Record<string, string>, text }
}

/** `--config PATH`, and any key as `--key=value` or `--key value` (Spring Boot style). */
function parseArgv (argv: string[]): { configPath: string | undefined, values: Partial<RawConfig> } {
  const values: Partial<RawConfig> = {}
  let configPath: string | undefined
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    if (!arg.startsWith('--')) throw new ConfigError('command line', `unexpected argument "${arg}"`)
    const eq = arg.indexOf('=')
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq)
    let value: string | undefined = eq === -1 ? undefined : arg.slice(eq + 1)
    if (value === undefined) {
      value = argv[++i]
      if (value === undefined) throw new ConfigError(name, 'has no value on the command line')
    }
    if (name === 'config') configPath = value
    else if (isConfigKey(name)) values[name] = value
    else checkCommandLineKey(name, value)
  }
  return { configPath, values }
}

/**
 * A relative `sqlite:` path is read from the folder of the configuration file in use (or the
 * install folder when none is), whether the URL came from the file, the environment or the
 * command line; the embedded default from the install folder. Never from the working folder:
 * a server started from another folder must open the same store, not a new one at 1.
 */
function resolveSqlitePath (store: StoreConfig, bases: PathBases): StoreConfig {
  if (store.kind !== 'sqlite' || store.path === ':memory:') return store
  return { ...store, path: resolve(store.embeddedDefault === true ? bases.install : bases.relative, store.path) }
}

/**
 * Where the warm-start file lives: as given (relative: by resolveSqlitePath's rule), else beside
 * the SQLite file, else in the install folder's data/.
 */
function stateFile (p: ParsedConfig, store: StoreConfig, bases: PathBases): string | undefined {
  const v = p['leaf.segment.state-file']
  if (v === 'off') return undefined
  if (v !== '') return resolve(bases.relative, v)
  // Port 0 is a new port at every start: no later start is this instance's to warm.
  if (p['server.port'] === 0) return undefined
  const dir = store.kind === 'sqlite' && store.path !== ':memory:' ? dirname(store.path) : join(bases.install, 'data')
  return join(dir, `segment-state-${p['server.port']}.json`)
}
