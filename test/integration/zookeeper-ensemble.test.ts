import t, { type Test } from 'tap'
import type { ResolvedConfig } from '../../src/config/resolve-config.js'
import { isLeafError } from '../../src/errors.js'
import { startSnowflakeMode, type SnowflakeMode } from '../../src/modes/snowflake-mode.js'
import { fenceMarginMs, type ClaimResult } from '../../src/snowflake/worker-id/recyclable/recyclable-lease-options.js'
import { connectZookeeper, closeZookeeper, ownerOf, zk } from '../../src/snowflake/worker-id/zookeeper-client.js'
import { sleep, waitUntil } from '../fault/services.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { ZooKeeperEnsemble } from '../helpers/zookeeper-ensemble.js'
import { uniqueName } from '../helpers/zookeeper.js'
import { channels, type LeaseClaimMessage, type LeaseLostMessage } from '../../src/channels.js'

// Both ZooKeeper worker-id sources against a real 3-node ensemble, in this process, through the
// server's own snowflake mode (the lease, and the generator that asks it before every ID):
//   zookeeper       Leaf's own: a persistent sequential node per ip:port, an ephemeral node
//                   while alive, heartbeats. Documented (docs/snowflake-mode.md): losing
//                   ZooKeeper does not stop it; the ephemeral node keeps a second instance of the
//                   same ip:port out.
//   zookeeper-lease a pool of leased ids; the holder fences itself TTL - margin after its last
//                   confirmed renewal was sent, before ZooKeeper can free the id
//                   (docs/worker-ids.md, properties 3 and 4).
// "May issue" is what the generator checks, so it is probed by asking the generator for an ID
// every PROBE_MS: the lease's check(ms) and issuableUntil, never a copy of them.

const TTL_MS = 4000
const HEARTBEAT_MS = 500
const PROBE_MS = 5

const ensemble = await ZooKeeperEnsemble.create({ size: 3, tickTimeMs: 200 })
t.teardown(() => ensemble.stop({ removeDir: t.passing() }))
const startedAt = performance.now()
await ensemble.start()
t.comment(`ensemble of ${ensemble.size} up in ${Math.round(performance.now() - startedAt)} ms: ${ensemble.address} (pids ${ensemble.nodes.map((n) => n.pid).join(', ')}; ${ensemble.dir})`)

type Source = 'zookeeper' | 'zookeeper-lease'

function sourceConfig (source: Source, name: string, address: string): ResolvedConfig {
  return testConfig({
    'leaf.name': name,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker-id.source': source,
    'leaf.snowflake.zk.address': address,
    'leaf.snowflake.zk.connect-timeout-ms': 5000,
    'leaf.snowflake.zk.session-timeout-ms': TTL_MS,
    'leaf.snowflake.lease.ttl-ms': TTL_MS,
    'leaf.snowflake.heartbeat-interval-ms': HEARTBEAT_MS,
    'leaf.snowflake.cache.dir': tempDir('leaf-cache-'),
    'leaf.snowflake.ip': '10.1.2.3',
    'leaf.snowflake.port': 8080,
  })
}

interface Sample {
  /** Date.now() when the ID was asked for (the clock of the lease's own figures). */
  at: number
  /** performance.now() at the same moment (the clock of the ensemble's figures). */
  mono: number
  ok: boolean
  code: string | undefined
  workerId: number
  /** The lease's own estimate of its end (recyclable sources), as the status says. */
  leaseEnd: number | undefined
  connected: boolean
  lastHeartbeat: number | undefined
}

/** One instance of a source, its generator asked for an ID every PROBE_MS. */
class Holder {
  readonly samples: Sample[] = []
  readonly claims: ClaimResult[] = []
  readonly ids = new Set<bigint>()
  /** IDs whose worker field is not the lease's worker id at the time. */
  foreign = 0
  lost = 0
  private unsubscribe = () => {}
  private timer: NodeJS.Timeout | undefined
  private pending = false

  private constructor (readonly source: Source, readonly config: ResolvedConfig, readonly mode: SnowflakeMode) {}

