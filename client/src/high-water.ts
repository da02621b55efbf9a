import type { IdRange } from './id-ranges.js'

// No ID twice from one server instance (client/README.md#guarantees), checked once per answer, so the
// hot path costs nothing. Answers to concurrent requests arrive in any order: each is held to
// the mark as it was when its request was SENT, and must not overlap any answer accepted
// meanwhile; so every two accepted answers are compared one way or the other.

/** A request under way for one `<mode>/<key>`. */
export interface Ticket { readonly scope: string, readonly seq: number }

/** An accepted answer, kept while a request sent before it is still under way. */
interface Accepted { seq: number, first: bigint, last: bigint }

interface Mark {
  /** The highest ID accepted, over the answers every request under way was sent after. */
  base: bigint | undefined
  /** Answers accepted while a request sent before them was under way, in order. */
  recent: Accepted[]
}

export class HighWaterMarks {
  private seq = 0
  /** Per `<mode>/<key>`: the seq of each request under way. */
  private readonly open = new Map<string, Set<number>>()
  /** Per instance, per `<mode>/<key>`. */
  private readonly marks = new Map<string, Map<string, Mark>>()

  sent (scope: string): Ticket {
    const seq = ++this.seq
    let open = this.open.get(scope)
    if (open === undefined) this.open.set(scope, open = new Set())
    open.add(seq)
    return { scope, seq }
  }

  /** The request ended without an answer to accept (a failure). Accepting ends it too. */
  ended (ticket: Ticket): void {
    const open = this.open.get(ticket.scope)
    if (open === undefined) return
    open.delete(ticket.seq)
    if (open.size === 0) this.open.delete(ticket.scope)
  }

  /** Undefined when accepted; else why it is refused. */
  accept (ticket: Ticket, instance: string, ranges: readonly IdRange[]): string | undefined {
    this.ended(ticket)
    let previous: bigint | undefined
    for (const r of ranges) {
      if (r.last < r.first) return `the answer is not strictly increasing: a run from ${r.first} down to ${r.last}`
      if (previous !== undefined && r.first <= previous) return `the answer is not strictly increasing: ${r.first} after ${previous}`
      previous = r.last
    }
    const first = ranges[0]?.first
    if (first === undefined || previous === undefined) return undefined
    const last = previous
    let byInstance = this.marks.get(instance)
    if (byInstance === undefined) this.marks.set(instance, byInstance = new Map())
    let mark = byInstance.get(ticket.scope)
    if (mark === undefined) byInstance.set(ticket.scope, mark = { base: undefined, recent: [] })

    let floor = mark.base
    for (const a of mark.recent) {
      if (a.seq < ticket.seq) {
        if (floor === undefined || a.last > floor) floor = a.last
      } else if (first <= a.last && last >= a.first) {
        return `IDs ${first}..${last} overlap ${a.first}..${a.last}, taken from ${instance} for ${ticket.scope} while this request was under way`
      }
    }
    if (floor !== undefined && first <= floor) {
      return `IDs from ${first}, at or below ${floor}, the highest this client took from ${instance} for ${ticket.scope}: the instance went back`
    }
    mark.recent.push({ seq: ++this.seq, first, last })
    this.settle(mark, this.open.get(ticket.scope))
    return undefined
  }

  /** Folds into the base the answers that every request under way was sent after. */
  private settle (mark: Mark, open: Set<number> | undefined): void {
    let oldest = Infinity
    if (open !== undefined) for (const seq of open) if (seq < oldest) oldest = seq
    let kept = 0
    for (const a of mark.recent) {
      if (a.seq < oldest) {
        if (mark.base === undefined || a.last > mark.base) mark.base = a.last
      } else {
        mark.recent[kept++] = a
      }
    }
    mark.recent.length = kept
  }
}
