import t from 'tap'
import { readUrlParameters, type Driver } from '../../src/config/url-parameters.js'
import { describeTls, mysqlSsl, mysqlTlsSession, pgSsl, pgTlsSession, tlsRefusal } from '../../src/database/tls-options.js'

// leaf.jdbc.url's parameters as the Java drivers read them: each read, accepted without effect,
// or refused in one line naming it (docs/configuration.md#url-parameters).

const read = (driver: Driver, query: string) => readUrlParameters(driver, new URLSearchParams(query))
const mode = (driver: Driver, query: string) => {
  const p = read(driver, query)
  return [p.tlsMode, p.tlsModeFrom]
}

t.test('TLS modes: sslMode, and the older switches as each driver reads them', async (t) => {
  const cases: [Driver, string, [string | undefined, string | undefined]][] = [
    ['mysql', '', [undefined, undefined]],
    ['mysql', 'sslMode=disabled', ['disable', 'sslMode=disabled']],
    ['mysql', 'SSLMODE=Verify_Identity', ['verify-full', 'SSLMODE=Verify_Identity']],
    ['mariadb', 'sslMode=trust', ['require', 'sslMode=trust']],
    ['mysql', 'useSSL=false', ['disable', 'useSSL=false']],
    // Connector/J 5.1, Java Leaf's: the certificate is checked unless verifyServerCertificate=false.
    ['mysql', 'useSSL=true', ['verify-ca', 'useSSL=true (Connector/J 5.1 checks the certificate unless verifyServerCertificate=false)']],
    ['mysql', 'useSSL=true&requireSSL=true', ['verify-ca', 'useSSL=true&requireSSL=true (Connector/J 5.1 checks the certificate unless verifyServerCertificate=false)']],
    ['mysql', 'useSSL=true&verifyServerCertificate=false', ['prefer', 'useSSL=true&verifyServerCertificate=false']],
    ['mysql', 'requireSSL=true&verifyServerCertificate=false', ['require', 'requireSSL=true&verifyServerCertificate=false']],
    ['mysql', 'verifyServerCertificate=true', ['verify-ca', 'verifyServerCertificate=true']],
    ['mysql', 'verifyServerCertificate=false', [undefined, undefined]],
    ['mysql', 'useSSL=false&requireSSL=true', ['disable', 'useSSL=false']],
    ['mysql', 'sslMode=REQUIRED&useSSL=false', ['require', 'sslMode=REQUIRED']],
    ['mariadb', 'useSsl=true', ['verify-full', 'useSsl=true']],
    ['mariadb', 'useSsl=true&trustServerCertificate=true', ['require', 'useSsl=true&trustServerCertificate=true']],
    ['mariadb', 'useSsl=true&disableSslHostnameVerification=true', ['verify-ca', 'useSsl=true&disableSslHostnameVerification=true']],
    ['mariadb', 'useSsl=false&trustServerCertificate=true', ['disable', 'useSsl=false']],
    ['postgres', 'sslmode=allow', ['prefer', 'sslmode=allow']],
    ['postgres', 'sslmode=verify-ca', ['verify-ca', 'sslmode=verify-ca']],
    ['postgres', 'ssl=true', ['verify-full', 'ssl=true']],
    ['postgres', 'ssl=', ['verify-full', 'ssl=true']],
    // PgJDBC: anything but ssl=true is prefer.
    ['postgres', 'ssl=false', ['prefer', 'ssl=false']],
    ['postgres', 'ssl=true&sslfactory=org.postgresql.ssl.NonValidatingFactory', ['require', 'ssl=true&sslfactory=org.postgresql.ssl.NonValidatingFactory']],
    ['postgres', 'sslfactory=org.postgresql.ssl.NonValidatingFactory', [undefined, undefined]],
  ]
  for (const [driver, query, expected] of cases) t.same(mode(driver, query), expected, `${driver} ?${query}`)
})

t.test('files, timeouts and the application name', async (t) => {
  t.same(read('postgres', 'sslrootcert=ca.pem&sslcert=c.pem&sslkey=k.pem&sslpassword=pw&connectTimeout=5&socketTimeout=7&ApplicationName=ids'), {
    ca: { path: 'ca.pem', from: 'sslrootcert' },
    cert: { path: 'c.pem', from: 'sslcert' },
    key: { path: 'k.pem', from: 'sslkey' },
    keyPassphrase: 'pw',
    connectTimeoutMs: 5000,
    queryTimeoutMs: 7000,
    applicationName: 'ids',
  })
  t.same(read('postgres', 'connect_timeout=3&application_name=x'), { connectTimeoutMs: 3000, applicationName: 'x' }, 'libpq\'s names')
  t.same(read('mariadb', 'connectTimeout=1500&socketTimeout=2500&serverSslCert=/etc/ca.pem'), { connectTimeoutMs: 1500, queryTimeoutMs: 2500, ca: { path: '/etc/ca.pem', from: 'serverSslCert' } })
  t.same(read('mysql', 'User=u&PASSWORD=p'), { user: 'u', password: 'p' }, 'the credentials in any case, as Connector/J reads them')
})

