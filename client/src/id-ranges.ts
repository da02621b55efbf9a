/** Consecutive IDs `first`..`last`, both included: how a batch is held (never as an array of IDs). */
export interface IdRange { first: bigint, last: bigint }

// A batch answer is decimal IDs one per line, and they come in runs of consecutive IDs (a
// segment's range, a snowflake millisecond's sequence). Each line is read as two numbers, the
// digits before the last 9 and the last 9, which stay exact up to 24 digits, so a run is
// found with number arithmetic and only its first ID becomes a bigint.

const LOW_DIGITS = 9
const LOW_BASE = 1e9
const ZERO = 0x30
const NINE = 0x39
const MINUS = 0x2d
/** The most digits an int64 has (19), and one to spare before the two halves lose exactness. */
const MAX_DIGITS = 20

/**
 * The runs of a `text/plain` batch answer, in order; undefined when the text is not one
 * decimal integer per line (a proxy's page, a truncated body).
 */
export function parseIdRanges (text: string): IdRange[] | undefined {
  const ranges: IdRange[] = []
  let runStart = -1 // offset of the run's first line
  let runEnd = 0
  let runCount = 0
  let prevHigh = 0
  let prevLow = 0
  let pos = 0
  const length = text.length
  if (length === 0) return undefined
  while (pos < length) {
    let end = text.indexOf('\n', pos)
    if (end === -1) end = length
    const digits = end - pos
    if (digits === 0 || digits > MAX_DIGITS) return undefined
    if (text.charCodeAt(pos) === MINUS) {
      // Negative IDs (a Vesta layout's version 1) are rare: one bigint each, no run search.
      if (runStart !== -1) ranges.push(closeRun(text, runStart, runEnd, runCount))
      runStart = -1
      const id = parseSigned(text, pos, end)
      if (id === undefined) return undefined
      ranges.push(extend(ranges, id))
    } else {
      let high = 0
      let low = 0
      const split = end - LOW_DIGITS
      for (let i = pos; i < end; i++) {
        const c = text.charCodeAt(i)
        if (c < ZERO || c > NINE) return undefined
        if (i < split) high = high * 10 + (c - ZERO)
        else low = low * 10 + (c - ZERO)
      }
      const next = runStart !== -1 && (low === prevLow + 1
        ? high === prevHigh
        : low === 0 && prevLow === LOW_BASE - 1 && high === prevHigh + 1)
      if (next) {
        runCount++
      } else {
        if (runStart !== -1) ranges.push(closeRun(text, runStart, runEnd, runCount))
        runStart = pos
        runCount = 1
      }
      runEnd = end
      prevHigh = high
      prevLow = low
    }
    pos = end + 1 // past a trailing newline too: the loop ends
  }
  if (runStart !== -1) ranges.push(closeRun(text, runStart, runEnd, runCount))
  return ranges
}

function closeRun (text: string, start: number, end: number, count: number): IdRange {
  const lineEnd = text.indexOf('\n', start)
  const first = BigInt(text.slice(start, lineEnd === -1 || lineEnd > end ? end : lineEnd))
  return { first, last: first + BigInt(count - 1) }
}

function parseSigned (text: string, pos: number, end: number): bigint | undefined {
  const s = text.slice(pos, end)
  return /^-[0-9]{1,19}$/.test(s) ? BigInt(s) : undefined
}

/** A negative ID as its own range, or the previous range one longer when it follows it. */
function extend (ranges: IdRange[], id: bigint): IdRange {
  const prev = ranges[ranges.length - 1]
  if (prev !== undefined && prev.last + 1n === id) {
    ranges.pop()
    return { first: prev.first, last: id }
  }
  return { first: id, last: id }
}

/** How many IDs the ranges hold. */
export function countIds (ranges: readonly IdRange[]): number {
  let n = 0
  for (const r of ranges) n += Number(r.last - r.first) + 1
  return n
}
