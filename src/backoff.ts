// The server's one backoff rule (the client has its own, in client/src/servers.ts).

/** `previousMs` is 0 when the last attempt succeeded. */
export function nextBackoffMs (previousMs: number, minMs: number, maxMs = Infinity): number {
  return Math.min(Math.max(previousMs * 2, minMs), maxMs)
}
