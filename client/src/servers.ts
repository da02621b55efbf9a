/** How failed servers are skipped. */
export interface BackoffOptions {
  /** The first skip after a failure; each further failure in a row doubles it. */
  backoffMs: number
  maxBackoffMs: number
}

interface ServerState {
  url: string
  /** Failures in a row, reset by a success. */
  failures: number
  /** Skipped until this time while others are available. */
  downUntil: number
}

/**
 * Round-robin over the servers, skipping any in its backoff. When every server is in its
 * backoff, the one whose backoff ends first is named with how long until then: a call that
 * has not tried it yet tries it at once (an earlier call's failures do not fail this one
 * unasked); a call that has waits for it.
 */
export class ServerRing {
  private readonly states: ServerState[]
  private cursor = 0

  constructor (urls: readonly string[], private readonly options: BackoffOptions, private readonly now: () => number) {
    this.states = urls.map((url) => ({ url, failures: 0, downUntil: 0 }))
  }

  get size (): number {
    return this.states.length
  }

  /** The next server to ask, and how many ms until its backoff ends (0: now). `prefer` is asked first when it is up. */
  pick (prefer?: string): { server: string, waitMs: number } {
    const now = this.now()
    if (prefer !== undefined) {
      const s = this.states.find((x) => x.url === prefer)
      if (s !== undefined && s.downUntil <= now) return { server: s.url, waitMs: 0 }
    }
    const n = this.states.length
    let soonest = this.states[this.cursor % n] as ServerState
    for (let i = 0; i < n; i++) {
      const s = this.states[(this.cursor + i) % n] as ServerState
      if (s.downUntil <= now) {
        this.cursor = (this.cursor + i + 1) % n
        return { server: s.url, waitMs: 0 }
      }
      if (s.downUntil < soonest.downUntil) soonest = s
    }
    this.cursor = (this.states.indexOf(soonest) + 1) % n
    return { server: soonest.url, waitMs: soonest.downUntil - now }
  }

  failed (url: string): void {
    const s = this.states.find((x) => x.url === url)
    if (s === undefined) return
    s.failures++
    const backoff = Math.min(this.options.maxBackoffMs, this.options.backoffMs * 2 ** Math.min(s.failures - 1, 30))
    s.downUntil = this.now() + backoff
  }

  succeeded (url: string): void {
    const s = this.states.find((x) => x.url === url)
    if (s === undefined) return
    s.failures = 0
    s.downUntil = 0
  }

  /** Whether the server is in its backoff now. */
  isDown (url: string): boolean {
    const s = this.states.find((x) => x.url === url)
    return s !== undefined && s.downUntil > this.now()
  }
}
