import { execFileSync } from 'node:child_process'
import t from 'tap'
import { measuredChangesSince, ROOT, staleFigures } from '../scripts/run-info.js'

// Published figures (bench/results, test/fault/results) are refused once the code they measure
// changed: the server, the client, both harnesses, the lockfile, the compiler settings.

const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim()
/** git's empty tree: what came before the first commit. */
const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904'
/** What came before the last commit that changed `path`. */
const beforeLastChange = (path: string) => git('rev-list', '--parents', '-n', '1', git('log', '-1', '--format=%H', '--', path)).split(' ')[1] ?? EMPTY_TREE

t.test('a change to any measured path since the figures\' commit makes them stale; the results files do not', async (t) => {
  for (const path of ['src/app.ts', 'client/src/index.ts', 'bench/run.ts', 'test/fault/harness.ts', 'package-lock.json', 'tsconfig.json']) {
    // Before the last commit that changed the file, the file is among the changes.
    const before = beforeLastChange(path)
    t.ok(measuredChangesSince(before).includes(path), `${path}: changed since ${before.slice(0, 8)}`)
    t.match(staleFigures({ commit: before, dirty: false }), /changed since .*: rerun them$/)
  }
  for (const path of ['bench/results/latest.json', 'test/fault/results/latest.json', 'docs/performance.md']) {
    t.notOk(measuredChangesSince(beforeLastChange(path)).includes(path), `${path} is not measured code`)
  }
  t.match(staleFigures({ commit: 'c0ffee', dirty: false }), /not in this repository/)
  t.match(staleFigures({ commit: git('rev-parse', 'HEAD'), dirty: true }), /uncommitted changes/)
})
