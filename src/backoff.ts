// The one backoff rule of the server's retries: a failed segment load, a resting MySQL host, an
// allocation repeated after a conflict. (The client package has its own, in client/src/servers.ts.)

/**
 * The wait after a failure: `minMs` after the first, then twice the previous wait, at most
 * `maxMs`. `previousMs` is 0 when the last attempt succeeded.
 */
export function nextBackoffMs (previousMs: number, minMs: number, maxMs = Infinity): number {
  return Math.min(Math.max(previousMs * 2, minMs), maxMs)
}
