import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { describe, fmtMs, procStats, startScenarioLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { createRandom } from '../hostile.js'
import { HttpClient, httpClients, runLoad } from '../load.js'
import { sleep } from '../services.js'

const CLIENTS = 16
const RUN_MS = 60_000
const MAX_REQUESTS = 3_000_000
/** Growth is measured from here: the heap has grown to the load by then. */
const WARM_UP_MS = 10_000
const SAMPLE_EVERY_MS = 2_000
/**
 * Stated bounds, from the end of the warm-up to the end of the run. RSS: 32 MB, about a
 * third of the server's working size (~90 MB) and 3 s of a 1 MB-per-second leak. Open
 * descriptors: the 16 client connections plus the pool and ZooKeeper sockets are open at
 * both ends of the window, so any growth past a few is a leak.
 */
const RSS_GROWTH_BOUND_KB = 32 * 1024
const FD_GROWTH_BOUND = 4

/**
 * 9. 60 s of mixed load, unpaced (as fast as the machine goes), on one instance with both
 * modes: segment and snowflake singles and batches, decodes, a /metrics scrape each second.
 * No error; RSS and open file descriptors (/proc/<pid>) no higher at the end than after the
 * warm-up, within the stated bounds.
 */
export async function soak (suite: Suite, report: Report): Promise<void> {
  const { leaf, tag } = await startScenarioLeaf(suite, 's9', { step: 10_000, snowflake: { port: 7901 } })
  const clients = httpClients(CLIENTS + 1)
  const scraper = clients[CLIENTS] as HttpClient
  const randoms = Array.from({ length: CLIENTS }, (_, c) => createRandom(c + 1))
  const lastSnowflake: (bigint | undefined)[] = []
  let decodes = 0
  let scrapes = 0
  const samples: { at: number, rssKb: number, fds: number }[] = []
  const start = performance.now()
  const state = { done: false }

  // Both side loops end with the load, and after at most twice its time.
  const sideLoops = 2 * RUN_MS
  const sampling = (async () => {
    for (let i = 0; i < sideLoops / SAMPLE_EVERY_MS && !state.done; i++) {
      samples.push({ at: performance.now() - start, ...procStats(leaf.pid) })
      await sleep(SAMPLE_EVERY_MS)
    }
  })()
  const scraping = (async () => {
    for (let i = 0; i < sideLoops / 1000 && !state.done; i++) {
      report.requests++
      scrapes++
      const a = await scraper.get(`${leaf.url}/metrics`)
      if (a.status !== 200 || !a.body.includes('leaf_ids_issued_total')) report.failure(`/metrics: ${describe(a)}`)
      await sleep(1000)
    }
  })()

  const result = await runLoad({
    clients: CLIENTS,
    maxRequests: MAX_REQUESTS,
    maxMs: RUN_MS,
    async step (c) {
      const r = randoms[c] as ReturnType<typeof createRandom>
      const client = clients[c] as HttpClient
      const p = r.next()
      const last = lastSnowflake[c]
      if (p < 0.05 && last !== undefined) {
        report.requests++
        decodes++
        const a = await client.get(`${leaf.url}/decodeSnowflakeId?snowflakeId=${last}`)
        const parts = decodeSnowflakeId(last)
        let json: { workerId?: unknown, sequenceId?: unknown } = {}
        try {
          json = JSON.parse(a.body) as typeof json
        } catch {}
        if (a.status !== 200 || json.workerId !== String(parts.workerId) || json.sequenceId !== String(parts.sequence)) {
          report.failure(`decode ${last}: ${describe(a)}`)
        }
        return
      }
      const mode = p < 0.55 ? 'segment' : 'snowflake'
      const batch = (p >= 0.45 && p < 0.55) || p >= 0.9
      const { ids } = await takeIds(report, client, leaf.url, mode, mode === 'segment' ? tag : `k${c}`, batch ? r.between(1, 20) : undefined, `c${c}`)
      if (mode === 'snowflake' && ids !== undefined) lastSnowflake[c] = ids[ids.length - 1]
    },
  })
  state.done = true
  samples.push({ at: performance.now() - start, ...procStats(leaf.pid) })
  await Promise.all([sampling, scraping])
  for (const client of clients) client.close()

  const base = samples.find((s) => s.at >= WARM_UP_MS) ?? samples[0]
  const end = samples[samples.length - 1]
  if (base === undefined || end === undefined) throw new Error('no samples')
  const peak = samples.reduce((m, s) => Math.max(m, s.rssKb), 0)
  report.check(end.rssKb - base.rssKb <= RSS_GROWTH_BOUND_KB, `RSS grew ${Math.round((end.rssKb - base.rssKb) / 1024)} MB after the warm-up (bound ${RSS_GROWTH_BOUND_KB / 1024} MB)`)
  report.check(end.fds - base.fds <= FD_GROWTH_BOUND, `open descriptors grew ${base.fds} -> ${end.fds} after the warm-up (bound +${FD_GROWTH_BOUND})`)
  report.check(result.ms >= RUN_MS - 1000, `the run ended after ${fmtMs(result.ms)}`)
  report.note(`${result.requests} load requests in ${fmtMs(result.ms)} (${Math.round(result.requests / result.ms * 1000)}/s, ${CLIENTS} unpaced clients), ` +
    `${decodes} decodes, ${scrapes} /metrics scrapes; RSS ${Math.round(base.rssKb / 1024)} MB at ${fmtMs(base.at)}, ${Math.round(end.rssKb / 1024)} MB at the end, ` +
    `peak ${Math.round(peak / 1024)} MB (bound +${RSS_GROWTH_BOUND_KB / 1024} MB); fds ${base.fds} -> ${end.fds} (bound +${FD_GROWTH_BOUND}); ` +
    `RSS MB every ${SAMPLE_EVERY_MS / 1000} s: ${samples.map((s) => Math.round(s.rssKb / 1024)).join(' ')}`)
}
