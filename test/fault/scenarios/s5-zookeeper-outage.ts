import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { SCHEDULING_SLACK_MS, Timeline, fmtMs, metrics, startScenarioLeaf, takeIds, zkInspector, type Report, type Suite, type ZkInspector } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { createProxy } from '../../helpers/tcp-proxy.js'
import { sleep, waitUntil } from '../services.js'

const CLIENTS = 8
const RATE = 2000
const SESSION_TIMEOUT_MS = 2000
const HEARTBEAT_MS = 1000
/** How long ZooKeeper stays down in the first phase: longer than the session timeout. */
const BLINK_MS = 5000
/** Bounds the /metrics scrape loop (every 50 ms: 150 s). */
const MAX_SCRAPES = 3000
/** leaf.segment.wait-timeout-ms (given explicitly, though segment mode is off): the latency bound is this plus SCHEDULING_SLACK_MS. */
const WAIT_TIMEOUT_MS = 3000

/**
 * 5. ZooKeeper stopped (SIGKILL) twice under snowflake load; the instance reaches it through
 * a plain TCP proxy. Phase A: down 5 s, then back: the client reconnects (ZooKeeper restores
 * sessions at start and gives them a full timeout, so the session may survive). Phase B:
 * down, and once back the instance still cannot reach it (proxy closed) until the server
 * has expired the session and deleted the ephemeral node; then the proxy opens. Throughout:
 * no failed request, none slower than the wait timeout + 1 s; leaf_zookeeper_connected goes
 * 1 -> 0 -> 1 each time; the ephemeral node is back, owned by a new session, after the expiry.
 */
