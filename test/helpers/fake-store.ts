import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type NewTag, type SegmentStore, type TagRow, type TagChanges, type UnusedRange } from '../../src/segment/store.js'

interface Row { maxId: bigint, step: number, description: string | null, updateTime: Date }

/**
 * An in-memory leaf_alloc for unit tests of the generator. `failing` makes every call
 * reject, `delayMs` delays every answer, `calls` records each allocate (with the adapted
 * step asked for, if any).
 */
export class FakeStore implements SegmentStore {
  rows = new Map<string, Row>()
  failing = false
  /** What a failing call rejects with. */
  failure: Error = new Error('store down')
  delayMs = 0
  calls: { key: string, step: number | undefined }[] = []
  /** Allocations under way now, and the most there ever were at once. */
  allocating = 0
  maxAllocating = 0
  /** leaf_alloc_parked: tag -> its rows. */
  parked: { key: string, owner: string, first: bigint, end: bigint }[] = []
  claims: { key: string, owner: string }[] = []
  /** Every giveBack asked, and whether it held. */
  givenBack: { key: string, end: bigint, firstUnused: bigint, ok: boolean }[] = []

  constructor (rows: Record<string, { maxId?: bigint, step: number }> = {}) {
    for (const [key, row] of Object.entries(rows)) this.add(key, row.step, row.maxId)
  }

  add (key: string, step: number, maxId = 1n): void {
    this.rows.set(key, { maxId, step, description: null, updateTime: new Date() })
  }

  private async answer<T> (fn: () => T): Promise<T> {
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs))
    if (this.failing) throw this.failure
    return fn()
  }

  /** The rows as they are when it is asked (a SELECT reads then), answered after `delayMs`. */
  getAllTags (): Promise<TagRow[]> {
    const rows = [...this.rows].map(([key, row]) => ({ key, maxId: row.maxId }))
    return this.answer(() => rows)
  }

  allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    this.calls.push({ key, step: adapted?.step })
    this.maxAllocating = Math.max(this.maxAllocating, ++this.allocating)
    const done = () => { this.allocating-- }
    return this.reserve(key, adapted).finally(done)
  }

  private reserve (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    return this.answer(() => {
      const row = this.rows.get(key)
      if (row === undefined) return undefined
      const next = row.maxId + BigInt(adapted !== undefined && adapted.tableStep === row.step ? adapted.step : row.step)
      if (next > 2n ** 63n - 1n) throw new IdSpaceEnded(key)
      row.maxId = next
      return { key, maxId: row.maxId, step: row.step, ...(this.storeId === undefined ? {} : { store: this.storeId }) }
    })
  }

  /** What identity() answers: set it to play a failover. */
  storeId: string | undefined = undefined
  raised: { key: string, atLeast: bigint }[] = []

  raiseMaxId (key: string, atLeast: bigint): Promise<boolean> {
    return this.answer(() => {
      const row = this.rows.get(key)
      this.raised.push({ key, atLeast })
      if (row === undefined) return false
      if (row.maxId < atLeast) row.maxId = atLeast
      return true
    })
  }

  identity (): Promise<string | undefined> {
    return this.answer(() => this.storeId)
  }

  giveBack (key: string, end: bigint, firstUnused: bigint): Promise<boolean> {
    return this.answer(() => {
      const row = this.rows.get(key)
      const ok = row !== undefined && row.maxId === end
      if (ok) row.maxId = firstUnused
      this.givenBack.push({ key, end, firstUnused, ok })
      return ok
    })
  }

  park (key: string, owner: string, ranges: readonly UnusedRange[]): Promise<boolean> {
    return this.answer(() => {
      for (const r of ranges) this.parked.push({ key, owner, ...r })
      return true
    })
  }

  claimParked (key: string, owner: string): Promise<UnusedRange[]> {
    this.claims.push({ key, owner })
    return this.answer(() => {
      const mine = this.parked.filter((p) => p.key === key && p.owner === owner).sort((a, b) => a.first < b.first ? -1 : 1)
      this.parked = this.parked.filter((p) => !mine.includes(p))
      return mine.map(({ first, end }) => ({ first, end }))
    })
  }

  getAllRows (): Promise<LeafAllocRow[]> {
    return this.answer(() => [...this.rows].map(([key, r]) => ({ key, ...r })))
  }

  getTag (key: string): Promise<LeafAllocRow | undefined> {
    return this.answer(() => {
      const row = this.rows.get(key)
      return row === undefined ? undefined : { key, ...row }
    })
  }

  createTag (tag: NewTag): Promise<LeafAllocRow | undefined> {
    return this.answer(() => {
      if (this.rows.has(tag.key)) return undefined
      this.rows.set(tag.key, { maxId: tag.maxId, step: tag.step, description: tag.description, updateTime: new Date() })
      return { key: tag.key, ...this.rows.get(tag.key) as Row }
    })
  }

  updateTag (key: string, changes: TagChanges): Promise<LeafAllocRow | undefined> {
    return this.answer(() => {
      const row = this.rows.get(key)
      if (row === undefined) return undefined
      if (changes.step !== undefined) row.step = changes.step
      if (changes.description !== undefined) row.description = changes.description
      return { key, ...row }
    })
  }

  ping (): Promise<void> {
    return this.answer(() => undefined)
  }

  async close (): Promise<void> {}
}
