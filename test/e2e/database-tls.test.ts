import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { TEST_MYSQL_HOST, TEST_MYSQL_PORT } from '../helpers/mysql.js'
import { TEST_PG_HOST, TEST_PG_PORT } from '../helpers/postgres.js'
import { SERVER_JS, emptyConfigFile, get, logLines, startServer } from '../helpers/server-process.js'
import { makeCertificates, removeCertificates, startTlsMariaDb } from '../helpers/tls-servers.js'

// The built server over TLS to a MariaDB that requires it: the start line names the TLS mode
// and the cipher the server reports, /cache shows it; a start that TLS refuses ends in one line
// naming the fix; and a password given in the URL, a file or the environment is never in the
// output of a start that failed.

const certs = await makeCertificates()
t.teardown(() => removeCertificates(certs))
const maria = await startTlsMariaDb(certs)
t.teardown(() => maria.stop())

/** The server run to its exit: its code and every line it wrote. */
function runToExit (args: string[], env: Record<string, string> = {}): { status: number | null, output: string } {
  const run = spawnSync(process.execPath, [SERVER_JS, '--server.host=127.0.0.1', '--server.port=0', '--config', emptyConfigFile(), '--leaf.segment.enable=true', ...args], {
    cwd: tempDir(), env: { PATH: process.env.PATH, LOG_LEVEL: 'info', ...env }, encoding: 'utf8', timeout: 30_000,
  })
  return { status: run.status, output: `${run.stdout}${run.stderr}` }
}

t.test('over TLS: the start line and /cache name the mode and the cipher', async (t) => {
  const dir = tempDir()
  const passwordFile = join(dir, 'db-password')
  writeFileSync(passwordFile, 'leaf\n')
  const server = await startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=jdbc:mysql://localhost:${maria.port}/leaf?sslMode=VERIFY_IDENTITY&useUnicode=true&characterEncoding=utf8`,
      '--leaf.jdbc.username=leaf', `--leaf.jdbc.password-file=${passwordFile}`, `--leaf.jdbc.ssl.ca=${certs.ca}`, '--leaf.segment.state-file=off'],
  })
  t.teardown(() => server.stop())
  const enabled = logLines(server.output).find((l) => l.msg === 'segment mode enabled')
  t.match(enabled, { tls: /^verify-full \(sslMode=VERIFY_IDENTITY\): TLSv1\.[23] TLS_\w+$/ }, String(enabled?.tls))
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '1' }, 'IDs through the REQUIRE SSL user')
  const page = await get(`${server.url}/cache`)
  t.match(page.body, /<dt>database TLS<\/dt><dd data-tls>verify-full \(sslMode=VERIFY_IDENTITY\): TLSv1\.[23] TLS_\w+<\/dd>/)
})

t.test('a start TLS refuses: one line naming the fix, and the password nowhere in the output', async (t) => {
  const secrets = { url: 'url-Secret-1', file: 'file-Secret-2', env: 'env-Secret-3', config: 'config-Secret-4', key: 'sslpassword-Secret-5' }
  const dir = tempDir()
  const passwordFile = join(dir, 'db-password')
  writeFileSync(passwordFile, `${secrets.file}\n`)
  const runs = [
    // The password in the URL; a CA that did not sign the server's certificate.
    runToExit([`--leaf.jdbc.url=mysql://leaf:${secrets.url}@localhost:${maria.port}/leaf?sslMode=VERIFY_CA`, `--leaf.jdbc.ssl.ca=${certs.otherCa}`]),
    // From a file; a wrong password over TLS.
    runToExit([`--leaf.jdbc.url=jdbc:mysql://localhost:${maria.port}/leaf?sslMode=VERIFY_IDENTITY`, '--leaf.jdbc.username=leaf', `--leaf.jdbc.password-file=${passwordFile}`, `--leaf.jdbc.ssl.ca=${certs.ca}`]),
    // From the environment; REQUIRED against a server without TLS.
    runToExit([`--leaf.jdbc.url=jdbc:mysql://${TEST_MYSQL_HOST}:${TEST_MYSQL_PORT}/leaf?sslMode=REQUIRED`, '--leaf.jdbc.username=leaf'], { LEAF_JDBC_PASSWORD: secrets.env }),
    // A client key's passphrase (PgJDBC's sslpassword); require against a PostgreSQL without TLS.
    runToExit([`--leaf.jdbc.url=jdbc:postgresql://${TEST_PG_HOST}:${TEST_PG_PORT}/leaf?user=leaf&password=leaf&sslmode=require&sslcert=${certs.clientCert}&sslkey=${certs.clientKey}&sslpassword=${secrets.key}`]),
    // In the URL of a configuration error.
    runToExit([`--leaf.jdbc.url=jdbc:mysql://localhost:${maria.port}/leaf?user=leaf&password=${secrets.config}&sslMode=STRICT`]),
  ]
  const expected = [
    /^start refused: segment store mysql:\/\/leaf@localhost:\d+\/leaf: SELF_SIGNED_CERT_IN_CHAIN: TLS mode verify-ca \(sslMode=VERIFY_CA\) refused the server: .*leaf\.jdbc\.ssl\.ca$/,
    /^start refused: segment store mysql:\/\/leaf@localhost:\d+\/leaf: ER_ACCESS_DENIED_ERROR: .*check leaf\.jdbc\.username and leaf\.jdbc\.password/,
    /^start refused: segment store mysql:\/\/leaf@127\.0\.0\.1:\d+\/leaf: TLS_NOT_OFFERED: the server offers no TLS, and TLS mode require \(sslMode=REQUIRED\) requires it/,
    /^start refused: segment store postgres:\/\/leaf@127\.0\.0\.1:\d+\/leaf: TLS_NOT_OFFERED: the server offers no TLS, and TLS mode require \(sslmode=require\) requires it/,
    /^leaf-ts: configuration error: leaf\.jdbc\.url: parameter sslMode: "STRICT" is not one of/,
  ]
  runs.forEach((run, i) => {
    t.equal(run.status, 1, `start ${i + 1}: exit 1`)
    const lines = run.output.split('\n').filter((l) => l !== '')
    const errors = [...logLines(lines).filter((l) => (l.level as number) >= 50).map((l) => l.msg as string), ...lines.filter((l) => l.startsWith('leaf-ts: '))]
    t.equal(errors.length, 1, `start ${i + 1}: one error line`)
    t.match(errors[0], expected[i] as RegExp)
    t.notMatch(run.output, /\n\s+at |"stack"/, 'no stack trace')
    for (const secret of Object.values(secrets)) t.notOk(run.output.includes(secret), `start ${i + 1}: ${secret} is not in the output`)
  })
})
