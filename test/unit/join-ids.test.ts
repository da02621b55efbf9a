import t from 'tap'
import { expandRanges, type IdRange } from '../../src/id-range.js'
import { joinRanges } from '../../src/http/join-ids.js'

t.test('joinRanges writes the ranges\' IDs as join does', async (t) => {
  const cases: [string, IdRange[]][] = [
    ['none', []],
    ['an empty range', [{ first: 5, count: 0 }]],
    ['one', [{ first: 7, count: 1 }]],
    ['a run over 9 -> 10 and 99 -> 100', [{ first: 8, count: 94 }]],
    ['a carry to one more digit', [{ first: 999_995, count: 10 }]],
    ['one segment\'s batch past 2^31', [{ first: 4_294_967_000, count: 1000 }]],
    ['a batch over segments', [{ first: 95, count: 10 }, { first: 2001, count: 3 }, { first: 2_000_000_000, count: 2 }]],
    ['ranges not increasing', [{ first: 5, count: 1 }, { first: 4, count: 2 }, { first: 3, count: 1 }]],
    ['bigints: a snowflake millisecond and the next', [{ first: 2127220875605311488n, count: 3 }, { first: 2127220875609505792n, count: 2 }]],
    ['bigints past 2^53', [{ first: 2n ** 53n - 2n, count: 5 }, { first: 10n ** 20n - 2n, count: 4 }]],
    ['a bigint carry to one more digit', [{ first: 9999999999999999999n, count: 3 }]],
    ['a bigint over 32 digits, carrying to one more', [{ first: 10n ** 40n - 2n, count: 4 }]],
    ['carries at the edge of the 64-byte scratch text', [{ first: 10n ** 58n - 1n, count: 3 }, { first: 10n ** 59n - 1n, count: 2 }, { first: 10n ** 60n - 1n, count: 2 }]],
    ['texts of 1 to 16 digits (whole and partial 4-byte words)', Array.from({ length: 16 }, (_, i) => ({ first: 10 ** i - 1, count: 2 }))],
    ['ranges from negative to positive (rows written straight to the table)', [{ first: -3, count: 6 }, { first: -2n, count: 4 }]],
    ['a range ending at 2^53 - 1', [{ first: Number.MAX_SAFE_INTEGER - 3, count: 4 }]],
    ['a number range past 2^53 (rounded as first + i)', [{ first: 2 ** 53 - 2, count: 5 }]],
    ['numbers and bigints', [{ first: 41, count: 2 }, { first: 43n, count: 2 }, { first: 45, count: 1 }]],
  ]
  for (const [name, ranges] of cases) {
    const ids = expandRanges(ranges)
    t.equal(joinRanges(ranges, '\n'), ids.join('\n'), `${name}, newline`)
    t.equal(joinRanges(ranges, '","'), ids.join('","'), `${name}, JSON separator`)
    t.equal(joinRanges(ranges, '\n', true), ids.map((id) => `${id}\n`).join(''), `${name}, lines ended by a newline`)
  }
})

t.test('joinRanges matches join on random batches of ranges', async (t) => {
  let seed = 12345
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
  let mismatches = 0
  for (let round = 0; round < 500; round++) {
    const ranges: IdRange[] = []
    // Half past 2^31, the rest small; some rounds bigints, as snowflake gives them.
    let next = (random() < 0.5 ? 2 ** 31 : 0) + Math.floor(random() * 10 ** Math.floor(random() * 15))
    const big = random() < 0.3
    const count = 1 + Math.floor(random() * 10)
    for (let i = 0; i < count; i++) {
      const n = Math.floor(random() * 300)
      ranges.push({ first: big ? BigInt(next) + 2_000_000_000_000_000_000n : next, count: n })
      next += n + Math.floor(random() * 5000)
    }
    if (joinRanges(ranges, '\n') !== expandRanges(ranges).join('\n')) mismatches++
    if (joinRanges(ranges, '\n', true) !== expandRanges(ranges).map((id) => `${id}\n`).join('')) mismatches++
  }
  t.equal(mismatches, 0)
})

t.test('a batch larger than the buffer grows it', async (t) => {
  const ranges = [{ first: 1_000_000_000_000, count: 20_000 }]
  const ids = expandRanges(ranges)
  t.ok(ids.join('","').length > 64 * 1024, 'past the first 64 KiB')
  t.equal(joinRanges(ranges, '","'), ids.join('","'))
})

t.test('a separator outside printable ASCII goes to join', async (t) => {
  t.equal(joinRanges([{ first: 2 ** 40, count: 2 }], ' € '), [2 ** 40, 2 ** 40 + 1].join(' € '))
  t.equal(joinRanges([{ first: 2 ** 40, count: 2 }], ' € ', true), `${2 ** 40} € ${2 ** 40 + 1} € `)
  t.equal(joinRanges([], ' € ', true), '', 'nothing: no separator either')
})
