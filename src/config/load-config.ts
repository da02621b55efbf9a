import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { parse as parseProperties } from 'dot-properties'
import { collect, ConfigError, refuseIfAny } from './config-error.js'
import { CONFIG_KEYS, KEYS, envName, isConfigKey, type ConfigKey, type LandedConfig, type ParsedConfig, type RawConfig, type WorkerIdSource } from './keys.js'
import { parseJdbcUrl, type StoreConfig } from './jdbc-url.js'
import { resolveServerTls, type ServerTls } from './server-tls.js'
import { checkCommandLineKey, checkEnvironment, checkFileKeys } from './unknown-keys.js'

export { ConfigError, ConfigErrors, type ConfigErrorCode } from './config-error.js'
export { ForeignKeyError, UnknownKeyError } from './unknown-keys.js'
export type { StoreConfig } from './jdbc-url.js'

export const DEFAULT_CONFIG_PATH = 'config/leaf.properties'
/** The package's folder when unbundled (tests); the bundled server passes its own. */
export const INSTALL_DIR = fileURLToPath(new URL('../../', import.meta.url))

/** The fields made from several keys (keys.ts, resolvedKey). */
interface ResolvedFields {
  server: {
    /** server.tls.cert and server.tls.key, read; undefined: plain HTTP. */
    tls: ServerTls | undefined
  }
  segment: {
    store: StoreConfig
    /** The URL's connectTimeout and socketTimeout win over the keys, as its user and password do. */
    connectTimeoutMs: number
    queryTimeoutMs: number
    /** leaf.segment.failover-hold-ms, or its default (defaultFailoverHoldMs): max-id-guard.ts. */
    failoverHoldMs: number
    /** undefined: no warm start. */
    stateFile: string | undefined
  }
  snowflake: {
    port: number
    /** leaf.snowflake.worker-id.source, else zookeeper with a ZooKeeper address and static without. */
    workerIdSource: WorkerIdSource
    /**
     * Whether a ZooKeeper address, leaf.snowflake.worker-id.source or leaf.snowflake.worker.id
     * was given: without one, snowflake mode refuses to start (resolve-config.ts).
     */
    workerIdSourceNamed: boolean
  }
}

type Flat<T> = { [K in keyof T]: T[K] }
type Sections<A, B> = {
  [K in keyof A | keyof B]: K extends keyof A ? (K extends keyof B ? Flat<A[K] & B[K]> : A[K]) : K extends keyof B ? B[K] : never
}

export type Config = Sections<LandedConfig, ResolvedFields>
export type ServerConfig = Config['server']
/** The snowflake keys' values as given (resolve-config.ts resolves the layout from them). */
export type SnowflakeConfig = Config['snowflake']

export type ConfigFileSource = '--config' | 'LEAF_CONFIG' | typeof DEFAULT_CONFIG_PATH | 'shipped'

export interface LoadedConfig {
  config: Config
  file: string | undefined
  fileFrom: ConfigFileSource | undefined
  /** Worth a log line, not a refused start (unknown keys, ...). */
  warnings: string[]
  /** Where relative paths were read from: the file's folder, else the install folder. */
  relativeTo: string
}

export interface LoadOptions {
  argv?: string[]
  env?: Record<string, string | undefined>
  cwd?: string
  /** The package's own config/leaf.properties, read when no other file is named. */
  shippedPath?: string
  installDir?: string
}

/**
 * Defaults < properties file < environment < command line. The file is the first of
 * `--config`, `LEAF_CONFIG`, `./config/leaf.properties`, the shipped one. Throws every error found.
 */
export function loadConfig ({ argv = [], env = {}, cwd = process.cwd(), shippedPath, installDir = INSTALL_DIR }: LoadOptions = {}): LoadedConfig {
  const errors: ConfigError[] = []
  const warnings: string[] = []
  const cli = readCommandLine(argv, errors)
  const file = collect(errors, () => findPropertiesFile(cli.configPath, env.LEAF_CONFIG, cwd, shippedPath))
  if (file !== undefined) {
    const checked = checkFileKeys(file.path, file.text, file.values)
    errors.push(...checked.errors)
    warnings.push(...checked.warnings)
  }
  errors.push(...checkEnvironment(env))

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
  const fromFile = readSecretFiles(raw, bases.relative, errors)
  const parsed = parseKeys(raw, fromFile, errors)
  refuseIfAny(errors)

  // An empty value is the default, not a choice.
  const given = (k: ConfigKey) => [file?.values[k], env[envName(k)], cli.values[k]].some((v) => v !== undefined && v.trim() !== '')
  const config = toConfig(parsed, bases, fromFile, given)
  // The shipped file names worker id 0 so that a first start serves; it is nobody's choice.
  const shipped = file !== undefined && shippedPath !== undefined && resolve(file.path) === resolve(shippedPath)
  const chosen = (k: ConfigKey) => (shipped ? [env[envName(k)], cli.values[k]] : [file?.values[k], env[envName(k)], cli.values[k]]).some((v) => v !== undefined && v.trim() !== '')
  warnings.push(...staticWorkerIdWarning(config.snowflake, chosen))
  return { config, file: file?.path, fileFrom: file?.from, warnings, relativeTo: bases.relative }
}