t.test('accepted without effect: what Java Leaf URLs carry', async (t) => {
  t.same(read('mysql', 'useUnicode=true&characterEncoding=UTF-8&characterSetResults=utf8&serverTimezone=Asia/Shanghai&useLegacyDatetimeCode=false&useJDBCCompliantTimezoneShift=true&autoReconnect=true&failOverReadOnly=false&rewriteBatchedStatements=true&allowPublicKeyRetrieval=true&user=u&password=p'), { user: 'u', password: 'p' })
  t.same(read('postgres', 'tcpKeepAlive=true&prepareThreshold=0&reWriteBatchedInserts=true'), {})
})

t.test('refused in one line naming the parameter', async (t) => {
  const refuses = (driver: Driver, query: string, message: RegExp) => t.throws(() => read(driver, query), { name: 'ConfigError', message }, `${driver} ?${query}`)
  refuses('mysql', 'characterEncoding=latin1', /^leaf\.jdbc\.url: parameter characterEncoding: "latin1": connections use utf8mb4/)
  refuses('mysql', 'useSSL=maybe', /^leaf\.jdbc\.url: parameter useSSL: "maybe" is not true or false$/)
  refuses('mysql', 'sslMode=REQUIRED&SSLMODE=DISABLED', /parameter SSLMODE: is given more than once/)
  refuses('mysql', 'enabledTLSProtocols=TLSv1.2', /parameter enabledTLSProtocols: is not read by Leaf-TS: Leaf-TS offers TLS 1\.2 and 1\.3/)
  refuses('mariadb', 'serverSslCert=classpath:ca.pem', /parameter serverSslCert: names a Java class-path resource/)
  refuses('mariadb', 'serverSslCert=-----BEGIN CERTIFICATE-----abc', /parameter serverSslCert: holds the certificate itself/)
  refuses('mariadb', 'keyStore=/k.jks', /parameter keyStore: names a Java key store/)
  refuses('mysql', 'connectTimeout=abc', /parameter connectTimeout: "abc" is not a whole number of milliseconds/)
  refuses('mysql', 'connectTimeout=50', /parameter connectTimeout: 50 ms is out of range: give 100 to 60000 ms \(it sets leaf\.jdbc\.connect-timeout-ms\)/)
  refuses('postgres', 'socketTimeout=0', /parameter socketTimeout: 0 means no bound .*give 1 to 60 s \(it sets leaf\.jdbc\.query-timeout-ms\)/)
  refuses('postgres', 'connectTimeout=61', /61 s is out of range/)
  refuses('postgres', 'sslfactory=com.example.MyFactory', /parameter sslfactory: "com\.example\.MyFactory" is a Java class/)
  refuses('postgres', 'targetServerType=primary', /parameter targetServerType: is not read by Leaf-TS: Leaf-TS connects to one server/)
  refuses('postgres', 'useSSL=true', /parameter useSSL: is not read by Leaf-TS: remove it/)
  refuses('mysql', 'sslrootcert=ca.pem', /parameter sslrootcert: is not read by Leaf-TS: remove it/)
  refuses('mysql', 'trustServerCertificate=true', /parameter trustServerCertificate: is MariaDB Connector\/J's, and the URL is Connector\/J's/)
  refuses('mariadb', 'requireSSL=true', /parameter requireSSL: is Connector\/J's, and the URL is MariaDB Connector\/J's/)
  refuses('mariadb', 'trustServerCertificate=true', /parameter trustServerCertificate: has no effect without useSsl=true/)
  // An unencoded '&' in a password: what follows is not echoed.
  t.throws(() => read('mysql', 'user=u&password=ab&cd-secret=x'), { message: /^leaf\.jdbc\.url: has a parameter Leaf-TS does not read, not named here .*percent-encoded \(%26\)/ }, 'a password cut by an \'&\'')
  t.throws(() => read('mysql', 'user=u&password=ab&cd-secret=x'), { message: /^(?!.*cd-secret)/ }, 'the rest of the password is not in the message')
})

