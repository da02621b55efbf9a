import type { Clock } from './clock.js'
import type { Transport } from './transport.js'

export interface LeafClientOptions {
  /** Base URLs of the Leaf-TS servers (`http://10.0.0.1:8080`); asked round-robin. */
  servers: readonly string[]
  /** Sent as `Authorization: Bearer <token>` with every request (for a gateway in front of the servers). */
  token?: string
  /** Keep IDs in a local buffer per (mode, key), fetched ahead in batches. Default true; false: one request per call. */
  prefetch?: boolean
  /** How long one call may take, retries on other servers included (ms). Default 5,000. */
  timeoutMs?: number
  /** How long one request to one server may take before the next server is asked (ms). Default 2,000. */
  requestTimeoutMs?: number
  /** Smallest batch asked for. Default 100. */
  minBatch?: number
  /** Largest batch asked for; the servers' `leaf.batch.max` (default 10,000). A server that says its own is lower lowers it. */
  maxBatch?: number
  /** The batch size adapts to one fetch per key per this many ms. Default 1,000. */
  targetFetchIntervalMs?: number
  /** Snowflake IDs are dropped this long after the request that fetched them was sent (ms). Default 1,000. */
  snowflakeMaxAgeMs?: number
  /** A failed server is skipped for this long, doubling with each failure in a row (ms). Default 100. */
  backoffMs?: number
  /** The longest skip. Default 5,000. */
  maxBackoffMs?: number
  /**
   * When every server refuses the connection, a call fails with UNREACHABLE once each has
   * refused this many times (the rounds `backoffMs` apart, doubling), not at `timeoutMs`. Default 2.
   */
  refusedRounds?: number
  /**
   * `round-robin` (default): each fetch goes to the next server. `sticky`: each (mode, key)
   * stays with the server that last answered it until that one fails, so its IDs keep
   * increasing until a failover.
   */
  balance?: 'round-robin' | 'sticky'
  /** Keep-alive connections per server at most. Default 16. */
  connections?: number
  /** How requests are sent; the default is undici, one keep-alive Pool per server. */
  transport?: Transport
  /** Tests inject one. */
  clock?: Clock
}

export const DEFAULTS = {
  prefetch: true,
  timeoutMs: 5000,
  requestTimeoutMs: 2000,
  minBatch: 100,
  /** The server's `leaf.batch.max` default. */
  maxBatch: 10_000,
  targetFetchIntervalMs: 1000,
  snowflakeMaxAgeMs: 1000,
  backoffMs: 100,
  maxBackoffMs: 5000,
  refusedRounds: 2,
  balance: 'round-robin',
  connections: 16,
} as const

export type Settled = Required<Omit<LeafClientOptions, 'token' | 'transport' | 'clock'>>

export function settle (options: LeafClientOptions): Settled {
  const settled = { ...DEFAULTS, ...definedOnly(options) } as Settled
  if (!Array.isArray(settled.servers) || settled.servers.length === 0) throw new TypeError('servers: at least one server URL is needed')
  for (const s of settled.servers) {
    let url: URL
    try {
      url = new URL(s)
    } catch {
      throw new TypeError(`servers: ${JSON.stringify(s)} is not a URL`)
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`servers: ${s} is not http(s)`)
  }
  if (new Set(settled.servers).size !== settled.servers.length) throw new TypeError('servers: a server is listed twice')
  const positive = ['timeoutMs', 'requestTimeoutMs', 'targetFetchIntervalMs', 'snowflakeMaxAgeMs', 'maxBackoffMs'] as const
  for (const k of positive) if (!(typeof settled[k] === 'number' && settled[k] > 0)) throw new RangeError(`${k} must be a number above 0, not ${String(settled[k])}`)
  if (!(typeof settled.backoffMs === 'number' && settled.backoffMs >= 0)) throw new RangeError(`backoffMs must be a number from 0, not ${String(settled.backoffMs)}`)
  for (const k of ['minBatch', 'maxBatch', 'connections', 'refusedRounds'] as const) {
    if (!Number.isInteger(settled[k]) || settled[k] < 1) throw new RangeError(`${k} must be an integer from 1, not ${String(settled[k])}`)
  }
  if (settled.minBatch > settled.maxBatch) throw new RangeError(`minBatch (${settled.minBatch}) is above maxBatch (${settled.maxBatch})`)
  if (settled.balance !== 'round-robin' && settled.balance !== 'sticky') throw new TypeError(`balance must be 'round-robin' or 'sticky', not ${String(settled.balance)}`)
  return settled
}

function definedOnly<T extends object> (values: T): Partial<T> {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) as Partial<T>
}