/** A value read from a secret file is named in errors by its file key. */
function parseKeys (raw: RawConfig, fromFile: Map<ConfigKey, ConfigKey>, errors: ConfigError[]): ParsedConfig {
  const parsed = {} as Record<ConfigKey, unknown>
  for (const k of CONFIG_KEYS) {
    try {
      parsed[k] = KEYS[k].parse(raw[k], k)
    } catch (err) {
      const fileKey = fromFile.get(k)
      if (!(err instanceof ConfigError)) throw err
      errors.push(fileKey === undefined ? err : new ConfigError(fileKey, `the file's content: ${err.message.slice(k.length + 2)}`, { code: err.code, cause: err }))
    }
  }
  return parsed as ParsedConfig
}

// The URL's password would silently win over a password file meant to replace it.
function checkUrlPassword (store: StoreConfig, parsed: ParsedConfig, passwordFromFile: boolean): void {
  if (!passwordFromFile || store.kind === 'sqlite' || store.password === parsed['leaf.jdbc.password']) return
  throw new ConfigError('leaf.jdbc.password-file', 'is set, and leaf.jdbc.url carries a password too, which would win: give the password one way (remove it from the URL)', { code: 'CONFIG_CONFLICT' })
}

/** Keys whose value may come from a file (a Kubernetes or Docker secret). */
export const SECRET_FILE_KEYS = {
  'leaf.jdbc.password-file': 'leaf.jdbc.password',
  'leaf.admin.token-file': 'leaf.admin.token',
  'leaf.admin.view-token-file': 'leaf.admin.view-token',
  'leaf.snowflake.zk.auth-file': 'leaf.snowflake.zk.auth',
} as const satisfies Partial<Record<ConfigKey, ConfigKey>>

/**
 * Puts each secret file's content (without its final newline) in `raw` under the key it stands
 * for; a relative path is read from `relativeTo`. Returns the keys so filled, by their file key.
 * An unreadable or empty file, or a file beside a value given for the key itself, is an error.
 */
function readSecretFiles (raw: RawConfig, relativeTo: string, errors: ConfigError[]): Map<ConfigKey, ConfigKey> {
  const filled = new Map<ConfigKey, ConfigKey>()
  for (const [fileKey, key] of Object.entries(SECRET_FILE_KEYS) as [keyof typeof SECRET_FILE_KEYS, ConfigKey][]) {
    const given = raw[fileKey].trim()
    if (given === '') continue
    const content = collect(errors, () => readSecretFile(fileKey, key, raw[key], resolve(relativeTo, given)))
    if (content === undefined) continue
    raw[key] = content
    filled.set(key, fileKey)
  }
  return filled
}

