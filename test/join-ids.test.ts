import t from 'tap'
import { joinIds, joinRanges } from '../src/http/join-ids.js'
import { expandRanges, type Id, type IdRange } from '../src/segment/segment-buffer.js'

t.test('joinIds writes what Array.prototype.join writes', async (t) => {
  const cases: [string, Id[]][] = [
    ['empty', []],
    ['one', [7]],
    ['a run over 9 -> 10 and 99 -> 100', [8, 9, 10, 11, 98, 99, 100, 101]],
    ['a run over 999,999 -> 1,000,000', Array.from({ length: 5 }, (_, i) => 999_998 + i)],
    ['jumps between runs (a batch over two segments)', [5, 6, 7, 1001, 1002, 2_000_000_000, 2_000_000_001]],
    ['IDs past 2^31, as a segment serves them', Array.from({ length: 2000 }, (_, i) => 4_294_967_290 + i)],
    ['the last exact numbers', [Number.MAX_SAFE_INTEGER - 2, Number.MAX_SAFE_INTEGER - 1, Number.MAX_SAFE_INTEGER]],
    ['bigints: a snowflake millisecond and the next', [2127220875605311488n, 2127220875605311489n, 2127220875609505792n, 2127220875609505793n]],
    ['bigint carry to one more digit', [9999999999999999999n, 10000000000000000000n, 10000000000000000001n]],
    ['a number then a bigint one higher', [41, 42n, 43n]],
    ['not increasing', [5, 4, 4, 3]],
    ['a bigint then a number one higher', [5n, 6, 7]],
    ['numbers past 2^31 then a bigint then numbers', [2 ** 31, 2 ** 31 + 1, 3n, 4, 5]],
    ['negative IDs (rows written straight to the table)', [-3, -2, -1, 0, 1, 2 ** 31, -5n, -4n, -3n]],
    ['a bigint over 32 digits, carrying to one more', [10n ** 40n - 2n, 10n ** 40n - 1n, 10n ** 40n, 10n ** 40n + 1n]],
    ['carries at the edge of the 64-byte scratch text', [10n ** 58n - 1n, 10n ** 58n, 10n ** 58n + 1n, 10n ** 59n - 1n, 10n ** 59n, 10n ** 60n - 1n, 10n ** 60n]],
    ['texts of 1 to 16 digits (whole and partial 4-byte words)', Array.from({ length: 16 }, (_, i) => [10 ** i - 1, 10 ** i]).flat()],
  ]
  for (const [name, ids] of cases) {
    t.equal(joinIds(ids, '\n'), ids.join('\n'), `${name}, newline`)
    t.equal(joinIds(ids, '","'), ids.join('","'), `${name}, JSON separator`)
  }
})

t.test('joinIds matches join on random batches of runs and jumps', async (t) => {
  let seed = 12345
  const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
  let mismatches = 0
  for (let round = 0; round < 500; round++) {
    const ids: Id[] = []
    // Half past 2^31, the rest small.
    let next = (random() < 0.5 ? 2 ** 31 : 0) + Math.floor(random() * 10 ** Math.floor(random() * 15))
    const big = random() < 0.3
    const count = 1 + Math.floor(random() * 300)
    for (let i = 0; i < count; i++) {
      ids.push(big ? BigInt(next) + 2_000_000_000_000_000_000n : next)
      next += random() < 0.9 ? 1 : 1 + Math.floor(random() * 5000)
    }
    if (joinIds(ids, '\n') !== ids.join('\n')) mismatches++
  }
  t.equal(mismatches, 0)
})

t.test('a batch larger than the buffer grows it', async (t) => {
  const ids = Array.from({ length: 20_000 }, (_, i) => 1_000_000_000_000 + i)
  t.ok(ids.join('","').length > 64 * 1024, 'past the first 64 KiB')
  t.equal(joinIds(ids, '","'), ids.join('","'))
})

t.test('a separator outside printable ASCII goes to join', async (t) => {
  const ids = [2 ** 40, 2 ** 40 + 1]
  t.equal(joinIds(ids, ' € '), ids.join(' € '))
})

t.test('joinRanges writes the ranges\' IDs as join does', async (t) => {
  const cases: [string, IdRange[]][] = [
    ['none', []],
    ['an empty range', [{ first: 5, count: 0 }]],
    ['one segment\'s batch', [{ first: 4_294_967_000, count: 1000 }]],
    ['a batch over two segments', [{ first: 95, count: 10 }, { first: 2001, count: 3 }]],
    ['a carry to one more digit', [{ first: 999_995, count: 10 }]],
    ['bigints past 2^53', [{ first: 2n ** 53n - 2n, count: 5 }, { first: 10n ** 20n - 2n, count: 4 }]],
    ['a range from negative to positive (rows written straight to the table)', [{ first: -3, count: 6 }, { first: -2n, count: 4 }]],
    ['a range ending at 2^53 - 1', [{ first: Number.MAX_SAFE_INTEGER - 3, count: 4 }]],
    ['a number range past 2^53 (rounded as first + i)', [{ first: 2 ** 53 - 2, count: 5 }]],
    ['over 64 KiB of text', [{ first: 10 ** 15, count: 5000 }]],
  ]
  for (const [name, ranges] of cases) {
    const ids = expandRanges(ranges)
    t.equal(joinRanges(ranges, '\n'), ids.join('\n'), `${name}, newline`)
    t.equal(joinRanges(ranges, '","'), ids.join('","'), `${name}, JSON separator`)
  }
  t.equal(joinRanges([{ first: 7, count: 2 }], ' € '), '7 € 8', 'a separator outside printable ASCII goes to join')
})