t.test('the drivers\' TLS options per mode', async (t) => {
  const tls = (mode: 'disable' | 'prefer' | 'require' | 'verify-ca' | 'verify-full') => ({ mode, modeFrom: 'test', ca: 'CA', cert: 'C', key: 'K', passphrase: 'P' })
  t.equal(mysqlSsl(undefined), undefined)
  t.equal(mysqlSsl(tls('disable')), undefined)
  t.same(mysqlSsl(tls('prefer')), { ca: 'CA', cert: 'C', key: 'K', passphrase: 'P', rejectUnauthorized: false, verifyIdentity: false })
  t.same(mysqlSsl(tls('verify-ca')), { ca: 'CA', cert: 'C', key: 'K', passphrase: 'P', rejectUnauthorized: true, verifyIdentity: false })
  t.same(mysqlSsl({ mode: 'verify-full', modeFrom: 'x' }), { rejectUnauthorized: true, verifyIdentity: true })
  t.equal(pgSsl(tls('disable')), false)
  t.match(pgSsl(tls('require')), { rejectUnauthorized: false, checkServerIdentity: Function })
  t.match(pgSsl(tls('verify-ca')), { rejectUnauthorized: true, checkServerIdentity: Function })
  t.notOk('checkServerIdentity' in (pgSsl(tls('verify-full')) as object), 'verify-full: Node\'s own check of the name')
})

t.test('sessions, and the line that names them', async (t) => {
  t.same(mysqlTlsSession([{ Variable_name: 'Ssl_version', Value: 'TLSv1.3' }, { Variable_name: 'Ssl_cipher', Value: 'TLS_AES_256_GCM_SHA384' }]), { version: 'TLSv1.3', cipher: 'TLS_AES_256_GCM_SHA384' })
  t.same(mysqlTlsSession([{ Variable_name: 'Ssl_version', Value: '' }, { Variable_name: 'Ssl_cipher', Value: '' }]), { version: null, cipher: null })
  t.same(mysqlTlsSession(undefined), { version: null, cipher: null })
  t.same(pgTlsSession({ leaf_tls_version: 'TLSv1.3', leaf_tls_cipher: 'X' }), { version: 'TLSv1.3', cipher: 'X' })
  t.same(pgTlsSession({ leaf_tls_version: null, leaf_tls_cipher: null }), { version: null, cipher: null })
  const prefer = { mode: 'prefer' as const, modeFrom: 'default' }
  t.equal(describeTls(prefer, undefined), 'prefer (default): no session yet')
  t.equal(describeTls(prefer, { version: null, cipher: null }), 'prefer (default): plain text, the server offers no TLS')
  t.equal(describeTls({ mode: 'disable', modeFrom: 'useSSL=false' }, { version: null, cipher: null }), 'disable (useSSL=false): plain text')
  t.equal(describeTls(prefer, { version: 'TLSv1.3', cipher: 'X' }), 'prefer (default): TLSv1.3 X')
})

t.test('refusals at start: the certificate checks, by Node\'s code or mysql2\'s message', async (t) => {
  const full = { mode: 'verify-full' as const, modeFrom: 'sslMode=VERIFY_IDENTITY' }
  t.equal(tlsRefusal(new Error('x'), undefined), undefined)
  t.equal(tlsRefusal(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), full), undefined, 'not a TLS error')
  t.match(tlsRefusal(Object.assign(new Error('certificate has expired'), { code: 'CERT_HAS_EXPIRED' }), full), /^CERT_HAS_EXPIRED: TLS mode verify-full \(sslMode=VERIFY_IDENTITY\) refused the server: certificate has expired: .*renew it/)
  t.match(tlsRefusal(Object.assign(new Error('certificate is not yet valid'), { code: 'HANDSHAKE_SSL_ERROR' }), full), /^CERT_NOT_YET_VALID: /)
  t.match(tlsRefusal(Object.assign(new Error('Hostname/IP does not match certificate\'s altnames: Host: a. is not in the cert\'s altnames: DNS:b'), { code: 'HANDSHAKE_SSL_ERROR' }), full), /^ERR_TLS_CERT_ALTNAME_INVALID: /)
  t.equal(tlsRefusal(Object.assign(new Error('something else'), { code: 'HANDSHAKE_SSL_ERROR' }), full), undefined)
  t.match(tlsRefusal(new Error('The server does not support SSL connections'), full), /^TLS_NOT_OFFERED: /)
})
