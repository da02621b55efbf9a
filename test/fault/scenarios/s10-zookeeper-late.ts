import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { checkSlowest, fmtMs, metrics, scenarioSetup, startLeaf, takeIds, type Leaf, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { createProxy } from '../../helpers/tcp-proxy.js'
import { sleep, waitUntil } from '../services.js'

const CONNECT_TIMEOUT_MS = 1000
/** How long ZooKeeper's bytes are held at each start: 0.1, 1.5 and 4 s past the connect timeout. */
const DELAYS_MS = [1100, 2500, 5000]
/** Longer than a reset lasts, so that a reset never costs the session. */
const SESSION_TIMEOUT_MS = 6000
const HEARTBEAT_MS = 1000
/** leaf.segment.wait-timeout-ms's default, which this scenario keeps. */
const SEGMENT_WAIT_TIMEOUT_MS = 3000
const RESETS = 5
/** Each reset: connections cut and refused for this long, then ZooKeeper reachable again. */
const RESET_MS = 150
const RESET_EVERY_MS = 1000
const CLIENTS = 4
const RATE = 400
const RECONNECT_BOUND_MS = 15_000
const EXIT_BOUND_MS = 10_000

/**
 * 10. ZooKeeper answers late, and its connection is reset, under both modes' load. One
 * identity (name, ip:port, cache folder): a first life with ZooKeeper on time leaves the
 * worker-id cache; then one life per delay, each started with ZooKeeper's bytes held by the
 * proxy 0.1 to 4 s past leaf.snowflake.zk.connect-timeout-ms, so the start goes on from the
 * cache and ZooKeeper's answers arrive after it gave up on them; the delay is lifted once
 * they have arrived, then the connection is reset (block and unblock within 200 ms) five
 * times. Passes when the process never dies (it ends only at SIGTERM, with exit 0), serves
 * both modes throughout with no failed request, keeps its worker id, reconnects to ZooKeeper,
 * and no ID repeats.
 */
export async function zookeeperLate (suite: Suite, report: Report): Promise<void> {
  const proxy = await createProxy(suite.zk.port)
  const { tag, options } = await scenarioSetup(suite, 's10', {
    step: 1000,
    snowflake: { zk: `127.0.0.1:${proxy.port}`, port: 8001, sessionTimeoutMs: SESSION_TIMEOUT_MS, heartbeatMs: HEARTBEAT_MS },
    args: [`--leaf.snowflake.zk.connect-timeout-ms=${CONNECT_TIMEOUT_MS}`],
  })
  const workerIds = new Set<number>()
  const reconnects: number[] = []
  const lives: string[] = []
  try {
    // Life 0: ZooKeeper on time. It registers the worker id and writes the cache.
    const first = await startLeaf(suite, 'life0', options)
    const zero = await serve(report, first, tag, async () => {
      report.check(await waitUntil(async () => await zkConnected(first) === 1, RECONNECT_BOUND_MS), 'life 0: never connected to ZooKeeper')
    })
    for (const id of zero.workerIds) workerIds.add(id)
    report.check(zero.death === undefined, `life 0: the process died (${zero.death?.how}): ${zero.death?.why}`)
    await stopped(report, first, 'life 0')

    for (const delay of DELAYS_MS) {
      const life = `delay ${delay} ms`
      proxy.delayMs = delay
      const started = performance.now()
      let leaf: Leaf
      try {
        leaf = await startLeaf(suite, `delay${delay}`, options)
      } catch (err) {
        report.check(false, `${life}: no start: ${firstLine((err as Error).message)}`)
        proxy.delayMs = 0
        continue
      }
      const startMs = performance.now() - started
      const result = await serve(report, leaf, tag, async (dead) => {
        // ZooKeeper's late answers arrive up to twice the delay after the start's request.
        await sleep(2 * delay + 1000 - (performance.now() - started))
        proxy.delayMs = 0
        if (dead()) return
        const lifted = performance.now()
        const connected = await waitUntil(async () => dead() || await zkConnected(leaf) === 1, RECONNECT_BOUND_MS)
        if (dead()) return
        report.check(connected, `${life}: not connected to ZooKeeper within ${fmtMs(RECONNECT_BOUND_MS)} of the delay's end`)
        reconnects.push(performance.now() - lifted)
        for (let i = 0; i < RESETS && !dead(); i++) {
          proxy.block()
          await sleep(RESET_MS)
          proxy.unblock()
          await sleep(RESET_EVERY_MS)
        }
        if (dead()) return
        report.check(await waitUntil(async () => dead() || await zkConnected(leaf) === 1, RECONNECT_BOUND_MS) && !dead(),
          `${life}: not connected to ZooKeeper within ${fmtMs(RECONNECT_BOUND_MS)} of the last reset`)
      })
      proxy.delayMs = 0
      for (const id of result.workerIds) workerIds.add(id)
      if (result.death !== undefined) {
        report.check(false, `${life}: the process died ${fmtMs(result.death.at - started)} after its start (${result.death.how}): ${result.death.why}`)
        continue
      }
      report.check(result.segment > 0 && result.snowflake > 0, `${life}: IDs served: segment ${result.segment}, snowflake ${result.snowflake}`)
      lives.push(`${life}: listening after ${fmtMs(startMs)}, ${result.requests} requests, ${result.segment} segment and ${result.snowflake} snowflake IDs`)
      await stopped(report, leaf, life)
    }
    report.check(workerIds.size === 1, `worker ids seen: ${[...workerIds].join(', ')}`)
    report.note(`${lives.join('; ')}; ZooKeeper connected ${reconnects.map(fmtMs).join(', ')} after each delay ended; ${RESETS} resets of ${RESET_MS} ms per life`)
    report.recover = reconnects.length === 0 ? 'never' : `ZK back within ${fmtMs(Math.max(...reconnects))}`
    // Neither ID path waits on ZooKeeper: a segment request waits for a load at most the wait
    // timeout (the default, 3000 ms), a snowflake one at most the restart window (a heartbeat).
    checkSlowest(report, Math.max(SEGMENT_WAIT_TIMEOUT_MS, HEARTBEAT_MS), 'the longer of leaf.segment.wait-timeout-ms (3000 ms, the default) and the heartbeat')
  } finally {
    await proxy.close()
  }
}

interface Served {
  requests: number
  segment: number
  snowflake: number
  workerIds: Set<number>
  death: { at: number, how: string, why: string } | undefined
}

/** Runs both modes' load on `leaf` while `act` runs; notices the process's death. */
async function serve (report: Report, leaf: Leaf, tag: string, act: (dead: () => boolean) => Promise<void>): Promise<Served> {
  const served: Served = { requests: 0, segment: 0, snowflake: 0, workerIds: new Set(), death: undefined }
  const state = { stop: false }
  leaf.exited.then(() => {
    served.death ??= { at: performance.now(), how: `exit ${leaf.proc.exitCode} ${leaf.proc.signalCode ?? ''}`.trim(), why: crashLine(leaf.output) }
  }, () => {})
  const dead = () => served.death !== undefined && !state.stop
  const batch = batchMix(10, 10)
  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxRequests: 1_000_000, maxMs: 120_000, until: () => served.death !== undefined }, async (client, c, n) => {
    const mode = n % 2 === 0 ? 'segment' : 'snowflake'
    const { ids } = await takeIds(report, client, leaf.url, mode, mode === 'segment' ? tag : `k${c}`, batch(n), `${leaf.label}c${c}`)
    served.requests++
    if (ids === undefined) return
    if (mode === 'segment') served.segment += ids.length
    else {
      served.snowflake += ids.length
      for (const id of ids) served.workerIds.add(decodeSnowflakeId(id).workerId)
    }
  })
  try {
    await act(dead)
    await sleep(500)
  } finally {
    state.stop = true
    await load.stop()
  }
  return served
}

