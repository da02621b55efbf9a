import t from 'tap'
import { createHostFence } from '../../src/segment/host-fence.js'
import type { HostState } from '../../src/database/host-census.js'
import { captureLogger } from '../helpers/logger.js'

// The rules of a host list that must not split (src/segment/host-fence.ts), over a census the
// test sets: which states stop allocations, refuse a start, or refuse a move. The same rules
// against real servers: test/integration/host-split.test.ts, test/integration/mysql-hosts.test.ts, fault scenarios 27-29.

const H1 = 'db1:3306'
const H2 = 'db2:3306'
const writable = (host: string, id: number): HostState => ({ host, state: 'writable', store: `server_id ${id}`, server: `server_id ${id} at ${host}` })
const readOnly = (host: string, id: number): HostState => ({ ...writable(host, id), state: 'read-only' })
const unknown = (host: string): HostState => ({ host, state: 'unknown', error: 'ECONNREFUSED' })

function fence (options: { left?: string[], trusted?: string[] } = {}) {
  let states: HostState[] = []
  let inUse = H1
  const { logger, lines } = captureLogger()
  const f = createHostFence({ logger, census: async () => states, inUse: () => inUse, ...options })
  return { f, lines, set: (s: HostState[]) => { states = s }, use: (h: string) => { inUse = h } }
}

t.test('more than one writable store stops allocations (STORE_SPLIT), logged once at error; one writable store again lets them resume', async (t) => {
  const { f, lines, set } = fence()
  set([writable(H1, 1), readOnly(H2, 2)])
  await f.check()
  t.equal(f.blocked(), undefined)
  set([writable(H1, 1), writable(H2, 2)])
  await f.check()
  await f.check()
  t.match(f.blocked(), { code: 'STORE_SPLIT', statusCode: 503, message: /db1:3306 \(server_id 1\), db2:3306 \(server_id 2\)/ })
  t.match(f.view().split, { hosts: ['db1:3306 (server_id 1)', 'db2:3306 (server_id 2)'] })
  t.equal(lines.filter((l) => l.level === 50).length, 1, 'one error line for the split, not one per census')
  set([readOnly(H1, 1), writable(H2, 2)])
  await f.check()
  t.equal(f.blocked(), undefined)
  t.equal(f.view().split, undefined)
})

t.test('a Galera cluster\'s nodes are one store; a host that does not answer is unknown, not writable', async (t) => {
  const { f, set } = fence()
  const node = (host: string): HostState => ({ host, state: 'writable', store: 'galera cluster 0f3c', server: 'galera cluster 0f3c' })
  set([node(H1), node(H2)])
  await f.check()
  t.equal(f.blocked(), undefined)
  t.equal(f.startRefusal(), undefined, 'a cluster is no split')
  set([writable(H1, 1), unknown(H2)])
  await f.check()
  t.equal(f.blocked(), undefined)
  t.equal(f.startRefusal(), undefined, 'one host unknown: the start goes on')
})

t.test('a list whose hosts all answer writable, as distinct stores, refuses the start in one line naming them and the fix', async (t) => {
  const { f, set } = fence()
  set([writable(H1, 1), writable(H2, 2)])
  await f.check()
  t.match(f.startRefusal(), /^every host of leaf\.jdbc\.url answers writable \(db1:3306 \(server_id 1\), db2:3306 \(server_id 2\)\): .*SET GLOBAL read_only = 1/)
  t.notMatch(f.startRefusal() ?? '', /\n/)
  // Two addresses of one server are one store.
  set([writable(H1, 1), { ...writable(H2, 1), server: 'server_id 1 at db1:3306' }])
  await f.check()
  t.equal(f.startRefusal(), undefined)
})

t.test('stores left are refused unless trusted; the file keeps them', async (t) => {
  const { f } = fence({ left: ['server_id 1', 'server_id 3'], trusted: ['server_id 3'] })
  t.equal(f.refuses('server_id 1'), true)
  t.equal(f.refuses('server_id 3'), false, 'left by an earlier life, trusted by the operator')
  t.equal(f.refuses('server_id 2'), false)
  f.leave('server_id 2')
  t.same(f.leftStores().sort(), ['server_id 1', 'server_id 2'])
  // The key left set after a switchover back: a failover of this life away from that store is
  // remembered, or the old primary's return would find this instance's fence open.
  f.leave('server_id 3')
  t.equal(f.refuses('server_id 3'), true)
  t.same(f.leftStores().sort(), ['server_id 1', 'server_id 2', 'server_id 3'])
})

