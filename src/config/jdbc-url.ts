import { isIP } from 'node:net'
import { resolveDatabaseTls, type DatabaseTls, type TlsKeys } from './database-tls.js'
import { ConfigError } from './config-error.js'
import { readUrlParameters } from './url-parameters.js'

/** One MySQL server of leaf.jdbc.url. */
export interface MysqlHost { host: string, port: number }

export type StoreConfig =
  /** `embeddedDefault`: the URL was empty; only that store makes its folder and demo tags. */
  | { kind: 'sqlite', path: string, embeddedDefault?: true }
  /** `replication`: the first host is the only one written; the others must answer read-only. */
  | { kind: 'mysql', hosts: MysqlHost[], user: string, password: string, database: string, replication?: true } & NetworkedOptions
  | { kind: 'postgres', host: string, port: number, user: string, password: string, database: string, applicationName?: string } & NetworkedOptions

export interface NetworkedOptions {
  /** Always set by parseJdbcUrl; undefined (a config built by hand, in tests): plain text. */
  tls?: DatabaseTls
  /** The URL's connectTimeout / socketTimeout win over the keys. */
  urlTimeouts?: { connectMs?: number, queryMs?: number }
}

export interface TlsSources { keys?: TlsKeys, relativeTo?: string }
const NO_TLS_KEYS: TlsKeys = { ca: '', cert: '', key: '' }

const DEFAULT_PORTS = { mysql: 3306, postgres: 5432 } as const

/** In the install folder, whatever the working folder. */
export const DEFAULT_SQLITE_PATH = './data/leaf.db'
const URL_KEY = 'leaf.jdbc.url'

