import { Writable } from 'node:stream'
import pino from 'pino'
import t from 'tap'
import { createLogThrottle } from '../../src/log-throttle.js'
import { describeCause, driverError, isPermanentStoreError } from '../../src/database/driver-errors.js'
import { DatabaseError, ServerRefused, UnansweredStatement } from '../../src/database/errors.js'
import { TimeoutError, withTimeout } from '../../src/timers.js'

/** A real pino logger whose lines land in `lines`, parsed. */
function capture () {
  const lines: Record<string, unknown>[] = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      done()
    },
  })
  return { logger: pino({ level: 'info' }, stream), lines }
}

function fakeClock () {
  let now = 1000
  return { clock: () => now, advance: (ms: number) => { now += ms } }
}

const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:3306'), { code: 'ECONNREFUSED', errno: -111 })

t.test('the first failure of a cause logs at once; later ones within the interval are counted into the next line', async (t) => {
  const { logger, lines } = capture()
  const { clock, advance } = fakeClock()
  const throttle = createLogThrottle(logger, { clock })
  throttle.warn('db', refused, 'database unreachable', { key: 'order' })
  t.equal(lines.length, 1, 'logged at once')
  t.match(lines[0], { level: 40, msg: 'database unreachable', key: 'order', code: 'ECONNREFUSED', err: 'connect ECONNREFUSED 127.0.0.1:3306' })
  t.notOk('repeated' in (lines[0] as object), 'no count on the first line')

  for (let i = 0; i < 5; i++) {
    advance(5000)
    throttle.warn('db', refused, 'database unreachable')
  }
  t.equal(lines.length, 1, '5 more within 25 s: none logged')
  advance(4999)
  throttle.warn('db', refused, 'database unreachable')
  t.equal(lines.length, 1, 'still within 30 s of the first line')
  advance(1)
  throttle.warn('db', refused, 'database unreachable')
  t.equal(lines.length, 2, 'logged again 30 s after the first line')
  t.match(lines[1], { msg: 'database unreachable', repeated: 6 }, 'the 6 held back are counted')

  advance(30_000)
  throttle.warn('db', refused, 'database unreachable')
  t.equal(lines.length, 3)
  t.notOk('repeated' in (lines[2] as object), 'nothing held back since the last line: no count')
})

t.test('causes are throttled apart, at their own level', async (t) => {
  const { logger, lines } = capture()
  const { clock, advance } = fakeClock()
  const throttle = createLogThrottle(logger, { clock, intervalMs: 1000 })
  throttle.warn('a', refused, 'a failed')
  throttle.error('b', refused, 'b failed')
  throttle.warn('a', refused, 'a failed')
  throttle.error('b', refused, 'b failed')
  throttle.error('b', refused, 'b failed')
  t.same(lines.map((l) => [l.level, l.msg]), [[40, 'a failed'], [50, 'b failed']])
  advance(1000)
  throttle.warn('a', refused, 'a failed')
  throttle.error('b', refused, 'b failed')
  t.same(lines.slice(2).map((l) => [l.msg, l.repeated]), [['a failed', 1], ['b failed', 2]], 'the interval is the one given')
})

t.test('clear: the next failure logs at once, and the count held back is returned', async (t) => {
  const { logger, lines } = capture()
  const { clock } = fakeClock()
  const throttle = createLogThrottle(logger, { clock })
  throttle.warn('zk', refused, 'heartbeat failed')
  throttle.warn('zk', refused, 'heartbeat failed')
  throttle.warn('zk', refused, 'heartbeat failed')
  t.equal(throttle.clear('zk'), 2)
  t.equal(throttle.clear('zk'), 0, 'nothing held after a clear')
  throttle.warn('zk', refused, 'heartbeat failed')
  t.equal(lines.length, 2, 'logged at once after the clear')
})

