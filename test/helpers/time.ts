import FakeTimers from '@sinonjs/fake-timers'
import type { Test } from 'tap'

// Time in tests. Integration and end-to-end tests wait on real processes and engines, so they
// sleep and poll (`sleep`, `until`); unit tests never wait on real time: `fakeTime` replaces the
// timers, Date and performance.now for one test, and `clock.tickAsync`, `outcome` and `settled`
// move them, running each timer due and the promise callbacks between them, in no real time
// (a `sleep` under fake time is a fake timer too).

/** The fake clock of a test: `tickAsync(ms)` moves it, `setSystemTime` steps Date alone. */
export type FakeClock = ReturnType<typeof FakeTimers.install>

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Polls `what` every `everyMs` until it holds or `ms` passed; answers its last value. */
export async function until (what: () => boolean | Promise<boolean>, ms: number, everyMs = 50): Promise<boolean> {
  const end = Date.now() + ms
  while (!await what() && Date.now() < end) await sleep(everyMs)
  return what()
}

/**
 * Fake timers, Date and performance.now for the rest of `t` (uninstalled at its end), starting
 * at `now`. setImmediate and process.nextTick stay real: promise callbacks and I/O callbacks run
 * as they would. The clock moves only when the test moves it (`clock.tickAsync`, `outcome`, `settled`).
 * With `auto`, it also runs the next timer after every turn of the real event loop (fake-timers'
 * `nextAsync` mode), as though the process slept until then: for tests of code that waits on
 * timers at many places in one call. Under `auto` no real asynchronous I/O may be awaited: a turn
 * spent waiting for it moves the fake clock too, so a lease's TTL would lapse while a file is read.
 */
export function fakeTime (t: Test, { now = 1_700_000_000_000, auto = false } = {}): FakeClock {
  const clock = FakeTimers.install({
    now,
    toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'],
  })
  if (auto) clock.setTickMode({ mode: 'nextAsync' })
  t.teardown(() => clock.uninstall())
  return clock
}

export type Outcome<T> = { state: 'resolved', value: T, afterMs: number } | { state: 'rejected', reason: unknown, afterMs: number } | { state: 'pending', afterMs: number }

/**
 * Moves the fake clock a millisecond at a time until `promise` settles or `maxMs` passed: how it
 * stands then, and after how many fake milliseconds. A hang shows as `pending`, never as a test
 * that waits forever.
 */
export async function outcome<T> (clock: FakeClock, promise: Promise<T>, maxMs: number): Promise<Outcome<T>> {
  const seen: { end?: { state: 'resolved', value: T } | { state: 'rejected', reason: unknown } } = {}
  promise.then((value) => { seen.end = { state: 'resolved', value } }, (reason: unknown) => { seen.end = { state: 'rejected', reason } })
  await clock.tickAsync(0)
  let afterMs = 0
  for (; afterMs < maxMs && seen.end === undefined; afterMs++) await clock.tickAsync(1)
  return seen.end === undefined ? { state: 'pending', afterMs } : { ...seen.end, afterMs }
}

/** Awaits `value`, moving the fake clock while it is pending; throws when it is still pending after `maxMs` of fake time. */
export async function settled<T> (clock: FakeClock, value: T | Promise<T>, maxMs = 60_000): Promise<T> {
  const o = await outcome(clock, Promise.resolve(value), maxMs)
  if (o.state === 'resolved') return o.value
  if (o.state === 'rejected') throw o.reason
  throw new Error(`still pending after ${maxMs} ms of fake time`)
}

/** What `value` rejects with, moving the fake clock while it is pending; undefined when it resolves. */
export async function failureOf (clock: FakeClock, value: unknown, maxMs = 60_000): Promise<unknown> {
  return settled(clock, value, maxMs).then(() => undefined, (e: unknown) => e)
}
