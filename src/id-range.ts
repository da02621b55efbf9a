/** The largest ID, and the largest `leaf_alloc.max_id`: 2^63 - 1, a signed BIGINT (Java's long). */
export const MAX_ID = 2n ** 63n - 1n

/** `count` consecutive IDs from `first`: how both generators hand a batch to the routes. */
export interface IdRange<T extends number | bigint = number | bigint> { first: T, count: number }

/** The IDs of some ranges, in order. */
export function expandRanges<T extends number | bigint> (ranges: readonly IdRange<T>[]): T[] {
  const ids: (number | bigint)[] = []
  for (const { first, count } of ranges) {
    if (typeof first === 'number') for (let i = 0; i < count; i++) ids.push(first + i)
    else for (let i = 0; i < count; i++) ids.push((first as bigint) + BigInt(i))
  }
  return ids as T[]
}
