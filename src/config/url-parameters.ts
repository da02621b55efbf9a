import { ConfigError } from './keys.js'

// Each parameter of leaf.jdbc.url is read, accepted without effect, or refused; none is dropped
// in silence (a URL that asked for TLS must not connect in plain text). docs/configuration.md#url-parameters

const URL_KEY = 'leaf.jdbc.url'

/** libpq's names for the TLS modes: docs/configuration.md#tls */
export type TlsMode = 'disable' | 'prefer' | 'require' | 'verify-ca' | 'verify-full'
export const TLS_MODES: readonly TlsMode[] = ['disable', 'prefer', 'require', 'verify-ca', 'verify-full']

export interface FileParameter { path: string, from: string }

/** What the URL's parameters ask for; undefined: not said. */
export interface UrlParameters {
  /** The `user` and `password` parameters, in whatever case they are written (Connector/J normalises it). */
  user?: string
  password?: string
  tlsMode?: TlsMode
  tlsModeFrom?: string
  ca?: FileParameter
  cert?: FileParameter
  key?: FileParameter
  /** The client key's passphrase (PgJDBC's sslpassword): never logged. */
  keyPassphrase?: string
  connectTimeoutMs?: number
  queryTimeoutMs?: number
  applicationName?: string
}

type Kind = 'mysql' | 'postgres'
export type Driver = 'mysql' | 'mariadb' | 'postgres'

