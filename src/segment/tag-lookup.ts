// A tag not in the tag list, looked up in the store on the request that asks for it, so that a
// row inserted since the last refresh serves at once; bounded, so that unknown keys (a typo
// in a loop, a scan) cannot turn into a query each: docs/segment-mode.md#a-new-tag.

/** Lookups of unknown tags per second across all tags; also the burst. */
export const TAG_LOOKUPS_PER_SECOND = 20
/** One tag is looked up at most once in this many ms. */
export const TAG_LOOKUP_INTERVAL_MS = 1000

export interface TagLookupOptions {
  /** Whether the store holds a row of exactly this key. */
  find: (key: string) => Promise<boolean>
  monotonic: () => number
  perSecond?: number
  intervalMs?: number
}

/** Why no lookup is made now: the tag was looked up within the interval, or the global rate is spent. */
export type LookupSkipped = 'recent' | 'rate'

export interface TagLookup {
  /** The lookup of `key` (one shared by every request for it while it runs), or why none is made. */
  lookup (key: string): Promise<boolean> | LookupSkipped
  /** Keys remembered now: those looked up within the interval, and those in flight. */
  readonly remembered: number
}

export function createTagLookup ({ find, monotonic, perSecond = TAG_LOOKUPS_PER_SECOND, intervalMs = TAG_LOOKUP_INTERVAL_MS }: TagLookupOptions): TagLookup {
  const inFlight = new Map<string, Promise<boolean>>()
  /** When each key was last looked up, oldest first: only those within the interval are kept. */
  const askedAt = new Map<string, number>()
  // A store that hangs holds its lookups up to its query timeout: two seconds' worth at most.
  const maxInFlight = 2 * perSecond
  // A token bucket: `perSecond` tokens a second, at most `perSecond` saved.
  let tokens = perSecond
  let refilledAt = monotonic()

  function forgetOld (now: number): void {
    for (const [key, at] of askedAt) {
      if (now - at < intervalMs) break
      askedAt.delete(key)
    }
  }

  return {
    lookup (key) {
      const pending = inFlight.get(key)
      if (pending !== undefined) return pending
      const now = monotonic()
      forgetOld(now)
      if (askedAt.has(key)) return 'recent'
      tokens = Math.min(perSecond, tokens + (now - refilledAt) * perSecond / 1000)
      refilledAt = now
      if (tokens < 1 || inFlight.size >= maxInFlight) return 'rate'
      tokens -= 1
      askedAt.set(key, now)
      const looked = find(key).finally(() => inFlight.delete(key))
      inFlight.set(key, looked)
      return looked
    },
    get remembered () {
      return askedAt.size + inFlight.size
    },
  }
}
