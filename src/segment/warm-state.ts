// The warm-start file (docs/segment-mode.md#warm-start). It holds no ranges, so a copied or
// restored file can cost a load, never an ID twice; an older file's marks are lower bounds too.

import { accessSync, constants, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import type { GuardState } from './max-id-guard.js'

/** A tag with IDs issued within this long before a graceful stop is warm-started at the next start. */
export const WARM_WINDOW_MS = 60_000

export interface WarmState {
  /** The id the last stop parked under (random, a new one each run). */
  owner: string
  tags: string[]
  guard?: GuardState
  hostList?: HostListState
}

/** A host list's host in use and stores left; written at a graceful stop and when a store is left. */
export interface HostListState {
  /** The configured store it is for, as GuardState.where. */
  where: string
  inUse?: string
  left: string[]
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
  return {
    owner: state.owner,
    tags: state.tags,
    ...(isGuardState(state.guard) ? { guard: state.guard } : {}),
    ...(isHostListState(state.hostList) ? { hostList: state.hostList } : {}),
  }
}

/** Checked at start, so that an unwritable folder refuses the start rather than losing the file at the stop. */
export function stateFolderProblem (path: string): string | undefined {
  const folder = dirname(path)
  let existing = folder
  for (;;) {
    try {
      if (!statSync(existing).isDirectory()) return `${existing} is not a folder (the warm-start file is ${path})`
      break
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || dirname(existing) === existing) return `the folder ${folder} cannot be read (${code ?? 'error'})`
      existing = dirname(existing)
    }
  }
  try {
    accessSync(existing, constants.W_OK)
  } catch (err) {
    return `the folder ${existing} is not writable (${(err as NodeJS.ErrnoException).code ?? 'error'}; the warm-start file is ${path})`
  }
  return undefined
}

/** Writes the file whole or not at all: a temporary file renamed over it. */
export function writeWarmState (path: string, state: WarmState, now = new Date()): void {
  mkdirSync(dirname(path), { recursive: true })
  const file: WarmFile = {
    version: 1,
    savedAt: now.toISOString(),
    owner: state.owner,
    tags: [...state.tags],
    ...(state.guard === undefined ? {} : { guard: state.guard }),
    ...(state.hostList === undefined ? {} : { hostList: state.hostList }),
  }
  const tmp = `${path}.${process.pid}.tmp`
  writeFileSync(tmp, JSON.stringify(file) + '\n')
  renameSync(tmp, path)
}

/** A guard state as written; anything else (an older file has none) is left out. */
function isGuardState (v: unknown): v is GuardState {
  if (typeof v !== 'object' || v === null) return false
  const { where, store, marks, heldUntil } = v as { where?: unknown, store?: unknown, marks?: unknown, heldUntil?: unknown }
  return (where === undefined || typeof where === 'string') && (store === undefined || typeof store === 'string') &&
    (heldUntil === undefined || typeof heldUntil === 'number') &&
    typeof marks === 'object' && marks !== null &&
    Object.values(marks).every((m) => typeof m === 'string' && /^\d+$/.test(m))
}

function isHostListState (v: unknown): v is HostListState {
  if (typeof v !== 'object' || v === null) return false
  const { where, inUse, left } = v as { where?: unknown, inUse?: unknown, left?: unknown }
  return typeof where === 'string' && (inUse === undefined || typeof inUse === 'string') &&
    Array.isArray(left) && left.every((s) => typeof s === 'string')
}
