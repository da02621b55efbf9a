import { ConfigError } from './keys.js'

// The query parameters of leaf.jdbc.url, as Java services write them for Connector/J, MariaDB
// Connector/J, PgJDBC and libpq: each is read (TLS, timeouts, the application name), accepted
// without effect for a stated reason, or refused in one line naming it. None is dropped in
// silence: a URL that asked for TLS and connected in plain text would put the password on the
// wire. docs/configuration.md#url-parameters lists them (test/docs/docs.test.ts checks).

const URL_KEY = 'leaf.jdbc.url'

/**
 * How a connection uses TLS, by libpq's names (Connector/J's in brackets):
 * - `disable` (DISABLED): plain text;
 * - `prefer` (PREFERRED): TLS when the server offers it, else plain text; the certificate is not checked;
 * - `require` (REQUIRED): TLS or no connection; the certificate is not checked (but see resolveDatabaseTls: a CA makes it `verify-ca`);
 * - `verify-ca` (VERIFY_CA): TLS, the server's certificate chain checked against the CA;
 * - `verify-full` (VERIFY_IDENTITY): and its name against the host of the URL.
 */
export type TlsMode = 'disable' | 'prefer' | 'require' | 'verify-ca' | 'verify-full'
export const TLS_MODES: readonly TlsMode[] = ['disable', 'prefer', 'require', 'verify-ca', 'verify-full']

/** A PEM file the URL names: its path as written, and the parameter that named it. */
export interface FileParameter { path: string, from: string }

/** What the URL's parameters ask for; undefined: not said. */
export interface UrlParameters {
  tlsMode?: TlsMode
  /** The parameter(s) the mode was read from, for messages and the start line. */
  tlsModeFrom?: string
  ca?: FileParameter
  cert?: FileParameter
  key?: FileParameter
  /** The client key's passphrase (PgJDBC's sslpassword): never logged. */
  keyPassphrase?: string
  connectTimeoutMs?: number
  queryTimeoutMs?: number
  /** PostgreSQL's application_name. */
  applicationName?: string
}

type Kind = 'mysql' | 'postgres'
/** Whose parameters the URL holds: Connector/J's (jdbc:mysql:, mysql:), MariaDB Connector/J's (jdbc:mariadb:, mariadb:), or PostgreSQL's. */
export type Driver = 'mysql' | 'mariadb' | 'postgres'

/** Connector/J's sslMode and MariaDB Connector/J 3's, lower-cased. */
const MYSQL_SSL_MODES: Record<string, TlsMode> = {
  disabled: 'disable',
  preferred: 'prefer',
  required: 'require',
  verify_ca: 'verify-ca',
  verify_identity: 'verify-full',
  // MariaDB Connector/J 3
  disable: 'disable',
  trust: 'require',
  'verify-ca': 'verify-ca',
  'verify-full': 'verify-full',
}

/** libpq's and PgJDBC's sslmode; `allow` (plain first, TLS if refused) is read as `prefer`, which encrypts where it can. */
const PG_SSL_MODES: Record<string, TlsMode> = {
  disable: 'disable',
  allow: 'prefer',
  prefer: 'prefer',
  require: 'require',
  'verify-ca': 'verify-ca',
  'verify-full': 'verify-full',
}

const KEY_STORE_FIX = 'Leaf-TS reads PEM files, not Java key stores: export the CA with `keytool -exportcert -rfc` (or `openssl pkcs12 -in store.p12 -nokeys`) and the client certificate and key with `openssl pkcs12 -in store.p12 -nodes`, and give them as leaf.jdbc.ssl.ca, leaf.jdbc.ssl.cert and leaf.jdbc.ssl.key'

/** Parameters that name a Java key store (or its password and type): refused with the PEM keys to use. */
const KEY_STORE = new Set([
  'trustcertificatekeystoreurl', 'trustcertificatekeystorepassword', 'trustcertificatekeystoretype',
  'clientcertificatekeystoreurl', 'clientcertificatekeystorepassword', 'clientcertificatekeystoretype',
  'truststore', 'truststorepassword', 'truststoretype', 'keystore', 'keystorepassword', 'keystoretype',
  'fallbacktosystemtruststore', 'fallbacktosystemkeystore',
])

