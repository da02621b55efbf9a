import { expandRanges, type IdRange } from '../id-range.js'

type Id = IdRange['first']

// A batch's text, its IDs joined by a separator, without a number-to-string conversion per
// ID. A batch is ranges of consecutive IDs (a segment's range, or a snowflake millisecond's
// sequence), so each ID's text is the previous one's with the last digits counted up in
// place, and it is copied out four bytes at a time. V8's join converts every element on its
// own, and a batch's IDs are new numbers each time, so none is in V8's number-to-string
// cache. Per 1,000 fresh IDs, in process: below 2^31 join took 34 to 38 µs against 11 here;
// past 2^31 (a double-to-string each) 190 µs; for bigints (snowflake) 55 µs.

const NINE = 0x39
const ZERO = 0x30
const ONE = 0x31
/** Copies are whole 32-bit words: up to 3 bytes past a text are written, then overwritten. */
const SLACK = 4

let out: Buffer = Buffer.allocUnsafe(64 * 1024)
let outView = new DataView(out.buffer, out.byteOffset, out.length)
// The current ID's digits followed by the separator.
let text = new Uint8Array(64)
let textView = new DataView(text.buffer)

/**
 * The IDs of `ranges`, joined by `sep`: `expandRanges(ranges).join(sep)`; `terminated`: each
 * ID followed by `sep`, the last one too (lines of text, so every line is an ID).
 */
export function joinRanges (ranges: readonly IdRange[], sep: string, terminated = false): string {
  if (!isPlainAscii(sep)) {
    const ids = expandRanges(ranges)
    return ids.join(sep) + (terminated && ids.length > 0 ? sep : '')
  }
  let pos = 0
  for (const { first, count } of ranges) pos = writeRun(first, count, sep, pos)
  return pos === 0 ? '' : out.toString('latin1', 0, terminated ? pos : pos - sep.length)
}

function isPlainAscii (sep: string): boolean {
  return /^[\x20-\x7e\n]*$/.test(sep)
}

/** Writes `count` consecutive IDs from `first`, each followed by `sep`, at `pos` in `out`. */
function writeRun (first: Id, count: number, sep: string, pos: number): number {
  if (count < 1) return pos
  // Negative IDs (and numbers past 2^53) are written out one by one.
  const countable = typeof first === 'number' ? first >= 0 && first + count - 1 <= Number.MAX_SAFE_INTEGER : first >= 0n
  const sepLength = sep.length
  let length = setText(first, sep) // of the current ID's digits
  let d = text
  let dv = textView
  let buf = out
  let view = outView
  for (let i = 0; ; i++) {
    const chunk = length + sepLength
    if (pos + chunk + SLACK > buf.length) {
      buf = out = grow(buf, pos + chunk + SLACK)
      view = outView = new DataView(buf.buffer, buf.byteOffset, buf.length)
    }
    for (let w = 0; w < chunk; w += 4) view.setUint32(pos + w, dv.getUint32(w, true), true)
    pos += chunk
    if (i + 1 === count) return pos
    if (!countable) {
      length = setText(typeof first === 'number' ? first + (i + 1) : first + BigInt(i + 1), sep)
      d = text
      dv = textView
      continue
    }

    // Add one to the digits in place: trailing nines become zeros, the digit before them
    // goes up, and 999 + 1 is a 1 followed by the zeros (and the separator) already there.
    let k = length - 1
    while (k >= 0 && d[k] === NINE) d[k--] = ZERO
    if (k >= 0) {
      d[k] = (d[k] as number) + 1
    } else if (chunk + 1 + SLACK > d.length) {
      length = setText(typeof first === 'number' ? first + (i + 1) : first + BigInt(i + 1), sep)
      d = text
      dv = textView
    } else {
      d.copyWithin(1, 0, chunk)
      d[0] = ONE
      length++
    }
  }
}

/** Writes an ID's digits and the separator into `text` (grown when needed); returns the digits' length. */
function setText (id: Id, sep: string): number {
  const digits = String(id)
  const length = digits.length
  if (length + sep.length + 1 + SLACK > text.length) {
    text = new Uint8Array(2 * (length + sep.length + 1 + SLACK))
    textView = new DataView(text.buffer)
  }
  for (let k = 0; k < length; k++) text[k] = digits.charCodeAt(k)
  for (let k = 0; k < sep.length; k++) text[length + k] = sep.charCodeAt(k)
  return length
}

function grow (buffer: Buffer, needed: number): Buffer {
  const bigger = Buffer.allocUnsafe(Math.max(needed, buffer.length * 2))
  buffer.copy(bigger)
  return bigger
}