/** Java Leaf's JDBC URL as-is, Connector/J host lists, libpq URLs, `sqlite:PATH`; empty: the embedded store. */
export function parseJdbcUrl (url: string, username: string, password: string, tlsSources: TlsSources = {}): StoreConfig {
  let value = url.trim()
  if (value === '') return { kind: 'sqlite', path: DEFAULT_SQLITE_PATH, embeddedDefault: true }
  if (value.startsWith('sqlite:')) {
    const path = value.slice('sqlite:'.length)
    if (path === '') throw new ConfigError(URL_KEY, 'sqlite: needs a file path, e.g. sqlite:./data/leaf.db')
    return { kind: 'sqlite', path }
  }
  let replication = false
  const form = /^(?:jdbc:)?(mysql|mariadb):([a-z][a-z0-9+.-]*):\/\//i.exec(value)
  if (form !== null) {
    replication = readMysqlForm((form[1] as string).toLowerCase(), (form[2] as string).toLowerCase())
    value = `jdbc:${(form[1] as string).toLowerCase()}${value.slice(value.indexOf('://'))}`
  }
  const kind = /^(jdbc:)?(mysql|mariadb):\/\//.test(value)
    ? 'mysql'
    : /^(jdbc:postgresql|postgres|postgresql):\/\//.test(value) ? 'postgres' : undefined
  if (kind === undefined) {
    const scheme = value.includes(':') ? value.slice(0, value.indexOf(':')) : value
    throw new ConfigError(URL_KEY, `unknown scheme "${scheme}" (use jdbc:mysql://, mysql://, jdbc:postgresql://, postgres:// or sqlite:)`)
  }
  // WHATWG URLs hold one host: the list is split off and each host parsed on its own.
  const rest = value.slice(value.indexOf('://') + 3)
  const authorityEnd = rest.search(/[/?#]/)
  const authority = authorityEnd === -1 ? rest : rest.slice(0, authorityEnd)
  const at = authority.lastIndexOf('@')
  const credentials = at === -1 ? '' : authority.slice(0, at + 1)
  const hostList = authority.slice(at + 1)
  let parsed: URL
  try {
    parsed = new URL(`mysql://${credentials}leaf-host${authorityEnd === -1 ? '' : rest.slice(authorityEnd)}`)
  } catch (err) {
    throw new ConfigError(URL_KEY, 'is not a valid URL', { cause: err })
  }
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part)
    } catch (err) {
      throw new ConfigError(URL_KEY, `has a malformed percent-encoding in its ${what}`, { cause: err })
    }
  }
  if (hostList === '') throw new ConfigError(URL_KEY, 'has no host')
  let hosts: MysqlHost[]
  try {
    hosts = hostList.split(',').map((part) => parseHost(part, DEFAULT_PORTS[kind]))
  } catch (err) {
    // An '@' past a host list that does not read: credentials with a '/', '?' or '#' ended it
    // early. The error must not echo what may be part of a password.
    if (at === -1 && authorityEnd !== -1 && rest.slice(authorityEnd).includes('@')) {
      throw new ConfigError(URL_KEY, 'has a host list that cannot be read: a user or password with \'/\', \'?\' or \'#\' must be percent-encoded', { cause: err })
    }
    throw err
  }
  const database = decode(parsed.pathname.replace(/^\//, ''), 'database')
  if (database === '' || database.includes('/')) throw new ConfigError(URL_KEY, 'must name one database, e.g. .../leaf')
  // JDBC URLs may carry the credentials as query parameters; the URL wins over the keys.
  const params = readUrlParameters(kind === 'postgres' ? 'postgres' : /^(jdbc:)?mariadb:/i.test(value) ? 'mariadb' : 'mysql', parsed.searchParams)
  const user = decode(parsed.username, 'user') || params.user || username
  const pass = decode(parsed.password, 'password') || params.password || password
  const networked: NetworkedOptions = { tls: resolveDatabaseTls(params, tlsSources.keys ?? NO_TLS_KEYS, tlsSources.relativeTo ?? process.cwd()) }
  if (params.connectTimeoutMs !== undefined || params.queryTimeoutMs !== undefined) {
    networked.urlTimeouts = { ...(params.connectTimeoutMs === undefined ? {} : { connectMs: params.connectTimeoutMs }), ...(params.queryTimeoutMs === undefined ? {} : { queryMs: params.queryTimeoutMs }) }
  }
  if (kind === 'mysql') {
    // mysql2 checks the certificate of a host given as an IP address against the name
    // `localhost` (Node's fallback when no server name is set), which a certificate for
    // another server may hold: refused rather than a check that is not one.
    const ip = networked.tls?.mode === 'verify-full' ? hosts.find((h) => isIP(h.host) !== 0) : undefined
    if (ip !== undefined) throw new ConfigError(URL_KEY, `host ${ip.host}: TLS mode verify-full (${networked.tls?.modeFrom ?? ''}) checks the certificate against the host's name, and Leaf-TS's MySQL driver cannot check an IP address: give the host by the DNS name its certificate holds, or use sslMode=VERIFY_CA`)
    return { kind, hosts, user, password: pass, database, ...(replication ? { replication: true } : {}), ...networked }
  }
  const [host, ...others] = hosts
  // node-postgres connects to one server; a failover list is the job of a proxy or a virtual IP.
  if (host === undefined || others.length > 0) throw new ConfigError(URL_KEY, 'names several PostgreSQL hosts: give one (a proxy or virtual IP in front of a failover pair)')
  return { kind, host: host.host, port: host.port, user, password: pass, database, ...networked, ...(params.applicationName === undefined ? {} : { applicationName: params.applicationName }) }
}

/** Each would write through more than one server, or one the URL does not name. */
const REFUSED_FORMS: Record<string, string> = {
  loadbalance: 'it spreads writes over every host, and two writable hosts hand out the same IDs (a split brain by design): give the hosts as a failover list (jdbc:mysql://h1,h2/leaf) or the source first in jdbc:mysql:replication://',
  'load-balance-read': 'it spreads writes over every host, and two writable hosts hand out the same IDs: give the hosts as a failover list (jdbc:mysql://h1,h2/leaf)',
  aurora: 'the driver finds the writer itself, out of sight of Leaf-TS: give the writer endpoint of the cluster as the one host (jdbc:mysql://writer-endpoint:3306/leaf)',
  srv: 'the hosts come from DNS SRV records, out of sight of Leaf-TS: give them as a failover list (jdbc:mysql://h1,h2/leaf)',
  'replication+srv': 'the hosts come from DNS SRV records, out of sight of Leaf-TS: give them in jdbc:mysql:replication://source,replica/leaf',
  'loadbalance+srv': 'it spreads writes over every host: give the hosts as a failover list (jdbc:mysql://h1,h2/leaf)',
}

/** True for `replication`; `sequential` and `failover` are the plain list; the rest are refused. */
function readMysqlForm (driver: string, form: string): boolean {
  if (form === 'sequential' || form === 'failover') return false
  if (form === 'replication') return true
  const why = REFUSED_FORMS[form] ?? 'Leaf-TS reads jdbc:mysql://h1,h2/leaf (a failover list, also jdbc:mariadb:sequential:// and failover://) and jdbc:mysql:replication://source,replica/leaf'
  throw new ConfigError(URL_KEY, `uses the ${driver}:${form}:// form, which Leaf-TS does not read: ${why}`)
}

/** `host`, `host:port`, `[v6]` or `[v6]:port`; the error names the part it could not read. */
function parseHost (part: string, defaultPort: number): MysqlHost {
  const bad = (why: string) => new ConfigError(URL_KEY, `host "${part}" ${why}`)
  let parsed: URL | undefined
  try {
    parsed = new URL(`mysql://${part}`)
  } catch {}
  // (mysql: is not a special scheme: its host is kept as written, port and case alike.)
  if (parsed === undefined || parsed.hostname === '' || parsed.host !== part) throw bad('is not a host or host:port')
  const port = parsed.port === '' ? defaultPort : Number(parsed.port)
  if (port === 0) throw bad('has port 0')
  return { host: parsed.hostname.replace(/^\[|\]$/g, ''), port }
}
