import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { createLeafClient, type LeafClient } from '../../../client/src/index.js'
import { withSqlite } from '../../helpers/sqlite.js'
import { fmtMs, startLeaf, unique, type Leaf, type LeafOptions, type Report, type Suite } from '../harness.js'
import { freePort, sleep } from '../services.js'

const CALLERS = 20
/** Load before the kill, and after the restart. */
const BEFORE_MS = 6000
const AFTER_MS = 15_000
/** The tag's step: Leaf's default for a new tag is 1000; the demo tag's 2000. */
const STEP = 2000
/** A caller waits 1 ms after this many IDs. */
const PACE_IDS = 5
/** A caller that got an error waits this long before its next call, as a real one would. */
const ERROR_PAUSE_MS = 20
/**
 * Errors a caller may get: no answer while the server is down (UNREACHABLE while its port
 * refuses connections, NETWORK, TIMEOUT), and, from the restarted server, ID_REGRESSION. Any
 * other is a failure.
 */
const EXPECTED = new Set(['UNREACHABLE', 'NETWORK', 'TIMEOUT', 'ID_REGRESSION'])

/**
 * An embedded store of its own: a SQLite file with Leaf's table and the scenario's tag, made
 * here, so that whether the server seeds a new file or not does not matter.
 */
function freshStore (dir: string, tag: string): string {
  mkdirSync(dir, { recursive: true })
  const file = join(dir, 'leaf.db')
  withSqlite(file, (db) => {
    db.exec(`CREATE TABLE leaf_alloc (
      biz_tag VARCHAR(128) NOT NULL DEFAULT '' PRIMARY KEY, max_id BIGINT NOT NULL DEFAULT 1, step INT NOT NULL,
      description VARCHAR(256) DEFAULT NULL, update_time TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`)
    db.prepare('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, 1, ?, ?)').run(tag, STEP, 'fault scenario 33')
  })
  return file
}

/**
 * 33. A client whose only server comes back on a fresh store (issue 39, item 5): one server on
 * an embedded SQLite store, CALLERS callers of @leaf-ts/client taking segment IDs; the server is
 * SIGKILLed and started again at once on the same port (so under the same instance name) on a
 * new SQLite file, whose tag starts at 1 again, and the callers keep taking. Every ID a caller
 * got goes to the ledger: the client must not hand out an ID twice (before issue 39 it handed
 * out the fresh store's repeats). Callers may get errors, each counted by code.
 */
export async function clientFreshStore (suite: Suite, report: Report): Promise<void> {
  const tag = unique('s33')
  const name = unique('fault-s33')
  const port = await freePort()
  const options = (life: string): LeafOptions => ({
    name,
    segment: `sqlite:${freshStore(join(suite.dir, `${name}-${life}`), tag)}`,
    args: [`--server.port=${port}`],
  })
  const state: { leaf: Leaf, stop: boolean } = { leaf: await startLeaf(suite, 'life1', options('life1')), stop: false }
  const client: LeafClient = createLeafClient({ servers: [state.leaf.url], timeoutMs: 2000, requestTimeoutMs: 1000 })
  const ids: bigint[][] = Array.from({ length: CALLERS }, () => [])
  const errors = new Map<string, number>()
  const marks = { killedAt: 0, restartedAt: 0, beforeKill: 0, afterRestart: 0, firstAfterRestart: 0, maxBeforeKill: 0n }
  report.expectedWhat = 'caller errors: UNREACHABLE/NETWORK/TIMEOUT while down, ID_REGRESSION from the fresh store'
  try {
    const callers = Array.from({ length: CALLERS }, async (_, c) => {
      const mine = ids[c] as bigint[]
      let n = 0
      while (!state.stop) {
        try {
          const id = await client.nextId('segment', tag)
          mine.push(id)
          if (marks.killedAt === 0) {
            marks.beforeKill++
            if (id > marks.maxBeforeKill) marks.maxBeforeKill = id
          } else if (marks.restartedAt > 0) {
            marks.afterRestart++
            if (marks.firstAfterRestart === 0) marks.firstAfterRestart = performance.now()
          }
          // Paced, as callers doing other work are: some 100,000 IDs a second in all, so that
          // the ledger stays small.
          if (++n % PACE_IDS === 0) await sleep(1)
        } catch (err) {
          const code = (err as { code?: string }).code ?? String(err)
          errors.set(code, (errors.get(code) ?? 0) + 1)
          if (EXPECTED.has(code)) report.expected++
          else report.failure(`a caller got ${code}: ${(err as Error).message}`)
          await sleep(ERROR_PAUSE_MS)
        }
      }
    })
    await sleep(BEFORE_MS)
    marks.killedAt = performance.now()
    state.leaf.proc.kill('SIGKILL')
    await state.leaf.exited
    state.leaf = await startLeaf(suite, 'life2', options('life2'))
    marks.restartedAt = performance.now()
    await sleep(AFTER_MS)
    state.stop = true
    await Promise.all(callers)
  } finally {
    state.stop = true
    const stats = client.stats()
    report.requests = stats.requests
    await client.close()
    for (const [c, mine] of ids.entries()) report.ledger.record(`segment:${tag}`, `c${c}`, mine)
    const refused = stats.refused ?? 0
    report.note(`${CALLERS} callers: ${marks.beforeKill} IDs before the SIGKILL (the highest ${marks.maxBeforeKill}), ` +
      `the server listening again on a fresh store ${fmtMs(marks.restartedAt - marks.killedAt)} after it, then ${marks.afterRestart} IDs in ${fmtMs(AFTER_MS)}; ` +
      `${stats.requests} requests, ${refused} answers refused for going back; caller errors: ${[...errors].map(([code, n]) => `${code} ${n}`).join(', ') || 'none'}`)
    report.recover = marks.firstAfterRestart === 0 ? 'no ID after the restart' : `first ID ${fmtMs(marks.firstAfterRestart - marks.restartedAt)} after the restart`
  }
  report.check(marks.beforeKill > 0, 'no ID before the kill')
}
