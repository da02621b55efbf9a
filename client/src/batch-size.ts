/** The batch-size bounds and the aim of Leaf's step rule, as the client applies it. */
export interface SizingOptions {
  minBatch: number
  maxBatch: number
  /** One fetch per key per this many ms is the aim. */
  targetIntervalMs: number
}

/**
 * Leaf's step rule (SegmentIDGenImpl.updateSegmentFromDb), on the client: when the time since
 * the key's previous fetch is under the aim, the next batch is twice as large; at more than
 * twice the aim, half as large; in between it stays. Halving once per fetch, not resetting,
 * is what lets a burst after an idle minute still get a large batch.
 */
export function nextBatchSize (size: number, sincePreviousMs: number | undefined, sizing: SizingOptions): number {
  let next = size
  if (sincePreviousMs !== undefined) {
    if (sincePreviousMs < sizing.targetIntervalMs) next = size * 2
    else if (sincePreviousMs >= 2 * sizing.targetIntervalMs) next = Math.floor(size / 2)
  }
  return Math.min(sizing.maxBatch, Math.max(sizing.minBatch, next))
}
