import { parseLines, type Pair } from 'dot-properties'
import { ConfigError } from './config-error.js'
import { CONFIG_KEYS, envName, isConfigKey, type ConfigKey } from './keys.js'

// A typo in Leaf-TS's own names would start the server in another mode, so it refuses the
// start; Java Leaf's and Spring Boot's keys are passed over, or refused where their meaning
// would be lost. Rules: docs/configuration.md#names-that-are-not-keys

/** An unknown name in one of Leaf-TS's namespaces: the start is refused. */
export class UnknownKeyError extends ConfigError {
  /** The key it most likely meant; undefined when none is near. */
  readonly suggestion: string | undefined
  /** `FILE:LINE`, `environment` or `command line`. */
  readonly where: string
  constructor (name: string, where: string, suggestion: string | undefined, suggestionKey?: string) {
    const hint = suggestion === undefined
      ? 'remove it (docs/configuration.md lists the keys)'
      : `did you mean ${suggestion}${suggestionKey === undefined ? '' : ` (${suggestionKey})`}?`
    super(name, `not a configuration key (${where}); ${hint}`, { code: 'UNKNOWN_KEY' })
    this.name = 'UnknownKeyError'
    this.suggestion = suggestion
    this.where = where
  }
}

/** A key of Java Leaf or Spring Boot that Leaf-TS does not read. */
export class ForeignKeyError extends ConfigError {
  readonly where: string
  constructor (name: string, where: string, [what, fix]: Refusal) {
    super(name, `${what} (${where}); ${fix}`, { code: 'UNSUPPORTED_KEY' })
    this.name = 'ForeignKeyError'
    this.where = where
  }
}

/** Why a foreign key's value cannot be passed over, and the fix. */
type Refusal = [what: string, fix: string]

/** `key` ending in `.*` is a family; without `refuse` the key is always passed over. */
interface ForeignKey { key: string, refuse?: (value: string) => Refusal | undefined }

const AT_THE_ROOT: Refusal = ['Spring Boot\'s path prefix; Leaf-TS serves its routes at the root (/api/segment/get/...)', 'remove it and keep the prefix in a proxy in front']

export const FOREIGN_KEYS: readonly ForeignKey[] = [
  // Java Leaf's worker-id modes other than zk, passed over, would put every instance on worker id 0.
  {
    key: 'leaf.snowflake.mode',
    refuse: (v) => ['', 'zk'].includes(v.trim())
      ? undefined
      : [`"${v.trim()}", a Java Leaf worker-id mode Leaf-TS does not read`,
          'remove it and set leaf.snowflake.worker-id.source (zookeeper, zookeeper-lease, db-lease, statefulset, or static with a leaf.snowflake.worker.id of its own for each instance)'],
  },
  // Read by Java Leaf in its local mode alone, which the key above refuses.
  { key: 'leaf.snowflake.local.workIdMap' },
  // Spring Boot: Tomcat's, Spring's or the actuator's, none of which Leaf-TS has.
  { key: 'spring.*' },
  { key: 'logging.*' },
  { key: 'management.*' },
  { key: 'server.tomcat.*' },
  { key: 'server.jetty.*' },
  { key: 'server.undertow.*' },
  { key: 'server.netty.*' },
  { key: 'server.compression.*' },
  { key: 'server.http2.*' },
  { key: 'server.error.*' },
  { key: 'server.session.*' },
  { key: 'server.servlet.session.*' },
  { key: 'server.servlet.encoding.*' },
  { key: 'server.servlet.jsp.*' },
  { key: 'server.servlet.application-display-name' },
  { key: 'server.display-name' },
  { key: 'server.server-header' },
  { key: 'server.connection-timeout' },
  { key: 'server.max-http-header-size' },
  { key: 'server.max-http-request-header-size' },
  { key: 'server.use-forward-headers' },
  { key: 'server.forward-headers-strategy' },
  { key: 'server.shutdown' },
  // Spring Boot keys whose meaning would be lost: refused with the fix.
  { key: 'server.address', refuse: () => ['Spring Boot\'s listen address, which Leaf-TS does not read', 'set server.host instead'] },
  ...['server.context-path', 'server.servlet.context-path', 'server.servlet-path', 'server.servlet.path'].map((key) => ({
    key, refuse: (v: string) => ['', '/'].includes(v.trim()) ? undefined : AT_THE_ROOT,
  })),
  {
    key: 'server.ssl.*',
    refuse: (v: string): Refusal | undefined => v.trim() === 'false' ? undefined : ['Spring Boot\'s TLS, from a Java key store, which Leaf-TS does not read', 'remove it, and give server.tls.cert and server.tls.key as PEM files (openssl pkcs12 -in KEYSTORE.p12 -nodes) or end TLS in a proxy in front'],
  },
]

/** LEAF_ variables that are not keys, so that a shell that runs the tests can start the server too. */
export const NON_KEY_VARIABLES: readonly string[] = ['LEAF_CONFIG', 'LEAF_PG_BIN', 'LEAF_TEST_*']

/** How many edits away a key may be and still be named as the one meant. */
function nearEnough (name: string): number {
  return Math.max(2, Math.floor(name.length / 4))
}

/** Optimal-string-alignment distance: a swap of two neighbours (`segement`) counts 1. */
export function editDistance (a: string, b: string): number {
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, (previous[j - 1] as number) + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, (before[j - 2] as number) + 1)
      current.push(best)
    }
    before = previous
    previous = current
  }
  return previous[b.length] as number
}

