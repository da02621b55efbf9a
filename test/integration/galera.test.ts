import t, { type Test } from 'tap'
import type { Connection, RowDataPacket } from 'mysql2/promise'
import { sleep, waitUntil } from '../fault/services.js'
import { errnoOf, GaleraCluster } from '../helpers/galera.js'
import { ALLOCATE_RETRIES, createMysqlStore } from '../../src/segment/stores/mysql-store.js'
import { channels } from '../../src/channels.js'
import { listen } from '../helpers/channels.js'

// test/helpers/galera.ts works (three nodes join, agree on the cluster state), and shows what
// Leaf's segment transactions meet on Galera: concurrent allocations of one row from two nodes
// fail with certification conflicts (errno 1213); a killed node stalls commits until it is
// evicted, after which two nodes go on; a node without quorum refuses queries (errno 1047).
// And one fact the product must know: the four statements sent as ONE multi-statement query
// now and then report a successful COMMIT for a transaction that was rolled back by a
// conflict, returning a max_id another node's transaction also returned. Leaf-TS's store, on
// two nodes, allocates without a failure and never returns a range twice.

const ER_LOCK_DEADLOCK = 1213
const ER_UNKNOWN_COM_ERROR = 1047
const STEP = 10
const TRIES_PER_NODE = 400
const LEAF_TX = 'START TRANSACTION; UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?; SELECT max_id FROM leaf_alloc WHERE biz_tag = ?; COMMIT'

const bootStart = performance.now()
const cluster = await GaleraCluster.create()
t.teardown(() => cluster.close())
await cluster.init()
t.comment(`3 Galera nodes (client ports ${cluster.nodes.map((n) => n.port).join(', ')}) booted and synced in ${Math.round(performance.now() - bootStart)} ms`)

