import { executionAsyncResource } from 'node:async_hooks'

// Keeps one process.nextTick() record alive for the life of the process.
//
// Node builds every nextTick record as `{ [async_id_symbol]: id, [trigger_async_id_symbol]: t,
// callback, args }`. V8 keeps only two states of feedback for properties defined after a
// computed key: monomorphic (one hidden class) or megamorphic, for good. The hidden classes
// of those records are held weakly. A full GC that runs while no record is alive (an idle
// moment after start, when this service has more heap to tidy than a bare server) frees
// them. The next record then gets a new hidden class and the feedback turns megamorphic.
// From then on, every nextTick (about 20 per HTTP request, from Node's streams) defines
// `callback` and `args` through the V8 runtime (Runtime_DefineKeyedOwnPropertyInLiteral, 20 to
// 30 calls per HTTP request): 25,000 to 37,000 extra instructions per request, 40% to 60% of
// its count. Without this module, 3 of 7 service processes counted took that path; with it,
// none (docs/performance.md). `npm run bench` counts the calls in every run and fails when
// they come back.
//
// One live record keeps the whole chain of hidden classes reachable through its map's back
// pointers, so the feedback stays monomorphic. The record is the resource of a nextTick
// callback's own tick (executionAsyncResource), so no async hook is ever enabled: enabling one
// would turn off V8's promise fast paths for the life of the process. The record sits in
// Node's queue until the callback runs and takes it, so it is alive throughout. The cost is one
// small object and no work per request.

let kept: object | undefined
let asked = false

/** Keeps the record of one nextTick alive, from the moment this is called. */
export function keepTickShape (): void {
  if (asked) return
  asked = true
  process.nextTick(() => {
    kept = executionAsyncResource()
  })
}

/** The record kept, once its tick has run (for tests). */
export function keptTickRecord (): object | undefined {
  return kept
}

// On import: the entry point imports this module first, so the record is taken before the
// rest of the service loads and allocates.
keepTickShape()
