import dns from 'node:dns'
import t, { type Test } from 'tap'
import type { Connection } from 'mysql2/promise'
import { parseJdbcUrl, type StoreConfig } from '../../src/config/jdbc-url.js'
import type { TlsKeys } from '../../src/config/database-tls.js'
import { storeRefusal } from '../../src/modes/segment-mode.js'
import { leafLayout } from '../../src/layout/layout.js'
import { createDbLeaseStore } from '../../src/snowflake/worker-id/db-lease/db-lease-store.js'
import { createStore } from '../../src/segment/stores/create-store.js'
import { readHost } from '../../src/database/host-census.js'
import { killThread } from '../../src/database/kill-thread.js'
import { IDENTITY_SQL, identityOf } from '../../src/database/server-identity.js'
import { TEST_MYSQL_HOST, TEST_MYSQL_PORT } from '../helpers/mysql.js'
import { TEST_PG_HOST, TEST_PG_PORT } from '../helpers/postgres.js'
import { makeCertificates, removeCertificates, startTlsMariaDb, startTlsPostgres } from '../helpers/tls-servers.js'

// TLS to MySQL/MariaDB and PostgreSQL against real servers with TLS on (test/helpers/tls-servers.ts):
// every mode encrypts the session, as the server itself reports it (MariaDB refuses the `leaf`
// user in plain text: REQUIRE SSL; PostgreSQL's pg_stat_ssl); verify-full refuses a
// certificate for another name, verify-ca one of another CA, require a server without TLS,
// each in one line naming the fix; prefer falls back to plain text on a server without TLS;
// the host census, the kill connection and db-lease run over TLS too.

// A second name of this machine that the server's certificate does not hold: resolved to the
// loopback address in this process (net.connect asks dns.lookup at each connection).
const OTHER_NAME = 'other.leaf.test'
const lookup = dns.lookup
;(dns as { lookup: unknown }).lookup = (host: string, ...rest: unknown[]) => (lookup as (...a: unknown[]) => void)(host === OTHER_NAME ? '127.0.0.1' : host, ...rest)
t.teardown(() => { (dns as { lookup: unknown }).lookup = lookup })

const certs = await makeCertificates()
t.teardown(() => removeCertificates(certs))
const [maria, pgNode] = await Promise.all([startTlsMariaDb(certs), startTlsPostgres(certs)])
t.teardown(() => maria.stop())
t.teardown(() => pgNode.stop())

const NO_KEYS: TlsKeys = { ca: '', cert: '', key: '' }
const POOL = { connectTimeoutMs: 2000, poolSize: 2, queryTimeoutMs: 2000 }

function config (url: string, keys: Partial<TlsKeys> = {}): StoreConfig {
  return parseJdbcUrl(url, '', '', { keys: { ...NO_KEYS, ...keys }, relativeTo: certs.dir })
}

const mariaUrl = (host: string, query: string, user = 'leaf', driver = 'mysql') => `jdbc:${driver}://${host}:${maria.port}/leaf?user=${user}&password=leaf&${query}`
const pgUrl = (host: string, query: string) => `jdbc:postgresql://${host}:${pgNode.port}/leaf?user=leaf&password=leaf&${query}`

/** Pings through a store of `store`, then returns its TLS session and closes it. */
async function session (store: StoreConfig): Promise<{ cipher: string | null, version: string | null } | undefined> {
  const s = createStore(store, POOL)
  try {
    await s.ping()
    await s.getAllTags()
    return s.tlsSession?.()
  } finally {
    await s.close()
  }
}

/** The start's refusal line for `store`, or undefined when it connects. */
async function refusal (store: StoreConfig): Promise<string | undefined> {
  const s = createStore(store, POOL)
  try {
    await s.ping()
    return undefined
  } catch (err) {
    return storeRefusal('the store', err, store)?.message ?? `not a refusal: ${(err as Error).message}`
  } finally {
    await s.close()
  }
}

const MYSQL_MODES = [
  ['sslMode=PREFERRED', {}],
  ['sslMode=REQUIRED', {}],
  ['useSSL=true&requireSSL=true&verifyServerCertificate=false', {}],
  ['useSSL=true', { ca: certs.ca }], // Connector/J 5.1: verify-ca
  ['sslMode=VERIFY_CA', { ca: certs.ca }],
  ['sslMode=VERIFY_IDENTITY', { ca: certs.ca }],
  ['', { ca: certs.ca }], // a CA alone: verify-full
] as const

