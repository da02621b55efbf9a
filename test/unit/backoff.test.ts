import t from 'tap'
import { nextBackoffMs } from '../../src/backoff.js'

t.test('the wait doubles from the minimum after each failure, up to the maximum', async (t) => {
  const waits: number[] = []
  let wait = 0
  for (let n = 0; n < 8; n++) waits.push(wait = nextBackoffMs(wait, 100, 5000))
  t.same(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000])
})

t.test('a success (previous wait 0) starts again at the minimum; no maximum: unbounded', async (t) => {
  t.equal(nextBackoffMs(0, 10), 10)
  t.equal(nextBackoffMs(40, 10), 80)
  t.equal(nextBackoffMs(2 ** 20, 10), 2 ** 21)
})