function readSecretFile (fileKey: ConfigKey, key: ConfigKey, keyValue: string, path: string): string {
  if (keyValue !== '') throw new ConfigError(fileKey, `is set, and so is ${key}: give the secret one way`, { code: 'CONFIG_CONFLICT' })
  let content: string
  try {
    content = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError(fileKey, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'}): give a file this process may read`, { code: 'CONFIG_FILE_UNREADABLE', cause: err })
  }
  content = content.replace(/\r?\n$/, '')
  if (content === '') throw new ConfigError(fileKey, `${path} is empty: write the secret in it, or unset ${fileKey}`)
  return content
}

/**
 * The view token is read-only only while it differs from the admin token: the same secret given
 * for both would open tag management to everyone given it to view. Named by the key (or the file
 * key) it came from; the message never holds the secret.
 */
function checkAdminTokens (config: LandedConfig, fromFile: Map<ConfigKey, ConfigKey>): void {
  if (config.adminViewToken !== '' && config.adminViewToken === config.adminToken) {
    const key = fromFile.get('leaf.admin.view-token') ?? 'leaf.admin.view-token'
    throw new ConfigError(key, 'is the same as leaf.admin.token, so it would manage tags too: give the viewers a token of their own, or unset it', { code: 'CONFIG_CONFLICT' })
  }
}

/** Node's own rule (its constructor throws on it). */
function checkServerTimeouts (server: LandedConfig['server']): void {
  if (server.requestTimeoutMs > 0 && server.headersTimeoutMs > server.requestTimeoutMs) {
    throw new ConfigError('server.request-timeout-ms', `${server.requestTimeoutMs} is less than server.headers-timeout-ms (${server.headersTimeoutMs}): receiving a request includes its headers; raise it, or lower server.headers-timeout-ms`, { code: 'CONFIG_CONFLICT' })
  }
}

/** Rules that need the layout are in resolve-config.ts. */
function checkWorkerIdSource (snowflake: SnowflakeConfig, errors: ConfigError[]): void {
  const { workerIdSource, zkAddress, leaseTtlMs, heartbeatIntervalMs } = snowflake
  if ((workerIdSource === 'zookeeper' || workerIdSource === 'zookeeper-lease') && zkAddress === '') {
    errors.push(new ConfigError('leaf.snowflake.worker-id.source', `${workerIdSource} needs leaf.snowflake.zk.address`, { code: 'CONFIG_CONFLICT' }))
  }
  if (workerIdSource.endsWith('-lease') && leaseTtlMs < 3 * heartbeatIntervalMs) {
    errors.push(new ConfigError('leaf.snowflake.lease.ttl-ms', `${leaseTtlMs} is less than 3 heartbeat intervals (leaf.snowflake.heartbeat-interval-ms is ${heartbeatIntervalMs}): one late renewal would stop issuing`, { code: 'CONFIG_CONFLICT' }))
  }
}

// A fleet started on the shipped file's static worker id issues the same IDs everywhere, silently.
function staticWorkerIdWarning (snowflake: SnowflakeConfig, chosen: (key: ConfigKey) => boolean): string[] {
  // Named nowhere: the start is refused instead (resolve-config.ts).
  if (!snowflake.enabled || snowflake.workerIdSource !== 'static' || !snowflake.workerIdSourceNamed) return []
  if (chosen('leaf.snowflake.worker-id.source') || chosen('leaf.snowflake.worker.id')) return []
  return [`snowflake mode on the static worker id ${snowflake.workerId} of the shipped config file, since neither leaf.snowflake.worker-id.source, leaf.snowflake.zk.address nor leaf.snowflake.worker.id is set elsewhere: ` +
    'every instance started so issues the same IDs; a fleet needs a worker-id source (leaf.snowflake.worker-id.source=zookeeper, zookeeper-lease, db-lease or statefulset), ' +
    'or a leaf.snowflake.worker.id of its own for each instance']
}

// Two refresh intervals (every peer reads the store's identity that often), plus one refresh's
// worst case per host: a connection, its first round trip, the statement, a kill.
function defaultFailoverHoldMs (refreshIntervalMs: number, store: StoreConfig, connectTimeoutMs: number, queryTimeoutMs: number): number {
  const hosts = store.kind === 'mysql' ? store.hosts.length : 1 // postgres: one host
  return 2 * refreshIntervalMs + hosts * (connectTimeoutMs + 3 * queryTimeoutMs)
}

/** Never the working folder: see resolveSqlitePath. */
interface PathBases { relative: string, install: string }

/** Each landing key's value on its target (keys.ts). */
function landKeys (parsed: ParsedConfig): LandedConfig {
  const config: Record<string, unknown> = {}
  for (const k of CONFIG_KEYS) {
    const spec = KEYS[k]
    if (spec.resolved) continue
    const path = spec.target.split('.')
    let section = config
    for (const name of path.slice(0, -1)) section = (section[name] ??= {}) as Record<string, unknown>
    section[path.at(-1) as string] = parsed[k]
  }
  return config as LandedConfig
}

/** The landed keys with the resolved fields; throws every broken rule between keys at once. */
function toConfig (parsed: ParsedConfig, bases: PathBases, fromFile: Map<ConfigKey, ConfigKey>, given: (key: ConfigKey) => boolean): Config {
  const errors: ConfigError[] = []
  const landed = landKeys(parsed)
  const store = collect(errors, () => resolveStore(parsed, bases))
  const tls = collect(errors, () => resolveServerTls(parsed['server.tls.cert'], parsed['server.tls.key'], bases.relative))
  const server = { ...landed.server, tls }
  const snowflake = {
    ...landed.snowflake,
    port: parsed['leaf.snowflake.port'] ?? parsed['server.port'],
    workerIdSource: parsed['leaf.snowflake.worker-id.source'] || (parsed['leaf.snowflake.zk.address'] === '' ? 'static' : 'zookeeper'),
    workerIdSourceNamed: parsed['leaf.snowflake.zk.address'] !== '' || given('leaf.snowflake.worker-id.source') || given('leaf.snowflake.worker.id'),
  } satisfies SnowflakeConfig
  if (store !== undefined) collect(errors, () => checkUrlPassword(store, parsed, fromFile.has('leaf.jdbc.password')))
  checkWorkerIdSource(snowflake, errors)
  collect(errors, () => checkServerTimeouts(server))
  collect(errors, () => checkAdminTokens(landed, fromFile))
  refuseIfAny(errors)
  if (store === undefined) throw new Error('no store without an error') // (collect leaves it undefined only with one)
  const urlTimeouts = store.kind === 'sqlite' ? undefined : store.urlTimeouts
  const connectTimeoutMs = urlTimeouts?.connectMs ?? parsed['leaf.jdbc.connect-timeout-ms']
  const queryTimeoutMs = urlTimeouts?.queryMs ?? parsed['leaf.jdbc.query-timeout-ms']
  const segment = {
    ...landed.segment,
    store,
    connectTimeoutMs,
    queryTimeoutMs,
    failoverHoldMs: parsed['leaf.segment.failover-hold-ms'] ?? defaultFailoverHoldMs(landed.segment.refreshIntervalMs, store, connectTimeoutMs, queryTimeoutMs),
    stateFile: stateFile(parsed, store, bases),
  }
  return { ...landed, server, segment, snowflake }
}

function resolveStore (parsed: ParsedConfig, bases: PathBases): StoreConfig {
  const tlsKeys = { ca: parsed['leaf.jdbc.ssl.ca'], cert: parsed['leaf.jdbc.ssl.cert'], key: parsed['leaf.jdbc.ssl.key'] }
  const store = parseJdbcUrl(parsed['leaf.jdbc.url'], parsed['leaf.jdbc.username'], parsed['leaf.jdbc.password'], { keys: tlsKeys, relativeTo: bases.relative })
  return resolveSqlitePath(store, bases)
}

interface PropertiesFile { path: string, from: ConfigFileSource, values: Record<string, string>, text: string }

function findPropertiesFile (cliPath: string | undefined, envPath: string | undefined, cwd: string, shippedPath: string | undefined): PropertiesFile | undefined {
  if (cliPath) return readPropertiesFile(resolve(cwd, cliPath), '--config')
  if (envPath) return readPropertiesFile(resolve(cwd, envPath), 'LEAF_CONFIG')
  const local = readPropertiesFile(resolve(cwd, DEFAULT_CONFIG_PATH), DEFAULT_CONFIG_PATH, { optional: true })
  if (local !== undefined || shippedPath === undefined) return local
  return readPropertiesFile(resolve(shippedPath), 'shipped', { optional: true })
}

function readPropertiesFile (path: string, from: ConfigFileSource, { optional = false } = {}): PropertiesFile | undefined {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (optional && code === 'ENOENT') return undefined
    throw new ConfigError(from === 'shipped' ? 'the shipped config file' : from, `cannot read ${path} (${code ?? 'error'})`, { code: 'CONFIG_FILE_UNREADABLE', cause: err })
  }
  return { path, from, values: parseProperties(text) as Record<string, string>, text }
}

