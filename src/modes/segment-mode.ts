import type { Config } from '../config/load-config.js'
import type { Logger } from '../logger.js'
import { createSegmentGenerator, type SegmentGenerator, type SegmentGeneratorOptions } from '../segment/segment-generator.js'
import type { SegmentStore } from '../segment/store.js'
import { createStore, describeStore } from '../segment/stores/create-store.js'
import { newWarmState, readWarmState, writeWarmState, type WarmState } from '../segment/warm-state.js'

/** How long a graceful stop may spend giving unused IDs back (part of the 10 s drain). */
export const GIVE_BACK_BUDGET_MS = 3000

export interface SegmentMode {
  store: SegmentStore
  generator: SegmentGenerator
  close (): Promise<void>
}

/**
 * Opens the store and loads the tags; a store that is down is retried in the background.
 * With a warm-start file, the tags it names load their first segments in the background
 * (the generator reports `warming` meanwhile, and readiness waits), and a graceful stop
 * gives back or parks what it did not hand out under the file's identity.
 */
export async function startSegmentMode (
  config: Config,
  logger: Logger,
  extra: Pick<SegmentGeneratorOptions, 'clock' | 'onLoad' | 'onGiveBack'> = {}
): Promise<SegmentMode> {
  const { segment } = config
  const warm = segment.stateFile === undefined ? undefined : openWarmState(segment.stateFile, logger)
  const store = createStore(segment.store, segment)
  const generator = createSegmentGenerator({
    store,
    logger,
    waitTimeoutMs: segment.waitTimeoutMs,
    refreshIntervalMs: segment.refreshIntervalMs,
    bufferSeconds: segment.bufferSeconds,
    maxBufferedSegments: segment.maxBufferedSegments,
    owner: warm?.owner,
    ...extra,
  })
  const ready = await generator.init()
  logger.info({ store: describeStore(segment.store), ready, bufferSeconds: segment.bufferSeconds, stateFile: segment.stateFile ?? '(none)' }, 'segment mode enabled')
  if (warm !== undefined && warm.tags.length > 0) warmStart(generator, warm.tags, ready, logger)
  return {
    store,
    generator,
    async close () {
      const { giveBacks, warmTags } = await generator.shutdown(GIVE_BACK_BUDGET_MS)
      for (const g of giveBacks) {
        if (g.unused === 0n) continue
        const lost = g.unused - g.returned - g.parked
        logger.info({ key: g.key, unused: String(g.unused), returned: String(g.returned), parked: String(g.parked), lost: String(lost), reason: g.reason },
          lost === 0n ? 'unused IDs given back' : 'unused IDs given back in part: the rest is lost')
      }
      if (warm !== undefined && segment.stateFile !== undefined) {
        try {
          writeWarmState(segment.stateFile, { owner: warm.owner, tags: warmTags })
          logger.info({ file: segment.stateFile, tags: warmTags.length }, 'warm-start file written')
        } catch (err) {
          logger.warn({ file: segment.stateFile, err: (err as Error).message }, 'warm-start file not written: the next start loads every tag on its first request, and takes nothing parked')
        }
      }
      await store.close()
    },
  }
}

function openWarmState (file: string, logger: Logger): WarmState | undefined {
  try {
    return readWarmState(file)
  } catch (err) {
    logger.warn({ file, err: (err as Error).message }, 'warm-start file unreadable: every tag loads on its first request, nothing parked is taken, and it is rewritten at the next graceful stop')
    return newWarmState()
  }
}

function warmStart (generator: SegmentGenerator, tags: string[], ready: boolean, logger: Logger): void {
  if (!ready) {
    logger.warn({ tags: tags.length }, 'warm start skipped: the tag list is not loaded (database unreachable)')
    return
  }
  const started = performance.now()
  generator.warm(tags).then(() => {
    logger.info({ tags: tags.length, ms: Math.round(performance.now() - started) }, 'warm start: hot tags loaded')
  }, (err: unknown) => logger.warn({ err }, 'warm start failed'))
}
