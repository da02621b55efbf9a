import t from 'tap'
import { readinessAnswer } from '../../src/modes/readiness.js'

const snowflakeWaits = {
  ready: false,
  modes: { segment: { ready: true }, snowflake: { ready: false, reason: 'SNOWFLAKE_NOT_READY: snowflake mode holds no worker id yet' } },
}

t.test('the whole instance is ready only when every enabled mode is', async (t) => {
  t.same(readinessAnswer(snowflakeWaits), { status: 503, body: { status: 'not ready', modes: snowflakeWaits.modes } })
  t.same(readinessAnswer({ ready: true, modes: { segment: { ready: true } } }).status, 200)
  t.same(readinessAnswer({ ready: false, reason: 'no mode enabled', modes: {} }), { status: 503, body: { status: 'not ready', reason: 'no mode enabled', modes: {} } })
})

t.test('?mode= answers for one mode, with every mode in the body', async (t) => {
  t.same(readinessAnswer(snowflakeWaits, 'segment'), { status: 200, body: { status: 'ready', modes: snowflakeWaits.modes } })
  t.same(readinessAnswer(snowflakeWaits, 'snowflake'), { status: 503, body: { status: 'not ready', reason: 'SNOWFLAKE_NOT_READY: snowflake mode holds no worker id yet', modes: snowflakeWaits.modes } })
  t.match(readinessAnswer({ ready: true, modes: { segment: { ready: true } } }, 'snowflake'), { status: 503, body: { reason: 'snowflake mode is disabled on this instance' } })
})