/** Connector/J's sslMode and MariaDB Connector/J 3's, lower-cased. */
const MYSQL_SSL_MODES: Record<string, TlsMode> = {
  disabled: 'disable',
  preferred: 'prefer',
  required: 'require',
  verify_ca: 'verify-ca',
  verify_identity: 'verify-full',
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

/** Accepted without effect (lower-cased names): Leaf-TS sends few statements, in UTC and ASCII. */
const NO_EFFECT: Record<Kind, Record<string, string>> = {
  mysql: {
    useunicode: 'connections always use utf8mb4',
    characterencoding: 'connections always use utf8mb4',
    charactersetresults: 'connections always use utf8mb4',
    servertimezone: 'the session runs in UTC, and update_time is read as UTC',
    uselegacydatetimecode: 'the session runs in UTC, and update_time is read as UTC',
    usejdbccomplianttimezoneshift: 'the session runs in UTC, and update_time is read as UTC',
    nullcatalogmeanscurrent: 'Leaf-TS reads no catalog metadata',
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

/** Errors name the parameter, never a value that may be a secret. */
export function readUrlParameters (driver: Driver, params: URLSearchParams): UrlParameters {
  const kind: Kind = driver === 'postgres' ? 'postgres' : 'mysql'
  const out: UrlParameters = {}
  const seen = new Set<string>()
  const legacy: LegacySwitches = {}
  // A `&` in a password not percent-encoded ends it early, and what follows reads as a
  // parameter: with a password in the URL, an unknown name is not echoed (it may be part of it).
  const hasPassword = [...params.keys()].some((name) => name.toLowerCase() === 'password')
  for (const [name, value] of params) {
    const lower = name.toLowerCase()
    if (seen.has(lower)) throw bad(name, 'is given more than once')
    seen.add(lower)
    if (lower === 'user' || lower === 'password') {
      out[lower] = value
      continue
    }
    if (KEY_STORE.has(lower)) throw bad(name, `names a Java key store: ${KEY_STORE_FIX}`)
    const refused = REFUSED[kind][lower]
    if (refused !== undefined) throw bad(name, `is not read by Leaf-TS: ${refused}`)
    if (NO_EFFECT[kind][lower] !== undefined) {
      if ((lower === 'characterencoding' || lower === 'charactersetresults') && !/^utf-?8(mb4)?$/i.test(value.trim())) throw bad(name, `"${value}": connections use utf8mb4; give utf8 or remove it`)
      continue
    }
    const known = kind === 'mysql' ? readMysqlParameter(driver, name, lower, value, out, legacy) : readPostgresParameter(name, lower, value, out, legacy)
    if (known) continue
    if (hasPassword) throw new ConfigError(URL_KEY, 'has a parameter Leaf-TS does not read, not named here since the URL carries a password it may be part of: a \'&\' in the password must be percent-encoded (%26); otherwise see docs/configuration.md#url-parameters for those read')
    throw bad(name, 'is not read by Leaf-TS: remove it (docs/configuration.md#url-parameters lists those read)')
  }
  if (out.tlsMode === undefined) legacyMode(driver, legacy, out)
  return out
}

/** The TLS switches of one MySQL driver, and what to write instead with the other's URL. */
const MARIADB_ONLY = new Set(['trustservercertificate', 'disablesslhostnameverification', 'serversslcert'])
const CONNECTOR_J_ONLY = new Set(['requiressl', 'verifyservercertificate'])

/** False when it is not a MySQL parameter. */
function readMysqlParameter (driver: Driver, name: string, lower: string, value: string, out: UrlParameters, legacy: LegacySwitches): boolean {
  if (driver === 'mysql' && MARIADB_ONLY.has(lower)) throw bad(name, 'is MariaDB Connector/J\'s, and the URL is Connector/J\'s (jdbc:mysql:): use sslMode (DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY) and leaf.jdbc.ssl.ca, or write the URL as jdbc:mariadb:')
  if (driver === 'mariadb' && CONNECTOR_J_ONLY.has(lower)) throw bad(name, 'is Connector/J\'s, and the URL is MariaDB Connector/J\'s (jdbc:mariadb:): use sslMode (disable, trust, verify-ca, verify-full), or write the URL as jdbc:mysql:')
  switch (lower) {
    case 'sslmode': {
      const mode = MYSQL_SSL_MODES[value.trim().toLowerCase()]
      if (mode === undefined) throw bad(name, `"${value}" is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY (Connector/J) or disable, trust, verify-ca, verify-full (MariaDB Connector/J)`)
      out.tlsMode = mode
      out.tlsModeFrom = `${name}=${value.trim()}`
      return true
    }
    case 'usessl': legacy.useSSL = bool(name, value); return true
    case 'requiressl': legacy.requireSSL = bool(name, value); return true
    case 'verifyservercertificate': legacy.verifyServerCertificate = bool(name, value); return true
    case 'trustservercertificate': legacy.trustServerCertificate = bool(name, value); return true
    case 'disablesslhostnameverification': legacy.disableHostnameCheck = bool(name, value); return true
    case 'serversslcert':
      if (/^classpath:/i.test(value)) throw bad(name, 'names a Java class-path resource: give the CA (or the server\'s certificate) as a PEM file path here or in leaf.jdbc.ssl.ca')
      if (value.includes('-----BEGIN')) throw bad(name, 'holds the certificate itself: give it as a PEM file path here or in leaf.jdbc.ssl.ca')
      out.ca = { path: value, from: name }
      return true
    case 'connecttimeout': out.connectTimeoutMs = timeout(name, value, 'ms', 'leaf.jdbc.connect-timeout-ms'); return true
    case 'sockettimeout': out.queryTimeoutMs = timeout(name, value, 'ms', 'leaf.jdbc.query-timeout-ms'); return true
  }
  return false
}

function readPostgresParameter (name: string, lower: string, value: string, out: UrlParameters, legacy: LegacySwitches): boolean {
  switch (lower) {
    case 'sslmode': {
      const mode = PG_SSL_MODES[value.trim().toLowerCase()]
      if (mode === undefined) throw bad(name, `"${value}" is not one of disable, allow, prefer, require, verify-ca, verify-full`)
      out.tlsMode = mode
      out.tlsModeFrom = `${name}=${value.trim()}`
      return true
    }
    // PgJDBC: an empty ssl= is ssl=true.
    case 'ssl': legacy.pgSsl = value.trim() === '' ? true : bool(name, value); return true
    case 'sslfactory':
      if (value.trim() !== 'org.postgresql.ssl.NonValidatingFactory') throw bad(name, `"${value}" is a Java class: Leaf-TS checks certificates by sslmode (verify-ca, verify-full) against the PEM CA in sslrootcert or leaf.jdbc.ssl.ca`)
      legacy.pgNonValidating = true
      return true
    case 'sslrootcert': out.ca = { path: value, from: name }; return true
    case 'sslcert': out.cert = { path: value, from: name }; return true
    case 'sslkey': out.key = { path: value, from: name }; return true
    case 'sslpassword': out.keyPassphrase = value; return true
    case 'connecttimeout':
    case 'connect_timeout':
    case 'logintimeout': out.connectTimeoutMs = timeout(name, value, 's', 'leaf.jdbc.connect-timeout-ms'); return true
    case 'sockettimeout': out.queryTimeoutMs = timeout(name, value, 's', 'leaf.jdbc.query-timeout-ms'); return true
    case 'applicationname':
    case 'application_name': out.applicationName = value; return true
  }
  return false
}

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
 * The mode the older switches ask for when no sslMode was given (table: docs/configuration.md#tls).
 * Java Leaf's Connector/J 5.1 checks the certificate on useSSL=true unless told not to.
 */
function legacyMode (driver: Driver, l: LegacySwitches, out: UrlParameters): void {
  const set = (mode: TlsMode, from: string) => { out.tlsMode = mode; out.tlsModeFrom = from }
  if (driver === 'postgres') {
    if (l.pgSsl === true) set(l.pgNonValidating === true ? 'require' : 'verify-full', l.pgNonValidating === true ? 'ssl=true&sslfactory=org.postgresql.ssl.NonValidatingFactory' : 'ssl=true')
    else if (l.pgSsl === false) set('prefer', 'ssl=false')
    return
  }
  if (driver === 'mariadb') {
    if (l.useSSL === false) return set('disable', 'useSsl=false')
    if (l.useSSL !== true) {
      if (l.trustServerCertificate !== undefined || l.disableHostnameCheck !== undefined) throw new ConfigError(URL_KEY, `parameter ${l.trustServerCertificate !== undefined ? 'trustServerCertificate' : 'disableSslHostnameVerification'}: has no effect without useSsl=true: add it, or use sslMode (trust, verify-ca, verify-full)`)
      return
    }
    if (l.trustServerCertificate === true) return set('require', 'useSsl=true&trustServerCertificate=true')
    return l.disableHostnameCheck === true ? set('verify-ca', 'useSsl=true&disableSslHostnameVerification=true') : set('verify-full', 'useSsl=true')
  }
  if (l.useSSL === false) return set('disable', 'useSSL=false')
  const asked = [l.useSSL === true ? 'useSSL=true' : '', l.requireSSL === true ? 'requireSSL=true' : ''].filter((a) => a !== '').join('&')
  if (asked === '') {
    if (l.verifyServerCertificate === true) set('verify-ca', 'verifyServerCertificate=true')
    return
  }
  if (l.verifyServerCertificate !== false) return set('verify-ca', `${asked} (Connector/J 5.1 checks the certificate unless verifyServerCertificate=false)`)
  set(l.requireSSL === true ? 'require' : 'prefer', `${asked}&verifyServerCertificate=false`)
}