/**
 * Accepted and without effect, by lower-cased name, with the reason (docs/configuration.md says
 * the same). The connection's own settings are Leaf-TS's: it sends a handful of statements of
 * its own, in UTC and ASCII.
 */
const NO_EFFECT: Record<Kind, Record<string, string>> = {
  mysql: {
    useunicode: 'connections always use utf8mb4',
    characterencoding: 'connections always use utf8mb4',
    servertimezone: 'the session runs in UTC, and update_time is read as UTC',
    connectiontimezone: 'the session runs in UTC, and update_time is read as UTC',
    autoreconnect: 'a broken connection is never reused: the pool opens a new one',
    autoreconnectforpools: 'a broken connection is never reused: the pool opens a new one',
    maxreconnects: 'a broken connection is never reused: the pool opens a new one',
    initialtimeout: 'a broken connection is never reused: the pool opens a new one',
    failoverreadonly: 'Leaf-TS never writes through a read-only host: the host list rules (docs/production.md) decide',
    allowmultiqueries: 'Leaf-TS sends its own statements',
    rewritebatchedstatements: 'Leaf-TS sends its own statements',
    cacheprepstmts: 'Leaf-TS sends its own statements',
    useserverprepstmts: 'Leaf-TS sends its own statements',
    prepstmtcachesize: 'Leaf-TS sends its own statements',
    prepstmtcachesqllimit: 'Leaf-TS sends its own statements',
    uselocalsessionstate: 'Leaf-TS sends its own statements',
    zerodatetimebehavior: 'leaf_alloc holds no zero dates',
    tinyint1isbit: 'leaf_alloc has no TINYINT(1) column',
    allowpublickeyretrieval: 'mysql2 fetches the server\'s RSA key for caching_sha2_password by itself',
  },
  postgres: {
    tcpkeepalive: 'connections always use TCP keep-alive',
    preparethreshold: 'Leaf-TS sends its own statements',
    preparedstatementcachequeries: 'Leaf-TS sends its own statements',
    rewritebatchedinserts: 'Leaf-TS sends its own statements',
    binarytransfer: 'Leaf-TS sends its own statements',
    stringtype: 'Leaf-TS sends its own statements',
  },
}

/** Refused with a reason of their own (lower-cased names). */
const REFUSED: Record<Kind, Record<string, string>> = {
  mysql: {
    enabledtlsprotocols: 'Leaf-TS offers TLS 1.2 and 1.3, as Node does: remove it',
    tlsversion: 'Leaf-TS offers TLS 1.2 and 1.3, as Node does: remove it',
    enabledsslciphersuites: 'Leaf-TS offers Node\'s default ciphers: remove it',
    enabledsslciphersuites2: 'Leaf-TS offers Node\'s default ciphers: remove it',
  },
  postgres: {
    currentschema: 'Leaf-TS uses the user\'s search_path: create leaf_alloc in a schema on it, or set it for the role (ALTER ROLE ... SET search_path = ...)',
    options: 'Leaf-TS sets its own session options: set them for the role (ALTER ROLE ... SET ...)',
    targetservertype: 'Leaf-TS connects to one server: give its address (or a proxy\'s)',
    loadbalancehosts: 'Leaf-TS connects to one server: give its address (or a proxy\'s)',
    sslnegotiation: 'Leaf-TS negotiates TLS the standard way (an SSLRequest first): remove it',
  },
}

const bad = (name: string, why: string) => new ConfigError(URL_KEY, `parameter ${name}: ${why}`)

function bool (name: string, value: string): boolean {
  const v = value.trim().toLowerCase()
  if (v === 'true' || v === 'yes') return true
  if (v === 'false' || v === 'no') return false
  throw bad(name, `"${value}" is not true or false`)
}

