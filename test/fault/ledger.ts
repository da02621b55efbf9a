// Every ID the suite receives goes through here: duplicates per ID space (a segment tag, or
// all snowflake IDs), and strict increase within each response and each stream (one
// client's sequential requests to one instance, for one tag or for snowflake).

const INITIAL_CAPACITY = 1 << 16

class Int64List {
  private data = new BigInt64Array(INITIAL_CAPACITY)
  length = 0

  push (id: bigint): void {
    if (this.length === this.data.length) {
      const bigger = new BigInt64Array(this.data.length * 2)
      bigger.set(this.data)
      this.data = bigger
    }
    this.data[this.length++] = id
  }

  sorted (): BigInt64Array {
    return this.data.slice(0, this.length).sort()
  }
}

export class IdLedger {
  private readonly spaces = new Map<string, Int64List>()
  private readonly last = new Map<string, bigint>()
  /** Every ID recorded. */
  ids = 0
  orderViolations = 0
  readonly samples: string[] = []

  /**
   * Records the IDs of one successful response. `space` is where IDs must be unique,
   * `stream` is where they must increase (undefined: only within the response).
   */
  record (space: string, stream: string | undefined, ids: bigint[]): void {
    let list = this.spaces.get(space)
    if (list === undefined) this.spaces.set(space, list = new Int64List())
    let previous = stream === undefined ? undefined : this.last.get(stream)
    for (const id of ids) {
      if (previous !== undefined && id <= previous) {
        this.orderViolations++
        if (this.samples.length < 5) this.samples.push(`${stream ?? space}: ${id} after ${previous}`)
      }
      previous = id
      list.push(id)
    }
    if (stream !== undefined && previous !== undefined) this.last.set(stream, previous)
    this.ids += ids.length
  }

  /** IDs seen more than once, per space, summed (sorts every space: call once at the end). */
  duplicates (): number {
    let dups = 0
    for (const [space, list] of this.spaces) {
      const sorted = list.sorted()
      for (let i = 1; i < sorted.length; i++) {
        if (sorted[i] === sorted[i - 1]) {
          dups++
          if (this.samples.length < 10) this.samples.push(`duplicate in ${space}: ${sorted[i]}`)
        }
      }
    }
    return dups
  }

  /** Sorted IDs of one space. */
  sorted (space: string): BigInt64Array {
    return this.spaces.get(space)?.sorted() ?? new BigInt64Array(0)
  }

  get spaceNames (): string[] {
    return [...this.spaces.keys()]
  }
}

/**
 * The IDs of a text/plain answer, or undefined if it is not that: a single ID alone (`123`,
 * Leaf's contract) or a batch, every ID on a line ended by a newline, the last one too
 * (`1\n2\n`). `batch` says which form the request asked for; undefined takes either.
 */
export function parseIds (body: string, batch?: boolean): bigint[] | undefined {
  const single = /^[0-9]{1,19}$/.test(body)
  const lines = !single && /^([0-9]{1,19}\n)+$/.test(body)
  if (batch === true ? !lines : batch === false ? !single : !(single || lines)) return undefined
  return (lines ? body.slice(0, -1) : body).split('\n').map(BigInt)
}

/**
 * The IDs of an ID route's answer, or undefined: the bare digits or lines (`parseIds`) in
 * whatever content type Accept chose, or Leaf-TS's JSON (`{"id"}`, `{"ids"}`) under its own
 * media type.
 */
export function parseAnswerIds (body: string, contentType: string | undefined): bigint[] | undefined {
  if (contentType?.startsWith('application/vnd.leaf-ts+json') !== true) return parseIds(body)
  let json: { id?: unknown, ids?: unknown }
  try {
    json = JSON.parse(body) as typeof json
  } catch {
    return undefined
  }
  const ids = json.ids ?? (json.id === undefined ? undefined : [json.id])
  if (!Array.isArray(ids) || ids.length === 0 || !ids.every((id) => typeof id === 'string' && /^[0-9]{1,19}$/.test(id))) return undefined
  return ids.map((id) => BigInt(id as string))
}
