// The errors the segment generator answers with.

import { LeafError } from '../errors.js'

export function missingKey (key: string, initialized: boolean): LeafError {
  return initialized
    ? new LeafError('KEY_NOT_FOUND', `Tag "${key}" is not in the leaf_alloc table.`)
    : new LeafError('NOT_READY', 'The segment generator has not loaded its tags yet.')
}

export function spaceEnded (key: string): LeafError {
  return new LeafError('ID_SPACE_EXHAUSTED', `The ID space of "${key}" has ended: its max_id cannot move by its step without passing 2^63 - 1.`)
}

export function shuttingDown (): LeafError {
  return new LeafError('NOT_READY', 'This instance is shutting down.')
}
