import { CLIENT_CODES, connectFailure, LeafClientError } from './errors.js'

/** What a call does next while every failure it met was a refused connection. */
export type RefusalStep =
  | { kind: 'ask', server: string, pauseMs: number }
  | { kind: 'give-up' }

/**
 * One call's refused connections. A server that refuses a connection does so in microseconds,
 * and one that does it `rounds` times in a row is not coming back within the call: waiting out
 * `timeoutMs` for it only makes the caller wait. So while every failure of the call is a
 * refused connection, the call goes round the servers, each round after a pause that doubles
 * from `backoffMs`, and gives up with UNREACHABLE once each has refused `rounds` times. Any
 * other failure (a timeout, a 5xx) ends this: a server that accepts but is slow or unready may
 * still answer, and the call retries until its deadline as before.
 */
export class Refusals {
  /** Refusals per server, in the order of `servers`. */
  private readonly counts: Map<string, number>
  private readonly reasons = new Map<string, string>()
  private onlyRefused = true
  private pausedForRound = 0
  private last: LeafClientError | undefined

  constructor (
    private readonly servers: readonly string[],
    private readonly rounds: number,
    private readonly backoffMs: number,
    private readonly startedAt: number
  ) {
    this.counts = new Map(servers.map((s) => [s, 0]))
  }

  /** Told of each failed attempt of the call. */
  failed (server: string, err: LeafClientError): void {
    const reason = connectFailure(err)
    if (reason === undefined) {
      this.onlyRefused = false
      return
    }
    this.counts.set(server, (this.counts.get(server) ?? 0) + 1)
    this.reasons.set(server, reason)
    this.last = err
  }

  /**
   * Once every server has refused and nothing else failed: the server refused the fewest times,
   * with the pause that starts a round, or give-up after the last round. Undefined before that
   * (the ring picks, skipping servers in their backoff) and after any other failure.
   */
  next (): RefusalStep | undefined {
    if (!this.unreachable) return undefined
    let fewest = Infinity
    let most = 0
    let server = this.servers[0] as string
    for (const s of this.servers) {
      const n = this.counts.get(s) as number
      if (n < fewest) {
        fewest = n
        server = s
      }
      if (n > most) most = n
    }
    if (fewest >= this.rounds) return { kind: 'give-up' }
    // Every server refused `fewest` times: a round is over, the next starts after its pause.
    if (fewest === most && this.pausedForRound < fewest) {
      this.pausedForRound = fewest
      return { kind: 'ask', server, pauseMs: this.backoffMs * 2 ** Math.min(fewest - 1, 30) }
    }
    return { kind: 'ask', server, pauseMs: 0 }
  }

  /** Whether every server has refused and nothing else failed: the call's error is UNREACHABLE. */
  get unreachable (): boolean {
    if (!this.onlyRefused) return false
    for (const n of this.counts.values()) if (n === 0) return false
    return true
  }

  error (attempts: number, now: number): LeafClientError {
    const n = this.servers.length
    const allRefused = [...this.reasons.values()].every((r) => r === 'ECONNREFUSED')
    const what = allRefused
      ? `${n} server${n === 1 ? '' : 's'} refused the connection`
      : `${n} server${n === 1 ? '' : 's'} could not be connected to`
    const list = this.servers.map((s) => allRefused ? s : `${s} (${this.reasons.get(s) ?? '?'})`).join(', ')
    const elapsed = Math.round(now - this.startedAt)
    return new LeafClientError(CLIENT_CODES.UNREACHABLE,
      `${what} (${attempts} attempts in ${elapsed} ms): ${list}; check that Leaf-TS runs there and that these are its address and port`,
      { server: this.last?.server, attempts, cause: this.last })
  }
}
