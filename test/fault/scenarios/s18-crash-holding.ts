import { join } from 'node:path'
import { fmtMs, metrics, scenarioSetup, startLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { HttpClient, backgroundLoad, batchMix } from '../load.js'
import { sleep, waitUntil } from '../services.js'

const CLIENTS = 8
const RATE = 1000
const TABLE_STEP = 500
const BUFFER_SECONDS = 30

/**
 * 18. A crash gives nothing back. An instance holding a chain of segments (a 30 s horizon)
 * under load is SIGKILLed: max_id is what its last reservation left, nothing was returned.
 * The next instance, started with the same warm-start file, issues only IDs above every ID
 * the dead one issued, at or above max_id at the kill. The scenario ends with a SIGTERM of
 * the second instance, which gives its own tail back (leaf_segment_ids_returned_total).
 */
export async function crashHolding (suite: Suite, report: Report): Promise<void> {
  const setup = await scenarioSetup(suite, 's18', { step: TABLE_STEP })
  const { tag, name } = setup
  const options = { ...setup.options, env: { LEAF_SEGMENT_BUFFER_SECONDS: String(BUFFER_SECONDS), LEAF_SEGMENT_STATE_FILE: join(suite.dir, `${name}.json`) } }
  const lives = [{ max: -1n, min: -1n, n: 0 }, { max: -1n, min: -1n, n: 0 }]
  const state = { leaf: await startLeaf(suite, 'life1', options), life: 0, killed: false }
  const probe = new HttpClient()
  const batch = batchMix(10, 10)
  report.expectedWhat = 'cut by SIGKILL'

  const load = backgroundLoad({ clients: CLIENTS, ratePerSecond: RATE, maxMs: 120_000 }, async (client, c, n) => {
    const { leaf, life } = state
    if (state.killed && life === 0) return sleep(10)
    const cut = (a: { status: number }) => life === 0 && state.killed && a.status === 0
    const { ids } = await takeIds(report, client, leaf.url, 'segment', tag, batch(n), `c${c}-${life}`, cut)
    const l = lives[life] as { max: bigint, min: bigint, n: number }
    for (const id of ids ?? []) {
      if (l.min < 0n || id < l.min) l.min = id
      if (id > l.max) l.max = id
      l.n++
    }
  })

  const cache = async () => {
    const a = await probe.get(`${state.leaf.url}/api/cache`)
    return (JSON.parse(a.body) as { key: string, bufferSeconds: number | null, segments: unknown[], bufferedIds: number }[]).find((v) => v.key === tag)
  }
  await waitUntil(async () => ((await cache())?.segments.length ?? 0) >= 3, 20_000, 100)
  const held = await cache()
  state.killed = true
  const killedAt = performance.now()
  state.leaf.proc.kill('SIGKILL')
  await state.leaf.exited
  const maxAtKill = await suite.db.maxId(tag)
  await sleep(500)
  const maxAfter = await suite.db.maxId(tag)
  const second = await startLeaf(suite, 'life2', options)
  state.leaf = second
  state.life = 1
  const restartMs = performance.now() - killedAt
  await sleep(3000)
  await load.stop()
  const [one, two] = lives as [typeof lives[0], typeof lives[0]]
  const returnedBefore = (await metrics(probe, second.url)).get(`leaf_segment_ids_returned_total{key="${tag}"}`) ?? 0
  const maxBeforeTerm = await suite.db.maxId(tag)
  const code = await second.stop('SIGTERM')
  const maxAfterTerm = await suite.db.maxId(tag)
  probe.close()

  report.check(held !== undefined && held.segments.length >= 3, `the first life held ${held?.segments.length} segments at the kill: the scenario needs a chain`)
  report.check(maxAfter === maxAtKill, `max_id moved after the kill (${maxAtKill} -> ${maxAfter}): something was returned or reserved by a dead process`)
  report.check(one.n > 0 && two.n > 0, `IDs per life: ${one.n}, ${two.n}`)
  report.check(two.min > one.max, `the second life's lowest ID ${two.min} is not above the first life's highest ${one.max}`)
  report.check(two.min >= maxAtKill, `the second life's lowest ID ${two.min} is below max_id at the kill (${maxAtKill})`)
  report.check(returnedBefore === 0, `leaf_segment_ids_returned_total ${returnedBefore} before any graceful stop`)
  report.check(code === 0, `SIGTERM of the second life exited ${code}`)
  report.check(maxAfterTerm < maxBeforeTerm, `the second life's SIGTERM gave nothing back (max_id ${maxBeforeTerm} -> ${maxAfterTerm}) though it reserved last`)
  report.note(`the first life held ${held?.bufferedIds} IDs in ${held?.segments.length} segments (${held?.bufferSeconds} s) at the SIGKILL; max_id ${maxAtKill} at the kill and ${maxAfter} after; ` +
    `life 1 issued ${one.n} IDs up to ${one.max}, life 2 ${two.n} from ${two.min}, listening ${fmtMs(restartMs)} after the kill; ` +
    `its SIGTERM returned max_id ${maxBeforeTerm} -> ${maxAfterTerm}`)
  report.recover = `lost ${maxAtKill - one.max - 1n} IDs at the kill; next IDs from ${two.min - one.max} above`
}