  static async start (source: Source, name: string, address: string): Promise<Holder> {
    const config = sourceConfig(source, name, address)
    const box: { holder?: Holder } = {}
    const claims: ClaimResult[] = []
    // Only the recyclable source publishes claims; one holder of it runs at a time.
    const leaseAddress = `${config.snowflake.ip}:${config.snowflake.port}`
    const onClaim = (m: LeaseClaimMessage) => { if (m.address === leaseAddress) (box.holder?.claims ?? claims).push(m.result) }
    const onLost = (m: LeaseLostMessage) => { if (m.address === leaseAddress && box.holder !== undefined) box.holder.lost++ }
    channels.leaseClaim.subscribe(onClaim)
    channels.leaseLost.subscribe(onLost)
    const mode = await startSnowflakeMode(config, silentLogger)
    const holder = new Holder(source, config, mode)
    holder.unsubscribe = () => {
      channels.leaseClaim.unsubscribe(onClaim)
      channels.leaseLost.unsubscribe(onLost)
    }
    holder.claims.push(...claims)
    box.holder = holder
    holder.timer = setInterval(() => holder.probe(), PROBE_MS)
    return holder
  }

  get lease (): SnowflakeMode['lease'] {
    return this.mode.lease
  }

  private record (at: number, mono: number, ok: boolean, err?: unknown): void {
    const status = this.lease.status()
    this.samples.push({
      at,
      mono,
      ok,
      code: err === undefined ? undefined : isLeafError(err) ? err.code : String(err),
      workerId: this.lease.workerId,
      leaseEnd: status.leaseExpiresAt,
      connected: status.zookeeperConnected,
      lastHeartbeat: status.lastHeartbeat,
    })
  }

  private take (id: bigint): void {
    this.ids.add(id)
    if (this.mode.generator.decode(id).workerId !== this.lease.workerId) this.foreign++
  }

  probe (): void {
    if (this.pending) return
    const at = Date.now()
    const mono = performance.now()
    try {
      const id = this.mode.generator.next()
      if (typeof id === 'bigint') {
        this.take(id)
        this.record(at, mono, true)
        return
      }
      // The clock is waited out (a restart window): the answer comes later.
      this.pending = true
      id.then((v) => { this.take(v); this.record(at, mono, true) }, (err: unknown) => this.record(at, mono, false, err))
        .finally(() => { this.pending = false })
    } catch (err) {
      this.record(at, mono, false, err)
    }
  }

  /** The samples taken at or after `from` (Date.now()) and before `to`. */
  between (from: number, to = Infinity): Sample[] {
    return this.samples.filter((s) => s.at >= from && s.at < to)
  }

  /** The longest time (ms) between two samples that could issue, from `from` to `to`. */
  longestGap (from: number, to = Infinity): number {
    const ok = this.between(from, to).filter((s) => s.ok)
    let gap = 0
    for (let i = 1; i < ok.length; i++) gap = Math.max(gap, (ok[i] as Sample).at - (ok[i - 1] as Sample).at)
    return gap
  }

  last (): Sample | undefined {
    return this.samples.at(-1)
  }

  async close (): Promise<void> {
    clearInterval(this.timer)
    await this.mode.close()
    this.unsubscribe()
  }
}

/** What ZooKeeper holds of one leaf.name: both sources' nodes, read by a client of its own. */
interface Tree {
  forever: string[]
  temporary: { owner: string, timestamp: number } | undefined
  holders: string[]
  holder: { owner: string, token: unknown } | undefined
  issued: { issuedUntil: number, by: unknown } | undefined
}

