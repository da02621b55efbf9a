// The generator's tags: the leaf_alloc tag list, read at init and again on a timer.

import type { Logger } from '../logger.js'
import type { LogThrottle } from '../log-throttle.js'
import type { SegmentBuffer } from './segment-buffer.js'
import type { SegmentStore } from './store.js'
import type { MaxIdGuard } from './max-id-guard.js'

export interface TagListOptions {
  store: SegmentStore
  logger: Logger
  throttle: LogThrottle
  buffers: Map<string, SegmentBuffer>
  newBuffer: (key: string) => SegmentBuffer
  guard: MaxIdGuard | undefined
  refreshIntervalMs: number
}

export interface TagList {
  /** Loads the tag list (retrying in the background on failure) and starts the refresh timer. */
  init (): Promise<boolean>
  readonly initialized: boolean
  refreshTags (): Promise<void>
  close (): void
}

export function createTagList ({ store, logger, throttle, buffers, newBuffer, guard, refreshIntervalMs }: TagListOptions): TagList {
  let initialized = false
  let closed = false
  let refreshTimer: NodeJS.Timeout | undefined

  async function refreshTags (): Promise<void> {
    // Only tags known before the read may be dropped: one added meanwhile (addTag) stays.
    const known = [...buffers.keys()]
    // The marks as they were before the read: an allocation that lands while it is in flight
    // raises a mark above what the read saw, which is no regression.
    const before = await guard?.marksBeforeRead()
    const rows = await store.getAllTags()
    const tags = rows.map((r) => r.key)
    const current = new Set(tags)
    const added: string[] = []
    for (const tag of tags) {
      if (!buffers.has(tag)) {
        buffers.set(tag, newBuffer(tag))
        added.push(tag)
      }
    }
    const removed: string[] = []
    for (const tag of known) {
      if (!current.has(tag) && buffers.delete(tag)) removed.push(tag)
    }
    if (added.length > 0 || removed.length > 0) logger.info({ added, removed }, 'segment tags refreshed')
    initialized = true
    // Every refresh looks at who answers too: a peer that allocates nothing still sees a failover.
    await guard?.checkStore()
    // And compares the rows with this instance's marks: a max_id lowered by hand, or by a
    // failover the identity does not show.
    if (before !== undefined) await guard?.checkRows(rows, before)
  }

  function scheduleRefresh (delayMs: number): void {
    if (closed) return
    refreshTimer = setTimeout(() => {
      refreshTags().then(
        () => {
          throttle.clear('tag-refresh')
          scheduleRefresh(refreshIntervalMs)
        },
        (err: unknown) => {
          throttle.warn('tag-refresh', err, 'segment tag refresh failed; retrying')
          scheduleRefresh(initialized ? refreshIntervalMs : Math.min(refreshIntervalMs, 1000))
        }
      )
    }, delayMs)
    refreshTimer.unref()
  }

  return {
    async init () {
      try {
        await refreshTags()
        scheduleRefresh(refreshIntervalMs)
        return true
      } catch (err) {
        throttle.warn('tag-refresh', err, 'segment generator could not load its tags; retrying in the background')
        scheduleRefresh(Math.min(refreshIntervalMs, 1000))
        return false
      }
    },
    get initialized () {
      return initialized
    },
    refreshTags,
    close () {
      closed = true
      clearTimeout(refreshTimer)
    },
  }
}
