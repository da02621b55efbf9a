import t from 'tap'
import { parseLayout } from '../../src/layout/layout-spec.js'
import { createSnowflakeGenerator } from '../../src/snowflake/snowflake-generator.js'

// The js-safe layout on the real clock and the real timers: its few sequence bits run out
// within a millisecond, so the generator waits for the next time unit the way it does in
// production. (Every other layout rule is tested on fake time: test/unit/snowflake-layouts.test.ts.)

const TWEPOCH = 1288834974657

const increasing = (ids: readonly bigint[]) => ids.every((id, i) => i === 0 || id > (ids[i - 1] as bigint))

t.test('js-safe with a real clock: 100,000 IDs, each an exact JavaScript number', async (t) => {
  const layout = parseLayout('js-safe', { twepoch: TWEPOCH, vestaVersion: 0, vestaGenMethod: 2, now: Date.now() })
  const gen = createSnowflakeGenerator({ workerId: 255, layout })
  const ids: bigint[] = []
  while (ids.length < 100_000) ids.push(...await gen.nextBatch('k', 10_000))
  t.equal(ids.length, 100_000)
  t.ok(ids.every((id) => id <= BigInt(Number.MAX_SAFE_INTEGER) && id > 0n), 'all in (0, 2^53 - 1]')
  t.equal(new Set(ids).size, ids.length, 'unique')
  t.ok(increasing(ids), 'increasing')
  t.ok(ids.every((id) => BigInt(Number(id)) === id), 'BigInt(Number(id)) === id for every one')
  t.ok(ids.every((id) => gen.decode(id).workerId === 255))
})