async function readTree (name: string, address: string, workerId: number): Promise<Tree> {
  const client = await connectZookeeper(address, 10_000, 5000)
  try {
    const base = `/snowflake/${name}`
    const temporary = await zk.getWithStat(client, `${base}/temporary/10.1.2.3:8080`)
    const holder = await zk.getWithStat(client, `${base}/lease/holders/${workerId}`)
    const issued = await zk.getWithStat(client, `${base}/lease/issued/${workerId}`)
    const json = (data: Buffer | undefined) => JSON.parse(String(data)) as Record<string, unknown>
    return {
      forever: (await zk.getChildren(client, `${base}/forever`)).sort(),
      temporary: temporary && { owner: ownerOf(temporary.stat), timestamp: json(temporary.data).timestamp as number },
      holders: (await zk.getChildren(client, `${base}/lease/holders`)).sort(),
      holder: holder && { owner: ownerOf(holder.stat), token: json(holder.data).owner },
      issued: issued && { issuedUntil: json(issued.data).issuedUntil as number, by: json(issued.data).by },
    }
  } finally {
    await closeZookeeper(client)
  }
}

const NO_SESSION = '0x0000000000000000'

/** The tree both holders of `name` should have left: one forever node, one holder node, both owned by a live session. */
function checkTree (t: Test, tree: Tree, zkHolder: Holder, leaseHolder: Holder): void {
  t.same(tree.forever, [`10.1.2.3:8080-${String(zkHolder.lease.workerId).padStart(10, '0')}`], 'zookeeper: one forever node, with its worker id')
  t.ok(tree.temporary !== undefined && tree.temporary.owner !== NO_SESSION, 'zookeeper: its ephemeral node is held by a session')
  t.same(tree.holders, [String(leaseHolder.lease.workerId)], 'zookeeper-lease: one holder node, for its worker id')
  t.ok(tree.holder !== undefined && tree.holder.owner !== NO_SESSION && tree.holder.token === tree.issued?.by, 'zookeeper-lease: the holder node is ephemeral, and issued/<id> was written by its claim')
}

/** Both sources on `address`, closed (with the ensemble whole again, so their sessions can end) when `t` ends. */
async function startBoth (t: Test, name: string, address: string): Promise<[Holder, Holder]> {
  const zkHolder = await Holder.start('zookeeper', name, address)
  const leaseHolder = await Holder.start('zookeeper-lease', name, address)
  t.teardown(async () => {
    for (const node of ensemble.nodes) if (!node.running) ensemble.startNode(node.index)
    await ensemble.waitForQuorum({ nodes: ensemble.size })
    await zkHolder.close()
    await leaseHolder.close()
  })
  return [zkHolder, leaseHolder]
}

/** The ids each holder issued are distinct and carry its worker id. */
function checkIds (t: Test, holder: Holder): void {
  const issued = holder.samples.filter((s) => s.ok).length
  t.equal(holder.ids.size, issued, `${holder.source}: ${issued} IDs issued, all distinct`)
  t.equal(holder.foreign, 0, `${holder.source}: every ID carries the lease's worker id`)
}

