import mysql from 'mysql2/promise'
import type { ConnectionOptions as TlsConnectionOptions } from 'node:tls'
import type { DatabaseTls } from '../config/database-tls.js'
import type { Logger } from '../logger.js'
import { driverCause } from './errors.js'

// The store's TLS (config/database-tls.ts) as each driver takes it, the `prefer` mode neither
// driver has (TLS when the server offers it, else plain text), and what a session negotiated.
//
// mysql2 and node-postgres both refuse a server without TLS once `ssl` is set: so `prefer`
// asks for TLS, and on that refusal alone (mysql2's HANDSHAKE_NO_SSL_SUPPORT, node-postgres'
// "does not support SSL") connects again in plain text. The certificate is not checked in
// `prefer` and `require`, as in Connector/J and libpq; `verify-ca` checks its chain against
// the CA (Node's public roots when none is given); `verify-full` also its name against the
// URL's host (a DNS name, or an IP address in the certificate's IP entries).

/** What one database session uses: TLS with its protocol and cipher, or plain text. */
export interface TlsSession {
  /** `TLSv1.3`, ...; null: plain text. */
  version: string | null
  cipher: string | null
}

/** mysql2's `ssl`; undefined: plain text. */
export function mysqlSsl (tls: DatabaseTls | undefined): mysql.SslOptions | undefined {
  if (tls === undefined || tls.mode === 'disable') return undefined
  const verify = tls.mode === 'verify-ca' || tls.mode === 'verify-full'
  return {
    ...pemOptions(tls),
    rejectUnauthorized: verify,
    verifyIdentity: tls.mode === 'verify-full',
  }
}

/** node-postgres' `ssl`; false: plain text. */
export function pgSsl (tls: DatabaseTls | undefined): false | TlsConnectionOptions {
  if (tls === undefined || tls.mode === 'disable') return false
  const verify = tls.mode === 'verify-ca' || tls.mode === 'verify-full'
  return {
    ...pemOptions(tls),
    rejectUnauthorized: verify,
    // verify-ca: the chain only, as libpq.
    ...(tls.mode === 'verify-full' ? {} : { checkServerIdentity: () => undefined }),
  }
}

function pemOptions (tls: DatabaseTls): { ca?: string, cert?: string, key?: string, passphrase?: string } {
  return {
    ...(tls.ca === undefined ? {} : { ca: tls.ca }),
    ...(tls.cert === undefined ? {} : { cert: tls.cert }),
    ...(tls.key === undefined ? {} : { key: tls.key }),
    ...(tls.passphrase === undefined ? {} : { passphrase: tls.passphrase }),
  }
}

/** Whether `err` is the server saying it has no TLS (and nothing else went wrong). */
export function tlsNotOffered (err: unknown): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown, message?: unknown }
  return code === 'HANDSHAKE_NO_SSL_SUPPORT' || message === 'The server does not support SSL connections'
}

/** `prefer` met a server without TLS: connect in plain text instead. */
export function mayFallBack (tls: DatabaseTls | undefined, err: unknown): boolean {
  return tls?.mode === 'prefer' && tlsNotOffered(err)
}

/**
 * Servers (`host:port`) that declined TLS under `prefer` in this process: later connections of
 * their own (the census at each refresh, a kill) go in plain text at once, rather than spend a
 * connection each time learning it again. A server that turns TLS on is used with it from the
 * next start.
 */
const declined = new Set<string>()
const serverKey = (o: { host?: string, port?: number }) => `${o.host ?? ''}:${o.port ?? ''}`

/**
 * A connection of its own (the host census, a kill): with TLS as the store's, in plain text
 * after a `prefer` the server declined.
 */
export async function openMysqlConnection (options: mysql.ConnectionOptions, tls: DatabaseTls | undefined): Promise<mysql.Connection> {
  const ssl = tls?.mode === 'prefer' && declined.has(serverKey(options)) ? undefined : mysqlSsl(tls)
  try {
    return await mysql.createConnection(ssl === undefined ? options : { ...options, ssl })
  } catch (err) {
    if (!mayFallBack(tls, err)) throw err
    declined.add(serverKey(options))
    return await mysql.createConnection(options)
  }
}

/** Notes that `server` declined TLS under `prefer` (a pool's fallback), for openMysqlConnection. */
export function noteDeclined (server: { host: string, port: number }): void {
  declined.add(serverKey(server))
}

/**
 * Tells, at warn, that a pool to `to` fell back to plain text under `prefer` (`fix`: the URL
 * parameter that insists on TLS). Never a secret.
 */
export function warnPlainText (logger: Logger | undefined, to: { host: string, port: number }, tls: DatabaseTls, fix: string): void {
  const server = `${to.host.includes(':') ? `[${to.host}]` : to.host}:${to.port}`
  logger?.warn({ server, tls: `${tls.mode} (${tls.modeFrom})` },
    `TLS is preferred, and ${server} offers none: its connections go in plain text, the password and the IDs cross the network readable; ` +
    `once the server has TLS, set ${fix} or stronger in leaf.jdbc.url`)
}

/** MySQL's own view of a session's TLS: appended to a connection's first round trip. */
export const MYSQL_TLS_SQL = "SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')"