/** The candidate nearest to `name` (case aside) within `limit` edits; the first on a tie. */
function nearest (name: string, candidates: readonly string[], limit: number): string | undefined {
  let found: string | undefined
  let best = limit + 1
  for (const candidate of candidates) {
    const d = editDistance(name.toLowerCase(), candidate.toLowerCase())
    if (d < best) {
      best = d
      found = candidate
    }
  }
  return found
}

export function nearestKey (name: string): ConfigKey | undefined {
  return nearest(name, CONFIG_KEYS, nearEnough(name)) as ConfigKey | undefined
}

function matches (pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : name === pattern
}

function foreignKey (key: string): ForeignKey | undefined {
  return FOREIGN_KEYS.find((f) => matches(f.key, key))
}

function foreignVariable (name: string): ForeignKey | undefined {
  return FOREIGN_KEYS.find((f) => matches(f.key.endsWith('.*') ? `${envName(f.key.slice(0, -1))}*` : envName(f.key), name))
}

/** What became of a name that is not a key: passed over, not ours (a warning), or refused. */
type Verdict = 'passed over' | 'not ours' | ConfigError

/** `strict` (the command line): every unknown name that is not foreign is refused. */
function judgeKey (name: string, value: string, where: string, strict: boolean): Verdict {
  const foreign = foreignKey(name)
  if (foreign !== undefined) {
    const problem = foreign.refuse?.(value)
    if (problem !== undefined) return new ForeignKeyError(name, where, problem)
    return 'passed over'
  }
  if (strict || name.startsWith('leaf.') || name.startsWith('server.')) return new UnknownKeyError(name, where, nearestKey(name))
  const slip = nearest(name, CONFIG_KEYS, 2)
  if (slip !== undefined) return new UnknownKeyError(name, where, slip)
  return 'not ours'
}

/** The line each key of a .properties text is (last) set on, counted as Java counts lines. */
function keyLines (text: string): Map<string, number> {
  const lines = new Map<string, number>()
  for (const node of parseLines(text, true)) {
    if (node.type !== 'PAIR') continue
    lines.set((node as Pair).key, text.slice(0, node.range[0]).split(/\r\n|\r|\n/).length)
  }
  return lines
}

export function checkFileKeys (path: string, text: string, values: Record<string, string>): { errors: ConfigError[], warnings: string[] } {
  const errors: ConfigError[] = []
  const warnings: string[] = []
  const lines = keyLines(text)
  const unknown = Object.keys(values).filter((k) => !isConfigKey(k))
  unknown.sort((a, b) => (lines.get(a) ?? 0) - (lines.get(b) ?? 0))
  for (const key of unknown) {
    const where = `${path}:${lines.get(key) ?? '?'}`
    const verdict = judgeKey(key, values[key] as string, where, false)
    if (verdict instanceof ConfigError) errors.push(verdict)
    else if (verdict === 'not ours') warnings.push(`${where}: unknown key ${key} ignored`)
  }
  return { errors, warnings }
}

/** A `--name value` of the command line that is not a key: passed over when foreign, else refused. */
export function checkCommandLineKey (name: string, value: string): ConfigError | undefined {
  const verdict = judgeKey(name, value, 'command line', true)
  return verdict instanceof ConfigError ? verdict : undefined
}

const KEY_VARIABLES = new Map(CONFIG_KEYS.map((k) => [envName(k), k]))
const SERVER_KEY_VARIABLES = [...KEY_VARIABLES.keys()].filter((v) => v.startsWith('SERVER_'))

/** Kubernetes' Service variables (LEAF_SERVICE_HOST, ...): a Service named `leaf` must not stop its pods. */
function isServiceLink (name: string, value: string): boolean {
  return /_SERVICE_(HOST|PORT(_\w+)?)$/.test(name) ||
    /_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(name) ||
    (name.endsWith('_PORT') && /^(tcp|udp|sctp):\/\//.test(value))
}

/**
 * LEAF_ is ours: any other LEAF_* variable is an error. SERVER_ is shared (CGI, Spring Boot):
 * refused only one slip from a key (SERVER_PROT) or when its meaning would be lost.
 */
export function checkEnvironment (env: Record<string, string | undefined>): ConfigError[] {
  const errors: ConfigError[] = []
  for (const [name, value = ''] of Object.entries(env)) {
    const upper = name.toUpperCase()
    if (KEY_VARIABLES.has(name) || !(upper.startsWith('LEAF_') || upper.startsWith('SERVER_'))) continue
    if (NON_KEY_VARIABLES.some((v) => matches(v, upper)) || isServiceLink(upper, value)) continue
    const foreign = foreignVariable(upper)
    if (foreign !== undefined) {
      const problem = foreign.refuse?.(value)
      if (problem !== undefined) errors.push(new ForeignKeyError(name, 'environment', problem))
      continue
    }
    if (upper.startsWith('SERVER_') && nearest(upper, SERVER_KEY_VARIABLES, 1) === undefined && !KEY_VARIABLES.has(upper)) continue
    const suggestion = nearest(upper, [...KEY_VARIABLES.keys()], nearEnough(upper))
    errors.push(new UnknownKeyError(name, 'environment', suggestion, suggestion === undefined ? undefined : KEY_VARIABLES.get(suggestion)))
  }
  return errors
}
