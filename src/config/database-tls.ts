import { resolve } from 'node:path'
import { createSecureContext } from 'node:tls'
import { ConfigError } from './config-error.js'
import { readPemFile } from './pem-file.js'
import type { FileParameter, TlsMode, UrlParameters } from './url-parameters.js'

export interface DatabaseTls {
  mode: TlsMode
  /** A URL parameter, `leaf.jdbc.ssl.ca`, or `default`. */
  modeFrom: string
  /** Certificates the server's chain must end in; none: Node's public roots. */
  ca?: string
  /** A client certificate and its key, for servers that ask for one (REQUIRE X509, `clientcert=verify-full`). */
  cert?: string
  key?: string
  passphrase?: string
}

export interface TlsKeys { ca: string, cert: string, key: string }

/** `prefer`, as Connector/J 8 and libpq, so a Java fleet stays encrypted; a CA given asks for `verify-full`. */
const DEFAULT_MODE: TlsMode = 'prefer'

/** Each PEM file read and checked; throws a ConfigError naming the key or parameter and the fix. */
export function resolveDatabaseTls (params: UrlParameters, keys: TlsKeys, relativeTo: string): DatabaseTls {
  const pick = (what: 'ca' | 'cert' | 'key', key: string): FileParameter | undefined => {
    const fromUrl = params[what]
    const fromKey = keys[what].trim()
    if (fromUrl !== undefined && fromKey !== '') throw new ConfigError(key, `is set, and so is the URL's ${fromUrl.from}: give the file one way`, { code: 'CONFIG_CONFLICT' })
    return fromUrl ?? (fromKey === '' ? undefined : { path: fromKey, from: key })
  }
  const ca = pick('ca', 'leaf.jdbc.ssl.ca')
  const cert = pick('cert', 'leaf.jdbc.ssl.cert')
  const key = pick('key', 'leaf.jdbc.ssl.key')
  if ((cert === undefined) !== (key === undefined)) {
    const given = (cert ?? key) as FileParameter
    throw new ConfigError(nameOf(given), 'a client certificate needs its key and a key its certificate: give both (leaf.jdbc.ssl.cert and leaf.jdbc.ssl.key)', { code: 'CONFIG_CONFLICT' })
  }
  let mode = params.tlsMode ?? (ca === undefined ? DEFAULT_MODE : 'verify-full')
  let modeFrom = params.tlsModeFrom ?? (ca === undefined ? 'default' : `${ca.from} (a CA given)`)
  const files = [ca, cert, key].filter((f) => f !== undefined)
  if (mode === 'disable' && files.length > 0) {
    throw new ConfigError(nameOf(files[0] as FileParameter), `is set, but ${modeFrom} turns TLS off: remove one of the two`, { code: 'CONFIG_CONFLICT' })
  }
  if (mode === 'prefer' && ca !== undefined) {
    throw new ConfigError(nameOf(ca), `a CA with ${modeFrom} would still connect in plain text to a server without TLS: use sslMode=VERIFY_IDENTITY (or VERIFY_CA, sslmode=verify-full or verify-ca)`, { code: 'CONFIG_CONFLICT' })
  }
  // Node's public roots without the host name would pass any server with any public certificate.
  if (mode === 'verify-ca' && ca === undefined) {
    throw new ConfigError('leaf.jdbc.ssl.ca', `is not set, and TLS mode verify-ca (${modeFrom}) checks the server's certificate against a CA: without one, any server holding any publicly signed certificate would pass. Give the CA that signed the server's certificate (from a Java trust store: keytool -exportcert -rfc), or use sslMode=VERIFY_IDENTITY (sslmode=verify-full) to check a public CA and the host name`, { code: 'CONFIG_CONFLICT' })
  }
  // libpq's rule: require with a CA checks the chain.
  if (mode === 'require' && ca !== undefined) {
    mode = 'verify-ca'
    modeFrom = `${modeFrom} with a CA (${ca.from})`
  }
  const tls: DatabaseTls = { mode, modeFrom }
  if (ca !== undefined) tls.ca = readPemFile(nameOf(ca), resolve(relativeTo, ca.path), 'certificate')
  if (cert !== undefined) tls.cert = readPemFile(nameOf(cert), resolve(relativeTo, cert.path), 'certificate')
  if (key !== undefined) tls.key = readPemFile(nameOf(key), resolve(relativeTo, key.path), 'private key')
  if (params.keyPassphrase !== undefined) tls.passphrase = params.keyPassphrase
  if (files.length > 0) {
    try {
      createSecureContext({ ca: tls.ca, cert: tls.cert, key: tls.key, passphrase: tls.passphrase })
    } catch (err) {
      const which = cert ?? ca ?? key
      // Node's message names the problem, never a secret.
      throw new ConfigError(nameOf(which as FileParameter), `the PEM files do not make a TLS context (${(err as Error).message}): give the CA, the client certificate and its own key, unencrypted or with sslpassword`, { cause: err })
    }
  }
  return tls
}

/** `leaf.jdbc.ssl.ca`, or `leaf.jdbc.url` for a URL parameter (the error then names the parameter). */
function nameOf (f: FileParameter): string {
  return f.from.startsWith('leaf.') ? f.from : `leaf.jdbc.url: parameter ${f.from}`
}