/** The session from MYSQL_TLS_SQL's rows (empty values: plain text). */
export function mysqlTlsSession (rows: unknown): TlsSession {
  const status = new Map(((Array.isArray(rows) ? rows : []) as { Variable_name?: unknown, Value?: unknown }[]).map((r) => [String(r.Variable_name).toLowerCase(), String(r.Value ?? '')]))
  const cipher = status.get('ssl_cipher') ?? ''
  const version = status.get('ssl_version') ?? ''
  return { cipher: cipher === '' ? null : cipher, version: cipher === '' || version === '' ? null : version }
}

/** PostgreSQL's own view of a session's TLS: columns of a connection's first statement (null: plain text). */
export const PG_TLS_COLUMNS = '(SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl) AS leaf_tls_version, ' +
  '(SELECT cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl) AS leaf_tls_cipher'

export interface PgTlsRow { leaf_tls_version?: unknown, leaf_tls_cipher?: unknown }

export function pgTlsSession (row: PgTlsRow | undefined): TlsSession {
  const cipher = typeof row?.leaf_tls_cipher === 'string' ? row.leaf_tls_cipher : null
  return { cipher, version: cipher === null || typeof row?.leaf_tls_version !== 'string' ? null : row.leaf_tls_version }
}

/**
 * One line for the start log and /cache: the mode, what chose it, and the session's protocol and
 * cipher as the server reports them; never a secret.
 */
export function describeTls (tls: DatabaseTls, session: TlsSession | undefined): string {
  const mode = `${tls.mode} (${tls.modeFrom})`
  if (session === undefined) return `${mode}: no session yet`
  if (session.cipher === null) return tls.mode === 'disable' ? `${mode}: plain text` : `${mode}: plain text, the server offers no TLS`
  return `${mode}: ${session.version ?? 'TLS'} ${session.cipher}`
}

/** Node's certificate-check codes, and what to do about each. */
const CERT_REMEDIES: Record<string, string> = {
  ERR_TLS_CERT_ALTNAME_INVALID: 'the server\'s certificate is not for the host name in leaf.jdbc.url (verify-full / VERIFY_IDENTITY checks it): connect by a name the certificate holds, or use sslMode=VERIFY_CA (sslmode=verify-ca)',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'the server\'s certificate is self-signed: give it (or the CA that signed it) as leaf.jdbc.ssl.ca',
  SELF_SIGNED_CERT_IN_CHAIN: 'the server\'s certificate chains to a CA that is not trusted: give that CA as leaf.jdbc.ssl.ca',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'the server\'s certificate does not chain to a trusted CA: give the CA that signed it as leaf.jdbc.ssl.ca (Node\'s public roots are used when none is given)',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'the server\'s certificate does not chain to a trusted CA: give the CA that signed it as leaf.jdbc.ssl.ca (Node\'s public roots are used when none is given)',
  UNABLE_TO_GET_ISSUER_CERT: 'the server\'s certificate does not chain to a trusted CA: give the CA that signed it as leaf.jdbc.ssl.ca',
  CERT_HAS_EXPIRED: 'the server\'s certificate has expired: renew it on the server',
  CERT_NOT_YET_VALID: 'the server\'s certificate is not valid yet: check the clocks, or the certificate\'s dates',
  CERT_SIGNATURE_FAILURE: 'the server\'s certificate signature does not verify against leaf.jdbc.ssl.ca',
}

/** Node's messages for its codes, as mysql2 passes them on without the code (node: crypto's X509 errors). */
const NODE_CERT_MESSAGES: Record<string, string> = {
  'self-signed certificate': 'DEPTH_ZERO_SELF_SIGNED_CERT',
  'self-signed certificate in certificate chain': 'SELF_SIGNED_CERT_IN_CHAIN',
  'unable to verify the first certificate': 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'unable to get local issuer certificate': 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'unable to get issuer certificate': 'UNABLE_TO_GET_ISSUER_CERT',
  'certificate has expired': 'CERT_HAS_EXPIRED',
  'certificate is not yet valid': 'CERT_NOT_YET_VALID',
  'certificate signature failure': 'CERT_SIGNATURE_FAILURE',
}

function nodeCertCode (message: string): string | undefined {
  return message.startsWith('Hostname/IP does not match certificate\'s altnames') ? 'ERR_TLS_CERT_ALTNAME_INVALID' : NODE_CERT_MESSAGES[message]
}

/**
 * One line for a start that met a TLS failure no retry mends, naming the fix; undefined for any
 * other error.
 */
export function tlsRefusal (wrapped: unknown, tls: DatabaseTls | undefined): string | undefined {
  if (tls === undefined) return undefined
  const err = driverCause(wrapped)
  const { code, message } = (err ?? {}) as { code?: unknown, message?: unknown }
  if (tlsNotOffered(err)) {
    return `TLS_NOT_OFFERED: the server offers no TLS, and TLS mode ${tls.mode} (${tls.modeFrom}) requires it: turn TLS on in the server (MySQL/MariaDB ssl-cert and ssl-key, PostgreSQL ssl=on), or lower the mode in leaf.jdbc.url`
  }
  // mysql2 reports a failed handshake as HANDSHAKE_SSL_ERROR with Node's message; the code is Node's.
  const cert = typeof code === 'string' && CERT_REMEDIES[code] !== undefined ? code : code === 'HANDSHAKE_SSL_ERROR' ? nodeCertCode(String(message)) : undefined
  if (cert !== undefined) {
    return `${cert}: TLS mode ${tls.mode} (${tls.modeFrom}) refused the server: ${String(message).replace(/\s+/g, ' ')}: ${CERT_REMEDIES[cert] as string}`
  }
  return undefined
}
