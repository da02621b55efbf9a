import { createHash, randomBytes } from 'node:crypto'
import type { Socket } from 'node:net'
import zookeeper, { type ACL } from 'node-zookeeper-client'
import t, { type Test } from 'tap'
import { LeaseRefused } from '../../src/errors.js'
import { leafLayout } from '../../src/layout/layout.js'
import type { Logger } from '../../src/logger.js'
import { acquireWorkerLease } from '../../src/snowflake/worker-id/zookeeper/zookeeper-source.js'
import { createZookeeperLeaseStore } from '../../src/snowflake/worker-id/zookeeper-lease/zookeeper-lease-store.js'
import { acquireWorkerId } from '../../src/snowflake/worker-id/create-source.js'
import type { WorkerLease } from '../../src/snowflake/worker-id/worker-id-source.js'
import type { ResolvedConfig } from '../../src/config/resolve-config.js'
import { CreateMode, closeZookeeper, connectZookeeper, createZookeeper, isNoNode, waitConnected, type Client } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { sleep, until } from '../helpers/time.js'
import { TEST_ZK, uniqueName, zk, zookeeperProxy } from '../helpers/zookeeper.js'

// leaf.snowflake.zk.auth against the real ZooKeeper: every node Leaf-TS creates carries an ACL
// of the configured digest identity alone; instances of that identity share the tree as usual;
// any other identity (another password, or none) is refused at start in one line naming the
// key, and never takes a worker id. Each test has a leaf.name of its own, removed at its end.

const USER = 'leaf-test'
const PASSWORD = `pw-${randomBytes(6).toString('hex')}`
const AUTH = `digest:${USER}:${PASSWORD}`
const WRONG = `digest:${USER}:not-${PASSWORD}`
/** The identity ZooKeeper's DigestAuthenticationProvider makes of AUTH: user:base64(sha1(user:password)). */
const DIGEST_ID = `${USER}:${createHash('sha1').update(`${USER}:${PASSWORD}`).digest('base64')}`
const LEAF = leafLayout(1288834974657)

/** A client of the test ZooKeeper, authenticated as `auth` (empty: none), closed when `t` ends. */
async function client (t: Test, auth = ''): Promise<Client> {
  const c = await connectZookeeper(TEST_ZK, 10_000, 5000, auth)
  t.teardown(() => closeZookeeper(c))
  return c
}

/** A leaf.name whose tree the AUTH identity removes when `t` ends (after the leases close: teardowns run last first). */
async function treeName (t: Test): Promise<string> {
  const name = uniqueName()
  const owner = await client(t, AUTH)
  t.teardown(() => removeTree(owner, `/snowflake/${name}`))
  return name
}

async function removeTree (c: Client, path: string): Promise<void> {
  let children: string[]
  try {
    children = await zk.getChildren(c, path)
  } catch (err) {
    if (isNoNode(err)) return
    throw err
  }
  for (const child of children) await removeTree(c, `${path}/${child}`)
  await zk.removeIfExists(c, path)
}

/** The node's ACL as [scheme, id, permissions]; node-zookeeper-client names the permissions `permission`, not as its typings say. */
function aclEntries (acls: ACL[]): [string, string, number][] {
  return acls.map((a) => [a.id.scheme, a.id.id, (a as unknown as { permission: number }).permission])
}

function aclOfNode (c: Client, path: string): Promise<[string, string, number][]> {
  return new Promise((resolve, reject) => c.getACL(path, (err, acls) => err ? reject(err) : resolve(aclEntries(acls))))
}

function codeOf (err: unknown): number | undefined {
  return (err as { getCode?: () => number }).getCode?.()
}

/** Every node Leaf-TS created under `root` carries the AUTH identity's ACL alone, and only it may read them. */
async function onlyAuthReads (t: Test, paths: string[]): Promise<void> {
  const owner = await client(t, AUTH)
  const anonymous = await client(t)
  const wrong = await client(t, WRONG)
  for (const path of paths) {
    t.same(await aclOfNode(owner, path), [['digest', DIGEST_ID, zookeeper.Permission.ALL]], `${path}: the digest identity's ACL alone`)
    await t.resolves(zk.getData(owner, path), `${path}: read with the auth`)
    t.equal(codeOf(await zk.getData(anonymous, path).catch((err: unknown) => err)), zookeeper.Exception.NO_AUTH, `${path}: NO_AUTH without auth`)
    t.equal(codeOf(await zk.getData(wrong, path).catch((err: unknown) => err)), zookeeper.Exception.NO_AUTH, `${path}: NO_AUTH with another password`)
  }
}

