import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { measuredChangesSince, ROOT, staleFigures } from '../../scripts/run-info.js'

// Published figures (bench/results, test/fault/results) are reported stale once the code they
// measure changed: the server, the client, both harnesses, the lockfile, the compiler settings.
// A change of comment lines alone leaves them current.

const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim()
/** git's empty tree: what came before the first commit. */
const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904'
/** What came before the last commit that changed `path`. */
const beforeLastCommit = (path: string) => git('rev-list', '--parents', '-n', '1', git('log', '-1', '--format=%H', '--', path)).split(' ')[1] ?? EMPTY_TREE
/** What came before the last commit that changed `path`'s code (not only its comments). */
function beforeLastChange (path: string): string {
  for (const commit of git('log', '-n', '50', '--format=%H', '--', path).split('\n')) {
    const parent = git('rev-list', '--parents', '-n', '1', commit).split(' ')[1] ?? EMPTY_TREE
    if (measuredChangesSince(parent).includes(path) || parent === EMPTY_TREE) return parent
  }
  throw new Error(`${path}: no change to its code in its last 50 commits`)
}

t.test('a change to any measured path since the figures\' commit makes them stale; the results files do not', async (t) => {
  for (const path of ['src/app.ts', 'client/src/index.ts', 'bench/run.ts', 'test/fault/harness.ts', 'package-lock.json', 'tsconfig.json']) {
    // Before the last commit that changed the file, the file is among the changes.
    const before = beforeLastChange(path)
    t.ok(measuredChangesSince(before).includes(path), `${path}: changed since ${before.slice(0, 8)}`)
    t.match(staleFigures({ commit: before, dirty: false }), /changed since .*: rerun them$/)
  }
  for (const path of ['bench/results/latest.json', 'test/fault/results/latest.json', 'docs/performance.md']) {
    t.notOk(measuredChangesSince(beforeLastCommit(path)).includes(path), `${path} is not measured code`)
  }
  t.match(staleFigures({ commit: 'c0ffee', dirty: false }), /not in this repository/)
  t.match(staleFigures({ commit: git('rev-parse', 'HEAD'), dirty: true }), /uncommitted changes/)
})

t.test('a change of comment lines alone leaves the figures current; a change of code beside a comment does not', async (t) => {
  const repo = mkdtempSync(join(tmpdir(), 'leaf-run-info-'))
  const run = (...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo, encoding: 'utf8' }).trim()
  mkdirSync(join(repo, 'src'))
  const file = (lines: string[]) => writeFileSync(join(repo, 'src/a.ts'), lines.join('\n') + '\n')
  run('init', '-q')
  file(['// checked by test/a.test.ts', '/**', ' * A block comment', ' */', 'export const a = 1'])
  run('add', '.')
  run('commit', '-q', '-m', 'one')
  const commit = run('rev-parse', 'HEAD')
  file(['// checked by test/unit/a.test.ts', '/**', ' * A block comment, reworded', ' */', 'export const a = 1'])
  t.same(measuredChangesSince(commit, repo), [], 'line and block comments changed: current')
  file(['// checked by test/unit/a.test.ts', '/**', ' * A block comment, reworded', ' */', 'export const a = 2'])
  t.same(measuredChangesSince(commit, repo), ['src/a.ts'], 'the code changed: stale')
  file(['// checked by test/a.test.ts', '/**', ' * A block comment', ' */', 'export const a = 1 // and a comment after code'])
  t.same(measuredChangesSince(commit, repo), ['src/a.ts'], 'a line of code with a comment after it: stale')
  file(['// checked by test/a.test.ts', '', '/**', ' * A block comment', ' */', 'export const a = 1'])
  t.same(measuredChangesSince(commit, repo), [], 'a blank line added: current')
  file(['// checked by test/a.test.ts', '/**', ' * A block comment', ' */', 'export const a = 1', 'export class G { *ids () { yield 1 } }', '*ids'])
  t.same(measuredChangesSince(commit, repo), ['src/a.ts'], 'a line of code starting with *: stale')
})