t.test('driver errors are logged as code and message without a stack; others whole', async (t) => {
  const { logger, lines } = capture()
  const throttle = createLogThrottle(logger)
  const driverErrors: [string, unknown][] = [
    ['mysql2', Object.assign(new Error("Access denied for user 'leaf'@'localhost' (using password: YES)"), { code: 'ER_ACCESS_DENIED_ERROR', errno: 1045, sqlState: '28000' })],
    ['mysql2 protocol', Object.assign(new Error('Connection lost: The server closed the connection.'), { code: 'PROTOCOL_CONNECTION_LOST', fatal: true })],
    ['node net', Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' })],
    ['SQLite', Object.assign(new Error('database is locked'), { name: 'SqliteError', code: 'SQLITE_BUSY' })],
    ['ZooKeeper', Object.assign(new Error('Exception: CONNECTION_LOSS[-4]'), { name: 'CONNECTION_LOSS', code: -4, getCode: () => -4 })],
  ]
  for (const [cause, err] of driverErrors) throttle.warn(cause, err, `${cause} failed`)
  t.equal(lines.length, driverErrors.length)
  for (const [i, line] of lines.entries()) {
    const [cause, err] = driverErrors[i] as [string, Error]
    t.same({ code: line.code, err: line.err }, { code: driverError(err)?.code, err: err.message }, cause)
    t.notMatch(JSON.stringify(line), /\n\s+at |"stack"/, `${cause}: no stack`)
  }
  t.equal(lines[4]?.code, 'CONNECTION_LOSS', 'ZooKeeper: its name is the code')

  const late = await withTimeout(new Promise(() => {}), 1, 'store did not answer within 1 ms').catch((e: unknown) => e)
  throttle.warn('timeout', late, 'load failed')
  t.match(lines.at(-1), { code: 'LEAF_TIMEOUT', err: 'store did not answer within 1 ms' }, 'our own timeouts: their code, flat')
  t.notMatch(JSON.stringify(lines.at(-1)), /"stack"/)

  const timedOut = Object.assign(new Error('Query inactivity timeout'), { code: 'PROTOCOL_SEQUENCE_TIMEOUT', fatal: true })
  const unanswered = new UnansweredStatement('Query inactivity timeout (its server thread 7 was killed: the statement ran before, or never will)',
    { state: 'ended', how: 'killed', threadId: 7 }, { cause: timedOut })
  throttle.warn('unanswered', unanswered, 'load failed')
  t.match(lines.at(-1), { code: 'PROTOCOL_SEQUENCE_TIMEOUT', err: unanswered.message }, 'a statement the pool wrapped: the driver\'s code, the pool\'s message')
  t.notMatch(JSON.stringify(lines.at(-1)), /"stack"/)
  const busy = new DatabaseError('LEAF_NO_CONNECTION_FREE', 'no MySQL connection free within 300 ms')
  throttle.warn('busy', new UnansweredStatement(busy.message, { state: 'not-sent' }, { cause: busy }), 'load failed')
  t.match(lines.at(-1), { code: 'LEAF_NO_CONNECTION_FREE', err: busy.message }, 'a statement that found no connection: the code of why')
  throttle.warn('refused', new ServerRefused('LEAF_SERVER_READ_ONLY', 'h:3306 is read-only'), 'load failed')
  t.match(lines.at(-1), { code: 'LEAF_SERVER_READ_ONLY', err: 'h:3306 is read-only' }, 'a refused server: its code, flat')

  throttle.warn('bug', new TypeError('x is undefined'), 'something else failed')
  t.match(lines.at(-1), { err: { type: 'TypeError', message: 'x is undefined', stack: /TypeError: x is undefined\n\s+at / } }, 'an error of ours keeps its stack')
  throttle.warn('odd', 'a string', 'a string was thrown')
  t.match(lines.at(-1), { err: 'a string' })
  throttle.warn('own code', Object.assign(new Error('no MySQL connection free within 4000 ms'), { code: 'not a driver code' }), 'acquire failed')
  t.match(lines.at(-1), { err: { type: 'Error', stack: /\n\s+at / } }, 'a code that is not a driver\'s: logged whole')
})

t.test('describeCause: the code and plain words, never the driver\'s message', async (t) => {
  t.equal(describeCause(refused), 'ECONNREFUSED (connection refused)')
  t.equal(describeCause(Object.assign(new Error("Access denied for user 'leaf'@'10.1.2.3'"), { code: 'ER_ACCESS_DENIED_ERROR' })), 'ER_ACCESS_DENIED_ERROR (access denied)')
  t.equal(describeCause(Object.assign(new Error('x'), { code: 'ER_SOMETHING_NEW' })), 'ER_SOMETHING_NEW')
  t.equal(describeCause(new Error('no answer within 1000 ms')), 'no answer within 1000 ms', 'an error without a code: its own message')
  t.equal(describeCause(new TimeoutError('no answer within 1000 ms')), 'LEAF_TIMEOUT (no answer in time)')
  t.equal(describeCause(new UnansweredStatement('connect ECONNREFUSED', { state: 'not-sent' }, { cause: refused })), 'ECONNREFUSED (connection refused)', 'a wrapped driver error: its code')
  const busy = new DatabaseError('LEAF_NO_CONNECTION_FREE', 'no MySQL connection free within 300 ms')
  t.equal(describeCause(new UnansweredStatement(busy.message, { state: 'not-sent' }, { cause: busy })), 'LEAF_NO_CONNECTION_FREE (no connection of the pool free in time)', 'a wrapped error of ours: its code')
})

t.test('isPermanentStoreError: access and schema errors, and a SQLite file that is not usable', async (t) => {
  const err = (code: string) => Object.assign(new Error(code), { code })
  for (const code of ['ER_ACCESS_DENIED_ERROR', 'ER_BAD_DB_ERROR', 'ER_NO_SUCH_TABLE', 'ER_DBACCESS_DENIED_ERROR', 'ER_TABLEACCESS_DENIED_ERROR']) {
    t.ok(isPermanentStoreError(err(code)), code)
  }
  for (const code of ['ECONNREFUSED', 'ETIMEDOUT', 'ENOTFOUND', 'PROTOCOL_CONNECTION_LOST', 'ER_CON_COUNT_ERROR', 'SQLITE_ERROR', 'EACCES']) {
    t.notOk(isPermanentStoreError(err(code)), `${code}: not permanent for MySQL`)
  }
  for (const code of ['SQLITE_ERROR', 'SQLITE_CANTOPEN', 'SQLITE_NOTADB', 'SQLITE_READONLY', 'EACCES', 'ENOTDIR']) {
    t.ok(isPermanentStoreError(err(code), { sqlite: true }), `SQLite: ${code}`)
  }
  for (const code of ['SQLITE_BUSY', 'SQLITE_LOCKED']) t.notOk(isPermanentStoreError(err(code), { sqlite: true }), `SQLite: ${code} passes`)
  t.notOk(isPermanentStoreError(new Error('no code')), 'no code: not permanent')
})