/** The config of one instance of `name`, as the server would load it. */
function instanceConfig (name: string, values: Record<string, string | number>): ResolvedConfig {
  return testConfig({
    'leaf.name': name,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.zk.address': TEST_ZK,
    'leaf.snowflake.cache.dir': tempDir('leaf-cache-'),
    'leaf.snowflake.ip': '10.1.2.3',
    'leaf.snowflake.port': 8080,
    'leaf.snowflake.zk.connect-timeout-ms': 3000,
    'leaf.snowflake.zk.session-timeout-ms': 4000,
    'leaf.snowflake.lease.ttl-ms': 9000,
    ...values,
  })
}

async function start (t: Test, config: ResolvedConfig, logger: Logger = silentLogger): Promise<WorkerLease> {
  const lease = await acquireWorkerId(config, logger, { clock: Date.now })
  t.teardown(() => lease.close())
  return lease
}

/** The start's refusal; a start that succeeds fails the test (its lease is closed). */
async function refusal (config: ResolvedConfig, logger: Logger = silentLogger): Promise<Error> {
  return acquireWorkerId(config, logger, { clock: Date.now }).then(
    async (lease) => {
      await lease.close()
      return new Error(`started with worker id ${lease.workerId}, but should have been refused`)
    },
    (err: unknown) => err as Error)
}

/** A refusal in one line, naming the key and the fix, and never the password. */
function isAuthRefusal (t: Test, err: Error, what: string, parts: string[] = []): void {
  t.ok(err instanceof LeaseRefused, `${what}: LeaseRefused (${err.name}: ${err.message})`)
  t.equal((err as LeaseRefused).code, 'LEASE_AUTH_REFUSED', `${what}: its code`)
  t.match(err.message, /NO_AUTH|AUTH_FAILED/, `${what}: ZooKeeper's answer`)
  t.match(err.message, /set leaf\.snowflake\.zk\.auth|give it as digest:user:password/, `${what}: the key and the fix`)
  t.notOk(err.message.includes('\n'), `${what}: one line`)
  t.notOk(err.message.includes(PASSWORD), `${what}: not the password`)
  for (const part of parts) t.ok(err.message.includes(part), `${what}: says ${JSON.stringify(part)}`)
}

function noSecretLogged (t: Test, lines: Record<string, unknown>[], what: string): void {
  const leaked = lines.filter((line) => JSON.stringify(line).includes(PASSWORD))
  t.same(leaked, [], `${what}: no log line holds the password (${lines.length} lines)`)
}

t.test('createZookeeper with auth: a request queued while disconnected runs with the identity after the reconnect', async (t) => {
  const name = await treeName(t)
  const c = createZookeeper(TEST_ZK, 10_000, AUTH)
  t.teardown(() => closeZookeeper(c))
  t.ok(await waitConnected(c, 5000), 'connected')
  await zk.mkdirp(c, `/snowflake/${name}`)
  t.same(await aclOfNode(c, `/snowflake/${name}`), [['digest', DIGEST_ID, zookeeper.Permission.ALL]], 'a node of the identity alone')
  const session = c.getSessionId().toString('hex')
  // The connection goes (the session stays); a request made meanwhile waits for the next one,
  // on which ZooKeeper knows the identity only once the authentication is sent again.
  await new Promise<void>((resolve) => {
    c.once('disconnected', () => resolve())
    ;(c as unknown as { connectionManager: { socket: Socket } }).connectionManager.socket.destroy()
  })
  const queued = zk.getData(c, `/snowflake/${name}`).then(() => 'read', (err: unknown) => String(err))
  t.ok(await waitConnected(c, 5000), 'connected again')
  t.equal(c.getSessionId().toString('hex'), session, 'the same session')
  t.equal(await queued, 'read', 'the queued request ran after the authentication, not before it (NO_AUTH)')
})