const COMMAND_LINE_OPTIONS = Object.fromEntries(['config', ...CONFIG_KEYS].map((name) => [name, { type: 'string' as const }]))

/** Spring Boot style: a name that is not a key takes the next argument too, and is passed over. */
function readCommandLine (argv: string[], errors: ConfigError[]): { configPath: string | undefined, values: Partial<RawConfig> } {
  const values: Partial<RawConfig> = {}
  let configPath: string | undefined
  const { tokens } = parseArgs({ args: argv, options: COMMAND_LINE_OPTIONS, strict: false, allowPositionals: true, tokens: true })
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] as (typeof tokens)[number]
    if (token.kind !== 'option' || !token.rawName.startsWith('--')) {
      // A short option (-x) or a group (-xy) is one argument however many tokens it makes.
      if (token.kind === 'option' && (tokens[i - 1]?.index === token.index)) continue
      errors.push(new ConfigError('command line', `unexpected argument "${argv[token.index] ?? ''}"`, { code: 'CONFIG_BAD_ARGUMENT' }))
      continue
    }
    let value = token.value
    const next = tokens[i + 1]
    if (value === undefined && token.name !== 'config' && !isConfigKey(token.name) && token.index + 1 < argv.length) {
      // A name that is not a key takes the next argument whatever it looks like (`-1`, `--x`).
      value = argv[token.index + 1]
      while (tokens[i + 1]?.index === token.index + 1) i++
    } else if (value === undefined && next?.kind === 'positional') {
      value = next.value
      i++
    }
    if (value === undefined) {
      errors.push(new ConfigError(token.name, 'has no value on the command line', { code: 'CONFIG_BAD_ARGUMENT' }))
      continue
    }
    if (token.name === 'config') configPath = value
    else if (isConfigKey(token.name)) values[token.name] = value
    else {
      const refused = checkCommandLineKey(token.name, value)
      if (refused !== undefined) errors.push(refused)
    }
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