t.test('a: the leader is killed; both holders keep their worker ids and keep issuing through the re-election', async (t) => {
  const name = uniqueName()
  const [zkHolder, leaseHolder] = await startBoth(t, name, ensemble.address)
  const ttl = leaseHolder.config.snowflake.leaseTtlMs
  const heartbeat = leaseHolder.config.snowflake.heartbeatIntervalMs
  const window = ttl - fenceMarginMs(ttl)
  t.same(leaseHolder.claims, ['claimed'])
  await sleep(2 * heartbeat)
  const ids = { zookeeper: zkHolder.lease.workerId, lease: leaseHolder.lease.workerId }
  const before = await readTree(name, ensemble.address, ids.lease)
  checkTree(t, before, zkHolder, leaseHolder)

  const leader = await ensemble.leader()
  if (leader === undefined) throw new Error('no leader')
  const atKill = { zk: zkHolder.lease.issuableUntil, leaseEnd: leaseHolder.lease.status().leaseExpiresAt ?? 0, lease: leaseHolder.lease.issuableUntil }
  const killAt = Date.now()
  const killMono = performance.now()
  await ensemble.stopNode(leader)
  const quorumMono = await ensemble.waitForQuorum()
  const quorumAt = killAt + Math.round(quorumMono - killMono)
  const reElectionMs = Math.round(quorumMono - killMono)
  const newLeader = await ensemble.leader()
  t.comment(`leader node ${leader + 1} SIGKILLed; node ${(newLeader ?? -1) + 1} leads a quorum again after ${reElectionMs} ms`)
  t.not(newLeader, leader)
  // The premise: an election this short fits in the lease's window with a heartbeat to spare.
  t.ok(reElectionMs < window - heartbeat, `re-election (${reElectionMs} ms) shorter than the lease window less a heartbeat (${window - heartbeat} ms)`)

  // Past the point where a lease renewed last before the kill would have fenced (its window),
  // and a whole TTL past the re-election.
  await sleep(Math.max(killAt + window, quorumAt + ttl) - Date.now())
  const endAt = Date.now()

  for (const holder of [zkHolder, leaseHolder]) {
    const during = holder.between(killAt, endAt)
    const failed = during.filter((s) => !s.ok)
    const gap = holder.longestGap(killAt, endAt)
    t.comment(`${holder.source}: ${during.length} probes from the kill on, ${failed.length} refused; longest gap in issuing ${gap} ms`)
    t.same(failed.map((s) => s.code), [], `${holder.source}: never stopped issuing`)
    t.ok(during.length > 0 && during.every((s) => s.workerId === holder.lease.workerId), `${holder.source}: the same worker id throughout`)
    t.ok((holder.last()?.lastHeartbeat ?? 0) > quorumAt, `${holder.source}: written to ZooKeeper again after the re-election`)
    t.equal(holder.lease.status().zookeeperConnected, true, `${holder.source}: connected again`)
  }
  t.equal(zkHolder.lease.workerId, ids.zookeeper)
  t.equal(leaseHolder.lease.workerId, ids.lease)
  t.equal(leaseHolder.lost, 0, 'zookeeper-lease: never fenced')
  t.same(leaseHolder.claims, ['claimed'], 'zookeeper-lease: no claim again')
  t.ok(zkHolder.lease.issuableUntil > atKill.zk, 'zookeeper: issuableUntil moved on')
  t.ok(leaseHolder.lease.issuableUntil > atKill.lease, 'zookeeper-lease: issuableUntil moved on')
  const leaseEnd = leaseHolder.lease.status().leaseExpiresAt ?? 0
  t.ok(leaseEnd > atKill.leaseEnd && leaseEnd > quorumAt + window, `zookeeper-lease: its lease end moved on by ${Math.round(leaseEnd - atKill.leaseEnd)} ms, past the re-election`)

  const after = await readTree(name, ensemble.address, ids.lease)
  checkTree(t, after, zkHolder, leaseHolder)
  t.equal(after.temporary?.owner, before.temporary?.owner, 'zookeeper: the ephemeral node is still its first session\'s: the session survived the election')
  t.ok((after.temporary?.timestamp ?? 0) > quorumAt, 'zookeeper: heartbeats reach the ephemeral node again')
  t.same(after.holder, before.holder, 'zookeeper-lease: the holder node is still its first session\'s, with its first claim\'s token')
  t.ok((after.issued?.issuedUntil ?? 0) > (before.issued?.issuedUntil ?? Infinity), 'zookeeper-lease: issued/<id> raised since')
  checkIds(t, zkHolder)
  checkIds(t, leaseHolder)
})

/**
 * b and c: quorum lost for longer than the lease TTL, then back. `isolate` picks the node that is
 * left alone (it loses its quorum: the others are killed); `address` is what the holders use.
 */