/** A timeout in ms within the bounds of the key it stands for; `unit` is what the driver counts in. */
function timeout (name: string, value: string, unit: 'ms' | 's', key: string): number {
  if (!/^\d+$/.test(value.trim())) throw bad(name, `"${value}" is not a whole number of ${unit === 'ms' ? 'milliseconds' : 'seconds'}`)
  const ms = Number(value) * (unit === 's' ? 1000 : 1)
  if (ms === 0) throw bad(name, `0 means no bound in the Java driver, and a statement or connection without one can hold the service: give ${unit === 'ms' ? '100 to 60000 ms' : '1 to 60 s'} (it sets ${key})`)
  if (ms < 100 || ms > 60_000) throw bad(name, `${value} ${unit} is out of range: give ${unit === 'ms' ? '100 to 60000 ms' : '1 to 60 s'} (it sets ${key})`)
  return ms
}

/**
 * Reads the URL's parameters for a MySQL or PostgreSQL store. `user` and `password` are the
 * credentials, read by the caller. Throws a ConfigError naming the parameter, never its value
 * when it may be a secret.
 */
export function readUrlParameters (driver: Driver, params: URLSearchParams): UrlParameters {
  const kind: Kind = driver === 'postgres' ? 'postgres' : 'mysql'
  const out: UrlParameters = {}
  const seen = new Set<string>()
  const legacy: LegacySwitches = {}
  for (const [name, value] of params) {
    const lower = name.toLowerCase()
    if (seen.has(lower)) throw bad(name, 'is given more than once')
    seen.add(lower)
    if (lower === 'user' || lower === 'password') continue
    if (KEY_STORE.has(lower)) throw bad(name, `names a Java key store: ${KEY_STORE_FIX}`)
    const refused = REFUSED[kind][lower]
    if (refused !== undefined) throw bad(name, `is not read by Leaf-TS: ${refused}`)
    if (NO_EFFECT[kind][lower] !== undefined) {
      if (lower === 'characterencoding' && !/^utf-?8(mb4)?$/i.test(value.trim())) throw bad(name, `"${value}": connections use utf8mb4; give utf8 or remove it`)
      continue
    }
    if (kind === 'mysql') readMysqlParameter(name, lower, value, out, legacy)
    else readPostgresParameter(name, lower, value, out, legacy)
  }
  if (out.tlsMode === undefined) legacyMode(driver, legacy, out)
  return out
}

function readMysqlParameter (name: string, lower: string, value: string, out: UrlParameters, legacy: LegacySwitches): void {
  switch (lower) {
    case 'sslmode': {
      const mode = MYSQL_SSL_MODES[value.trim().toLowerCase()]
      if (mode === undefined) throw bad(name, `"${value}" is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY (Connector/J) or disable, trust, verify-ca, verify-full (MariaDB Connector/J)`)
      out.tlsMode = mode
      out.tlsModeFrom = `${name}=${value.trim()}`
      return
    }
    case 'usessl': legacy.useSSL = bool(name, value); return
    case 'requiressl': legacy.requireSSL = bool(name, value); return
    case 'verifyservercertificate': legacy.verifyServerCertificate = bool(name, value); return
    case 'trustservercertificate': legacy.trustServerCertificate = bool(name, value); return
    case 'disablesslhostnameverification': legacy.disableHostnameCheck = bool(name, value); return
    case 'serversslcert':
      if (/^classpath:/i.test(value)) throw bad(name, 'names a Java class-path resource: give the CA (or the server\'s certificate) as a PEM file path here or in leaf.jdbc.ssl.ca')
      if (value.includes('-----BEGIN')) throw bad(name, 'holds the certificate itself: give it as a PEM file path here or in leaf.jdbc.ssl.ca')
      out.ca = { path: value, from: name }
      return
    case 'connecttimeout': out.connectTimeoutMs = timeout(name, value, 'ms', 'leaf.jdbc.connect-timeout-ms'); return
    case 'sockettimeout': out.queryTimeoutMs = timeout(name, value, 'ms', 'leaf.jdbc.query-timeout-ms'); return
  }
  throw bad(name, 'is not read by Leaf-TS: remove it (docs/configuration.md#url-parameters lists those read)')
}

