import type { Config } from '../config/load-config.js'
import type { Logger } from '../logger.js'
import { createSegmentGenerator, type SegmentGenerator, type SegmentGeneratorOptions } from '../segment/segment-generator.js'
import type { SegmentStore } from '../segment/store.js'
import { createStore, describeStore } from '../segment/stores/create-store.js'

export interface SegmentMode {
  store: SegmentStore
  generator: SegmentGenerator
  close (): Promise<void>
}

/** Opens the store and loads the tags; a store that is down is retried in the background. */
export async function startSegmentMode (
  config: Config,
  logger: Logger,
  extra: Pick<SegmentGeneratorOptions, 'clock' | 'onLoad'> = {}
): Promise<SegmentMode> {
  const store = createStore(config.segment.store, config.segment)
  const generator = createSegmentGenerator({
    store,
    logger,
    waitTimeoutMs: config.segment.waitTimeoutMs,
    refreshIntervalMs: config.segment.refreshIntervalMs,
    ...extra,
  })
  const ready = await generator.init()
  logger.info({ store: describeStore(config.segment.store), ready }, 'segment mode enabled')
  return {
    store,
    generator,
    async close () {
      generator.close()
      await store.close()
    },
  }
}