t.test('a move goes to a host seen read-only in this life, or of a store it wrote through, or, before the first allocation, to the one writable store', async (t) => {
  // A promotion: db2 was seen as a replica; db1 dies; db2 is promoted.
  const promoted = fence()
  promoted.set([writable(H1, 1), readOnly(H2, 2)])
  await promoted.f.check()
  promoted.f.allocated()
  // A blip of db1: to db2 (a replica: its server refuses the statement), and back to db1.
  promoted.set([unknown(H1), readOnly(H2, 2)])
  await t.resolves(promoted.f.beforeMove(H2, H1), 'to a replica seen read-only: allowed')
  promoted.set([writable(H1, 1), readOnly(H2, 2)])
  await t.resolves(promoted.f.beforeMove(H1, H2), 'back to the store it wrote through')
  // The promotion: db1 dies, db2 is promoted.
  promoted.set([unknown(H1), writable(H2, 2)])
  await t.resolves(promoted.f.beforeMove(H2, H1))
  promoted.use(H2)
  // db1 back writable, db2 cut off from this instance: db1 is the store this instance left
  // (the guard's leave()), refused by its identity before any statement.
  promoted.f.leave('server_id 1')
  t.equal(promoted.f.refuses('server_id 1'), true)
  // Both reachable: a split.
  promoted.set([writable(H1, 1), writable(H2, 2)])
  await t.rejects(promoted.f.beforeMove(H1, H2), { code: 'STORE_SPLIT' })

  // A new instance started after the failover: db1 down at its start, db2 the one writable store.
  const late = fence()
  late.set([unknown(H1), writable(H2, 2)])
  await late.f.check()
  await t.resolves(late.f.beforeMove(H2, H1), 'before the first allocation: to the one writable store')
  late.use(H2)
  late.f.allocated()
  late.set([writable(H1, 1), unknown(H2)])
  await t.rejects(late.f.beforeMove(H1, H2), { code: 'STORE_NOT_MOVED', statusCode: 503, reason: 'HOST_NOT_SEEN_AS_REPLICA' }, 'the blip that sent the review\'s instances back to the old primary: never seen read-only, never written through')

  // Another address of the store in use.
  const alias = fence()
  alias.set([writable(H1, 1), { ...writable(H2, 1), server: 'server_id 1 at db1:3306' }])
  await alias.f.check()
  alias.f.allocated()
  alias.set([unknown(H1), { ...writable(H2, 1), server: 'server_id 1 at db1:3306' }])
  await t.resolves(alias.f.beforeMove(H2, H1), 'the same server')
})

t.test('a store seen writable beside another (a split) is never moved to in this life, though seen read-only since', async (t) => {
  // The review's attack (fault scenario 91 of the review branch, 9,011 duplicates): an instance
  // started after the failover, on db2. db1 comes back writable (a split), is fenced with SET
  // GLOBAL read_only = 1 (seen read-only), then restarted with its my.cnf's read_only = 0; the
  // instance's path to db2 is cut past the hold.
  const late = fence()
  late.set([unknown(H1), writable(H2, 2)])
  await late.f.check()
  await late.f.beforeMove(H2, H1)
  late.use(H2)
  late.f.allocated('server_id 2')
  late.set([writable(H1, 1), writable(H2, 2)])
  await late.f.check()
  late.set([readOnly(H1, 1), writable(H2, 2)])
  await late.f.check()
  t.equal(late.f.blocked(), undefined, 'fenced: allocations resume')
  late.set([writable(H1, 1), unknown(H2)])
  await t.rejects(late.f.beforeMove(H1, H2), { code: 'STORE_NOT_MOVED', statusCode: 503, reason: 'HOST_WAS_IN_A_SPLIT' }, 'an old primary, not a promoted replica')
  // Still the store this instance writes through: back to db2 once it answers.
  late.set([writable(H1, 1), writable(H2, 2)])
  await t.rejects(late.f.beforeMove(H2, H1), { code: 'STORE_SPLIT' })
  late.set([readOnly(H1, 1), writable(H2, 2)])
  await t.resolves(late.f.beforeMove(H2, H1), 'the store its allocations went to is not barred by the split it saw')

  // A new instance whose start host is the old primary, back writable beside db2: statements
  // (the tag list) on db1, no allocation (the split holds them). db1 fenced: a move to db2. db1
  // restarted writable, the path to db2 cut: db1 was only a start host, never allocated on.
  const first = fence()
  first.set([writable(H1, 1), writable(H2, 2), unknown('db3:3306')])
  await first.f.check()
  t.match(first.f.blocked(), { code: 'STORE_SPLIT' })
  first.set([readOnly(H1, 1), writable(H2, 2), unknown('db3:3306')])
  await t.resolves(first.f.beforeMove(H2, H1))
  first.use(H2)
  first.f.allocated('server_id 2')
  first.set([writable(H1, 1), unknown(H2), unknown('db3:3306')])
  await t.rejects(first.f.beforeMove(H1, H2), { code: 'STORE_NOT_MOVED', statusCode: 503, reason: 'HOST_WAS_IN_A_SPLIT' }, 'a start host is not a store written through')
})