function readPostgresParameter (name: string, lower: string, value: string, out: UrlParameters, legacy: LegacySwitches): void {
  switch (lower) {
    case 'sslmode': {
      const mode = PG_SSL_MODES[value.trim().toLowerCase()]
      if (mode === undefined) throw bad(name, `"${value}" is not one of disable, allow, prefer, require, verify-ca, verify-full`)
      out.tlsMode = mode
      out.tlsModeFrom = `${name}=${value.trim()}`
      return
    }
    case 'ssl': legacy.pgSsl = bool(name, value); return
    case 'sslfactory':
      if (value.trim() !== 'org.postgresql.ssl.NonValidatingFactory') throw bad(name, `"${value}" is a Java class: Leaf-TS checks certificates by sslmode (verify-ca, verify-full) against the PEM CA in sslrootcert or leaf.jdbc.ssl.ca`)
      legacy.pgNonValidating = true
      return
    case 'sslrootcert': out.ca = { path: value, from: name }; return
    case 'sslcert': out.cert = { path: value, from: name }; return
    case 'sslkey': out.key = { path: value, from: name }; return
    case 'sslpassword': out.keyPassphrase = value; return
    case 'connecttimeout':
    case 'connect_timeout':
    case 'logintimeout': out.connectTimeoutMs = timeout(name, value, 's', 'leaf.jdbc.connect-timeout-ms'); return
    case 'sockettimeout': out.queryTimeoutMs = timeout(name, value, 's', 'leaf.jdbc.query-timeout-ms'); return
    case 'applicationname':
    case 'application_name': out.applicationName = value; return
  }
  throw bad(name, 'is not read by Leaf-TS: remove it (docs/configuration.md#url-parameters lists those read)')
}

/** The older TLS switches, as given. */
interface LegacySwitches {
  useSSL?: boolean
  requireSSL?: boolean
  verifyServerCertificate?: boolean
  trustServerCertificate?: boolean
  disableHostnameCheck?: boolean
  pgSsl?: boolean
  pgNonValidating?: boolean
}

/**
 * The mode the older switches ask for, when no sslMode/sslmode was given (it wins over them,
 * as in Connector/J 8):
 * - Connector/J 5.1 and 8: useSSL=false is DISABLED; useSSL=true PREFERRED; requireSSL=true
 *   REQUIRED; verifyServerCertificate=true VERIFY_CA;
 * - MariaDB Connector/J 2 (jdbc:mariadb:): useSsl=true checks the certificate and the host
 *   name (verify-full), but not with trustServerCertificate=true (require), nor the name with
 *   disableSslHostnameVerification=true (verify-ca);
 * - PgJDBC: ssl=true is verify-full, require with its NonValidatingFactory; ssl=false disable.
 */
function legacyMode (driver: Driver, l: LegacySwitches, out: UrlParameters): void {
  const set = (mode: TlsMode, from: string) => { out.tlsMode = mode; out.tlsModeFrom = from }
  if (driver === 'postgres') {
    if (l.pgSsl === false) set('disable', 'ssl=false')
    else if (l.pgNonValidating === true) set('require', 'sslfactory=org.postgresql.ssl.NonValidatingFactory')
    else if (l.pgSsl === true) set('verify-full', 'ssl=true')
    return
  }
  if (l.useSSL === false) return set('disable', 'useSSL=false')
  if (driver === 'mariadb') {
    if (l.useSSL !== true) return
    if (l.trustServerCertificate === true) return set('require', 'useSsl=true&trustServerCertificate=true')
    return l.disableHostnameCheck === true ? set('verify-ca', 'useSsl=true&disableSslHostnameVerification=true') : set('verify-full', 'useSsl=true')
  }
  if (l.verifyServerCertificate === true) return set('verify-ca', 'verifyServerCertificate=true')
  if (l.requireSSL === true) return set('require', 'requireSSL=true')
  if (l.useSSL === true) set('prefer', 'useSSL=true')
}