t.test('zk.mkdirp with auth: the first folder stays open, the rest are the identity\'s', async (t) => {
  const root = `/${uniqueName()}`
  const owner = await client(t, AUTH)
  t.teardown(() => removeTree(owner, root))
  await zk.mkdirp(owner, `${root}/a/b`)
  t.same(await aclOfNode(owner, root), [['world', 'anyone', zookeeper.Permission.ALL]], 'the first folder: open, as /snowflake is shared by every leaf.name')
  t.same(await aclOfNode(owner, `${root}/a`), [['digest', DIGEST_ID, zookeeper.Permission.ALL]], 'below it: the identity\'s')
  t.same(await aclOfNode(owner, `${root}/a/b`), [['digest', DIGEST_ID, zookeeper.Permission.ALL]], 'and further down')
  // Another fleet, with no auth, can still make its own tree beside.
  const anonymous = await client(t)
  await t.resolves(zk.mkdirp(anonymous, `${root}/other/forever`), 'another identity\'s tree beside it')
  t.same(await aclOfNode(anonymous, `${root}/other/forever`), [['world', 'anyone', zookeeper.Permission.ALL]], 'open, without auth (Java Leaf\'s ACL)')
})

t.test('zookeeper source, without auth: open ACLs, as Java Leaf', async (t) => {
  const name = uniqueName()
  const inspector = await client(t)
  t.teardown(() => removeTree(inspector, `/snowflake/${name}`))
  const lease = await start(t, instanceConfig(name, {}))
  const own = (await zk.getChildren(inspector, `/snowflake/${name}/forever`))[0]
  for (const path of [`/snowflake/${name}`, `/snowflake/${name}/forever`, `/snowflake/${name}/forever/${own}`, `/snowflake/${name}/temporary/10.1.2.3:8080`, `/snowflake/${name}/layout`]) {
    t.same(await aclOfNode(inspector, path), [['world', 'anyone', zookeeper.Permission.ALL]], `${path}: world:anyone`)
  }
  t.equal(lease.workerId, 0)
})

t.test('zookeeper source with auth: its nodes are the identity\'s; the same identity shares the tree; any other is refused', async (t) => {
  const name = await treeName(t)
  const { logger, lines } = captureLogger()
  const first = await start(t, instanceConfig(name, { 'leaf.snowflake.zk.auth': AUTH }), logger)
  const base = `/snowflake/${name}`
  const owner = await client(t, AUTH)
  const [own] = await zk.getChildren(owner, `${base}/forever`)
  t.equal(own, '10.1.2.3:8080-0000000000', 'the first worker id')
  await onlyAuthReads(t, [base, `${base}/forever`, `${base}/forever/${own}`, `${base}/temporary`, `${base}/temporary/10.1.2.3:8080`, `${base}/layout`])

  // A second instance of the same identity: its own worker id, as without auth.
  const second = await start(t, instanceConfig(name, { 'leaf.snowflake.zk.auth': AUTH, 'leaf.snowflake.port': 8081 }), logger)
  t.equal(first.workerId, 0)
  t.equal(second.workerId, 1, 'the second instance gets the next worker id')
  await onlyAuthReads(t, [`${base}/forever/10.1.2.3:8081-0000000001`, `${base}/temporary/10.1.2.3:8081`])

  // Another password, no auth, and a restart of the first one's ip:port without auth: refused,
  // and nothing is created for them.
  const wrong = await refusal(instanceConfig(name, { 'leaf.snowflake.zk.auth': WRONG, 'leaf.snowflake.port': 8082 }), logger)
  isAuthRefusal(t, wrong, 'another password', [`user "${USER}"`, `${base}`])
  const none = await refusal(instanceConfig(name, { 'leaf.snowflake.port': 8083 }), logger)
  isAuthRefusal(t, none, 'no auth', ['leaf.snowflake.zk.auth is not set', base])
  const restart = await refusal(instanceConfig(name, { 'leaf.snowflake.port': 8080 }), logger)
  isAuthRefusal(t, restart, 'no auth on the first one\'s ip:port')
  t.same((await zk.getChildren(owner, `${base}/forever`)).sort(), ['10.1.2.3:8080-0000000000', '10.1.2.3:8081-0000000001'], 'no worker id made for the refused instances')
  t.same((await zk.getChildren(owner, `${base}/temporary`)).sort(), ['10.1.2.3:8080', '10.1.2.3:8081'], 'nor an ephemeral node')
  t.equal(first.status().unavailable, undefined, 'the first instance serves on')
  noSecretLogged(t, lines, 'starts and refusals')
})

