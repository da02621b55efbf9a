import { resolve } from 'node:path'
import { createSecureContext } from 'node:tls'
import { ConfigError } from './config-error.js'
import { readPemFile } from './pem-file.js'

/** The HTTP server's certificate (chain) and its private key, as PEM text: it serves HTTPS. */
export interface ServerTls { cert: string, key: string }

const CERT_KEY = 'server.tls.cert'
const KEY_KEY = 'server.tls.key'

/** The pair checked now, so that a wrong file refuses the start rather than failing every handshake. */
export function resolveServerTls (certPath: string, keyPath: string, relativeTo: string): ServerTls | undefined {
  if (certPath === '' && keyPath === '') return undefined
  if (certPath === '' || keyPath === '') {
    const [missing, given] = certPath === '' ? [CERT_KEY, KEY_KEY] : [KEY_KEY, CERT_KEY]
    throw new ConfigError(missing, `is not set, but ${given} is: HTTPS needs both, the certificate (chain) and its private key as PEM files; or unset ${given} for plain HTTP`, { code: 'CONFIG_CONFLICT' })
  }
  const cert = readPemFile(CERT_KEY, resolve(relativeTo, certPath), 'certificate')
  const key = readPemFile(KEY_KEY, resolve(relativeTo, keyPath), 'private key')
  try {
    createSecureContext({ cert })
  } catch (err) {
    throw new ConfigError(CERT_KEY, `${resolve(relativeTo, certPath)} is not a certificate OpenSSL can read (${(err as Error).message}): give the server's certificate, then its intermediates, in PEM`, { cause: err })
  }
  try {
    createSecureContext({ cert, key })
  } catch (err) {
    // OpenSSL's message names the problem (key values mismatch, bad decrypt), never the key.
    throw new ConfigError(KEY_KEY, `${resolve(relativeTo, keyPath)} is not the private key of server.tls.cert's certificate, or cannot be opened (${(err as Error).message}): give that certificate's own key, unencrypted`, { cause: err })
  }
  return { cert, key }
}
