import { Counter } from 'prom-client'
import { channels, type SegmentTagLookupMessage, type SegmentGiveBackMessage, type SegmentLoadMessage, type ClockBackwardsMessage, type LeaseClaimMessage, type LeaseLostMessage, type StoreRegressionMessage, type StoreRetryMessage } from '../channels.js'
import type { Metrics } from './metrics.js'

/** Counts what the core publishes (src/channels.ts) into `metrics`; returns the unsubscribe. */
export function countCoreEvents (metrics: Metrics): () => void {
  const onLoad = (m: SegmentLoadMessage) => metrics.segmentLoad(m.key, m.seconds, m.ok)
  const onGiveBack = (m: SegmentGiveBackMessage) => metrics.segmentGiveBack(m.key, m.ids, m.to)
  const onRetry = (m: StoreRetryMessage) => metrics.segmentRetry(m.key, m.reason)
  const onRegression = (m: StoreRegressionMessage) => metrics.segmentRegression(m)
  const onBackwards = (_m: ClockBackwardsMessage) => metrics.clockBackwards()
  const onClaim = (m: LeaseClaimMessage) => metrics.leaseClaim(m.result)
  const onLost = (_m: LeaseLostMessage) => metrics.leaseLost()
  const lookups = new Counter({
    name: 'leaf_segment_tag_lookups_total',
    help: 'Tags not in the tag list looked up in the store on their request: result="found" (served at once), "missing" or "failed".',
    labelNames: ['result'],
    registers: [metrics.registry],
  })
  const onLookup = (m: SegmentTagLookupMessage) => lookups.inc({ result: m.result })
  channels.segmentLoad.subscribe(onLoad)
  channels.segmentGiveBack.subscribe(onGiveBack)
  channels.storeRetry.subscribe(onRetry)
  channels.storeRegression.subscribe(onRegression)
  channels.clockBackwards.subscribe(onBackwards)
  channels.leaseClaim.subscribe(onClaim)
  channels.leaseLost.subscribe(onLost)
  channels.segmentTagLookup.subscribe(onLookup)
  return () => {
    channels.segmentLoad.unsubscribe(onLoad)
    channels.segmentGiveBack.unsubscribe(onGiveBack)
    channels.storeRetry.unsubscribe(onRetry)
    channels.storeRegression.unsubscribe(onRegression)
    channels.clockBackwards.unsubscribe(onBackwards)
    channels.leaseClaim.unsubscribe(onClaim)
    channels.leaseLost.unsubscribe(onLost)
    channels.segmentTagLookup.unsubscribe(onLookup)
  }
}
