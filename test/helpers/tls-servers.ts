import { execFile, spawnSync } from 'node:child_process'
import { appendFileSync, chmodSync, copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { LEAF_SETUP_SQL, MariaDbNode } from './mariadb-node.js'
import { PgServerNode } from './postgres-replica.js'
import { freePort } from './ports.js'
import { ROOT } from './server-process.js'

// Database servers with TLS on, for the TLS tests: certificates made with openssl (a CA, a
// server certificate for the name `localhost` only, so that a connection to 127.0.0.1 checked
// with verify-full is refused, and a client certificate), a private MariaDB with ssl-ca,
// ssl-cert and ssl-key, and a private PostgreSQL with ssl=on. Each on a loopback port of its
// own, in a folder of its own, stopped by its own pid.

const run = promisify(execFile)
const asRoot = process.getuid?.() === 0

export interface Certificates {
  dir: string
  /** The CA's certificate (PEM file path). */
  ca: string
  /** The server's certificate and key: subjectAltName DNS:localhost only. */
  serverCert: string
  serverKey: string
  /** A client certificate (CN leaf-client) and key, signed by the CA. */
  clientCert: string
  clientKey: string
  /** A CA that signed nothing here: a server checked against it is refused. */
  otherCa: string
}

async function openssl (dir: string, args: string[]): Promise<void> {
  await run('openssl', args, { cwd: dir })
}

/** A fresh CA, server and client certificates in a temp folder (EC P-256, one day). */
export async function makeCertificates (): Promise<Certificates> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-tls-'))
  chmodSync(dir, 0o755)
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  await openssl(dir, ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-subj', '/CN=leaf-test-ca', '-days', '1'])
  await openssl(dir, ['req', '-x509', ...ec, '-keyout', 'other-ca.key', '-out', 'other-ca.pem', '-subj', '/CN=leaf-other-ca', '-days', '1'])
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=DNS:localhost\n')
  await openssl(dir, ['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost'])
  await openssl(dir, ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '1', '-extfile', 'server.ext'])
  await openssl(dir, ['req', ...ec, '-keyout', 'client.key', '-out', 'client.csr', '-subj', '/CN=leaf-client'])
  await openssl(dir, ['x509', '-req', '-in', 'client.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'client.pem', '-days', '1'])
  for (const f of ['ca.pem', 'other-ca.pem', 'server.pem', 'server.key', 'client.pem', 'client.key']) chmodSync(join(dir, f), 0o644)
  const at = (f: string) => join(dir, f)
  return { dir, ca: at('ca.pem'), serverCert: at('server.pem'), serverKey: at('server.key'), clientCert: at('client.pem'), clientKey: at('client.key'), otherCa: at('other-ca.pem') }
}

/**
 * A private MariaDB with TLS: the `leaf` user (password `leaf`) must come over TLS (REQUIRE
 * SSL), so that a session in plain text is refused by the server itself; `leafx509` (password
 * `leaf`) must show a client certificate of the CA (REQUIRE X509).
 */
export async function startTlsMariaDb (certs: Certificates): Promise<MariaDbNode> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-tls-mariadb-'))
  chmodSync(dir, 0o755)
  const node = new MariaDbNode({
    dir,
    port: await freePort(),
    options: [`ssl-ca=${certs.ca}`, `ssl-cert=${certs.serverCert}`, `ssl-key=${certs.serverKey}`],
  })
  await node.install()
  await node.start()
  const conn = await node.connect({ user: 'root', password: '', database: undefined, multipleStatements: true })
  try {
    await conn.query(`${LEAF_SETUP_SQL}
      ALTER USER 'leaf'@'%' REQUIRE SSL;
      CREATE USER 'leafx509'@'%' IDENTIFIED BY 'leaf' REQUIRE X509;
      GRANT ALL PRIVILEGES ON leaf.* TO 'leafx509'@'%';`)
  } finally {
    await conn.end()
  }
  return node
}

/** A private PostgreSQL (role and database leaf, sql/*.postgres.sql) with ssl=on and the server certificate. */
export async function startTlsPostgres (certs: Certificates): Promise<PgServerNode> {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-tls-pg-'))
  chmodSync(dir, 0o755)
  if (asRoot) spawnSync('chown', ['postgres:postgres', dir])
  const node = new PgServerNode(dir, await freePort())
  await run('bash', [join(ROOT, 'scripts/private-postgres.sh'), 'start', dir, String(node.port)], { timeout: 90_000 })
  // The key must be the server user's, and readable by it alone.
  for (const [from, to] of [[certs.serverCert, 'server.crt'], [certs.serverKey, 'server.key'], [certs.ca, 'root.crt']] as const) {
    copyFileSync(from, join(dir, to))
    chmodSync(join(dir, to), 0o600)
    if (asRoot) spawnSync('chown', ['postgres:postgres', join(dir, to)])
  }
  appendFileSync(join(dir, 'data', 'postgresql.conf'), `ssl = on\nssl_cert_file = '${join(dir, 'server.crt')}'\nssl_key_file = '${join(dir, 'server.key')}'\nssl_ca_file = '${join(dir, 'root.crt')}'\n`)
  await node.query('SELECT pg_reload_conf()')
  for (let i = 0; i < 50; i++) {
    const [row] = await node.query<{ ssl: string }>('SHOW ssl')
    if (row?.ssl === 'on') return node
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  await node.stop()
  throw new Error('PostgreSQL did not turn ssl on')
}

export function removeCertificates (certs: Certificates): void {
  rmSync(certs.dir, { recursive: true, force: true })
}
