import { join } from 'node:path'
import { fmtMs, startLeaf, takeIds, unique, zkInspector, type Report, type Suite } from '../harness.js'
import { backgroundLoad, batchMix, httpClients } from '../load.js'
import { createProxy } from '../../helpers/tcp-proxy.js'
import { sleep, waitUntil } from '../services.js'

const CLIENTS = 8
const PROBES = 8
const DELAY_MS = 200
const NODE_GONE_BOUND_MS = 1000

/**
 * 7. SIGTERM under load (both modes, unpaced). Every request sent before the signal and not
 * yet answered when it came must complete with its IDs; among them, PROBES requests that
 * are certainly inside the server: the first requests of a new tag, waiting for its first
 * segment from a MariaDB reached through a 200 ms proxy. The ephemeral node is gone within
 * a second of the signal and the process exits 0. The clients send nothing after the signal.
 */
export async function sigterm (suite: Suite, report: Report): Promise<void> {
  const proxy = await createProxy(suite.db.port, { delayMs: DELAY_MS })
  const inspector = await zkInspector(suite.zk)
  try {
    const name = unique('fault-s7')
    const port = 7701
    const temporary = `/snowflake/${name}/temporary/127.0.0.1:${port}`
    const warm = unique('s7-warm')
    const fresh = unique('s7-fresh')
    await suite.db.addTag(warm, 1_000_000)
    await suite.db.addTag(fresh, 1000)
    const leaf = await startLeaf(suite, 'both', {
      name,
      segment: suite.db.url(proxy.port),
      snowflake: { zk: suite.zk.address, port, cacheDir: join(suite.dir, name) },
    })
    report.check(await inspector.owner(temporary) !== undefined, `no ephemeral node ${temporary} before SIGTERM`)
    const probeClients = httpClients(PROBES)
    const at: { term?: number } = {}
    const inFlight = { total: 0, ok: 0, keepAlive: 0 }
    const batch = batchMix(10, 50)

    const load = backgroundLoad({ clients: CLIENTS, maxRequests: 500_000, maxMs: 60_000, until: () => at.term !== undefined }, async (client, c, n) => {
      const mode = n % 2 === 0 ? 'segment' : 'snowflake'
      const { answer, ids } = await takeIds(report, client, leaf.url, mode, mode === 'segment' ? warm : 'k', batch(n), `c${c}`)
      if (at.term !== undefined && answer.sentAt < at.term && answer.sentAt + answer.ms > at.term) {
        inFlight.total++
        if (ids !== undefined) inFlight.ok++
        if (answer.headers.connection === 'keep-alive') inFlight.keepAlive++
      }
    })

    await sleep(2000)
    const probes = Promise.all(probeClients.map((client) => takeIds(report, client, leaf.url, 'segment', fresh, undefined, undefined)))
    await sleep(100)
    const t0 = at.term = performance.now()
    leaf.proc.kill('SIGTERM')
    const gone = await waitUntil(async () => await inspector.owner(temporary) === undefined, 5000, 5)
    const goneMs = performance.now() - t0
    const code = await leaf.exited
    const exitMs = performance.now() - t0
    const probeAnswers = await probes
    const result = await load.stop()
    for (const client of probeClients) client.close()

    const probesOk = probeAnswers.filter((p) => p.ids !== undefined).length
    inFlight.keepAlive += probeAnswers.filter((p) => p.answer.headers.connection === 'keep-alive').length
    const slowestProbe = Math.max(...probeAnswers.map((p) => p.answer.ms))
    // The clients keep their connections open, as any keep-alive client or proxy pool does: a
    // server that answers in-flight requests with keep-alive waits on them to close.
    const hint = inFlight.keepAlive > 0 ? ` (${inFlight.keepAlive} in-flight answers said Connection: keep-alive, so their connections stay open and hold the close)` : ''
    report.check(code === 0, `exit code ${code}${code === 0 ? '' : hint}`)
    report.check(gone && goneMs <= NODE_GONE_BOUND_MS, `ephemeral node ${gone ? `gone only ${fmtMs(goneMs)}` : 'still there 5 s'} after SIGTERM (bound ${NODE_GONE_BOUND_MS} ms)`)
    report.check(probesOk === PROBES, `${PROBES - probesOk} of ${PROBES} requests waiting inside the server at SIGTERM did not complete`)
    report.check(probeAnswers.every((p) => p.answer.sentAt + p.answer.ms > t0), 'a probe was answered before SIGTERM: it did not test the drain')
    report.note(`${result.requests} load requests; at SIGTERM ${inFlight.total} load requests and ${PROBES} probes in flight: ` +
      `${inFlight.ok + probesOk} completed with their IDs (slowest probe ${fmtMs(slowestProbe)}), ${inFlight.keepAlive} of them with Connection: keep-alive; ephemeral node gone ${fmtMs(goneMs)} after the signal, exit ${code} after ${fmtMs(exitMs)}`)
    report.recover = `exit after ${fmtMs(exitMs)}`
  } finally {
    await inspector.close()
    await proxy.close()
  }
}
