import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { errorCode, fmtMs, metrics, readyz, startLeaf, takeIds, unique, type Leaf, type LeafOptions, type Report, type Suite } from '../harness.js'
import { HttpClient, runLoad } from '../load.js'
import { sleep, waitUntil } from '../services.js'
import { ReplicaPair } from '../../helpers/replica-pair.js'
import { createProxy, type TcpProxy } from '../../helpers/tcp-proxy.js'

/** Requests per second to each instance: small steps, so both reserve ranges every second or so. */
const RATE = 800
const CLIENTS_PER_INSTANCE = 3
const TABLE_STEP = 100
const REFRESH_MS = 1000
/** The review's short hold (3-6 s). */
const HOLD_MS = 3000
const WAIT_TIMEOUT_MS = 1000
const QUERY_TIMEOUT_MS = 1000
/** The slowest answer allowed: the wait timeout, and 1 s for the answer's own path (as scenario 25). */
const BOUND_MS = WAIT_TIMEOUT_MS + 1000
/** The blip on instance 1's path to the promoted host (the review's). */
const BLIP_MS = 2500
/** How long both instances run once the old primary is back, writable. */
const SPLIT_MS = 15_000

/** What sends one instance back to the old primary while the other stays on the promoted one. */
export type SplitTrigger = 'blip' | 'restart' | 'new instance'

/**
 * 27, 28, 29. Split brain across leaf.jdbc.url's host list (issue 39, item 1). Two instances
 * reach a MariaDB primary h1 and its GTID replica h2 (`h1,h2`). The replica lags; h1 is killed,
 * h2 promoted; both instances move to h2, see the change, raise the row above what they served
 * and hold. Then h1 is restarted as configured: writable, with its own max_id. One of three
 * things sends an instance back to it while the other stays on h2:
 * - 27, `blip`: instance 1's path to h2 (a TCP proxy) is cut for 2.5 s;
 * - 28, `restart`: instance 1 stops gracefully and starts again, its warm-start file kept;
 * - 29, `new instance`: a third instance starts with no warm-start file.
 * Today's code then allocates the same ranges on both hosts (257,717 to 406,100 duplicates in
 * the review; 3,575, 3,841 and 8,536 here on 6ff4b57). With the host census (src/database/host-census.ts), every instance sees
 * two writable hosts and allocates nowhere (STORE_SPLIT), a start refuses, and once h1 is
 * fenced (read_only=1) the instances serve again from h2: 0 duplicates.
 */