async function quorumLost (t: Test, o: { isolate: (leader: number) => number, address: (isolated: number) => string }): Promise<void> {
  const name = uniqueName()
  const leader = await ensemble.leader()
  if (leader === undefined) throw new Error('no leader')
  const isolated = o.isolate(leader)
  const killed = ensemble.nodes.map((n) => n.index).filter((i) => i !== isolated)
  const address = o.address(isolated)
  const [zkHolder, leaseHolder] = await startBoth(t, name, address)
  const ttl = leaseHolder.config.snowflake.leaseTtlMs
  const heartbeat = leaseHolder.config.snowflake.heartbeatIntervalMs
  const sessionTimeout = zkHolder.config.snowflake.zkSessionTimeoutMs
  const window = ttl - fenceMarginMs(ttl)
  await sleep(2 * heartbeat)
  const ids = { zookeeper: zkHolder.lease.workerId, lease: leaseHolder.lease.workerId }
  const before = await readTree(name, ensemble.address, ids.lease)
  checkTree(t, before, zkHolder, leaseHolder)
  t.comment(`holders on ${address}; node ${isolated + 1} (${isolated === leader ? 'the leader' : 'a follower'}) left alone, nodes ${killed.map((i) => i + 1).join(' and ')} SIGKILLed`)

  const killAt = Date.now()
  await Promise.all(killed.map((i) => ensemble.stopNode(i)))
  const killedAt = Date.now()
  // Quorum lost for longer than the lease TTL (and the session timeout).
  const outageMs = Math.max(ttl, sessionTimeout) + 2 * heartbeat
  t.ok(await waitUntil(async () => await ensemble.mode(isolated) === undefined, outageMs), `node ${isolated + 1} alone stops serving: no quorum`)
  await sleep(killAt + outageMs - Date.now())
  t.equal(await ensemble.mode(isolated), undefined, `node ${isolated + 1} still does not serve ${Date.now() - killAt} ms after the kill`)
  const restartAt = Date.now()

  // zookeeper-lease: stopped no later than its lease's end, before anyone could claim the id.
  const outage = leaseHolder.between(killAt, restartAt)
  const stopIndex = outage.findIndex((s) => !s.ok)
  const stop = outage[stopIndex]
  // The last ID before the stop, and the lease's end as the holder knew it then.
  const lastOk = leaseHolder.samples.filter((s) => s.ok && s.at < (stop?.at ?? -Infinity)).at(-1)
  const leaseEnd = lastOk?.leaseEnd
  t.ok(stop !== undefined && lastOk !== undefined && leaseEnd !== undefined, 'zookeeper-lease: stopped issuing during the outage')
  if (stop === undefined || lastOk === undefined || leaseEnd === undefined) return
  t.comment(`zookeeper-lease: stopped ${stop.at - killAt} ms after the kill (window ${window} ms), ${Math.round(leaseEnd - stop.at)} ms before its lease's end (margin ${fenceMarginMs(ttl)} ms); last ID ${Math.round(leaseEnd - lastOk.at)} ms before it`)
  t.equal(stop.code, 'WORKER_LEASE_LOST', 'zookeeper-lease: refused as a lost lease')
  // (+1: the lease's estimate reads the wall and the monotonic clock a moment apart.)
  t.ok(leaseEnd <= killedAt + ttl + 1, 'zookeeper-lease: no renewal confirmed once the quorum was gone (its lease ends within a TTL of the kill)')
  t.ok(stop.at <= leaseEnd, `zookeeper-lease: stopped ${Math.round(leaseEnd - stop.at)} ms before its lease's end, the earliest another instance could claim the id`)
  t.same(outage.slice(stopIndex).filter((s) => s.ok).map((s) => s.at), [], 'zookeeper-lease: issued nothing more while the quorum was gone')
  t.ok(leaseHolder.lost >= 1, 'zookeeper-lease: the fence published (leaf-ts:worker-id:lost)')

  // zookeeper: Leaf's rule, documented: it keeps serving with its worker id.
  const zkOutage = zkHolder.between(killAt, restartAt)
  t.comment(`zookeeper: ${zkOutage.length} probes during the outage, ${zkOutage.filter((s) => !s.ok).length} refused; longest gap in issuing ${zkHolder.longestGap(killAt, restartAt)} ms`)
  t.same(zkOutage.filter((s) => !s.ok).map((s) => s.code), [], 'zookeeper: kept issuing with its worker id (the lease is its own; no other instance can take it without ZooKeeper)')
  t.ok(zkOutage.some((s) => !s.connected), 'zookeeper: saw ZooKeeper go')

  // The two come back: both resume with no restart.
  const restartMono = performance.now()
  for (const i of killed) ensemble.startNode(i)
  const quorumMono = await ensemble.waitForQuorum()
  const quorumAt = restartAt + Math.round(quorumMono - restartMono)
  t.comment(`nodes ${killed.map((i) => i + 1).join(' and ')} restarted: a quorum again after ${Math.round(quorumMono - restartMono)} ms (outage ${quorumAt - killAt} ms)`)
  // A client finds a serving node within a session timeout (its handshake guard, zookeeper-client.ts),
  // and renews at the next heartbeat; one more heartbeat for a beat that began just before.
  const resumeBoundMs = Math.max(ttl, sessionTimeout) + 2 * heartbeat
  await waitUntil(() => leaseHolder.between(quorumAt).some((s) => s.ok) && (zkHolder.last()?.lastHeartbeat ?? 0) > quorumAt, resumeBoundMs + 1000, 5)
  const resumedAt = leaseHolder.between(quorumAt).find((s) => s.ok)?.at
  const zkBackAt = zkHolder.between(quorumAt).find((s) => (s.lastHeartbeat ?? 0) > quorumAt)?.lastHeartbeat
  t.ok(resumedAt !== undefined && resumedAt - quorumAt <= resumeBoundMs, `zookeeper-lease: issues again ${resumedAt === undefined ? 'never' : `${resumedAt - quorumAt} ms`} after the quorum came back (bound ${resumeBoundMs} ms)`)
  t.ok(zkBackAt !== undefined && zkBackAt - quorumAt <= resumeBoundMs, `zookeeper: heartbeats reach ZooKeeper again ${zkBackAt === undefined ? 'never' : `${zkBackAt - quorumAt} ms`} after the quorum came back (bound ${resumeBoundMs} ms)`)
  t.comment(`zookeeper-lease: resumed ${resumedAt === undefined ? '-' : resumedAt - quorumAt} ms after the quorum, ${resumedAt === undefined ? '-' : resumedAt - stop.at} ms after it stopped; claims ${JSON.stringify(leaseHolder.claims)}; worker id ${ids.lease} -> ${leaseHolder.lease.workerId}`)
  await sleep(2 * heartbeat)
  const settledAt = Date.now()
  if (resumedAt !== undefined) {
    t.same(leaseHolder.between(resumedAt, settledAt).filter((s) => !s.ok).map((s) => s.code), [], 'zookeeper-lease: keeps issuing once resumed')
  }
  t.same(zkHolder.between(quorumAt, settledAt).filter((s) => !s.ok).map((s) => s.code), [], 'zookeeper: never stopped')
  t.equal(zkHolder.lease.workerId, ids.zookeeper, 'zookeeper: the same worker id')
  t.equal(leaseHolder.lease.status().unavailable, undefined, 'zookeeper-lease: holds a lease again')

  const after = await readTree(name, ensemble.address, leaseHolder.lease.workerId)
  checkTree(t, after, zkHolder, leaseHolder)
  t.equal(after.temporary?.owner, before.temporary?.owner, 'zookeeper: its ephemeral node stayed its first session\'s: it was never free for another instance of this ip:port')
  if (leaseHolder.lease.workerId === ids.lease) {
    t.same(leaseHolder.claims, ['claimed'], 'zookeeper-lease: renewed its first claim (the session outlived the outage), no claim again')
    t.same(after.holder, before.holder, 'zookeeper-lease: its holder node stayed its first session\'s')
  }
  t.ok((after.issued?.issuedUntil ?? 0) > stop.at, 'zookeeper-lease: issued/<id> recorded past the stop')
  checkIds(t, zkHolder)
  checkIds(t, leaseHolder)
}

t.test('b: quorum lost (2 of 3 nodes killed) for longer than the lease TTL: the lease holder stops before its lease ends, and both resume when the nodes return', async (t) => {
  // The leader and one follower are killed: a follower is left alone.
  await quorumLost(t, { isolate: (leader) => (leader + 1) % ensemble.size, address: () => ensemble.address })
})

t.test('c: holders that reach only one node, cut off from the other two, behave as in b', async (t) => {
  // The followers are killed: the leader is left alone, and the holders know no other node.
  await quorumLost(t, { isolate: (leader) => leader, address: (isolated) => ensemble.addressOf(isolated) })
})
