import t from 'tap'
import { waitUntil } from '../fault/services.js'
import { errnoOf, ReplicaPair } from '../helpers/replica-pair.js'

// test/helpers/replica-pair.ts works, and shows what a failover of a primary/replica pair does
// to leaf_alloc: the replica refuses Leaf's writes until promoted, a lagging replica misses the
// primary's last allocations, and once promoted after the primary's crash it hands out again
// what the primary had already handed out (max_id went back).

const ER_OPTION_PREVENTS_STATEMENT = 1290
const ALLOCATE = 'UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?'

const bootStart = performance.now()
const pair = await ReplicaPair.create()
t.teardown(() => pair.close())
await pair.init()
t.comment(`primary on ${pair.ports.primary}, replica on ${pair.ports.replica}: booted (install, start, replication) in ${Math.round(performance.now() - bootStart)} ms`)

t.test('the two servers have their own server_id, the replica is read_only', async (t) => {
  const ids = await pair.serverIds()
  t.not(ids.primary, ids.replica, `server_id ${ids.primary} and ${ids.replica}`)
  t.same(ids, { primary: 1, replica: 2 })
  t.equal(await pair.primary.variable('read_only'), '0', 'primary writable')
  t.equal(await pair.replica.variable('read_only'), '1', 'replica read_only')
  t.equal(pair.primaryUrl, `mysql://leaf:leaf@127.0.0.1:${pair.ports.primary}/leaf`)
  t.equal(pair.replicaUrl, `mysql://leaf:leaf@127.0.0.1:${pair.ports.replica}/leaf`)
})

t.test('a write on the primary reaches the replica', async (t) => {
  await pair.primary.addTag('reaches', 100)
  await pair.primary.leafQuery(ALLOCATE, ['reaches'])
  const start = performance.now()
  const arrived = await waitUntil(async () => await pair.replica.maxId('reaches') === 101n, 10_000)
  t.ok(arrived, 'the replica has max_id 101')
  t.comment(`replicated within ${Math.round(performance.now() - start)} ms`)
})

t.test('a write as leaf on the replica fails with errno 1290 (read_only), and changes nothing', async (t) => {
  await pair.primary.addTag('readonly', 100)
  await pair.catchUp()
  const err = await pair.replica.leafQuery(ALLOCATE, ['readonly']).then(() => undefined, (e: unknown) => e)
  t.equal(errnoOf(err), ER_OPTION_PREVENTS_STATEMENT, String(err))
  t.equal(await pair.replica.maxId('readonly'), 1n)
  // The leaf user has no SUPER (nor READ_ONLY ADMIN): else read_only would not apply to it.
  const grants = await pair.replica.leafQuery<Record<string, string>[]>('SHOW GRANTS')
  t.notMatch(grants.map((g) => Object.values(g)[0]).join('\n'), /SUPER|READ_ONLY ADMIN|ALL PRIVILEGES ON \*\.\*/)
})

t.test('after lag() the primary\'s allocation is not on the replica; catchUp() brings it', async (t) => {
  await pair.primary.addTag('lagging', 100)
  await pair.lag()
  t.equal(await pair.replica.maxId('lagging'), 1n, 'the row is there before the lag')
  await pair.primary.leafQuery(ALLOCATE, ['lagging'])
  t.equal(await pair.primary.maxId('lagging'), 101n)
  // The IO thread still fetches the event into the relay log; only its application waits.
  const fetched = await waitUntil(async () => {
    const [status] = await pair.replica.query<{ Gtid_IO_Pos: string }[]>('SHOW SLAVE STATUS')
    return status?.Gtid_IO_Pos === await pair.primary.variable('gtid_binlog_pos')
  }, 10_000)
  t.ok(fetched, 'the replica received the event')
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(await pair.replica.maxId('lagging'), 1n, 'not applied')
  await pair.catchUp()
  t.equal(await pair.replica.maxId('lagging'), 101n, 'applied after catchUp()')
})

t.test('killPrimary() + promote() of a lagging replica: it accepts writes, and its max_id is behind the primary\'s last', async (t) => {
  await pair.primary.addTag('failover', 100)
  await pair.primary.leafQuery(ALLOCATE, ['failover']) // 101: reaches the replica
  await pair.lag()
  await pair.primary.leafQuery(ALLOCATE, ['failover']) // 201: handed out, never replicated
  const primaryLast = await pair.primary.maxId('failover')
  t.equal(primaryLast, 201n)

  const killedAt = performance.now()
  await pair.killPrimary()
  t.notOk(pair.primary.running, 'the primary is gone')
  await pair.promote()
  t.comment(`killed and promoted in ${Math.round(performance.now() - killedAt)} ms`)
  t.equal(await pair.replica.variable('read_only'), '0')

  const promoted = await pair.replica.maxId('failover')
  t.ok(promoted < primaryLast, `the promoted replica's max_id ${promoted} is behind the primary's last ${primaryLast}`)
  await pair.replica.leafQuery(ALLOCATE, ['failover'])
  const reissued = await pair.replica.maxId('failover')
  t.equal(reissued, 201n, 'a write as leaf goes through: and hands out [101, 201) a second time')

  // The old primary comes back as it was: writable, with the allocation the replica never had.
  await pair.restartPrimary()
  t.equal(await pair.primary.maxId('failover'), primaryLast, 'the restarted primary kept its max_id')
  t.equal(await pair.primary.variable('read_only'), '0', 'and is writable: two primaries')
})
