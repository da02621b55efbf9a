import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import pino from 'pino'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { StartRefused } from '../../src/errors.js'
import { storeRefusal } from '../../src/modes/segment-mode.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { TEST_MYSQL, createTestDatabase } from '../helpers/mysql.js'

// The segment mode's start against its store, in process (test/e2e/start.test.ts runs the
// same cases through dist/server.js): permanent errors refuse the start, others do not.

const mysqlServer = new URL(TEST_MYSQL)

t.test('a permanent store error refuses the start with a StartRefused naming the store, the code and the remedy', async (t) => {
  const folder = join(tempDir(), 'folder.db')
  mkdirSync(folder)
  const sqlite = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': `sqlite:${folder}` }), { logger: silentLogger }).catch((e: unknown) => e)
  t.ok(sqlite instanceof StartRefused, 'SQLite: a StartRefused')
  t.match(sqlite, { code: 'STORE_REFUSED', message: /^segment store sqlite:.*folder\.db: SQLITE_CANTOPEN: .*: check the file leaf\.jdbc\.url names/ })

  const db = await createTestDatabase()
  t.teardown(() => db.drop())
  const url = `mysql://${mysqlServer.username}:not-the-password@${mysqlServer.host}/${db.name}`
  const denied = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': url }), { logger: silentLogger }).catch((e: unknown) => e)
  t.ok(denied instanceof StartRefused, 'MySQL: a StartRefused')
  t.match(denied, { code: 'STORE_REFUSED', cause: { code: 'ER_ACCESS_DENIED_ERROR' }, message: /: ER_ACCESS_DENIED_ERROR: .*: check leaf\.jdbc\.username and leaf\.jdbc\.password/ })
  t.notMatch((denied as Error).message, /not-the-password/, 'no password in the line')
})

t.test('error 1698 (a user that signs in without a password): the remedy follows the password given, never "set leaf.jdbc.password" when one was', async (t) => {
  // What MariaDB answers over TCP for a user IDENTIFIED VIA unix_socket, with a password or without.
  const err = Object.assign(new Error("Access denied for user 'leaf'@'10.0.0.5'"), { code: 'ER_ACCESS_DENIED_NO_PASSWORD_ERROR', errno: 1698 })
  const store = { kind: 'mysql' as const, hosts: [{ host: 'db', port: 3306 }], user: 'leaf', database: 'leaf' }
  const withPassword = storeRefusal('mysql://leaf@db:3306/leaf', err, { ...store, password: 'secret' })
  t.ok(withPassword instanceof StartRefused)
  t.match(withPassword, { message: /^segment store mysql:\/\/leaf@db:3306\/leaf: ER_ACCESS_DENIED_NO_PASSWORD_ERROR: Access denied for user 'leaf'@'10\.0\.0\.5': this user signs in without a password .*the password given is not used: set leaf\.jdbc\.username to a user IDENTIFIED BY a password$/ })
  t.notMatch(withPassword?.message, /set leaf\.jdbc\.password/, 'a password was given: no advice to set one')
  t.notMatch(withPassword?.message, /secret/, 'no password in the line')

  const without = storeRefusal('mysql://leaf@db:3306/leaf', err, { ...store, password: '' })
  t.match(without, { message: /: this user signs in without a password .*: set leaf\.jdbc\.username to a user IDENTIFIED BY a password, and set leaf\.jdbc\.password$/ })
})

t.test('a store that refuses connections: the app starts, warning once with the code, and answers NOT_READY', async (t) => {
  const lines: Record<string, unknown>[] = []
  const logger = pino({ level: 'info' }, new Writable({
    write (chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as Record<string, unknown>)
      done()
    },
  }))
  const app = await buildApp(testConfig({ 'leaf.segment.enable': true, 'leaf.jdbc.url': 'mysql://leaf:leaf@127.0.0.1:1/leaf', 'leaf.jdbc.connect-timeout-ms': 300 }), { logger })
  t.teardown(() => app.close())
  t.match(lines.filter((l) => l.msg === 'database unreachable at start: answering NOT_READY and retrying in the background'),
    [{ level: 40, code: 'ECONNREFUSED', store: 'mysql://leaf@127.0.0.1:1/leaf' }])
  t.equal((await app.inject('/api/segment/get/order')).json().error, 'NOT_READY')
})