t.test('MariaDB: every mode encrypts the session (the server refuses the leaf user in plain text)', async (t) => {
  for (const [query, keys] of MYSQL_MODES) {
    const s = await session(config(mariaUrl('localhost', query), keys))
    t.match(s, { cipher: /\w/, version: /^TLSv1\.[23]$/ }, `${query || 'leaf.jdbc.ssl.ca alone'}: ${s?.version} ${s?.cipher}`)
  }
  // MariaDB Connector/J's names, in its URL.
  for (const query of [`sslMode=verify-full&serverSslCert=${certs.ca}`, `useSsl=true&serverSslCert=${certs.ca}`, 'useSsl=true&trustServerCertificate=true']) {
    const s = await session(config(mariaUrl('localhost', query, 'leaf', 'mariadb')))
    t.match(s, { cipher: /\w/ }, `jdbc:mariadb: ${query}: ${s?.cipher}`)
  }
  // The server's side: the leaf user cannot sign in without TLS.
  const plain = await refusal(config(mariaUrl('localhost', 'sslMode=DISABLED')))
  t.match(plain, /ER_ACCESS_DENIED_ERROR/, 'DISABLED: the server refuses the leaf user (REQUIRE SSL)')
})

t.test('MariaDB: verify-full refuses a certificate for another name, verify-ca one of another CA, in one line', async (t) => {
  // The certificate names localhost only.
  const name = await refusal(config(mariaUrl(OTHER_NAME, 'sslMode=VERIFY_IDENTITY'), { ca: certs.ca }))
  t.match(name, /^segment store the store: ERR_TLS_CERT_ALTNAME_INVALID: TLS mode verify-full \(sslMode=VERIFY_IDENTITY\) refused the server: .*other\.leaf\.test.*: the server's certificate is not for the host name in leaf\.jdbc\.url .*VERIFY_CA/)
  t.notMatch(name, /\n/, 'one line')
  t.match(await session(config(mariaUrl(OTHER_NAME, 'sslMode=VERIFY_CA'), { ca: certs.ca })), { cipher: /\w/ }, 'the same server by that name with VERIFY_CA connects')
  // mysql2 would check an IP address host against the name localhost: refused at start.
  t.throws(() => config(mariaUrl('127.0.0.1', 'sslMode=VERIFY_IDENTITY'), { ca: certs.ca }), { name: 'ConfigError', message: /^leaf\.jdbc\.url: host 127\.0\.0\.1: TLS mode verify-full \(sslMode=VERIFY_IDENTITY\) checks the certificate against the host's name, .*VERIFY_CA$/ })
  const ca = await refusal(config(mariaUrl('localhost', 'sslMode=VERIFY_CA'), { ca: certs.otherCa }))
  t.match(ca, /^segment store the store: (UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY): .*give (the CA that signed it|that CA) as leaf\.jdbc\.ssl\.ca/)
  const publicRoots = await refusal(config(mariaUrl('localhost', 'sslMode=VERIFY_IDENTITY')))
  t.match(publicRoots, /leaf\.jdbc\.ssl\.ca/, 'no CA given: Node\'s public roots, which do not hold the test CA')
})

t.test('MariaDB: a client certificate for a user that requires one', async (t) => {
  const s = await session(config(mariaUrl('localhost', 'sslMode=VERIFY_IDENTITY', 'leafx509'), { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey }))
  t.match(s, { cipher: /\w/ }, 'REQUIRE X509 passes with the certificate')
  const without = await refusal(config(mariaUrl('localhost', 'sslMode=VERIFY_IDENTITY', 'leafx509'), { ca: certs.ca }))
  t.match(without, /ER_ACCESS_DENIED_ERROR/, 'and is refused without it')
})

t.test('the shared MariaDB has no TLS: REQUIRED is refused in one line, PREFERRED falls back to plain text', async (t) => {
  const url = (q: string) => `jdbc:mysql://${TEST_MYSQL_HOST}:${TEST_MYSQL_PORT}/leaf?user=leaf&password=leaf&${q}`
  t.match(await refusal(config(url('sslMode=REQUIRED'))), /^segment store the store: TLS_NOT_OFFERED: the server offers no TLS, and TLS mode require \(sslMode=REQUIRED\) requires it: turn TLS on in the server/)
  t.same(await session(config(url('sslMode=PREFERRED'))), { cipher: null, version: null }, 'plain text')
  t.same(await session(config(url(''))), { cipher: null, version: null }, 'the default (prefer) too')
})

t.test('MariaDB: the host census and the kill connection run over TLS', async (t) => {
  const store = config(mariaUrl('localhost', 'sslMode=VERIFY_IDENTITY'), { ca: certs.ca })
  if (store.kind !== 'mysql') throw new Error('not mysql')
  const host = { host: 'localhost', port: maria.port, user: 'leaf', password: 'leaf', database: 'leaf', connectTimeoutMs: 2000, queryTimeoutMs: 2000 }
  t.match(await readHost({ ...host, tls: store.tls }), { state: 'writable' }, 'census over TLS')
  t.match(await readHost({ ...host, tls: undefined }), { state: 'unknown', error: /ER_ACCESS_DENIED_ERROR/ }, 'and refused in plain text: the census did use TLS')
  // A session to kill, and the kill over TLS.
  // The leaf user's own session (over TLS: REQUIRE SSL), which it may kill.
  const victim: Connection = await maria.connect({ multipleStatements: true, ssl: { rejectUnauthorized: false } })
  t.teardown(() => victim.destroy())
  const [rows] = await victim.query(IDENTITY_SQL) as unknown as [unknown[]]
  const identity = identityOf(rows) ?? null
  t.ok(identity, 'the victim\'s server said who it is')
  const id = victim.threadId as number
  t.match(await killThread({ ...host, tls: undefined }, id, identity), { outcome: 'not-killed', reason: /^Access denied for user 'leaf'/, cause: { code: 'ER_ACCESS_DENIED_ERROR' } }, 'in plain text the kill is refused')
  t.same(await killThread({ ...host, tls: store.tls }, id, identity), { outcome: 'killed' }, 'over TLS it is killed')
})

t.test('MariaDB: db-lease claims over TLS', async (t) => {
  const store = config(mariaUrl('localhost', 'sslMode=VERIFY_IDENTITY'), { ca: certs.ca })
  const lease = await createDbLeaseStore({ store, pool: 'tls', ttlMs: 5000, connectTimeoutMs: 2000, queryTimeoutMs: 2000, layout: leafLayout(1288834974657) })
  t.teardown(() => lease.close())
  t.ok(await lease.claim(1, 'owner-a', 'x:1'), 'claimed through the REQUIRE SSL user')
  t.same((await lease.list(0, 5)).map((s) => s.workerId), [1])
})

/** Every session of `application` as pg_stat_ssl sees it, read by the server's superuser. */
async function pgSessions (application: string): Promise<{ ssl: boolean, cipher: string | null }[]> {
  return await pgNode.query<{ ssl: boolean, cipher: string | null }>('SELECT s.ssl, s.cipher FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1', [application])
}

t.test('PostgreSQL: every mode encrypts the session (pg_stat_ssl on the server)', async (t) => {
  const modes = [['sslmode=prefer', {}], ['sslmode=require', {}], ['sslmode=verify-ca', { ca: certs.ca }], ['sslmode=verify-full', { ca: certs.ca }],
    [`sslmode=verify-full&sslrootcert=${certs.ca}`, {}], [`ssl=true&sslrootcert=${certs.ca}`, {}], ['sslfactory=org.postgresql.ssl.NonValidatingFactory', {}]] as const
  let n = 0
  for (const [query, keys] of modes) {
    const app = `leaf-tls-${n++}`
    const s = createStore(config(pgUrl('localhost', `${query}&ApplicationName=${app}`), keys), POOL)
    try {
      await s.getAllTags()
      const seen = await pgSessions(app)
      t.ok(seen.length > 0 && seen.every((r) => r.ssl && r.cipher !== null), `${query}: ${seen.map((r) => r.cipher).join(', ')} (server side)`)
      t.match(s.tlsSession?.(), { cipher: /\w/, version: /^TLSv1\.[23]$/ }, 'and as the store reports it')
    } finally {
      await s.close()
    }
  }
})

t.test('PostgreSQL: verify-full refuses a certificate for another name; require a server without TLS; prefer falls back', async (t) => {
  const name = await refusal(config(pgUrl(OTHER_NAME, 'sslmode=verify-full'), { ca: certs.ca }))
  t.match(await refusal(config(pgUrl('127.0.0.1', 'sslmode=verify-full'), { ca: certs.ca })), /ERR_TLS_CERT_ALTNAME_INVALID/, 'an IP address is checked against the certificate\'s IP entries')
  t.match(name, /^segment store the store: ERR_TLS_CERT_ALTNAME_INVALID: TLS mode verify-full \(sslmode=verify-full\) refused the server: .*verify-ca/)
  t.match(await refusal(config(pgUrl('localhost', 'sslmode=verify-ca'), { ca: certs.otherCa })), /leaf\.jdbc\.ssl\.ca/)
  const shared = (q: string) => `jdbc:postgresql://${TEST_PG_HOST}:${TEST_PG_PORT}/leaf?user=leaf&password=leaf&${q}`
  t.match(await refusal(config(shared('sslmode=require'))), /^segment store the store: TLS_NOT_OFFERED: the server offers no TLS, and TLS mode require \(sslmode=require\) requires it/)
  t.same(await session(config(shared('sslmode=prefer'))), { cipher: null, version: null }, 'prefer: plain text')
})

t.test('PostgreSQL: db-lease claims over TLS', async (t) => {
  const store = config(pgUrl('localhost', 'sslmode=verify-full&ApplicationName=leaf-tls-lease'), { ca: certs.ca })
  const lease = await createDbLeaseStore({ store, pool: 'tls', ttlMs: 5000, connectTimeoutMs: 2000, queryTimeoutMs: 2000, layout: leafLayout(1288834974657) })
  t.teardown(() => lease.close())
  t.ok(await lease.claim(2, 'owner-b', 'x:2'), 'claimed')
  const seen = await pgSessions('leaf-tls-lease')
  t.ok(seen.length > 0 && seen.every((r) => r.ssl), `its sessions are encrypted (server side: ${seen.map((r) => r.cipher).join(', ')})`)
})

t.test('bad TLS input: one line naming the key or parameter and the fix', async (t: Test) => {
  const bad = (url: string, keys: Partial<TlsKeys>, message: RegExp) => t.throws(() => config(url, keys), { name: 'ConfigError', message }, String(message))
  const url = 'jdbc:mysql://db/leaf'
  bad(`${url}?sslMode=STRICT`, {}, /^leaf\.jdbc\.url: parameter sslMode: "STRICT" is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY/)
  bad('jdbc:postgresql://db/leaf?sslmode=strict', {}, /^leaf\.jdbc\.url: parameter sslmode: "strict" is not one of disable, allow, prefer, require, verify-ca, verify-full$/)
  bad(`${url}?sslMode=VERIFY_CA`, { ca: 'missing.pem' }, /^leaf\.jdbc\.ssl\.ca: cannot read .*missing\.pem \(ENOENT\): give a PEM file/)
  bad(`${url}?sslMode=VERIFY_CA`, { ca: certs.clientKey }, /^leaf\.jdbc\.ssl\.ca: .*client\.key holds no PEM certificate .*openssl x509 -inform DER/)
  bad(`${url}?sslMode=REQUIRED`, { cert: certs.clientCert, key: certs.serverKey }, /^leaf\.jdbc\.ssl\.cert: the PEM files do not make a TLS context \(.*\)/)
  bad(`${url}?sslMode=REQUIRED`, { cert: certs.clientCert }, /^leaf\.jdbc\.ssl\.cert: a client certificate needs its key/)
  bad(`${url}?trustCertificateKeyStoreUrl=file:/etc/truststore.jks`, {}, /^leaf\.jdbc\.url: parameter trustCertificateKeyStoreUrl: names a Java key store: .*leaf\.jdbc\.ssl\.ca/)
  bad(`${url}?clientCertificateKeyStoreUrl=file:/k.p12&clientCertificateKeyStorePassword=hunter2`, {}, /clientCertificateKeyStoreUrl: names a Java key store/)
  bad(`${url}?sslMode=DISABLED`, { ca: certs.ca }, /^leaf\.jdbc\.ssl\.ca: is set, but sslMode=DISABLED turns TLS off/)
  bad(`${url}?sslMode=VERIFY_CA`, {}, /^leaf\.jdbc\.ssl\.ca: is not set, and TLS mode verify-ca \(sslMode=VERIFY_CA\) checks the server's certificate against a CA: without one, any server holding any publicly signed certificate would pass/)
  bad(`${url}?useSSL=true`, {}, /^leaf\.jdbc\.ssl\.ca: is not set, and TLS mode verify-ca \(useSSL=true \(Connector\/J 5\.1 checks the certificate unless verifyServerCertificate=false\)\)/)
  bad('jdbc:postgresql://db/leaf?sslmode=verify-ca', {}, /^leaf\.jdbc\.ssl\.ca: is not set, and TLS mode verify-ca/)
  bad(`${url}?sslMode=PREFERRED`, { ca: certs.ca }, /^leaf\.jdbc\.ssl\.ca: a CA with sslMode=PREFERRED would still connect in plain text/)
  bad(`${url}?cachePrepStmts=true&holdResultsOpenOverStatementClose=true`, {}, /^leaf\.jdbc\.url: parameter holdResultsOpenOverStatementClose: is not read by Leaf-TS: remove it/)
  bad(`${url}?socketTimeout=0`, {}, /^leaf\.jdbc\.url: parameter socketTimeout: 0 means no bound/)
  bad(`jdbc:postgresql://db/leaf?sslrootcert=${certs.ca}`, { ca: certs.ca }, /^leaf\.jdbc\.ssl\.ca: is set, and so is the URL's sslrootcert: give the file one way$/)
  bad('jdbc:postgresql://db/leaf?currentSchema=ids', {}, /^leaf\.jdbc\.url: parameter currentSchema: is not read by Leaf-TS: .*ALTER ROLE/)
  t.throws(() => config(`${url}?password=hunter2&secret-part=1`), { message: /^(?!.*(hunter2|secret-part))/ }, 'the password, and what an unencoded \'&\' cut from it, are never in the message')
})