t.test('zookeeper source, a tree made open before auth: an instance that cannot read a live peer refuses rather than skip its clock check', async (t) => {
  const name = await treeName(t)
  // Java Leaf (or Leaf-TS without auth) made the folders, open; then an instance with auth
  // registered in them, and runs.
  const before = await start(t, instanceConfig(name, {}))
  await before.close()
  const authed = await start(t, instanceConfig(name, { 'leaf.snowflake.zk.auth': AUTH, 'leaf.snowflake.port': 8081 }))
  t.equal(authed.workerId, 1)
  // A new instance without auth lists the open folders, but cannot read its peer's ephemeral node.
  const none = await refusal(instanceConfig(name, { 'leaf.snowflake.port': 8082 }))
  isAuthRefusal(t, none, 'a peer it cannot read')
  const owner = await client(t, AUTH)
  t.same((await zk.getChildren(owner, `/snowflake/${name}/forever`)).sort(), ['10.1.2.3:8080-0000000000', '10.1.2.3:8081-0000000001'], 'no worker id made for it')
})

t.test('zookeeper source: ZooKeeper refusing the authentication (AUTH_FAILED) refuses the start', async (t) => {
  const name = await treeName(t)
  // The key takes digest:user:password only; an unknown scheme is how ZooKeeper's AUTH_FAILED is reached.
  const err = await acquireWorkerLease({
    name,
    zkAddress: TEST_ZK,
    zkAuth: `nosuch:${USER}:${PASSWORD}`,
    ip: '10.1.2.3',
    port: 8080,
    staticWorkerId: 0,
    cacheDir: tempDir('leaf-cache-'),
    heartbeatIntervalMs: 3000,
    maxClockDriftMs: 5000,
    zkConnectTimeoutMs: 3000,
    zkSessionTimeoutMs: 4000,
    clock: Date.now,
    logger: silentLogger,
  }).then(async (lease) => {
    await lease.close()
    return new Error('started')
  }, (e: unknown) => e as Error)
  isAuthRefusal(t, err, 'AUTH_FAILED', ['AUTH_FAILED'])
})

t.test('zookeeper source started from its cache: once ZooKeeper answers, another identity stops issuing with the line', async (t) => {
  const name = await treeName(t)
  const cacheDir = tempDir('leaf-cache-')
  // An instance with auth leased worker id 0 and wrote the cache file, then stopped.
  const first = await start(t, instanceConfig(name, { 'leaf.snowflake.zk.auth': AUTH, 'leaf.snowflake.cache.dir': cacheDir }))
  t.equal(first.workerId, 0)
  await first.close()
  await sleep(10) // past the cache file's last millisecond
  for (const [what, auth, part] of [['no auth', '', 'NO_AUTH'], ['another password', WRONG, 'NO_AUTH'], ['AUTH_FAILED', `nosuch:${USER}:${PASSWORD}`, 'AUTH_FAILED']] as const) {
    // Its restart with another identity, while ZooKeeper is out of reach: the cached worker id serves.
    const proxy = await zookeeperProxy(t)
    proxy.block()
    const { logger, lines } = captureLogger()
    const lease = await acquireWorkerLease({
      name,
      zkAddress: `127.0.0.1:${proxy.port}`,
      zkAuth: auth,
      ip: '10.1.2.3',
      port: 8080,
      staticWorkerId: 0,
      cacheDir,
      heartbeatIntervalMs: 300,
      maxClockDriftMs: 5000,
      zkConnectTimeoutMs: 500,
      zkSessionTimeoutMs: 4000,
      clock: Date.now,
      logger,
    })
    t.teardown(() => lease.close())
    t.equal(lease.status().source, 'cache', `${what}: started from the cache file`)
    t.equal(lease.status().unavailable, undefined, `${what}: issuing`)
    // ZooKeeper answers: the cached worker id cannot be confirmed by this identity.
    proxy.unblock()
    await until(() => lease.status().unavailable !== undefined, 10_000)
    const why = lease.status().unavailable ?? ''
    t.match(why, part, `${what}: stopped issuing on ${part}`)
    t.match(why, /set leaf\.snowflake\.zk\.auth|give it as digest:user:password/, `${what}: naming the key and the fix`)
    t.equal(lease.issuableUntil, -Infinity, `${what}: nothing issuable`)
    noSecretLogged(t, lines, what)
    await lease.close()
  }
})

