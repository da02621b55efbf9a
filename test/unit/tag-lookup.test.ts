import t from 'tap'
import { createTagLookup, TAG_LOOKUP_INTERVAL_MS, TAG_LOOKUPS_PER_SECOND } from '../../src/segment/tag-lookup.js'

function setup (find: (key: string) => Promise<boolean> = async () => false) {
  const clock = { now: 0 }
  const asked: string[] = []
  const lookup = createTagLookup({ monotonic: () => clock.now, find: (key) => { asked.push(key); return find(key) } })
  return { lookup, clock, asked }
}

t.test('concurrent lookups of one key share one query', async (t) => {
  let answer: (found: boolean) => void = () => {}
  const { lookup, asked } = setup(() => new Promise((resolve) => { answer = resolve }))
  const first = lookup.lookup('k')
  const second = lookup.lookup('k')
  t.equal(first, second, 'the same promise')
  answer(true)
  t.equal(await first, true)
  t.same(asked, ['k'])
  t.equal(lookup.lookup('k'), 'recent', 'once it answered: not again within the interval')
})

t.test('the memory holds only the keys of the last interval, however many keys come', async (t) => {
  const { lookup, clock, asked } = setup()
  let most = 0
  for (let ms = 0; ms < 60_000; ms += 10) {
    clock.now = ms
    for (let i = 0; i < 50; i++) {
      const looked = lookup.lookup(`key-${ms}-${i}`)
      if (typeof looked !== 'string') await looked
    }
    most = Math.max(most, lookup.remembered)
  }
  t.ok(most <= TAG_LOOKUPS_PER_SECOND * (1 + TAG_LOOKUP_INTERVAL_MS / 1000), `at most ${most} keys remembered of 300,000 asked`)
  t.ok(asked.length <= TAG_LOOKUPS_PER_SECOND * 61, `${asked.length} queries in 60 s`)
  t.ok(asked.length >= TAG_LOOKUPS_PER_SECOND * 59, 'and the rate is used')
})

t.test('a store that hangs holds at most two seconds\' worth of lookups', async (t) => {
  const { lookup, clock, asked } = setup(() => new Promise(() => {}))
  for (let ms = 0; ms < 10_000; ms += 100) {
    clock.now = ms
    for (let i = 0; i < 5; i++) lookup.lookup(`key-${ms}-${i}`)
  }
  t.equal(asked.length, 2 * TAG_LOOKUPS_PER_SECOND)
  t.equal(lookup.remembered, 2 * TAG_LOOKUPS_PER_SECOND, 'in flight (their interval passed)')
})
