import t from 'tap'
import { Segment, SegmentBuffer } from '../../src/segment/segment-buffer.js'

// The buffer's transitions, as the loader, the load retry and the generator call them.

t.test('a first load starts serving; later loads append and start the step clock', async (t) => {
  const buf = new SegmentBuffer('order')
  t.equal(buf.state, 'empty')
  t.ok(buf.neverLoaded)
  buf.firstLoaded(new Segment(11n, 10))
  t.equal(buf.state, 'serving')
  t.same([buf.step, buf.minStep, buf.updateTimestamp], [10, 10, 0], 'the table\'s step; no step clock yet')
  buf.appendLoaded(new Segment(31n, 20), 10, 5000)
  t.same([buf.step, buf.minStep, buf.updateTimestamp], [20, 10, 5000], 'the adapted step, the table\'s step, the clock')
  t.same(buf.segments.map((s) => s.max), [11n, 31n])
  t.equal(buf.buffered, 30)
})

t.test('a stopped buffer stays stopped: a load that lands joins its chain, and serves nothing', async (t) => {
  const buf = new SegmentBuffer('order')
  buf.stopServing()
  buf.firstLoaded(new Segment(11n, 10))
  t.equal(buf.state, 'stopped')
  t.notOk(buf.serving)
  t.equal(buf.buffered, 10, 'held, for the give-back')
  buf.dropSegments()
  t.equal(buf.state, 'stopped', 'dropping the chain does not make it loadable again')
  buf.claimedParked([new Segment(51n, 10)])
  t.equal(buf.state, 'stopped')
})

t.test('dropped segments: the buffer is empty again, what was served stays counted', async (t) => {
  const buf = new SegmentBuffer('order')
  buf.firstLoaded(new Segment(11n, 10))
  buf.currentSegment.takeRange(3)
  buf.dropSegments()
  t.equal(buf.state, 'empty')
  t.equal(buf.issued, 3)
  t.equal(buf.servedEnd, 4n)
})

t.test('parked ranges taken over serve at once; none claimed leaves the buffer empty', async (t) => {
  const none = new SegmentBuffer('order')
  none.claimedParked([])
  t.ok(none.claimed)
  t.equal(none.state, 'empty')
  const some = new SegmentBuffer('order')
  some.claimedParked([new Segment(21n, 5), new Segment(40n, 10)])
  t.equal(some.state, 'serving')
  t.same([some.step, some.minStep], [0, 0], 'the next load uses the table\'s step')
})

t.test('missing and ended are final', async (t) => {
  const missing = new SegmentBuffer('order')
  missing.markMissing()
  missing.markEnded()
  t.equal(missing.supply, 'missing')
  t.notOk(missing.ended)
  const ended = new SegmentBuffer('order')
  ended.markEnded()
  ended.markMissing()
  t.equal(ended.supply, 'ended')
  t.ok(ended.ended)
})

t.test('loads: the one in flight, the backoff after a failure, cleared by a success', async (t) => {
  const buf = new SegmentBuffer('order')
  const first = Promise.resolve()
  buf.loadStarted(first)
  t.equal(buf.loading, first)
  buf.loadFailed(50, 1050)
  buf.loadSettled(first)
  t.equal(buf.loading, undefined)
  t.same([buf.backoffMs, buf.retryAt, buf.failedLoads], [50, 1050, 1])
  const second = Promise.resolve()
  buf.loadStarted(second)
  buf.loadSettled(first)
  t.equal(buf.loading, second, 'an older load settling leaves the newer one')
  buf.loadSucceeded(0.25)
  t.same([buf.backoffMs, buf.retryAt, buf.failedLoads, buf.lastLoadSeconds], [0, 0, 1, 0.25])
})