export async function zookeeperOutage (suite: Suite, report: Report): Promise<void> {
  const proxy = await createProxy(suite.zk.port)
  let inspector: ZkInspector | undefined
  try {
    const port = 7501
    const { leaf, name } = await startScenarioLeaf(suite, 's5', {
      snowflake: { zk: `127.0.0.1:${proxy.port}`, port, sessionTimeoutMs: SESSION_TIMEOUT_MS, heartbeatMs: HEARTBEAT_MS },
      args: [`--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`],
    })
    const temporary = `/snowflake/${name}/temporary/127.0.0.1:${port}`
    const timeline = new Timeline()
    const scraper = new HttpClient()
    const workerIds = new Set<number>()
    const state = { stop: false }

    // leaf_zookeeper_connected, scraped every 50 ms: its changes in order.
    const connected: number[] = []
    const scrapeErrors: string[] = []
    const scraping = (async () => {
      for (let i = 0; i < MAX_SCRAPES && !state.stop; i++) {
        try {
          const value = (await metrics(scraper, leaf.url)).get('leaf_zookeeper_connected')
          if (value === undefined) scrapeErrors.push('no leaf_zookeeper_connected in /metrics')
          else if (connected[connected.length - 1] !== value) connected.push(value)
        } catch (err) {
          scrapeErrors.push((err as Error).message)
        }
        await sleep(50)
      }
    })()
    const isConnected = (v: number) => () => connected[connected.length - 1] === v

    const batch = batchMix(10, 20)
    const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxRequests: 400_000, maxMs: 150_000 }, async (client, c, n) => {
      const { answer, ids } = await takeIds(report, client, leaf.url, 'snowflake', `k${c}`, batch(n), `c${c}`)
      timeline.add(answer, ids !== undefined, `client ${c} request ${n}`)
      for (const id of ids ?? []) workerIds.add(decodeSnowflakeId(id).workerId)
    })

    await sleep(2000)
    inspector = await zkInspector(suite.zk)
    const owner0 = await inspector.owner(temporary)
    report.check(owner0 !== undefined, `no ephemeral node ${temporary} before the outage`)
    await inspector.close()
    inspector = undefined

    // Phase A: ZooKeeper down for BLINK_MS, then back.
    const downA = performance.now()
    await suite.zk.stop('SIGKILL')
    report.check(await waitUntil(isConnected(0), 10_000), 'phase A: leaf_zookeeper_connected never went to 0')
    await sleep(BLINK_MS - (performance.now() - downA))
    await suite.zk.start()
    const upA = performance.now()
    const reconnectedA = await waitUntil(isConnected(1), 15_000, 10)
    const recoverA = performance.now() - upA
    report.check(reconnectedA, 'phase A: leaf_zookeeper_connected never went back to 1')
    inspector = await zkInspector(suite.zk)
    const ins = inspector
    let ownerA: string | undefined
    report.check(await waitUntil(async () => (ownerA = await ins.owner(temporary)) !== undefined, 10_000), 'phase A: no ephemeral node after ZooKeeper came back')
    await inspector.close()
    inspector = undefined

    // Phase B: down, and unreachable after its restart until the session has expired.
    const downB = performance.now()
    await suite.zk.stop('SIGKILL')
    proxy.block()
    report.check(await waitUntil(isConnected(0), 10_000), 'phase B: leaf_zookeeper_connected never went to 0')
    await sleep(3000 - (performance.now() - downB))
    await suite.zk.start()
    const upB = performance.now()
    inspector = await zkInspector(suite.zk)
    const insB = inspector
    const expired = await waitUntil(async () => await insB.owner(temporary) === undefined, 20_000, 25)
    const expiredMs = performance.now() - upB
    report.check(expired, 'phase B: the session never expired (the ephemeral node stayed)')
    proxy.unblock()
    const openedAt = performance.now()
    let ownerB: string | undefined
    const back = await waitUntil(async () => {
      ownerB = await insB.owner(temporary)
      return ownerB !== undefined && connected[connected.length - 1] === 1
    }, 20_000, 10)
    const recoverB = performance.now() - openedAt
    report.check(back, `phase B: ephemeral node (owner ${ownerB ?? 'none'}) or leaf_zookeeper_connected (${connected.join(',')}) not back within 20 s`)
    report.check(ownerB !== ownerA, 'phase B: the ephemeral node still belongs to the expired session')

    await sleep(2000)
    state.stop = true
    const result = await load.stop()
    const loadEnd = performance.now()
    await scraping
    scraper.close()

    report.check(connected.join(',') === '1,0,1,0,1', `leaf_zookeeper_connected went ${connected.join(' -> ')} (expected 1 -> 0 -> 1 -> 0 -> 1)`)
    report.check(scrapeErrors.length === 0, `/metrics failed ${scrapeErrors.length} times: ${scrapeErrors.slice(0, 3).join(' | ')}`)
    const { slowest } = timeline
    report.check(slowest.ms <= WAIT_TIMEOUT_MS + SCHEDULING_SLACK_MS, `an answer took ${fmtMs(slowest.ms)} (${slowest.what}; bound ${WAIT_TIMEOUT_MS} + ${SCHEDULING_SLACK_MS} ms)`)
    const gap = timeline.largestGap(downA, loadEnd)
    report.check(workerIds.size === 1, `worker ids seen: ${[...workerIds].join(', ')}`)
    report.note(`${result.requests} requests in ${fmtMs(result.ms)}; phase A: ZooKeeper down ${fmtMs(upA - downA)}, connected again ${fmtMs(recoverA)} after its restart, ` +
      `session ${ownerA === owner0 ? 'survived (same owner)' : 'replaced'}; phase B: down ${fmtMs(upB - downB)}, session expired ${fmtMs(expiredMs)} after the restart, ` +
      `node back (new owner) and connected ${fmtMs(recoverB)} after ZooKeeper became reachable; slowest answer ${fmtMs(slowest.ms)} (${slowest.what}), ` +
      `longest time without a successful answer from the first stop ${fmtMs(gap.ms)}`)
    report.recover = `A ${fmtMs(recoverA)}, B ${fmtMs(recoverB)}`
  } finally {
    await inspector?.close()
    await proxy.close()
  }
}