t.test('zookeeper-lease with auth: its nodes are the identity\'s; the same identity shares the pool; any other is refused at once', async (t) => {
  const name = await treeName(t)
  const { logger, lines } = captureLogger()
  const lease = (values: Record<string, string | number>) => instanceConfig(name, { 'leaf.snowflake.worker-id.source': 'zookeeper-lease', ...values })
  const first = await start(t, lease({ 'leaf.snowflake.zk.auth': AUTH }), logger)
  const second = await start(t, lease({ 'leaf.snowflake.zk.auth': AUTH, 'leaf.snowflake.port': 8081 }), logger)
  t.same([first.workerId, second.workerId], [0, 1], 'two instances of the identity: two worker ids')
  const base = `/snowflake/${name}`
  await onlyAuthReads(t, [base, `${base}/lease`, `${base}/lease/holders`, `${base}/lease/holders/0`, `${base}/lease/holders/1`,
    `${base}/lease/issued`, `${base}/lease/issued/0`, `${base}/lease/issued/1`, `${base}/layout`])

  for (const [what, values, parts] of [
    ['another password', { 'leaf.snowflake.zk.auth': WRONG, 'leaf.snowflake.port': 8082 }, [`user "${USER}"`, base]],
    ['no auth', { 'leaf.snowflake.port': 8083 }, ['leaf.snowflake.zk.auth is not set', base]],
  ] as const) {
    const started = performance.now()
    const err = await refusal(lease(values), logger)
    isAuthRefusal(t, err, what, [...parts])
    // Not after the TTL's retries: a refusal is not a store failure to wait out.
    t.ok(performance.now() - started < 5000, `${what}: refused at once (${Math.round(performance.now() - started)} ms)`)
  }
  const owner = await client(t, AUTH)
  t.same((await zk.getChildren(owner, `${base}/lease/holders`)).sort(), ['0', '1'], 'no id held by the refused instances')
  noSecretLogged(t, lines, 'starts and refusals')
})

t.test('zookeeper-lease, a pool made open before auth: an id whose record it cannot read is never taken', async (t) => {
  const name = await treeName(t)
  const lease = (values: Record<string, string | number>) => instanceConfig(name, { 'leaf.snowflake.worker-id.source': 'zookeeper-lease', ...values })
  // An instance without auth made the folders, open (leasing id 5); then an instance with auth
  // leased id 0, recorded its last millisecond in issued/0 (its identity's alone) and stopped.
  const before = await start(t, lease({ 'leaf.snowflake.worker-id.min': 5 }))
  t.equal(before.workerId, 5)
  await before.close()
  const authed = await start(t, lease({ 'leaf.snowflake.zk.auth': AUTH }))
  t.equal(authed.workerId, 0)
  await authed.close()
  const owner = await client(t, AUTH)
  t.same(await aclOfNode(owner, `/snowflake/${name}/lease/issued/0`), [['digest', DIGEST_ID, zookeeper.Permission.ALL]], 'issued/0 is the identity\'s')
  // Without auth, the free id 0 cannot be taken: its previous holder's last millisecond cannot be read.
  const started = performance.now()
  const err = await refusal(lease({}))
  isAuthRefusal(t, err, 'an unreadable record')
  t.ok(performance.now() - started < 5000, `refused at once (${Math.round(performance.now() - started)} ms)`)
  t.same(await zk.getChildren(owner, `/snowflake/${name}/lease/holders`), [], 'no id held')
})

t.test('zookeeper-lease store: AUTH_FAILED refuses the start', async (t) => {
  const name = await treeName(t)
  const err = await createZookeeperLeaseStore({ address: TEST_ZK, name, ttlMs: 9000, connectTimeoutMs: 3000, auth: `nosuch:${USER}:${PASSWORD}`, logger: silentLogger, layout: LEAF })
    .then(async (pool) => {
      await pool.close()
      return new Error('created')
    }, (e: unknown) => e as Error)
  isAuthRefusal(t, err, 'AUTH_FAILED', ['AUTH_FAILED'])
})

t.test('a persistent node created by zk.create with auth is the identity\'s', async (t) => {
  const name = await treeName(t)
  const c = await client(t, AUTH)
  await zk.mkdirp(c, `/snowflake/${name}`)
  await zk.create(c, `/snowflake/${name}/x`, 'data', CreateMode.PERSISTENT)
  await onlyAuthReads(t, [`/snowflake/${name}/x`])
})
