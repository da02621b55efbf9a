// Promise helpers over timers, shared by the generators, the lease and readiness.

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

export class TimeoutError extends Error {
  readonly code = 'LEAF_TIMEOUT'

  constructor (message: string) {
    super(message)
    this.name = 'TimeoutError'
  }
}

/** Rejects with a TimeoutError of `message` when `promise` has not settled within `ms`; the timer never outlives it. */
export function withTimeout<T> (promise: Promise<T>, ms: number, message: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new TimeoutError(message)), ms)
    promise.then((v) => { clearTimeout(timer); resolve(v) }, (e: unknown) => { clearTimeout(timer); reject(e) })
  })
}

/** Resolves true when `promise` settles (either way) within `ms`, false otherwise. Never rejects. */
export function settlesWithin (promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    const settled = () => { clearTimeout(timer); resolve(true) }
    promise.then(settled, settled)
  })
}
