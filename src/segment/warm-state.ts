// The warm-start file: the id the last graceful stop parked its unused IDs under, and the
// tags that served in the last minute before it, so the next start takes those IDs and loads
// those tags before it turns ready. It holds no ranges: what a stop parks is in the database,
// taken there by one start only, so a copied or restored file can cost a load, never an ID
// twice.

import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'

export interface WarmState {
  /** The id the last stop parked under (random, a new one each life). */
  owner: string
  tags: string[]
}

interface WarmFile extends WarmState { version: 1, savedAt: string }

/** The file's state; undefined when it is missing. Throws (with the reason) when it is not ours to read. */
export function readWarmState (path: string): WarmState | undefined {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    if ((err as { code?: string }).code === 'ENOENT') return undefined
    throw err
  }
  const state = JSON.parse(text) as Partial<WarmFile>
  if (state.version !== 1 || typeof state.owner !== 'string' || state.owner === '' || state.owner.length > 64 ||
    !Array.isArray(state.tags) || !state.tags.every((t) => typeof t === 'string')) {
    throw new Error('not a warm-start file of this version')
  }
  return { owner: state.owner, tags: state.tags }
}

/** Writes the file whole or not at all: a temporary file renamed over it. */
export function writeWarmState (path: string, state: WarmState, now = new Date()): void {
  mkdirSync(dirname(path), { recursive: true })
  const file: WarmFile = { version: 1, savedAt: now.toISOString(), owner: state.owner, tags: [...state.tags] }
  const tmp = `${path}.${process.pid}.tmp`
  writeFileSync(tmp, JSON.stringify(file) + '\n')
  renameSync(tmp, path)
}
