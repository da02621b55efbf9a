import { execFileSync } from 'node:child_process'
import { availableParallelism } from 'node:os'
import { fileURLToPath } from 'node:url'

// What every published figure carries, so a reader can rerun it on the same code: the commit,
// whether the code it measures had uncommitted changes, the date and the machine's core count.

export const ROOT = fileURLToPath(new URL('../', import.meta.url))

/**
 * What published figures describe: the server and the client, the harnesses that measure them
 * (the bench, the fault suite), the dependencies, the compiler settings and the bundling. A change
 * to any of them makes the figures stale; the results files themselves are not part of it.
 */
export const MEASURED_PATHS = [
  'src', 'client/src', 'bench', 'test/fault', 'package-lock.json', ':(glob)tsconfig*.json', ':(glob)client/tsconfig*.json',
  'scripts/build-server.ts',
  ':(exclude)bench/results', ':(exclude)test/fault/results',
]

export interface RunInfo {
  commit: string
  /** The code of MEASURED_PATHS differed from `commit` (changed or untracked files) when the run started. */
  dirty: boolean
  date: string
  cores: number
}

function git (...args: string[]): string {
  return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim()
}

export function runInfo (): RunInfo {
  return {
    commit: git('rev-parse', 'HEAD'),
    dirty: git('status', '--porcelain', '--', ...MEASURED_PATHS) !== '',
    date: new Date().toISOString(),
    cores: availableParallelism(),
  }
}

// A line that is only a comment or blank: `//`, a block comment's opening, a line of one
// (`* ...`), its closing, or nothing. A change whose every line is one (git diff -I) leaves the
// measured code as it was, so it does not make the figures stale. What this rule cannot see:
// code commented out by adding a block comment's opening and closing lines around it, and a
// line of a multi-line template literal that starts like a comment.
// (No alternative may match an empty line start: git matches against a line and its newline,
// after which an empty pattern matches any line; a blank line is matched by its own whitespace.)
export const COMMENT_LINE = String.raw`^[[:space:]]*(//|/\*|\*[ /]|\*$)|^[[:space:]]+$`

/** The files of MEASURED_PATHS whose code differs between `commit` and the working tree of `cwd`; throws when git does not know `commit`. */
export function measuredChangesSince (commit: string, cwd = ROOT): string[] {
  // --numstat, not --name-only: with -I, only --numstat and --stat leave out files whose every changed line was ignored.
  const args = ['diff', '--numstat', '--no-renames', `-I${COMMENT_LINE}`, commit, '--', ...MEASURED_PATHS]
  const out = execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  return out === '' ? [] : out.split('\n').map((line) => line.split('\t')[2] as string)
}

function knownCommit (commit: string): boolean {
  try {
    execFileSync('git', ['rev-parse', '--verify', '--quiet', `${commit}^{tree}`], { cwd: ROOT, stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Why figures from `info` do not describe the code checked out now, or undefined when they do (git's own failures throw). */
export function staleFigures (info: Pick<RunInfo, 'commit' | 'dirty'>): string | undefined {
  if (info.dirty) return `the figures were taken with uncommitted changes to the code they measure (commit ${info.commit})`
  if (!knownCommit(info.commit)) return `${info.commit}, the commit the figures came from, is not in this repository: rerun them`
  const files = measuredChangesSince(info.commit)
  if (files.length === 0) return undefined
  return `${files.slice(0, 5).join(', ')}${files.length > 5 ? ` and ${files.length - 5} more` : ''} changed since ${info.commit}, the commit the figures came from: rerun them`
}