t.test('all 3 nodes join one cluster', async (t) => {
  for (const node of cluster.nodes) {
    t.equal(await node.clusterSize(), 3, `node ${node.index}: wsrep_cluster_size 3`)
    t.equal((await node.wsrep()).wsrep_cluster_status, 'Primary', `node ${node.index}: Primary`)
  }
  const uuids = await cluster.clusterStateUuids()
  t.equal(uuids.length, 3)
  t.match(uuids[0], /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
  t.same(new Set(uuids), new Set([uuids[0]]), `all report wsrep_cluster_state_uuid ${uuids[0]}`)
  t.equal(await cluster.clusterStateUuid(), uuids[0])
  // A write on one node is on the others once it commits (certified and applied in order).
  await cluster.node(0).addTag('join', STEP)
  for (const node of cluster.nodes) {
    const rows = await node.connect().then(async (conn) => {
      try {
        await conn.query('SET SESSION wsrep_sync_wait = 1')
        return (await conn.query<RowDataPacket[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', ['join']))[0]
      } finally {
        await conn.end()
      }
    })
    t.equal(rows[0]?.max_id, '1', `node ${node.index} has the row`)
  }
})

interface Race {
  ok: string[]
  errnos: Map<number | undefined, number>
  final: bigint
  ms: number
}

/** `tries` allocations of `tag` from a connection to each of nodes 0 and 1 at once. */
async function race (tag: string, allocate: (conn: Connection) => Promise<string>): Promise<Race> {
  await cluster.node(0).addTag(tag, STEP)
  await waitUntil(async () => (await cluster.node(1).query<unknown[]>('SELECT 1 FROM leaf_alloc WHERE biz_tag = ?', [tag])).length === 1, 5000)
  const conns = await Promise.all([0, 1].map((i) => cluster.node(i).connect({ multipleStatements: true })))
  const ok: string[] = []
  const errnos = new Map<number | undefined, number>()
  const start = performance.now()
  try {
    await Promise.all(conns.map(async (conn) => {
      for (let i = 0; i < TRIES_PER_NODE; i++) {
        try {
          ok.push(await allocate(conn))
        } catch (err) {
          errnos.set(errnoOf(err), (errnos.get(errnoOf(err)) ?? 0) + 1)
          await conn.query('ROLLBACK').catch(() => {})
        }
      }
    }))
  } finally {
    await Promise.all(conns.map((c) => c.end()))
  }
  const ms = performance.now() - start
  // Read where neither writer ran, once it has applied all.
  const conn = await cluster.node(2).connect()
  try {
    await conn.query('SET SESSION wsrep_sync_wait = 1')
    const [rows] = await conn.query<RowDataPacket[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', [tag])
    return { ok, errnos, final: BigInt(rows[0]?.max_id as string), ms }
  } finally {
    await conn.end()
  }
}

function report (t: Test, what: string, r: Race): { duplicates: number } {
  const distinct = new Set(r.ok)
  const conflicts = r.errnos.get(ER_LOCK_DEADLOCK) ?? 0
  const duplicates = r.ok.length - distinct.size
  t.comment(`${what}: ${2 * TRIES_PER_NODE} transactions in ${Math.round(r.ms)} ms: ${r.ok.length} committed, ${conflicts} failed with 1213, ` +
    `${duplicates} max_id returned twice; the row moved ${(r.final - 1n) / BigInt(STEP)} times`)
  t.ok(conflicts > 0, `some transactions fail with errno 1213 (${conflicts})`)
  t.same([...r.errnos.keys()], [ER_LOCK_DEADLOCK], 'no errors but 1213')
  // Every distinct max_id returned is one move of the row, and the last is the row's value.
  t.equal(r.final, 1n + BigInt(STEP * distinct.size), 'the row moved once per distinct max_id returned')
  t.equal(r.ok.map(BigInt).reduce((a, b) => (a > b ? a : b), 0n), r.final, 'the greatest max_id returned is the row\'s')
  return { duplicates }
}

t.test('Leaf\'s transaction from two nodes on one row: conflicts fail with 1213', async (t) => {
  await t.test('as one multi-statement query', async (t) => {
    const r = await race('conflict-multi', async (conn) => {
      const [results] = await conn.query<RowDataPacket[][]>(LEAF_TX, ['conflict-multi', 'conflict-multi'])
      return String(results[2]?.[0]?.max_id)
    })
    // MariaDB 10.11 / Galera 4: a conflict that rolls the transaction back between two statements
    // of the query is now and then not reported: its SELECT reads the winner's max_id and COMMIT
    // says OK (the error comes with the connection's next query instead). Seen in most runs of
    // 800, not all: so Leaf-TS sends a transaction one statement per round trip on Galera
    // (src/database/mysql-pool.ts), and the test below holds its store to it.
    const { duplicates } = report(t, 'multi-statement', r)
    t.comment(`multi-statement: ${duplicates} max_id returned by two committed transactions`)
  })

  await t.test('as four statements, one round trip each', async (t) => {
    const r = await race('conflict-separate', async (conn) => {
      await conn.query('START TRANSACTION')
      await conn.query('UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?', ['conflict-separate'])
      const [rows] = await conn.query<RowDataPacket[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', ['conflict-separate'])
      await conn.query('COMMIT')
      return String(rows[0]?.max_id)
    })
    const { duplicates } = report(t, 'separate statements', r)
    t.equal(duplicates, 0, 'the successful ones never return the same max_id twice')
  })
})

t.test('Leaf-TS\'s store on two nodes, one row: conflicts are repeated at once and counted, at most 5 times, and no range is returned twice', async (t) => {
  const tag = 'store-race'
  await cluster.node(0).addTag(tag, STEP)
  await waitUntil(async () => (await cluster.node(1).query<unknown[]>('SELECT 1 FROM leaf_alloc WHERE biz_tag = ?', [tag])).length === 1, 5000)
  /** Per store: repeats of the allocation under way, and the reasons seen. */
  const repeats = [0, 0]
  const reasons = new Set<string>()
  const stores = [0, 1].map((i) => createMysqlStore({
    hosts: [{ host: '127.0.0.1', port: cluster.node(i).port }],
    user: 'leaf',
    password: 'leaf',
    database: 'leaf',
    connectTimeoutMs: 2000,
    poolSize: 4,
    queryTimeoutMs: 5000,
  }))
  // Each store's repeats, told apart by the node it ran on.
  const nodeOf = new Map([0, 1].map((i) => [`127.0.0.1:${cluster.node(i).port}`, i]))
  listen(t, channels.storeRetry, (m) => {
    const i = nodeOf.get(m.host)
    if (i === undefined || m.key !== tag) return
    repeats[i] = (repeats[i] as number) + 1
    reasons.add(m.reason)
  })
  t.teardown(() => Promise.all(stores.map((s) => s.close())))
  const ranges: bigint[] = []
  const identities = new Set<string | undefined>()
  const failures: { errno: number | undefined, repeats: number }[] = []
  let repeated = 0
  const start = performance.now()
  // Both load the one row as fast as they can: far more often than a generator does (one load
  // per tag as its last range is partly served), so that the two meet often.
  await Promise.all(stores.map(async (store, i) => {
    for (let n = 0; n < TRIES_PER_NODE; n++) {
      repeats[i] = 0
      try {
        const a = await store.allocate(tag)
        if (a !== undefined) ranges.push(a.maxId)
        identities.add(a?.store)
      } catch (err) {
        failures.push({ errno: errnoOf(err), repeats: repeats[i] as number })
      }
      repeated += repeats[i] as number
    }
  }))
  const ms = performance.now() - start
  t.comment(`${2 * TRIES_PER_NODE} allocations through the store in ${Math.round(ms)} ms: ${repeated} repeats after a conflict; ` +
    `${failures.length} failed after ${ALLOCATE_RETRIES} repeats (then the generator's own backoff takes over, the buffer serving)`)
  t.ok(repeated > 0, `conflicts met and repeated (${repeated})`)
  t.same([...reasons], ['ER_LOCK_DEADLOCK'], 'counted by their code')
  t.same(failures.filter((f) => f.errno !== 1213 || f.repeats !== ALLOCATE_RETRIES), [], `every allocation that failed was repeated ${ALLOCATE_RETRIES} times first, no more: the storm is bounded`)
  t.ok(failures.length < ranges.length / 50, `allocations that still failed are rare (${failures.length} of ${2 * TRIES_PER_NODE})`)
  t.equal(new Set(ranges).size, ranges.length, `no max_id returned twice (${ranges.length} ranges)`)
  t.equal(await cluster.node(2).maxId(tag), 1n + BigInt(STEP * ranges.length), 'the row moved once per range returned')
  t.same([...identities], [`galera cluster ${await cluster.clusterStateUuid()}`], 'every range names the cluster, whichever node answered')
})

t.test('a killed node: commits stall until it is evicted, then the 2 others go on; it rejoins', async (t) => {
  await cluster.node(0).addTag('kill', 1)
  const writer = await cluster.node(0).connect()
  const commits: { start: number, ms: number, errno?: number }[] = []
  const run = { writing: true }
  const loop = (async () => {
    while (run.writing) {
      const start = performance.now()
      try {
        await writer.query('UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?', ['kill'])
        commits.push({ start, ms: performance.now() - start })
      } catch (err) {
        commits.push({ start, ms: performance.now() - start, errno: errnoOf(err) })
      }
    }
  })()
  try {
    await sleep(500)
    const killedAt = performance.now()
    await cluster.node(2).kill()
    const evictedMs = await cluster.waitForSize(2, { timeoutMs: 20_000 })
    await sleep(1000)
    run.writing = false
    await loop
    const after = commits.filter((c) => c.start + c.ms >= killedAt)
    const longest = Math.max(...after.map((c) => c.ms))
    const failed = after.filter((c) => c.errno !== undefined)
    t.comment(`wsrep_cluster_size 2 on the survivors ${Math.round(evictedMs)} ms after the kill; the longest commit on node 0 then took ${Math.round(longest)} ms ` +
      `(${after.length} commits in the ${Math.round(performance.now() - killedAt)} ms after the kill, ${failed.length} failed${failed.length > 0 ? `: ${failed.map((c) => c.errno).join(', ')}` : ''})`)
    t.ok(longest < 15_000, 'commits stall for a few seconds at most (evs.suspect_timeout 2 s, inactive 3 s)')
    t.ok(after.filter((c) => c.errno === undefined && c.start > killedAt + longest).length > 10, 'and then go on')
  } finally {
    run.writing = false
    await loop
    await writer.end()
  }
  for (const i of [0, 1]) {
    await cluster.node(i).leafQuery('UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ?', ['kill'])
    t.pass(`node ${i} commits in the 2-node cluster`)
  }
  const last = await cluster.node(1).maxId('kill')

  const rejoinStart = performance.now()
  await cluster.node(2).start()
  await cluster.waitForSize(3)
  t.comment(`the killed node rejoined (Synced, size 3) in ${Math.round(performance.now() - rejoinStart)} ms`)
  t.equal(await cluster.node(2).maxId('kill'), last, 'with what was committed while it was away')
})

t.test('a node that lost quorum answers errno 1047; pc.bootstrap makes it serve again', async (t) => {
  const lonely = cluster.node(0)
  const killedAt = performance.now()
  await Promise.all([cluster.node(1).kill(), cluster.node(2).kill()])
  let err: unknown
  const refused = await waitUntil(async () => {
    err = await lonely.leafQuery('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', ['kill']).then(() => undefined, (e: unknown) => e)
    return err !== undefined
  }, 20_000, 100)
  t.ok(refused, 'SELECT on leaf_alloc fails')
  t.equal(errnoOf(err), ER_UNKNOWN_COM_ERROR, String(err))
  t.comment(`node 0 alone refuses queries ${Math.round(performance.now() - killedAt)} ms after the other two were killed`)
  const status = await lonely.wsrep()
  t.equal(status.wsrep_cluster_status, 'non-Primary')
  t.equal(status.wsrep_ready, 'OFF')

  await lonely.bootstrapPrimary()
  t.ok(await waitUntil(() => lonely.synced(), 10_000), 'Primary again, alone')
  t.equal(await lonely.clusterSize(), 1)
  const rows = await lonely.leafQuery<{ max_id: string }[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', ['kill'])
  t.equal(rows.length, 1, 'and answers')
})