export function splitBrain (trigger: SplitTrigger): (suite: Suite, report: Report) => Promise<void> {
  return async (suite, report) => {
    const id = trigger === 'blip' ? 's27' : trigger === 'restart' ? 's28' : 's29'
    const home = join(suite.dir, `${id}-split-brain`)
    mkdirSync(home, { recursive: true })
    const pair = await ReplicaPair.create(home)
    const tag = unique(id)
    const slots: (Leaf | undefined)[] = [undefined, undefined, undefined]
    const clients = Array.from({ length: slots.length * CLIENTS_PER_INSTANCE }, () => new HttpClient())
    const probe = new HttpClient()
    let proxy: TcpProxy | undefined
    try {
      await pair.init()
      await pair.primary.addTag(tag, TABLE_STEP)
      proxy = await createProxy(pair.ports.replica)
      const h1 = `127.0.0.1:${pair.ports.primary}`
      const direct = `mysql://leaf:leaf@${h1},127.0.0.1:${pair.ports.replica}/leaf`
      // Instance 1 reaches h2 through the proxy (same server, same identity), for the blip.
      const viaProxy = `mysql://leaf:leaf@${h1},127.0.0.1:${proxy.port}/leaf`
      const args = (state: string) => [
        `--leaf.segment.refresh-interval-ms=${REFRESH_MS}`, `--leaf.segment.failover-hold-ms=${HOLD_MS}`, `--leaf.segment.wait-timeout-ms=${WAIT_TIMEOUT_MS}`,
        `--leaf.jdbc.query-timeout-ms=${QUERY_TIMEOUT_MS}`, '--leaf.jdbc.connect-timeout-ms=1000', '--leaf.segment.buffer-seconds=0',
        `--leaf.segment.state-file=${state}`,
      ]
      const options: LeafOptions[] = [
        { name: unique(`fault-${id}-1`), segment: viaProxy, args: args(join(home, 'state-1.json')) },
        { name: unique(`fault-${id}-2`), segment: direct, args: args(join(home, 'state-2.json')) },
        { name: unique(`fault-${id}-3`), segment: direct, args: args('off') },
      ]
      slots[0] = await startLeaf(suite, 'instance1', options[0] as LeafOptions)
      slots[1] = await startLeaf(suite, 'instance2', options[1] as LeafOptions)
      const servedAbove = slots.map(() => 0n)
      const lastServedAt = slots.map(() => 0)
      let killedAt = Infinity
      let splitAt = Infinity
      let stop = false
      // Expected: SEGMENTS_NOT_READY from the kill until h2 serves (as in scenario 25), and from
      // the old primary's return on, STORE_SPLIT (or the hold's 503) until it is fenced; no answer
      // from an instance while it restarts. The pair replicates asynchronously, so an instance
      // whose refreshes fail for the hold (at the kill, through the blip) answers
      // STORE_UNCONFIRMED until one reaches h2 again.
      const expectedCodes = new Set(['SEGMENTS_NOT_READY', 'STORE_SPLIT', 'NOT_READY', 'STORE_UNCONFIRMED'])
      report.expectedWhat = 'SEGMENTS_NOT_READY or STORE_UNCONFIRMED after the kill; STORE_SPLIT, STORE_UNCONFIRMED, NOT_READY or no answer (a restart) after the old primary is back'
      const codes = new Map<string, number>()
      const load = runLoad({
        clients: clients.length,
        maxRequests: 400_000,
        maxMs: 120_000,
        ratePerSecond: RATE * 2,
        stop: () => stop,
        async step (c) {
          const i = c % slots.length
          const leaf = slots[i]
          if (leaf === undefined) {
            await sleep(20)
            return
          }
          const { answer, ids } = await takeIds(report, clients[c] as HttpClient, leaf.url, 'segment', tag, undefined, `i${i}-${leaf.pid}-c${c}`,
            (a) => a.sentAt >= killedAt && (a.status === 0 || expectedCodes.has(errorCode(a) ?? '')))
          if (ids === undefined) {
            const code = answer.status === 0 ? 'no answer' : errorCode(answer) ?? String(answer.status)
            if (answer.sentAt >= splitAt) codes.set(code, (codes.get(code) ?? 0) + 1)
          }
          if (answer.ms > BOUND_MS) report.failure(`instance ${i + 1}: an answer took ${fmtMs(answer.ms)} (bound ${fmtMs(BOUND_MS)})`)
          for (const x of ids ?? []) if (x > (servedAbove[i] as bigint)) servedAbove[i] = x
          if (ids !== undefined) lastServedAt[i] = performance.now()
        },
      })

      await sleep(3000)
      await pair.lag()
      // Long enough for both to reserve on h1 while h2 lags: the step doubles with each load.
      await sleep(4000)
      const primaryMax = await pair.primary.maxId(tag)
      killedAt = performance.now()
      await pair.killPrimary()
      await pair.promote()
      const replicaMax = await pair.replica.maxId(tag)
      // Both on h2: each counted the failover, then served above what h1 handed out.
      const counted = await waitUntil(async () => {
        const seen = await Promise.all([slots[0], slots[1]].map(async (leaf) => {
          const m = await metrics(probe, (leaf as Leaf).url).catch(() => new Map<string, number>())
          return (m.get('leaf_segment_store_regressions_total{cause="store_changed"}') ?? 0) + (m.get('leaf_segment_store_regressions_total{cause="max_id_went_back"}') ?? 0)
        }))
        return seen.every((n) => n > 0)
      }, 20_000, 100)
      const onH2 = await waitUntil(() => (servedAbove[0] as bigint) > primaryMax && (servedAbove[1] as bigint) > primaryMax, 30_000, 100)
      report.check(replicaMax < primaryMax, `the promoted replica's max_id ${replicaMax} is not behind the primary's ${primaryMax}: nothing was lost, the scenario tests nothing`)
      report.check(counted, 'not both instances counted the failover in leaf_segment_store_regressions_total')
      report.check(onH2, `not both served from the promoted store within 30 s (highest IDs ${servedAbove.join(', ')}, h1's max_id ${primaryMax})`)
      await sleep(1000)

      // The old primary comes back as configured: writable, its max_id where the kill left it.
      splitAt = performance.now()
      await pair.restartPrimary()
      const h1Row = await pair.primary.maxId(tag)
      let refusal: string | undefined
      let started = 0
      if (trigger === 'blip') {
        proxy.block()
        await sleep(BLIP_MS)
        proxy.unblock()
      } else {
        if (trigger === 'restart') {
          const old = slots[0] as Leaf
          slots[0] = undefined
          await old.stop('SIGTERM')
        }
        const slot = trigger === 'restart' ? 0 : 2
        try {
          slots[slot] = await startLeaf(suite, trigger === 'restart' ? 'instance1-restarted' : 'instance3', options[slot] as LeafOptions)
          started++
        } catch (err) {
          report.check(/exited with 1 before listening/.test((err as Error).message), `the refused start did not exit 1 before listening: ${(err as Error).message.slice(0, 200)}`)
          const line = (err as Error).message.split('\n').find((l) => l.includes('start refused: '))
          refusal = line === undefined ? (err as Error).message.slice(0, 300) : line.slice(line.indexOf('start refused: ')).replace(/"[,}].*$/, '')
        }
      }
      await sleep(SPLIT_MS)
      const during = await Promise.all(slots.map(async (leaf) => leaf === undefined ? undefined : await readyz(probe, leaf.url)))

      // The operator fences the old primary: the instances serve again, from h2 alone.
      await pair.primary.query('SET GLOBAL read_only = 1')
      const fencedAt = performance.now()
      if (refusal !== undefined) {
        const slot = trigger === 'restart' ? 0 : 2
        slots[slot] = await startLeaf(suite, trigger === 'restart' ? 'instance1-after-fence' : 'instance3-after-fence', options[slot] as LeafOptions)
      }
      const resumed = await waitUntil(async () => {
        const ready = await Promise.all(slots.map(async (leaf) => leaf === undefined || (await readyz(probe, leaf.url)).status === 200))
        return ready.every(Boolean) && slots.every((leaf, i) => leaf === undefined || (lastServedAt[i] as number) > fencedAt)
      }, 20_000, 100)
      const resumedMs = performance.now() - fencedAt
      await sleep(1000)
      stop = true
      await load
      const after = await Promise.all(slots.map(async (leaf) => leaf === undefined ? undefined : await readyz(probe, leaf.url)))

      for (const [i, r] of during.entries()) {
        if (r !== undefined) report.check(r.status === 503, `instance ${i + 1}'s /readyz answered ${r.status} while two hosts were writable: ${r.raw.slice(0, 200)}`)
      }
      report.check(resumed, `not every instance was ready and served again within 20 s of the fence (highest IDs ${servedAbove.join(', ')})`)
      for (const [i, r] of after.entries()) {
        if (r !== undefined) report.check(r.status === 200, `instance ${i + 1} not ready after the fence: ${r.raw}`)
      }
      report.note(`h1's max_id ${primaryMax} at the kill, h2's ${replicaMax} at the promotion; h1 back writable at ${h1Row}; ` +
        `${trigger === 'blip' ? `instance 1's path to h2 cut for ${fmtMs(BLIP_MS)}` : refusal !== undefined ? `the ${trigger === 'restart' ? 'restarted' : 'new'} instance refused to start: ${refusal.slice(0, 240)}` : `the ${trigger === 'restart' ? 'restarted' : 'new'} instance started (${started})`}; ` +
        `/readyz while both hosts were writable: ${during.map((r) => r === undefined ? '-' : String(r.status)).join(', ')}; ` +
        `non-200 answers after h1's return: ${[...codes].map(([c, n]) => `${c} ${n}`).join(', ') || 'none'}; every instance served from h2 again ${fmtMs(resumedMs)} after h1 was fenced`)
      report.recover = `served again ${fmtMs(resumedMs)} after the fence`
    } finally {
      for (const c of [...clients, probe]) c.close()
      for (const leaf of slots) await leaf?.stop('SIGTERM').catch(() => undefined)
      await proxy?.close()
      await pair.close({ keep: report.problems.length > 0 || report.failed > 0 })
    }
  }
}
