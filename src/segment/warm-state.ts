// The warm-start file: which tags served in the last minute before a graceful stop, so the
// next start loads their first segments before it turns ready. It names tags only, never
// ranges: a copied or restored file can cost a load, never an ID twice.

import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'

interface WarmState { version: 1, savedAt: string, tags: string[] }

/** The tags the file names; none when it is missing. Throws (with the reason) when it is not ours to read. */
export function readWarmTags (path: string): string[] {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    if ((err as { code?: string }).code === 'ENOENT') return []
    throw err
  }
  const state = JSON.parse(text) as Partial<WarmState>
  if (state.version !== 1 || !Array.isArray(state.tags) || !state.tags.every((t) => typeof t === 'string')) {
    throw new Error('not a warm-start file of this version')
  }
  return state.tags
}

/** Writes the file whole or not at all: a temporary file renamed over it. */
export function writeWarmTags (path: string, tags: readonly string[], now = new Date()): void {
  mkdirSync(dirname(path), { recursive: true })
  const state: WarmState = { version: 1, savedAt: now.toISOString(), tags: [...tags] }
  const tmp = `${path}.${process.pid}.tmp`
  writeFileSync(tmp, JSON.stringify(state) + '\n')
  renameSync(tmp, path)
}
