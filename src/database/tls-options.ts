import mysql from 'mysql2/promise'
import type { ConnectionOptions as TlsConnectionOptions } from 'node:tls'
import type { DatabaseTls } from '../config/database-tls.js'
import type { Logger } from '../logger.js'
import { driverCause } from './errors.js'

// The store's TLS as each driver takes it. Neither driver has `prefer`: both refuse a server
// without TLS once `ssl` is set, so `prefer` asks for TLS and, on that refusal alone, connects
// again in plain text. Modes: docs/configuration.md#tls

/** What one database session uses: TLS with its protocol and cipher, or plain text. */
export interface TlsSession {
  /** null: plain text. */
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

export function tlsNotOffered (err: unknown): boolean {
  const { code, message } = (err ?? {}) as { code?: unknown, message?: unknown }
  return code === 'HANDSHAKE_NO_SSL_SUPPORT' || message === 'The server does not support SSL connections'
}

export function mayFallBack (tls: DatabaseTls | undefined, err: unknown): boolean {
  return tls?.mode === 'prefer' && tlsNotOffered(err)
}

/** Servers that declined TLS under `prefer`: later one-off connections go in plain text at once, until restart. */
const declined = new Set<string>()
const serverKey = (o: { host?: string, port?: number }) => `${o.host ?? ''}:${o.port ?? ''}`

/** A one-off connection (the host census, a kill), with the store's TLS. */
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

export function noteDeclined (server: { host: string, port: number }): void {
  declined.add(serverKey(server))
}

/** `fix`: the URL parameter that insists on TLS. */
export function warnPlainText (logger: Logger | undefined, to: { host: string, port: number }, tls: DatabaseTls, fix: string): void {
  const server = `${to.host.includes(':') ? `[${to.host}]` : to.host}:${to.port}`
  logger?.warn({ server, tls: `${tls.mode} (${tls.modeFrom})` },
    `TLS is preferred, and ${server} offers none: its connections go in plain text, the password and the IDs cross the network readable; ` +
    `once the server has TLS, set ${fix} or stronger in leaf.jdbc.url`)
}

/** MySQL's own view of a session's TLS: appended to a connection's first round trip. */
export const MYSQL_TLS_SQL = "SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')"

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

/** One line for the start log and /cache; never a secret. */
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

/** The fix for a TLS failure no retry mends; undefined for any other error. */
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