/** SIGTERM, and the process must exit 0 within EXIT_BOUND_MS. */
async function stopped (report: Report, leaf: Leaf, life: string): Promise<void> {
  if (leaf.proc.exitCode !== null || leaf.proc.signalCode !== null) return
  leaf.proc.kill('SIGTERM')
  const code = await Promise.race([leaf.exited, sleep(EXIT_BOUND_MS).then(() => 'timeout' as const)])
  report.check(code === 0, `${life}: SIGTERM ended with ${code === 'timeout' ? `no exit within ${fmtMs(EXIT_BOUND_MS)}` : `exit ${code} ${leaf.proc.signalCode ?? ''}`}`)
}

async function zkConnected (leaf: Leaf): Promise<number | undefined> {
  const client = new HttpClient()
  try {
    return (await metrics(client, leaf.url)).get('leaf_zookeeper_connected')
  } finally {
    client.close()
  }
}

/** What the output says about why the process died: its first error line's message. */
function crashLine (output: string[]): string {
  const line = output.find((l) => /"level":(50|60)|^\S*Error\b/.test(l)) ?? output[output.length - 1] ?? ''
  try {
    const entry = JSON.parse(line) as { msg?: string, err?: { message?: string } }
    return [entry.msg, entry.err?.message].filter((s) => s !== undefined).join(': ').slice(0, 300)
  } catch {
    return line.slice(0, 300)
  }
}

function firstLine (message: string): string {
  return crashLine(message.split('\n')) || message.slice(0, 300)
}
