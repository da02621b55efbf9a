// Time as the client's buffers see it: the real one, or a fake in tests.

/** Time as the buffers see it; tests give a fake one. */
export interface Clock {
  now (): number
  /** A wait between attempts, which a background refill makes too; never keeps the process alive. */
  sleep (ms: number): Promise<void>
  /**
   * A waiting caller's deadline: runs `fn` after `ms` unless the returned function is called
   * first. It keeps the process alive until then, so that a script awaiting a call gets its
   * answer or its error (with every timer unref()ed, Node ended it with exit code 13).
   */
  timer (fn: () => void, ms: number): () => void
}

export const REAL_CLOCK: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => { setTimeout(resolve, ms).unref() }),
  timer (fn, ms) {
    const t = setTimeout(fn, ms)
    return () => clearTimeout(t)
  },
}
