import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fmtMs, steadyLoad, unique, type Report, type Suite } from '../harness.js'
import { LOST_MSG, cacheDirOf, decodeAll, logLines, startLeaseLeaf } from '../lease.js'
import { PrivateMariaDb, freePort, sleep, steppableClock } from '../services.js'

/** The lease settings of the measurement in issue 25: TTL 9 s, and the default heartbeat. */
const TTL_MS = 9000
const HEARTBEAT_MS = 3000
/** How far the database host's clock steps ahead while the holder serves (an NTP correction, say). */
const STEP = '+12s'
const STEP_MS = 12_000
const HOLDER_SERVES_MS = 2000
/** No snowflake answer waits on the store: only the host's scheduling bounds it. */
const ANSWER_BOUND_MS = 1000

/**
 * 21. The database host's clock steps 12 s ahead while a db-lease holder serves: by NOW(3) its
 * lease of 9 s has expired. A private MariaDB runs under libfaketime with an offset read from a
 * file. Holder A (pool of one id) serves; right after one of its renewals the file steps the
 * database's clock, and B starts (with a max-clock-drift-ms that lets it wait out A's
 * issuedUntil): it must not lease the id while A serves (A's row keeps changing), and is refused. Then A is SIGKILLed
 * and C starts: it takes the id over once it has seen A's row unchanged for A's TTL, and issues
 * after A's last millisecond. Passes when no ID repeats, A never fences, B is refused within its
 * start's deadline, C serves, and every answer is within the bound.
 */
export async function databaseClockStep (suite: Suite, report: Report): Promise<void> {
  const clockFile = join(suite.dir, 'mariadb-clock.rc')
  const db = new PrivateMariaDb(join(suite.dir, 'mariadb-stepped'), await freePort(), steppableClock(clockFile))
  report.expectedWhat = 'cut by SIGKILL'
  try {
    await db.init()
    const name = unique('fault-s21')
    const common = { source: 'db-lease' as const, name, ttlMs: TTL_MS, heartbeatMs: HEARTBEAT_MS, min: 0, max: 0, storePort: db.port }
    const a = await startLeaseLeaf(suite, 'A', { ...common, port: 7941, cacheDir: cacheDirOf(suite, name, 'A') })
    const aPid = a.pid
    const aLoad = steadyLoad(report, a, { mode: 'snowflake', key: 'k', stream: 'A', boundMs: ANSWER_BOUND_MS, expected: (x) => x.status === 0 })
    await sleep(HOLDER_SERVES_MS)
    const skew = async () => {
      const rows = await db.query<{ now: Date }[]>('SELECT NOW(3) AS now')
      return (rows[0]?.now as Date).getTime() - Date.now()
    }
    const before = await skew()
    // Right after one of A's renewals, so that B starts well before the next one: until then
    // NOW(3) says A's lease expired.
    const expiry = async () => (await db.query<{ e: string }[]>('SELECT CAST(expires_at AS CHAR) AS e FROM leaf.leaf_worker_lease WHERE pool = ? AND worker_id = 0', [name]))[0]?.e
    const renewedAt = await expiry()
    for (let i = 0; i < 200 && await expiry() === renewedAt; i++) await sleep(20)
    writeFileSync(clockFile, `${STEP}\n`)
    let after = before
    for (let i = 0; i < 40 && after < STEP_MS / 2; i++) {
      await sleep(100)
      after = await skew()
    }
    report.check(Math.abs(before) < 2000 && after > STEP_MS - 2000, `the database's clock did not step: ${before} ms, then ${after} ms off`)
    const rows = await db.query<{ expired: number }[]>('SELECT expires_at < NOW(3) AS expired FROM leaf.leaf_worker_lease WHERE pool = ? AND worker_id = 0', [name])
    report.check(Number(rows[0]?.expired) === 1, 'A\'s lease has not expired by NOW(3): the step does not test anything')

    const bStart = performance.now()
    // B would wait for A's issuedUntil rather than pass the id over for drift: no such rule saves A.
    const b = await startLeaseLeaf(suite, 'B', { ...common, port: 7942, cacheDir: cacheDirOf(suite, name, 'B'), timeoutMs: TTL_MS + 10_000, args: ['--leaf.snowflake.max-clock-drift-ms=15000'] })
      .then((leaf) => leaf, (err: unknown) => err as Error)
    const bMs = performance.now() - bStart
    if (b instanceof Error) {
      report.check(/every worker id of .* \[0, 0\] \(1 ids\) is leased/.test(b.message), `B did not start, but not for the pool being leased: ${b.message.split('\n').slice(-3).join(' ')}`)
      report.check(bMs <= TTL_MS + TTL_MS / 10 + 2000, `B refused only after ${fmtMs(bMs)}`)
    } else {
      report.check(false, `B leased the id A serves on, ${fmtMs(bMs)} after its start`)
      await b.stop('SIGKILL')
    }
    await sleep(HEARTBEAT_MS)
    const fenced = logLines(a, LOST_MSG).length
    report.check(fenced === 0, 'A fenced: its lease was taken')
    process.kill(aPid, 'SIGKILL')
    const aIds = await aLoad.stop()
    await a.exited

    const cStart = performance.now()
    const c = await startLeaseLeaf(suite, 'C', { ...common, port: 7943, cacheDir: cacheDirOf(suite, name, 'C'), timeoutMs: 2 * TTL_MS + 10_000 })
    const cMs = performance.now() - cStart
    const cLoad = steadyLoad(report, c, { mode: 'snowflake', key: 'k', stream: 'C', boundMs: ANSWER_BOUND_MS })
    await sleep(1000)
    const cIds = await cLoad.stop()
    await c.stop('SIGTERM')
    report.check(cMs >= TTL_MS, `C took A's id over ${fmtMs(cMs)} after its start, before watching A's row for A's TTL`)
    report.check(cIds.length > 0 && decodeAll(cIds).minTs > decodeAll(aIds).maxTs, 'C\'s first ID is not after A\'s last')
    report.note(`database clock ${before} ms, then ${after} ms off the real one (${STEP}); A's lease expired by NOW(3); ` +
      `B ${b instanceof Error ? `refused ${fmtMs(bMs)} after its start` : 'leased the id'}; A served ${aIds.length} IDs, fenced ${fenced} times; ` +
      `after A's SIGKILL, C took the id over ${fmtMs(cMs)} after its start and served ${cIds.length}`)
    report.recover = `C serving ${fmtMs(cMs)} after A's SIGKILL`
  } finally {
    await db.stop('SIGKILL')
  }
}
