import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface PemPair { cert: string, key: string }

/**
 * Two self-signed certificates (EC P-256, CN=localhost, valid for 100 years) with their keys,
 * for tests that only need OpenSSL to load a pair (config checks): a test key, guarding nothing.
 * Tests that connect make a fresh pair with makeSelfSigned.
 */
export const FIXED_PAIRS: readonly [PemPair, PemPair] = [
  {
    cert: `-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUJ4V/AwsQ5JqkRxJl0JcY/n985dcwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNzE2MTcyNloYDzIxMjYxMTEz
MTYxNzI2WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASb3u3Pcjvw0QW+YGHKbbMbB+D15WX2XjcGdxh6eAc6ByqX8LZ/+w8R
CohKL9KOrhyyAYMR6/4sa+7ldxogz9PCo28wbTAdBgNVHQ4EFgQUG7DBxq6ZhgPd
U9rHgyhsriDc+UswHwYDVR0jBBgwFoAUG7DBxq6ZhgPdU9rHgyhsriDc+UswDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDRwAwRAIgAf8CfyGGEOD8eJw1fDjYfN3ij9LoqOcNT207S8EJUjMCICk9
+ZDZ7FADJ++ura9D422O4owhpwafVal+cwuppUL+
-----END CERTIFICATE-----
`,
    key: `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgCjaH7vBWSnd0wHHg
oEivP0xz35macTpDQhYSpbbyNZqhRANCAASb3u3Pcjvw0QW+YGHKbbMbB+D15WX2
XjcGdxh6eAc6ByqX8LZ/+w8RCohKL9KOrhyyAYMR6/4sa+7ldxogz9PC
-----END PRIVATE KEY-----
`,
  },
  {
    cert: `-----BEGIN CERTIFICATE-----
MIIBnDCCAUGgAwIBAgIUQSYVxyt9sxUrDa0a0h6a0q1R2tAwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNzE2MTcyN1oYDzIxMjYxMTEz
MTYxNzI3WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQLW1rU3HFjDzYq9me8YNgaEZvpEOQYT1iUsqnS9l+i5KjBINK3CoA9
bP+sIotu91ILbubGjR2psIt6CnyCwt4wo28wbTAdBgNVHQ4EFgQUruxB9LKfFBLr
ScxVd+UnPq6bog4wHwYDVR0jBBgwFoAUruxB9LKfFBLrScxVd+UnPq6bog4wDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDSQAwRgIhALqSIfXzYYg4hQIoyHO43XYn5RrW8e1gljmrsNJjuKL5AiEA
ySIz+mjdAn+6JC7oevdQ1W3wVnX7EIdMANNUoy9FXoI=
-----END CERTIFICATE-----
`,
    key: `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgkRgEBfv6DMZSVgMh
kUJf4P10MfS+vXwqG270B1kj0zWhRANCAAQLW1rU3HFjDzYq9me8YNgaEZvpEOQY
T1iUsqnS9l+i5KjBINK3CoA9bP+sIotu91ILbubGjR2psIt6CnyCwt4w
-----END PRIVATE KEY-----
`,
  },
]

/** Writes a pair to `cert.pem` and `key.pem` in a new folder; returns their paths. */
export function writePair (pair: PemPair): { dir: string, cert: string, key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-tls-'))
  writeFileSync(join(dir, 'cert.pem'), pair.cert)
  writeFileSync(join(dir, 'key.pem'), pair.key)
  return { dir, cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') }
}

/** A new self-signed certificate for localhost and 127.0.0.1, valid one day, by openssl, in a new folder. */
export function makeSelfSigned (): { dir: string, cert: string, key: string, pair: PemPair } {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-tls-'))
  const cert = join(dir, 'cert.pem')
  const key = join(dir, 'key.pem')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-days', '1', '-keyout', key, '-out', cert], { stdio: 'ignore' })
  return { dir, cert, key, pair: { cert: readFileSync(cert, 'utf8'), key: readFileSync(key, 'utf8') } }
}
