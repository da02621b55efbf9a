import t from 'tap'
import { renderCachePage } from '../src/http/pages.js'
import type { LeaseStatus } from '../src/snowflake/worker-id/worker-lease.js'

// The /cache page's snowflake panel for each kind of source and state, rendered directly
// (the end-to-end tests see only the states their processes reach).

const TWEPOCH = 1288834974657
const base: LeaseStatus = {
  source: 'zookeeper',
  workerId: 5,
  zookeeperConnected: true,
  unavailable: undefined,
  lastHeartbeat: undefined,
  foreverPath: '/snowflake/leaf/forever/10.0.0.1:8080-0000000005',
  temporaryPath: '/snowflake/leaf/temporary/10.0.0.1:8080',
  cacheFile: '/tmp/leaf/workerID.properties',
}

const panel = (status: LeaseStatus | undefined) => renderCachePage(undefined, status, TWEPOCH)

t.test('Leaf\'s ZooKeeper source: connected or not, its nodes, its last heartbeat', async (t) => {
  const connected = panel({ ...base, lastHeartbeat: Date.now() - 3000 })
  t.match(connected, /badge ok">ZooKeeper connected</)
  t.match(connected, /forever node<\/dt><dd>\/snowflake\/leaf\/forever\/10\.0\.0\.1:8080-0000000005/)
  t.match(connected, /last heartbeat<\/dt><dd>\d{4}-\d\d-\d\dT[^<]+ \(3 s ago\)/)
  t.notMatch(connected, /issued until/)
  const disconnected = panel({ ...base, zookeeperConnected: false, foreverPath: undefined, temporaryPath: undefined })
  t.match(disconnected, /badge bad">ZooKeeper disconnected</)
  t.match(disconnected, /last heartbeat<\/dt><dd>—/)
  t.match(disconnected, /forever node<\/dt><dd>—/)
})

t.test('static and statefulset ids: no ZooKeeper', async (t) => {
  for (const source of ['static', 'statefulset'] as const) {
    const html = panel({ ...base, source, zookeeperConnected: false })
    t.match(html, /badge warn">no ZooKeeper</, source)
    t.match(html, new RegExp(`worker id</dt><dd>5 \\(from ${source}\\)`), source)
  }
})

t.test('a lease: leased or lost, its pool and range, its expiry and issuedUntil', async (t) => {
  const lease: LeaseStatus = { ...base, source: 'db-lease', pool: 'mysql://leaf@db:3306/leaf leaf_worker_lease (pool leaf)', range: [0, 63], leaseExpiresAt: Date.parse('2026-12-01T08:00:00Z'), issuedUntil: Date.parse('2026-12-01T07:59:57Z') }
  const leased = panel(lease)
  t.match(leased, /badge ok">leased</)
  t.match(leased, /pool<\/dt><dd>mysql:\/\/leaf@db:3306\/leaf leaf_worker_lease \(pool leaf\) · ids 0–63/)
  t.match(leased, /lease expires<\/dt><dd>2026-12-01T08:00:00\.000Z/)
  t.match(leased, /issued until<\/dt><dd>\d+ \(2026-12-01T07:59:57\.000Z\)/)
  t.notMatch(leased, /forever node/)
  const lost = panel({ ...lease, unavailable: 'no renewal confirmed within the lease time', leaseExpiresAt: undefined, issuedUntil: 0, pool: undefined, range: undefined })
  t.match(lost, /badge bad">lease lost</)
  t.match(lost, /lease expires<\/dt><dd>lost/)
  t.match(lost, /issued until<\/dt><dd>0 \(—\)/)
  t.match(lost, /pool<\/dt><dd>— · ids —/)
})

t.test('snowflake mode off', async (t) => {
  t.match(panel(undefined), /Snowflake mode is disabled/)
  t.match(panel(undefined), /Segment mode is disabled/)
})
