import { execFileSync } from 'node:child_process'
import { availableParallelism } from 'node:os'
import { fileURLToPath } from 'node:url'

// What every published figure carries, so a reader can rerun it on the same code: the commit,
// whether `src/` had uncommitted changes, the date and the machine's core count.

export const ROOT = fileURLToPath(new URL('../', import.meta.url))

export interface RunInfo {
  commit: string
  /** `src/` differed from `commit` (changed or untracked files) when the run started. */
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
    dirty: git('status', '--porcelain', '--', 'src') !== '',
    date: new Date().toISOString(),
    cores: availableParallelism(),
  }
}

/** Why figures from `info` do not describe the `src/` checked out now, or undefined when they do. */
export function staleFigures (info: Pick<RunInfo, 'commit' | 'dirty'>): string | undefined {
  if (info.dirty) return `the figures were taken with uncommitted changes in src/ (commit ${info.commit})`
  try {
    execFileSync('git', ['diff', '--quiet', info.commit, '--', 'src'], { cwd: ROOT, stdio: 'ignore' })
  } catch {
    return `src/ changed since ${info.commit}, the commit the figures came from: rerun them`
  }
  return undefined
}
