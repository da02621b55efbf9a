import type { Config } from '../config/load-config.js'
import type { Logger } from '../logger.js'
import { createSegmentGenerator, type SegmentGenerator, type SegmentGeneratorOptions } from '../segment/segment-generator.js'
import type { SegmentStore } from '../segment/store.js'
import { createStore, describeStore } from '../segment/stores/create-store.js'
import { readWarmTags, writeWarmTags } from '../segment/warm-state.js'

/** How long a graceful stop may spend giving unused IDs back (part of the 10 s drain). */
export const GIVE_BACK_BUDGET_MS = 3000

export interface SegmentMode {
  store: SegmentStore
  generator: SegmentGenerator
  close (): Promise<void>
}

/**
 * Opens the store and loads the tags; a store that is down is retried in the background.
 * The tags of the warm-start file load their first segments in the background, and the
 * generator reports `warming` meanwhile (readiness waits for it).
 */
export async function startSegmentMode (
  config: Config,
  logger: Logger,
  extra: Pick<SegmentGeneratorOptions, 'clock' | 'onLoad' | 'onGiveBack'> = {}
): Promise<SegmentMode> {
  const { segment } = config
  const store = createStore(segment.store, segment)
  const generator = createSegmentGenerator({
    store,
    logger,
    waitTimeoutMs: segment.waitTimeoutMs,
    refreshIntervalMs: segment.refreshIntervalMs,
    bufferSeconds: segment.bufferSeconds,
    maxBufferedSegments: segment.maxBufferedSegments,
    ...extra,
  })
  const ready = await generator.init()
  logger.info({ store: describeStore(segment.store), ready, bufferSeconds: segment.bufferSeconds }, 'segment mode enabled')
  if (segment.stateFile !== undefined) warmStart(generator, segment.stateFile, ready, logger)
  return {
    store,
    generator,
    async close () {
      const { giveBacks, warmTags } = await generator.shutdown(GIVE_BACK_BUDGET_MS)
      for (const g of giveBacks) {
        if (g.unused === 0n) continue
        logger.info({ key: g.key, returned: String(g.returned), unused: String(g.unused), reason: g.reason },
          g.returned > 0n ? 'unused IDs given back to leaf_alloc' : 'unused IDs could not be given back: lost')
      }
      if (segment.stateFile !== undefined) {
        try {
          writeWarmTags(segment.stateFile, warmTags)
          logger.info({ file: segment.stateFile, tags: warmTags.length }, 'warm-start file written')
        } catch (err) {
          logger.warn({ file: segment.stateFile, err: (err as Error).message }, 'warm-start file not written: the next start loads every tag on its first request')
        }
      }
      await store.close()
    },
  }
}

function warmStart (generator: SegmentGenerator, file: string, ready: boolean, logger: Logger): void {
  let tags: string[]
  try {
    tags = readWarmTags(file)
  } catch (err) {
    logger.warn({ file, err: (err as Error).message }, 'warm-start file unreadable: every tag loads on its first request')
    return
  }
  if (tags.length === 0) return
  if (!ready) {
    logger.warn({ file, tags: tags.length }, 'warm start skipped: the tag list is not loaded (database unreachable)')
    return
  }
  const started = performance.now()
  generator.warm(tags).then(() => {
    logger.info({ file, tags: tags.length, ms: Math.round(performance.now() - started) }, 'warm start: hot tags loaded')
  }, (err: unknown) => logger.warn({ err }, 'warm start failed'))
}
