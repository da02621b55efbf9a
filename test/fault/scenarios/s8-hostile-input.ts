import { alive, fmtMs, metrics, procStats, startScenarioLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { createRandom, hostileRequest, rawRequest, type HostileRequest, type RawAnswer } from '../hostile.js'
import { parseAnswerIds, parseIds } from '../ledger.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep } from '../services.js'

const REQUESTS = 20_000
const CONCURRENCY = 16
const WARM_UP = 20_000
const RSS_BOUND_KB = 50 * 1024
const TOKEN = 'fault-suite-token'

/**
 * 8. 20,000 hostile requests (random keys of 0 to 4,096 pieces from every byte class,
 * percent-encodings good and bad, dot segments, random counts and methods, bodies, oversized
 * header blocks), each on its own connection. Every answer must be documented: a 2xx, a
 * status of the errors table (docs/operations.md) with its JSON code (a /readyz 503 with its
 * own body; what Node's parser refuses too). Never a 500, never no answer; the process lives
 * on, and its RSS after the run is within 50 MB of before.
 */
export async function hostileInput (suite: Suite, report: Report): Promise<void> {
  const seed = Number(process.env.FAULT_SEED ?? Date.now() % 1_000_000)
  const random = createRandom(seed)
  const { leaf, tag } = await startScenarioLeaf(suite, 's8', { step: 1000, snowflake: { port: 7801 }, args: [`--leaf.admin.token=${TOKEN}`] })

  // "Before" is a server at its working size: V8 sizes its heap to the load, and 20,000 valid
  // requests alone move a cold server's RSS by some 45 MB. So first as many connections as
  // the hostile run, at its concurrency, with valid requests only; then the hostile run.
  await runLoad({
    clients: CONCURRENCY,
    maxRequests: WARM_UP,
    maxMs: 120_000,
    async step (_c, n) {
      const mode = n % 2 === 0 ? 'segment' : 'snowflake'
      const key = mode === 'segment' ? tag : `k${n % 1000}`
      const count = n % 3 === 0 ? 1 + n % 100 : undefined
      const target = `/api/${mode}/get/${key}${count === undefined ? '' : `?count=${count}`}`
      const a = await rawRequest(leaf.port, Buffer.from(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${leaf.port}\r\n\r\n`))
      const ids = a.status === 200 ? parseIds(a.body, count !== undefined) : undefined
      report.requests++
      if (ids !== undefined) report.ledger.record(mode === 'segment' ? `segment:${key}` : 'snowflake', undefined, ids)
      if (ids?.length !== (count ?? 1)) report.failure(`warm-up ${target}: ${a.status ?? 'none'} ${a.body.slice(0, 100)}`)
    },
  })
  await sleep(1000)
  const before = procStats(leaf.pid)
  const heapBefore = await heap(leaf.url)

  const statuses = new Map<string, number>()
  const problems = new Map<string, { n: number, sample: string }>()
  const problem = (what: string, req: HostileRequest, a: RawAnswer) => {
    const entry = problems.get(what) ?? { n: 0, sample: `${req.kind}: ${JSON.stringify(req.target.slice(0, 100))} -> ${a.status ?? 'none'} ${a.body.slice(0, 100)} ${a.error ?? ''}` }
    entry.n++
    problems.set(what, entry)
  }
  let replays = 0
  const idAnswers = { valid: 0, hostile: 0 }
  const started = performance.now()
  const result = await runLoad({
    clients: CONCURRENCY,
    maxRequests: REQUESTS,
    maxMs: 300_000,
    async step () {
      const req = hostileRequest(random, leaf.port, tag, TOKEN)
      report.requests++
      const sentAt = performance.now()
      let a = await rawRequest(leaf.port, req.bytes, { head: req.method === 'HEAD' })
      if (req.idRoute !== undefined) report.slowestMs = Math.max(report.slowestMs, performance.now() - sentAt)
      if (a.status === undefined && req.headLength < req.bytes.length) {
        // A server that refuses the head closes the connection while the body is still being
        // written: the reset can destroy its answer before it is read. Replay, with the body
        // 100 ms after the head, to read what it answers.
        replays++
        a = await rawRequest(leaf.port, req.bytes, { head: req.method === 'HEAD', split: req.headLength, pauseMs: 100 })
      }
      const label = `${a.status ?? 'none'}${a.status !== undefined && a.body === '' ? ' (no body)' : ''}`
      statuses.set(label, (statuses.get(label) ?? 0) + 1)
      const verdict = judge(suite, req, a)
      if (verdict !== undefined) {
        report.failure(verdict)
        problem(verdict, req, a)
      }
      // Every ID a 2xx of an ID route carries is recorded, whatever the request looked like.
      const route = req.idRoute
      if (route !== undefined && a.status !== undefined && a.status >= 200 && a.status < 300 && req.method !== 'HEAD') {
        const ids = parseAnswerIds(a.body, a.headers['content-type'])
        if (ids !== undefined) {
          idAnswers[req.valid === undefined ? 'hostile' : 'valid']++
          report.ledger.record(route.mode === 'segment' ? `segment:${route.key}` : 'snowflake', undefined, ids)
        }
        if (ids === undefined || (route.count !== undefined && ids.length !== route.count)) {
          report.failure('2xx from an ID route without its IDs')
          problem('2xx from an ID route without its IDs', req, a)
        }
      }
      if (req.valid !== undefined && a.status !== 200 && verdict === undefined) {
        report.failure('valid request refused')
        problem('valid request refused', req, a)
      }
    },
  })
  const runMs = performance.now() - started
  await sleep(1000)
  const survived = alive(leaf.pid) && leaf.proc.exitCode === null
  report.check(survived, `the server died: exit ${leaf.proc.exitCode} ${leaf.proc.signalCode}`)
  const after = survived ? procStats(leaf.pid) : { rssKb: Number.NaN, fds: Number.NaN }
  const heapAfter = survived ? await heap(leaf.url) : '-'
  const check = new HttpClient()
  const healthy = await takeIds(report, check, leaf.url, 'snowflake', 'after', undefined, undefined)
  check.close()

  report.check(healthy.ids !== undefined, 'no ID after the run')
  report.check(result.requests === REQUESTS, `${result.requests} of ${REQUESTS} requests sent`)
  report.check(after.rssKb - before.rssKb <= RSS_BOUND_KB, `RSS grew ${Math.round((after.rssKb - before.rssKb) / 1024)} MB (bound 50 MB)`)
  const errorLines = leaf.output.filter((l) => /"level":(50|60)/.test(l))
  report.check(errorLines.length === 0, `${errorLines.length} error lines in the server log, e.g. ${errorLines[0]?.slice(0, 300)}`)
  for (const [what, { n, sample }] of problems) report.problems.push(`${n} x ${what}, e.g. ${sample}`)
  report.note(`seed ${seed} (FAULT_SEED=${seed} replays it); ${result.requests} hostile requests in ${fmtMs(runMs)}; answers: ` +
    [...statuses].sort((a, b) => b[1] - a[1]).map(([s, n]) => `${s}: ${n}`).join(', ') +
    `; ${replays} answers lost to a reset and replayed with a pause before the body; ${idAnswers.valid + idAnswers.hostile} 2xx answers of ID routes recorded (${idAnswers.hostile} to hostile requests)` +
    `; RSS ${Math.round(before.rssKb / 1024)} MB before, ${Math.round(after.rssKb / 1024)} MB after (V8 heap before ${heapBefore}, after ${heapAfter}); fds ${before.fds} -> ${after.fds}`)
}

/** V8's heap (total and used, MB) from the server's /metrics, for the note. */
async function heap (base: string): Promise<string> {
  const client = new HttpClient()
  try {
    const m = await metrics(client, base)
    const mb = (name: string) => Math.round((m.get(name) ?? Number.NaN) / 1048576)
    return `${mb('nodejs_heap_size_total_bytes')}/${mb('nodejs_heap_size_used_bytes')}`
  } catch {
    return '?'
  } finally {
    client.close()
  }
}

/**
 * Undefined when the answer is one the errors table documents for this very request (the
 * generator works out which: `HostileRequest.allowed`), else what is wrong with it.
 */
function judge (suite: Suite, req: HostileRequest, a: RawAnswer): string | undefined {
  if (a.timedOut) return 'no answer within 10 s'
  if (a.status === undefined) return `connection closed without an answer (method ${JSON.stringify(req.method)})`
  if (a.status === 500) return '500'
  const fits = (what: string) => req.allowed.has(what) ? undefined : `${what} where only ${[...req.allowed].sort().join(' / ')} fit`
  if (a.status >= 200 && a.status < 300) return fits(String(a.status))
  const codes = suite.documented.get(a.status)
  if (codes === undefined) return `undocumented status ${a.status}`
  if (req.method === 'HEAD' && a.body === '') {
    return [...req.allowed].some((x) => x.startsWith(`${a.status} `)) ? undefined : `${a.status} (HEAD) where only ${[...req.allowed].sort().join(' / ')} fit`
  }
  let json: { error?: unknown, status?: unknown }
  try {
    json = JSON.parse(a.body) as typeof json
  } catch {
    return `${a.status} without a JSON body`
  }
  if (a.status === 503 && json.status === 'not ready') return fits('503 not ready') // /readyz's own body
  if (typeof json.error !== 'string') return `${a.status} with undocumented body ${JSON.stringify(json).slice(0, 80)}`
  if (!codes.has(json.error)) return `${a.status} ${json.error}: not in the documented errors table`
  return fits(`${a.status} ${json.error}`)
}
