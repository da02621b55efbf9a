import { rmSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import zookeeper from 'node-zookeeper-client'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import type { ResolvedConfig } from '../../src/config/resolve-config.js'
import { LeaseRefused, StartRefused } from '../../src/errors.js'
import type { Layout } from '../../src/layout/layout.js'
import { parseLayout } from '../../src/layout/layout-spec.js'
import { MYSQL_LEASE_DDL, createDbLeaseStore } from '../../src/snowflake/worker-id/db-lease/db-lease-store.js'
import { checkLayoutRecord, recordZookeeperLayout } from '../../src/snowflake/worker-id/layout-record.js'
import { acquireWorkerId } from '../../src/snowflake/worker-id/create-source.js'
import type { WorkerLease } from '../../src/snowflake/worker-id/worker-id-source.js'
import { CreateMode, isNoNode, type Client } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { createTestDatabase } from '../helpers/mysql.js'
import { get, startServer } from '../helpers/server-process.js'
import { TEST_ZK, inspector, uniqueName, zk } from '../helpers/zookeeper.js'

// The ID layout is part of a worker-id pool's identity (src/snowflake/worker-id/layout-record.ts):
// the first instance of a leaf.name records its layout (db-lease: the row worker_id = -1 of
// leaf_worker_lease, on MariaDB and on a SQLite file; ZooKeeper: /snowflake/<name>/layout, for
// the zookeeper-lease source and Java Leaf's tree of the zookeeper source), an instance with
// another layout refuses to start naming both, the same layout starts, and a pool that gave out
// worker ids before the record (as an older version left it) takes `leaf` and refuses the rest.
// Racing first starts with different layouts: exactly one starts. Through the whole app and the
// built server: the refusal is one line, no stack.

/** Leaf's layout as recorded: the signature is the record's format, so it is spelled out here. */
const LEAF_SIGNATURE = 'time=41ms,worker=10,sequence=12,epoch=1288834974657'
const JS_SAFE_SIGNATURE = 'time=40ms,worker=8,sequence=5,epoch=1767225600000'
/** A custom spec with Leaf's fields and epoch: the same layout, so the same signature. */
const LEAF_AS_CUSTOM = 'time=41ms,worker=10,sequence=12,epoch=1288834974657'

/** A layout as the configuration parses it with its defaults (twepoch, Vesta's version 0 and genMethod 2). */
function layoutOf (spec: string): Layout {
  return parseLayout(spec, { twepoch: 1288834974657, vestaVersion: 0, vestaGenMethod: 2, now: Date.now() })
}

/** One instance's config, as the server would load it. */
function instanceConfig (name: string, layout: string, values: Record<string, string | number | boolean>): ResolvedConfig {
  return testConfig({
    'leaf.name': name,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.layout': layout,
    'leaf.snowflake.cache.dir': tempDir('leaf-cache-'),
    'leaf.snowflake.ip': '10.1.2.3',
    'leaf.snowflake.port': 8080,
    'leaf.snowflake.lease.ttl-ms': 3000,
    'leaf.snowflake.heartbeat-interval-ms': 1000,
    'leaf.snowflake.zk.connect-timeout-ms': 5000,
    ...values,
  })
}

/** Starts the configured worker-id source; the lease is closed when `t` ends. */
async function start (t: Test, config: ResolvedConfig): Promise<WorkerLease> {
  const lease = await acquireWorkerId(config, silentLogger, { clock: Date.now })
  t.teardown(() => lease.close())
  return lease
}

/** The refusal of a start that must not happen (a lease it got after all is closed at once). */
async function refusal (config: ResolvedConfig): Promise<Error> {
  return acquireWorkerId(config, silentLogger, { clock: Date.now }).then(
    async (lease) => {
      await lease.close()
      return new Error(`started with worker id ${lease.workerId}, but should have been refused`)
    },
    (err: unknown) => err as Error)
}

/** The error is a LeaseRefused whose message holds every part. */
function isRefused (t: Test, err: Error, parts: string[], what: string): void {
  t.ok(err instanceof LeaseRefused, `${what}: LeaseRefused (${err.name}: ${err.message})`)
  t.equal((err as LeaseRefused).code, 'LEASE_LAYOUT_MISMATCH', `${what}: its code`)
  for (const part of parts) t.ok(err.message.includes(part), `${what}: the message says ${JSON.stringify(part)}`)
}

/** The parts of the refusal of `refused` by a pool that records `recorded`. */
function mismatch (recorded: Layout, refused: Layout): string[] {
  return [`records the ID layout "${recorded.signature}"`, `this instance's is "${refused.signature}" (${refused.spec})`, 'use another leaf.name']
}

/** The parts of the refusal of `refused` by a pool used before layouts were recorded. */
function unrecorded (refused: Layout): string[] {
  return ['gave out worker ids before layouts were recorded', `this instance's layout is ${refused.spec}`, 'Use another leaf.name']
}

// ---------------------------------------------------------------------------------------------
// db-lease on MariaDB and on a SQLite file

interface LayoutRow { pool: string, workerId: number, owner: string | null, address: string | null }

/** The db-lease table of one test, read and written behind the pools' backs. */
interface LeaseDb {
  url: string
  /** The row worker_id = -1 of `pool`, if any. */
  layoutRow (pool: string): Promise<LayoutRow | undefined>
  /** How many claim rows (worker_id >= 0) `pool` has. */
  claimRows (pool: string): Promise<number>
  /** The table as an older Leaf-TS created it, with a lease row of `pool` and no layout row. */
  oldPool (pool: string): Promise<void>
  /** A layout row with this address (NULL: undefined), as nothing in Leaf-TS writes it. */
  writeLayoutRow (pool: string, address: string | undefined): Promise<void>
}

// The SQLite table as db-lease-store.ts creates it (it does not export its DDL).
const SQLITE_LEASE_DDL = `CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool VARCHAR(128) NOT NULL, worker_id INTEGER NOT NULL, owner VARCHAR(64) DEFAULT NULL, address VARCHAR(255) DEFAULT NULL,
  expires_at INTEGER NOT NULL, issued_until INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pool, worker_id))`

function toLayoutRow (r: Record<string, unknown> | undefined): LayoutRow | undefined {
  if (r === undefined) return undefined
  return { pool: String(r.pool), workerId: Number(r.worker_id), owner: r.owner === null ? null : String(r.owner), address: r.address === null ? null : String(r.address) }
}

async function leaseDb (t: Test, kind: 'mysql' | 'sqlite'): Promise<LeaseDb> {
  if (kind === 'mysql') {
    const db = await createTestDatabase()
    t.teardown(() => db.drop())
    // Before the first start there is no table: no rows.
    const rows = async (sql: string, pool: string) => {
      try {
        return await db.query<Record<string, unknown>[]>(sql, [pool])
      } catch (err) {
        if ((err as { errno?: number }).errno === 1146) return []
        throw err
      }
    }
    return {
      url: db.url,
      async layoutRow (pool) {
        return toLayoutRow((await rows('SELECT pool, worker_id, owner, address FROM leaf_worker_lease WHERE pool = ? AND worker_id = -1', pool))[0])
      },
      async claimRows (pool) {
        return (await rows('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0', pool)).length
      },
      async oldPool (pool) {
        await db.query(MYSQL_LEASE_DDL)
        await db.query("INSERT INTO leaf_worker_lease (pool, worker_id, owner, address, expires_at, issued_until) VALUES (?, 0, NULL, '10.9.9.9:8080', NOW(3), ?)", [pool, Date.now() - 60_000])
      },
      async writeLayoutRow (pool, address) {
        await db.query(MYSQL_LEASE_DDL)
        await db.query('INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, -1, ?, NOW(3))', [pool, address ?? null])
      },
    }
  }
  const dir = tempDir('leaf-layout-db-')
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const path = join(dir, 'leaf.db')
  const use = <T>(fn: (db: Database.Database) => T): T => {
    const db = new Database(path, { timeout: 5000 })
    try {
      return fn(db)
    } finally {
      db.close()
    }
  }
  // Before the first start there is no table: no rows.
  const rows = (sql: string, pool: string) => use((db) =>
    db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'leaf_worker_lease'").get() === undefined ? [] : db.prepare(sql).all(pool) as Record<string, unknown>[])
  return {
    url: `sqlite:${path}`,
    async layoutRow (pool) {
      return toLayoutRow(rows('SELECT pool, worker_id, owner, address FROM leaf_worker_lease WHERE pool = ? AND worker_id = -1', pool)[0])
    },
    async claimRows (pool) {
      return rows('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0', pool).length
    },
    async oldPool (pool) {
      use((db) => {
        db.exec(SQLITE_LEASE_DDL)
        db.prepare("INSERT INTO leaf_worker_lease (pool, worker_id, owner, address, expires_at, issued_until) VALUES (?, 0, NULL, '10.9.9.9:8080', ?, ?)").run(pool, Date.now(), Date.now() - 60_000)
      })
    },
    async writeLayoutRow (pool, address) {
      use((db) => {
        db.exec(SQLITE_LEASE_DDL)
        db.prepare('INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, -1, ?, ?)').run(pool, address ?? null, Date.now())
      })
    },
  }
}

function dbLeaseConfig (db: LeaseDb, name: string, layout: string, values: Record<string, string | number | boolean> = {}): ResolvedConfig {
  return instanceConfig(name, layout, { 'leaf.snowflake.worker-id.source': 'db-lease', 'leaf.jdbc.url': db.url, ...values })
}

for (const kind of ['mysql', 'sqlite'] as const) {
  // [the first instance's layout, another one, a spec of the first's layout written otherwise]
  const pairs: [string, string, string | undefined][] = [
    ['leaf', 'js-safe', LEAF_AS_CUSTOM],
    ['vesta-min-granularity', 'vesta-max-peak', undefined],
    ['time=42ms,worker=9,sequence=12,epoch=1700000000000', 'leaf', 'time=42ms,worker=9,sequence=12,epoch=2023-11-14T22:13:20Z'],
  ]
  for (const [first, other, same] of pairs) {
    t.test(`db-lease on ${kind}: ${first} is recorded in the row -1; ${other} is refused naming both; ${first} starts again`, async (t) => {
      const db = await leaseDb(t, kind)
      const name = uniqueName()
      const a = layoutOf(first)
      const b = layoutOf(other)
      t.not(a.signature, b.signature, 'two different layouts')
      t.equal(await db.layoutRow(name), undefined, 'no record before the first start')

      const one = await start(t, dbLeaseConfig(db, name, first))
      t.same(await db.layoutRow(name), { pool: name, workerId: -1, owner: null, address: a.signature }, 'the first instance recorded its layout in the row -1')
      if (first === 'leaf') t.equal(a.signature, LEAF_SIGNATURE)

      const err = await refusal(dbLeaseConfig(db, name, other))
      isRefused(t, err, [`leaf_worker_lease (pool ${name})`, ...mismatch(a, b)], other)
      t.equal(await db.claimRows(name), 1, 'the refused instance claimed nothing')
      t.equal((await db.layoutRow(name))?.address, a.signature, 'the record is unchanged')

      const two = await start(t, dbLeaseConfig(db, name, first, { 'leaf.snowflake.port': 8081 }))
      t.not(two.workerId, one.workerId, `${first} again: started with a worker id of its own`)
      if (same !== undefined) {
        t.equal(layoutOf(same).signature, a.signature, `${same} is ${first} written otherwise`)
        const three = await start(t, dbLeaseConfig(db, name, same, { 'leaf.snowflake.port': 8082 }))
        t.equal(three.status().source, 'db-lease', `${same}: started`)
      }
      t.equal(await db.claimRows(name), same === undefined ? 2 : 3)
    })
  }

  t.test(`db-lease on ${kind}: a pool that gave out worker ids before layouts were recorded takes leaf and refuses js-safe`, async (t) => {
    const db = await leaseDb(t, kind)
    const name = uniqueName()
    await db.oldPool(name)

    for (const other of ['js-safe', 'vesta-max-peak']) {
      const err = await refusal(dbLeaseConfig(db, name, other))
      isRefused(t, err, [`leaf_worker_lease (pool ${name})`, ...unrecorded(layoutOf(other))], other)
      t.equal(await db.layoutRow(name), undefined, `${other}: nothing recorded`)
    }

    const lease = await start(t, dbLeaseConfig(db, name, 'leaf'))
    t.equal(lease.status().source, 'db-lease', 'leaf: started')
    t.same(await db.layoutRow(name), { pool: name, workerId: -1, owner: null, address: LEAF_SIGNATURE }, 'and recorded Leaf\'s layout')
    const err = await refusal(dbLeaseConfig(db, name, 'js-safe', { 'leaf.snowflake.port': 8081 }))
    isRefused(t, err, mismatch(layoutOf('leaf'), layoutOf('js-safe')), 'js-safe after the record')
  })

  t.test(`db-lease on ${kind}: a layout row with no layout in it refuses every layout`, async (t) => {
    const db = await leaseDb(t, kind)
    for (const address of [undefined, '']) {
      const name = uniqueName()
      await db.writeLayoutRow(name, address)
      const err = await refusal(dbLeaseConfig(db, name, 'leaf'))
      isRefused(t, err, ['records the ID layout ""', `this instance's is "${LEAF_SIGNATURE}"`], `address ${address === undefined ? 'NULL' : "''"}`)
      t.equal(await db.claimRows(name), 0, 'nothing claimed')
    }
  })

  t.test(`db-lease on ${kind}: two first starts with different layouts at once: exactly one starts`, async (t) => {
    const db = await leaseDb(t, kind)
    const store = dbLeaseConfig(db, 'x', 'leaf').segment.store
    const layouts = [layoutOf('leaf'), layoutOf('js-safe')]
    for (let round = 0; round < 4; round++) {
      const name = uniqueName()
      const results = await Promise.allSettled(layouts.map((layout) => createDbLeaseStore({ store, pool: name, ttlMs: 3000, connectTimeoutMs: 5000, queryTimeoutMs: 5000, layout })))
      const started = results.flatMap((r, i) => r.status === 'fulfilled' ? [i] : [])
      await Promise.all(results.map((r) => r.status === 'fulfilled' ? r.value.close() : undefined))
      t.equal(started.length, 1, `round ${round}: one of two started`)
      const winner = layouts[started[0] ?? 0] as Layout
      t.equal((await db.layoutRow(name))?.address, winner.signature, `round ${round}: the record is the winner's (${winner.name})`)
      const lost = results.find((r) => r.status === 'rejected')
      isRefused(t, (lost as PromiseRejectedResult | undefined)?.reason as Error ?? new Error('none refused'),
        mismatch(winner, layouts[1 - (started[0] ?? 0)] as Layout), `round ${round}: the loser`)
    }
  })
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper: the zookeeper-lease source and Java Leaf's tree (the zookeeper source)

type Inspector = Awaited<ReturnType<typeof inspector>>

async function zkInspector (t: Test): Promise<Inspector> {
  const zkc = await inspector()
  t.teardown(() => zkc.close())
  return zkc
}

/** Removes a tree that may not exist (a node it may not list is taken for a leaf). */
async function removeTree (client: Client, path: string): Promise<void> {
  let children: string[]
  try {
    children = await zk.getChildren(client, path)
  } catch (err) {
    if (isNoNode(err)) return
    if ((err as { getCode?: () => number }).getCode?.() !== zookeeper.Exception.NO_AUTH) throw err
    children = []
  }
  for (const child of children) await removeTree(client, `${path}/${child}`)
  await zk.removeIfExists(client, path)
}

/** A fresh leaf.name whose /snowflake/<name> tree is removed when `t` ends (after the leases close). */
function zkName (t: Test, zkc: Inspector): string {
  const name = uniqueName()
  t.teardown(() => removeTree(zkc, `/snowflake/${name}`))
  return name
}

async function layoutNode (zkc: Inspector, name: string): Promise<string | undefined> {
  const node = await zk.getWithStat(zkc, `/snowflake/${name}/layout`)
  return node === undefined ? undefined : String(node.data ?? '')
}

type ZkSource = 'zookeeper-lease' | 'zookeeper'

function zkConfig (source: ZkSource, name: string, layout: string, port = 8080): ResolvedConfig {
  return instanceConfig(name, layout, { 'leaf.snowflake.worker-id.source': source, 'leaf.snowflake.zk.address': TEST_ZK, 'leaf.snowflake.port': port })
}

/** What a source leased in the tree: claim nodes, whichever the source. */
async function claims (zkc: Inspector, source: ZkSource, name: string): Promise<string[]> {
  return zkc.children(source === 'zookeeper' ? `/snowflake/${name}/forever` : `/snowflake/${name}/lease/holders`)
}

for (const source of ['zookeeper-lease', 'zookeeper'] as const) {
  t.test(`${source}: the first instance records its layout at /snowflake/<name>/layout; another is refused naming both; the same starts`, async (t) => {
    const zkc = await zkInspector(t)
    const name = zkName(t, zkc)
    const one = await start(t, zkConfig(source, name, 'leaf', 8080))
    t.equal(one.status().source, source)
    t.equal(await layoutNode(zkc, name), LEAF_SIGNATURE, 'the layout node holds Leaf\'s signature')

    for (const other of ['js-safe', 'vesta-max-peak', 'time=41ms,worker=10,sequence=12,epoch=1500000000000']) {
      const err = await refusal(zkConfig(source, name, other, 8081))
      isRefused(t, err, [`ZooKeeper /snowflake/${name}/layout`, ...mismatch(layoutOf('leaf'), layoutOf(other))], other)
    }
    t.equal((await claims(zkc, source, name)).length, 1, 'the refused instances claimed nothing')
    t.same(await zkc.children(`/snowflake/${name}/temporary`), source === 'zookeeper' ? ['10.1.2.3:8080'] : [], 'and hold no ephemeral node')
    t.equal(await layoutNode(zkc, name), LEAF_SIGNATURE, 'the record is unchanged')

    const two = await start(t, zkConfig(source, name, 'leaf', 8082))
    t.not(two.workerId, one.workerId, 'leaf again: started with a worker id of its own')
    const three = await start(t, zkConfig(source, name, LEAF_AS_CUSTOM, 8083))
    t.equal(three.status().source, source, 'Leaf\'s layout as a custom spec: started')
    t.equal((await claims(zkc, source, name)).length, 3)
  })

  // Java Leaf's tree (forever/<ip:port>-<seq>), and for zookeeper-lease also a pool of an older
  // Leaf-TS (lease/issued/<id>): worker ids given out, no layout node.
  const oldTrees: [string, string, string][] = [
    ['Java Leaf\'s forever tree', 'forever/10.9.9.9:8080-0000000000', JSON.stringify({ ip: '10.9.9.9', port: '8080', timestamp: Date.now() - 60_000 })],
  ]
  if (source === 'zookeeper-lease') oldTrees.push(['an older zookeeper-lease pool', 'lease/issued/0', JSON.stringify({ issuedUntil: Date.now() - 60_000, by: 'old', released: true })])
  for (const [what, child, data] of oldTrees) {
    t.test(`${source}: ${what} with worker ids and no layout node takes leaf and refuses other layouts`, async (t) => {
      const zkc = await zkInspector(t)
      const name = zkName(t, zkc)
      const path = `/snowflake/${name}/${child}`
      await zk.mkdirp(zkc, path.slice(0, path.lastIndexOf('/')))
      await zk.create(zkc, path, data, CreateMode.PERSISTENT)

      for (const other of ['js-safe', 'vesta-min-granularity', 'time=42ms,worker=9,sequence=12,epoch=1700000000000']) {
        const err = await refusal(zkConfig(source, name, other, 8081))
        isRefused(t, err, [`ZooKeeper /snowflake/${name}/layout`, ...unrecorded(layoutOf(other))], other)
        t.equal(await layoutNode(zkc, name), undefined, `${other}: nothing recorded`)
      }
      t.same(await claims(zkc, source, name), source === 'zookeeper' ? ['10.9.9.9:8080-0000000000'] : [], 'nothing claimed')

      const lease = await start(t, zkConfig(source, name, 'leaf', 8080))
      t.equal(lease.status().source, source, 'leaf: started')
      t.equal(await layoutNode(zkc, name), LEAF_SIGNATURE, 'and recorded Leaf\'s layout')
      if (source === 'zookeeper') t.equal(lease.workerId, 1, 'after Java Leaf\'s worker id 0')
      const err = await refusal(zkConfig(source, name, 'js-safe', 8082))
      isRefused(t, err, mismatch(layoutOf('leaf'), layoutOf('js-safe')), 'js-safe after the record')
    })
  }

  t.test(`${source}: two first starts with different layouts at once on a fresh name: exactly one starts`, async (t) => {
    const zkc = await zkInspector(t)
    const specs = ['leaf', 'js-safe']
    for (let round = 0; round < 4; round++) {
      const name = zkName(t, zkc)
      const results = await Promise.allSettled(specs.map((spec, i) => acquireWorkerId(zkConfig(source, name, spec, 8080 + i), silentLogger, { clock: Date.now })))
      const started = results.flatMap((r, i) => r.status === 'fulfilled' ? [i] : [])
      await Promise.all(results.map((r) => r.status === 'fulfilled' ? r.value.close() : undefined))
      t.equal(started.length, 1, `round ${round}: one of two started`)
      const winner = layoutOf(specs[started[0] ?? 0] as string)
      t.equal(await layoutNode(zkc, name), winner.signature, `round ${round}: the record is the winner's (${winner.name})`)
      const lost = results.find((r) => r.status === 'rejected')
      isRefused(t, (lost as PromiseRejectedResult | undefined)?.reason as Error ?? new Error('none refused'),
        mismatch(winner, layoutOf(specs[1 - (started[0] ?? 0)] as string)), `round ${round}: the loser`)
    }
  })
}

// ---------------------------------------------------------------------------------------------
// recordZookeeperLayout and checkLayoutRecord, branch by branch

/**
 * `client`, except that its create of `path` first runs `before` (another instance's create,
 * say): the race between reading "no record" and writing one, made to happen every time.
 */
function racedOn (client: Client, path: string, before: () => Promise<void>): Client {
  return new Proxy(client, {
    get (target, prop) {
      if (prop === 'create') {
        return (p: string, ...rest: unknown[]) => {
          const go = () => (target.create as (...args: unknown[]) => void)(p, ...rest)
          if (p === path) before().then(go, go)
          else go()
        }
      }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

t.test('recordZookeeperLayout: a fresh tree gets the record; then the same layout passes and another is refused', async (t) => {
  const zkc = await zkInspector(t)
  const name = zkName(t, zkc)
  await recordZookeeperLayout(zkc, name, layoutOf('js-safe'))
  t.equal(await layoutNode(zkc, name), JS_SAFE_SIGNATURE, 'recorded, /snowflake/<name> made on the way')
  await recordZookeeperLayout(zkc, name, layoutOf('js-safe'))
  t.pass('the same layout passes')
  await t.rejects(recordZookeeperLayout(zkc, name, layoutOf('leaf')), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: `records the ID layout "${JS_SAFE_SIGNATURE}"` })
  t.equal(await layoutNode(zkc, name), JS_SAFE_SIGNATURE)
})

t.test('recordZookeeperLayout: another instance records between our read and our create (NodeExists): its record decides', async (t) => {
  const zkc = await zkInspector(t)
  const rival = await zkInspector(t)
  for (const [theirs, ours, passes] of [['leaf', 'leaf', true], ['leaf', 'js-safe', false], ['js-safe', 'leaf', false]] as const) {
    const name = zkName(t, zkc)
    const path = `/snowflake/${name}/layout`
    let raced = false
    const client = racedOn(zkc, path, async () => {
      raced = true
      await zk.create(rival, path, layoutOf(theirs).signature, CreateMode.PERSISTENT)
    })
    const result = recordZookeeperLayout(client, name, layoutOf(ours))
    if (passes) await t.resolves(result, `theirs ${theirs}, ours ${ours}: passes`)
    else await t.rejects(result, { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: `records the ID layout "${layoutOf(theirs).signature}", and this instance's is "${layoutOf(ours).signature}"` }, `theirs ${theirs}, ours ${ours}: refused`)
    t.ok(raced, 'the rival wrote first')
    t.equal(await layoutNode(zkc, name), layoutOf(theirs).signature, 'the rival\'s record stays')
  }
})

t.test('recordZookeeperLayout: a record that vanishes right after beating our create refuses (nothing to agree with)', async (t) => {
  const zkc = await zkInspector(t)
  const rival = await zkInspector(t)
  const name = zkName(t, zkc)
  const path = `/snowflake/${name}/layout`
  // The rival records before our create, which fails with NodeExists, and removes the record
  // before we read it back.
  const client = new Proxy(zkc, {
    get (target, prop) {
      if (prop === 'create') {
        // (data, ACL and mode are optional, in any order: what comes is passed on, the callback last.)
        type Callback = (err: Error | zookeeper.Exception | null, path: string) => void
        const create = target.create.bind(target) as (p: string, ...rest: unknown[]) => void
        return (p: string, ...rest: unknown[]) => {
          const cb = rest.pop() as Callback
          if (p !== path) return create(p, ...rest, cb)
          const ours = () => new Promise<[Error | null, string]>((resolve) => create(p, ...rest, ((err, created) => resolve([err as Error | null, created])) satisfies Callback))
          zk.create(rival, path, LEAF_SIGNATURE, CreateMode.PERSISTENT)
            .then(ours)
            .then(async ([err, created]) => {
              await zk.remove(rival, path)
              cb(err, created)
            })
            .catch((err: Error) => cb(err, ''))
        }
      }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  await t.rejects(recordZookeeperLayout(client, name, layoutOf('leaf')), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: 'records the ID layout ""' })
  t.equal(await layoutNode(zkc, name), undefined, 'no record was written')
})

t.test('recordZookeeperLayout: a layout node with no data refuses every layout', async (t) => {
  const zkc = await zkInspector(t)
  const name = zkName(t, zkc)
  await zk.mkdirp(zkc, `/snowflake/${name}`)
  await zk.create(zkc, `/snowflake/${name}/layout`, '', CreateMode.PERSISTENT)
  for (const spec of ['leaf', 'js-safe']) {
    await t.rejects(recordZookeeperLayout(zkc, name, layoutOf(spec)), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: `records the ID layout "", and this instance's is "${layoutOf(spec).signature}"` }, spec)
  }
  // And through a source: the start is refused too.
  const err = await refusal(zkConfig('zookeeper-lease', name, 'leaf'))
  isRefused(t, err, ['records the ID layout ""'], 'zookeeper-lease')
})

t.test('recordZookeeperLayout: ZooKeeper errors other than NoNode and NodeExists are passed on, not taken for an answer', async (t) => {
  const zkc = await zkInspector(t)
  // forever/ readable by nobody: counting its children fails with NO_AUTH.
  const unreadable = zkName(t, zkc)
  await zk.mkdirp(zkc, `/snowflake/${unreadable}`)
  const deleteOnly = [new zookeeper.ACL(zookeeper.Permission.DELETE, new zookeeper.Id('world', 'anyone'))]
  await new Promise<void>((resolve, reject) => zkc.create(`/snowflake/${unreadable}/forever`, deleteOnly, CreateMode.PERSISTENT, (err) => err ? reject(err) : resolve()))
  const noAuth = await recordZookeeperLayout(zkc, unreadable, layoutOf('leaf')).then(() => undefined, (err: unknown) => err as Error)
  t.notOk(noAuth instanceof LeaseRefused, 'not a layout refusal')
  t.equal((noAuth as { getCode?: () => number } | undefined)?.getCode?.(), zookeeper.Exception.NO_AUTH, 'NO_AUTH passed on')
  t.equal(await layoutNode(zkc, unreadable), undefined, 'nothing recorded')

  // /snowflake/<name> an ephemeral node: creating the record under it fails with NO_CHILDREN_FOR_EPHEMERALS.
  const ephemeral = zkName(t, zkc)
  await zk.mkdirp(zkc, '/snowflake')
  await zk.create(zkc, `/snowflake/${ephemeral}`, '', CreateMode.EPHEMERAL)
  const noChildren = await recordZookeeperLayout(zkc, ephemeral, layoutOf('leaf')).then(() => undefined, (err: unknown) => err as Error)
  t.notOk(noChildren instanceof LeaseRefused, 'not a layout refusal')
  t.equal((noChildren as { getCode?: () => number } | undefined)?.getCode?.(), zookeeper.Exception.NO_CHILDREN_FOR_EPHEMERALS, 'NO_CHILDREN_FOR_EPHEMERALS passed on')
})

t.test('checkLayoutRecord: a record decides by signature; no record decides by use', async (t) => {
  const leaf = layoutOf('leaf')
  const js = layoutOf('js-safe')
  const where = 'the pool'
  t.doesNotThrow(() => checkLayoutRecord(where, undefined, false, js), 'no record, unused: any layout')
  t.doesNotThrow(() => checkLayoutRecord(where, undefined, true, leaf), 'no record, used: leaf')
  t.throws(() => checkLayoutRecord(where, undefined, true, js), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: 'the pool gave out worker ids before layouts were recorded, so under Leaf\'s layout, and this instance\'s layout is js-safe' })
  t.throws(() => checkLayoutRecord(where, undefined, true, layoutOf('leaf,worker=8,sequence=14')), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH' }, 'no record, used: Leaf\'s name with other widths is not Leaf\'s layout')
  t.doesNotThrow(() => checkLayoutRecord(where, undefined, true, layoutOf('leaf,epoch=1500000000000')), 'no record, used: Leaf\'s fields with another twepoch (a setting before layouts were recorded)')
  t.doesNotThrow(() => checkLayoutRecord(where, JS_SAFE_SIGNATURE, true, js), 'the recorded layout')
  t.doesNotThrow(() => checkLayoutRecord(where, LEAF_SIGNATURE, true, layoutOf(LEAF_AS_CUSTOM)), 'the recorded layout, spelled otherwise')
  t.throws(() => checkLayoutRecord(where, LEAF_SIGNATURE, false, js), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH', message: `the pool records the ID layout "${LEAF_SIGNATURE}", and this instance's is "${JS_SAFE_SIGNATURE}" (js-safe)` })
  t.throws(() => checkLayoutRecord(where, LEAF_SIGNATURE, true, layoutOf('leaf,epoch=1500000000000')), { name: 'LeaseRefused', code: 'LEASE_LAYOUT_MISMATCH' }, 'another epoch is another layout')
  t.throws(() => checkLayoutRecord(where, '', true, leaf), { message: 'records the ID layout ""' }, 'an empty record matches nothing')
})

// ---------------------------------------------------------------------------------------------
// The whole app and the built server

t.test('buildApp: a second instance with another layout does not start; the first serves on', async (t) => {
  const dir = tempDir('leaf-layout-app-')
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const name = uniqueName()
  const values = (layout: string, port: number) => ({
    'leaf.name': name,
    'leaf.segment.enable': false,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker-id.source': 'db-lease',
    'leaf.jdbc.url': `sqlite:${join(dir, 'leaf.db')}`,
    'leaf.snowflake.layout': layout,
    'leaf.snowflake.cache.dir': join(dir, `cache-${port}`),
    'leaf.snowflake.ip': '10.1.2.3',
    'leaf.snowflake.port': port,
  })
  const first = await buildApp(testConfig(values('js-safe', 8080)), { logger: silentLogger })
  t.teardown(() => first.close())
  const err = await buildApp(testConfig(values('leaf', 8081)), { logger: silentLogger }).then(
    async (app) => { await app.close(); return new Error('the second app started') },
    (e: unknown) => e as Error)
  t.ok(err instanceof StartRefused, 'a StartRefused: the server prints its message alone')
  isRefused(t, err, [`leaf_worker_lease (pool ${name})`, ...mismatch(layoutOf('js-safe'), layoutOf('leaf'))], 'the second app')

  const res = await first.inject('/api/snowflake/get/k')
  t.equal(res.statusCode, 200, 'the first still issues')
  t.ok(BigInt(res.body) < 2n ** 53n, 'a js-safe ID')
})

t.test('the built server: a second instance with another layout exits 1 with the refusal on one log line, no stack', async (t) => {
  const zkc = await zkInspector(t)
  const name = zkName(t, zkc)
  const args = (layout: string, port: number) => [
    '--server.port=0',
    '--leaf.segment.enable=false',
    '--leaf.snowflake.enable=true',
    `--leaf.name=${name}`,
    `--leaf.snowflake.zk.address=${TEST_ZK}`,
    '--leaf.snowflake.ip=127.0.0.1',
    `--leaf.snowflake.port=${port}`,
    `--leaf.snowflake.cache.dir=${tempDir('leaf-layout-cache-')}`,
    `--leaf.snowflake.layout=${layout}`,
  ]
  const first = await startServer({ args: args('leaf', 9751) })
  t.teardown(() => first.stop())
  t.equal(await layoutNode(zkc, name), LEAF_SIGNATURE)

  const err = await startServer({ args: args('vesta-min-granularity', 9752) }).then(
    async (s) => { await s.stop(); return new Error('the second server started') },
    (e: unknown) => e as Error)
  t.match(err.message, /exited with 1 before listening/)
  const lines = err.message.split('\n')
  const refused = lines.filter((l) => l.includes('start refused'))
  t.equal(refused.length, 1, 'one line says why')
  const entry = JSON.parse(refused[0] ?? '{}') as { level?: number, msg?: string, err?: unknown, stack?: unknown }
  t.equal(entry.level, 60, 'at fatal level')
  t.equal(entry.msg, `start refused: ZooKeeper /snowflake/${name}/layout records the ID layout "${LEAF_SIGNATURE}", ` +
    `and this instance's is "${layoutOf('vesta-min-granularity').signature}" (vesta-min-granularity): ` +
    'mixed layouts under one leaf.name would make the same ID twice. Start with the recorded layout, or use another leaf.name (a pool of its own) for the new one')
  t.equal(entry.err, undefined, 'no error object')
  t.equal(entry.stack, undefined, 'no stack field')
  t.notOk(lines.some((l) => /^\s+at /.test(l) || l.includes('"stack"')), 'no stack trace anywhere in the output')
  t.same(await zkc.children(`/snowflake/${name}/forever`), ['127.0.0.1:9751-0000000000'], 'the refused server claimed nothing')

  const res = await get(`${first.url}/api/snowflake/get/k`)
  t.equal(res.status, 200, 'the first still issues')
})
