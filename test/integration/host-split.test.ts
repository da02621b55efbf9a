import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { StartRefused } from '../../src/errors.js'
import { checkReadiness } from '../../src/modes/readiness.js'
import { startSegmentMode, type SegmentMode } from '../../src/modes/segment-mode.js'
import type { Id } from '../../src/segment/segment-generator.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { ReplicaPair } from '../helpers/replica-pair.js'

// A host list that must not split (issue 39; docs/production.md, Host lists), in process
// against real MariaDB replication: h1 a primary, h2 its replica. h1 is killed, h2 promoted,
// both instances move to h2; then h1 comes back writable. Every instance sees two writable
// hosts and allocates nowhere (STORE_SPLIT, /readyz 503), a new instance refuses to start,
// and once h1 is fenced (read_only) they serve again from h2; the warm-start file keeps the
// host in use and the store left.

const TAG = 'split'
const pair = await ReplicaPair.create()
await pair.init()
t.teardown(() => pair.close())
await pair.primary.addTag(TAG, 10)
const h1 = `127.0.0.1:${pair.ports.primary}`
const h2 = `127.0.0.1:${pair.ports.replica}`
const url = `mysql://leaf:leaf@${h1},${h2}/leaf`
const dir = tempDir('leaf-split-')

function config (stateFile: string) {
  return testConfig({
    'leaf.segment.enable': true,
    'leaf.jdbc.url': url,
    'leaf.segment.refresh-interval-ms': 300,
    'leaf.segment.failover-hold-ms': 800,
    'leaf.segment.wait-timeout-ms': 500,
    'leaf.segment.buffer-seconds': 0,
    'leaf.jdbc.query-timeout-ms': 1000,
    'leaf.jdbc.connect-timeout-ms': 1000,
    'leaf.segment.state-file': stateFile,
  })
}

const served: bigint[] = []

/** IDs until `n` are served, waiting out a hold or a host down; or the first error whose code is `until`. */
async function serve (mode: SegmentMode, n: number, until?: string): Promise<string | undefined> {
  const started = performance.now()
  for (let got = 0; got < n;) {
    try {
      served.push(BigInt(await mode.generator.next(TAG) as Id))
      got++
    } catch (err) {
      const code = (err as { code?: string }).code
      if (code === until) return code
      if (code !== 'SEGMENTS_NOT_READY') throw err
      if (performance.now() - started > 20_000) throw new Error(`${got} of ${n} IDs within 20 s`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  return undefined
}

t.test('an old primary back writable: allocations stop everywhere, a start refuses, the fence lets them resume; the file keeps the host and the store left', async (t) => {
  const a = await startSegmentMode(config(join(dir, 'a.json')), silentLogger)
  const { logger, lines } = captureLogger()
  const b = await startSegmentMode(config(join(dir, 'b.json')), logger)
  let aOpen = true
  t.teardown(async () => {
    if (aOpen) await a.close()
    await b.close()
  })
  t.equal(a.hosts?.view().inUse, h1, 'a start without a file begins at the first host')
  t.match(a.hosts?.view().hosts, [{ host: h1, state: 'writable', store: 'server_id 1' }, { host: h2, state: 'read-only', store: 'server_id 2' }])
  await serve(a, 30)
  await serve(b, 30)
  await pair.lag()
  await serve(a, 60)
  await serve(b, 60)
  await pair.killPrimary()
  await pair.promote()
  // Both serve from h2 after the hold: each saw the store change, and left server_id 1.
  await serve(a, 200)
  await serve(b, 200)
  t.ok(a.guard.view().regressions > 0 && b.guard.view().regressions > 0, 'both saw the failover')
  t.same(a.hosts?.view().left, ['server_id 1'])
  t.equal(a.hosts?.view().inUse, h2)
  t.match(JSON.parse(readFileSync(join(dir, 'a.json'), 'utf8')), { hostList: { left: ['server_id 1'] } }, 'the store left is in the file at once')

  await pair.restartPrimary()
  await a.hosts?.check()
  await b.hosts?.check()
  t.match(a.hosts?.view().split, { hosts: [`${h1} (server_id 1)`, `${h2} (server_id 2)`] }, 'two writable hosts: a split')
  t.ok(lines.some((l) => l.level === 50 && /more than one host of leaf\.jdbc\.url answers writable/.test(String(l.msg))), 'an error logged')
  const ready = await checkReadiness({ segment: a, snowflake: undefined })
  t.match(ready, { ready: false, modes: { segment: { ready: false, reason: /^STORE_SPLIT: .*127\.0\.0\.1:\d+ \(server_id 1\), 127\.0\.0\.1:\d+ \(server_id 2\)/ } } })
  // The buffer serves on; then the tag needs an allocation, refused with the cause.
  t.equal(await serve(a, 100_000, 'STORE_SPLIT'), 'STORE_SPLIT', 'an allocation is refused with STORE_SPLIT')
  t.equal(await serve(b, 100_000, 'STORE_SPLIT'), 'STORE_SPLIT')
  const h1Row = await pair.primary.maxId(TAG)

  // A new instance refuses to start, and writes nothing.
  const refused = await startSegmentMode(config(join(dir, 'c.json')), silentLogger).catch((e: unknown) => e)
  t.ok(refused instanceof StartRefused)
  t.match(refused, { message: /^segment store mysql:\/\/leaf@.*: every host of leaf\.jdbc\.url answers writable \(127\.0\.0\.1:\d+ \(server_id 1\), 127\.0\.0\.1:\d+ \(server_id 2\)\): .*SET GLOBAL read_only = 1/ })
  t.equal(await pair.primary.maxId(TAG), h1Row, 'nothing allocated on h1 meanwhile')

  // The operator fences h1: allocations resume, on h2.
  await pair.primary.query('SET GLOBAL read_only = 1')
  // check() joins a census already running, which may have read h1 before the fence: the
  // second census begins after it.
  for (const instance of [a, b]) {
    await instance.hosts?.check()
    await instance.hosts?.check()
  }
  t.equal(a.hosts?.view().split, undefined)
  await serve(a, 200)
  await serve(b, 200)
  t.equal(await pair.primary.maxId(TAG), h1Row, 'still nothing on h1')
  t.equal(new Set(served).size, served.length, `no ID served twice (${served.length})`)

  // A graceful stop keeps the host in use and the store left; the next life starts there.
  await a.close()
  aOpen = false
  t.match(JSON.parse(readFileSync(join(dir, 'a.json'), 'utf8')), { hostList: { inUse: h2, left: ['server_id 1'] } })
  const again = await startSegmentMode(config(join(dir, 'a.json')), silentLogger)
  t.teardown(() => again.close())
  t.equal(again.hosts?.view().inUse, h2, 'the next life starts at the host last used')
  t.same(again.hosts?.view().left, ['server_id 1'])
  // h1 writable again, h2 not: a store left is never written, nothing is allocated.
  await pair.replica.query('SET GLOBAL read_only = 1')
  await pair.primary.query('SET GLOBAL read_only = 0')
  await again.hosts?.check()
  t.equal(again.hosts?.view().split, undefined, 'one writable host: no split')
  t.equal(await serve(again, 100_000, 'SEGMENTS_NOT_READY'), 'SEGMENTS_NOT_READY', 'its buffer served, then no allocation anywhere')
  t.equal(await pair.primary.maxId(TAG), h1Row, 'nothing allocated on the store left')
})
