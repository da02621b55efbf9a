import { readFileSync } from 'node:fs'
import { ConfigError } from './config-error.js'

// Checked now, so that a wrong file refuses the start rather than failing every handshake later.

const PEM_BLOCK = {
  certificate: { line: /-----BEGIN (TRUSTED )?CERTIFICATE-----/, convert: 'openssl x509 -inform DER -in FILE -out FILE.pem' },
  'private key': { line: /-----BEGIN ((RSA|EC|ENCRYPTED) )?PRIVATE KEY-----/, convert: 'openssl pkey -inform DER -in FILE -out FILE.pem (PgJDBC\'s .pk8 keys are DER)' },
} as const

/** The file's text; `key` is what the error names (`server.tls.cert`, `leaf.jdbc.url: parameter sslrootcert`). */
export function readPemFile (key: string, path: string, kind: keyof typeof PEM_BLOCK): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError(key, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'}): give a PEM file this process may read`, { code: 'CONFIG_FILE_UNREADABLE', cause: err })
  }
  if (!PEM_BLOCK[kind].line.test(text)) {
    throw new ConfigError(key, `${path} holds no PEM ${kind} (no -----BEGIN ... line): give one in PEM (from DER: ${PEM_BLOCK[kind].convert})`)
  }
  return text
}
