import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { readWorkerCache } from '../../../src/snowflake/worker-id/cache-file.js'
import { fmtMs, scenarioSetup, startLeaf, takeIds, zkInspector, type Leaf, type Report, type Suite } from '../harness.js'
import { backgroundLoad, batchMix } from '../load.js'
import { sleep } from '../services.js'

const CLIENTS = 8
const RATE = 2000
const HEARTBEAT_MS = 3000
const STEP = 1000

interface Life {
  segment: { min: bigint, max: bigint, n: number }
  snowflake: { min: bigint, max: bigint, n: number }
  workerIds: Set<number>
  /** performance.now() of its first ID of each mode. */
  first: { segment?: number, snowflake?: number }
}

function newLife (): Life {
  const range = () => ({ min: BigInt(Number.MAX_SAFE_INTEGER) ** 2n, max: -1n, n: 0 })
  return { segment: range(), snowflake: range(), workerIds: new Set(), first: {} }
}

/**
 * 6. An instance with both modes is killed (SIGKILL) under load and started again at once
 * with the same identity. Across the two lives: no duplicate, each client's IDs keep
 * increasing; the second life's segment IDs come from new segments only (at or past max_id
 * at the kill) and its snowflake IDs respect the restart window (not before the last stored
 * time + one heartbeat). Requests cut by the kill are counted apart (they got no answer).
 */
export async function killRestart (suite: Suite, report: Report): Promise<void> {
  const { name, tag, cacheDir, options } = await scenarioSetup(suite, 's6', { step: STEP, snowflake: { port: 7601, heartbeatMs: HEARTBEAT_MS } })
  const inspector = await zkInspector(suite.zk)
  try {
    const lives = [newLife(), newLife()] as const
    const state: { leaf: Leaf, life: 0 | 1, killedAt?: number } = { leaf: await startLeaf(suite, 'life1', options), life: 0 }
    let restarted: (leaf: Leaf) => void = () => {}
    const secondLife = new Promise<Leaf>((resolve) => { restarted = resolve })
    const batch = batchMix(10, 20)
    report.expectedWhat = 'cut by SIGKILL'

    const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE }, async (client, c, n) => {
      const { leaf, life } = state
      const mode = n % 2 === 0 ? 'segment' : 'snowflake'
      // Only a request to the killed process, answered after the kill with no HTTP answer.
      const cut = (a: { status: number }) => life === 0 && state.killedAt !== undefined && a.status === 0
      const { answer, ids } = await takeIds(report, client, leaf.url, mode, mode === 'segment' ? tag : 'k', batch(n), `c${c}`, cut)
      if (ids === undefined) {
        if (cut(answer)) await secondLife
        return
      }
      const l = lives[life]
      const r = l[mode]
      for (const id of ids) {
        if (id < r.min) r.min = id
        if (id > r.max) r.max = id
        if (mode === 'snowflake') l.workerIds.add(decodeSnowflakeId(id).workerId)
      }
      r.n += ids.length
      l.first[mode] ??= answer.sentAt + answer.ms
    })

    await sleep(3000 + Math.random() * 2000)
    state.killedAt = performance.now()
    state.leaf.proc.kill('SIGKILL')
    await state.leaf.exited
    // Read what the dead process left before the new one overwrites it.
    const cached = readWorkerCache(cacheDir)
    const forever = await inspector.children(`/snowflake/${name}/forever`)
    const stored = forever[0] === undefined ? undefined : await inspector.data(`/snowflake/${name}/forever/${forever[0]}`)
    const maxAtKill = await suite.db.maxId(tag)
    const second = await startLeaf(suite, 'life2', options)
    const restartMs = performance.now() - state.killedAt
    state.leaf = second
    state.life = 1
    restarted(second)
    await sleep(HEARTBEAT_MS + 1500)
    const result = await load.stop()

    const [one, two] = lives
    const lastStored = Math.max(cached?.lastTimestamp ?? 0, typeof stored?.timestamp === 'number' ? stored.timestamp : 0)
    const windowEnd = lastStored + HEARTBEAT_MS
    report.check(one.segment.n > 0 && one.snowflake.n > 0 && two.segment.n > 0 && two.snowflake.n > 0,
      `IDs per life: segment ${one.segment.n}/${two.segment.n}, snowflake ${one.snowflake.n}/${two.snowflake.n}`)
    report.check(two.segment.min >= maxAtKill, `second life's first segment ID ${two.segment.min} is below max_id at the kill (${maxAtKill}): not a new segment`)
    report.check(two.snowflake.min > one.snowflake.max, `second life's snowflake IDs start at ${two.snowflake.min}, not past the first life's last ${one.snowflake.max}`)
    report.check(lastStored > 0, 'no stored timestamp found (cache file or ZooKeeper node)')
    const firstTs = decodeSnowflakeId(two.snowflake.min).timestamp
    const lastTs = decodeSnowflakeId(one.snowflake.max).timestamp
    report.check(firstTs >= windowEnd, `restart window: second life's first ID at ${firstTs}, before stored ${lastStored} + heartbeat ${HEARTBEAT_MS}`)
    report.check(lastTs < windowEnd, `the first life issued an ID at ${lastTs}, past stored ${lastStored} + one heartbeat: the window would not cover it`)
    report.check(one.workerIds.size === 1 && [...two.workerIds].join() === [...one.workerIds].join(), `worker ids: ${[...one.workerIds]} then ${[...two.workerIds]}`)

    const recoverSegment = two.first.segment === undefined ? undefined : two.first.segment - state.killedAt
    const recoverSnowflake = two.first.snowflake === undefined ? undefined : two.first.snowflake - state.killedAt
    report.note(`${result.requests} requests; killed after ${one.segment.n + one.snowflake.n} IDs, listening again ${fmtMs(restartMs)} after the kill; ` +
      `segment: max_id at the kill ${maxAtKill}, second life from ${two.segment.min}; snowflake: last stored ${lastStored}, last ID of life 1 at ${lastTs} ` +
      `(${lastTs - lastStored} ms after it), first of life 2 at ${firstTs} (${firstTs - windowEnd} ms after the window)`)
    report.recover = `segment ${recoverSegment === undefined ? 'never' : fmtMs(recoverSegment)}, snowflake ${recoverSnowflake === undefined ? 'never' : fmtMs(recoverSnowflake)}`
  } finally {
    await inspector.close()
  }
}
