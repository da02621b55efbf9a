/**
 * Codes the client makes itself; every other code is the server's (`KEY_NOT_FOUND`,
 * `SEGMENTS_NOT_READY`, ...), passed through from its `{"error":"<CODE>"}` body.
 */
export const CLIENT_CODES = {
  /** No answer: the connection was refused, reset or closed. */
  NETWORK: 'NETWORK',
  /**
   * Every server refused the connection (or could not be connected to), round after round
   * (`refusedRounds`): the call fails at once rather than at its `timeoutMs`. Its message names
   * the servers, the attempts and how long they took.
   */
  UNREACHABLE: 'UNREACHABLE',
  /** No answer within the request's timeout, or the call's time budget ran out first. */
  TIMEOUT: 'TIMEOUT',
  /** An answer that is not Leaf's: a 200 without decimal IDs, or an error without its JSON body. */
  BAD_RESPONSE: 'BAD_RESPONSE',
  /**
   * A 200 whose IDs this client must not hand out: at or below the highest it already took
   * from that server instance for the key (the instance went back: a restart on a fresh
   * store, a store restored from a backup), or repeating or going back within the answer.
   */
  ID_REGRESSION: 'ID_REGRESSION',
  /** The client was closed before or during the call. */
  CLOSED: 'CLOSED',
  /** `tryNextNumber`/`nextNumber` on an ID past 2^53, which a number cannot hold exactly. */
  UNSAFE_INTEGER: 'UNSAFE_INTEGER',
} as const

export interface LeafClientErrorOptions {
  /** HTTP status of the server's answer; 0 when there was none. */
  status?: number
  /** The server that answered (or failed to); undefined when no server was asked. */
  server?: string | undefined
  /** How many requests the call made before it gave up. */
  attempts?: number
  cause?: unknown
}

export class LeafClientError extends Error {
  /** The server's error code, or one of CLIENT_CODES. */
  readonly code: string
  /** HTTP status of the answer, 0 when there was none. */
  readonly status: number
  /** The server's base URL, as given in `servers`. */
  readonly server: string | undefined
  /** Requests made for the call that failed (0 when none was needed to know). */
  readonly attempts: number

  constructor (code: string, message: string, options: LeafClientErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'LeafClientError'
    this.code = code
    this.status = options.status ?? 0
    this.server = options.server
    this.attempts = options.attempts ?? 0
  }

  /**
   * Whether another server (or the same one later) may answer: no answer, a 5xx
   * (`SEGMENTS_NOT_READY`, `STORE_UNAVAILABLE`, ...), a 429, an answer that is not Leaf's or
   * IDs that went back (another server, or another instance behind the same URL, may be right).
   * A 4xx (`KEY_NOT_FOUND`, `INVALID_KEY`, `UNAUTHORIZED`) would be the same everywhere.
   */
  get retryable (): boolean {
    if (this.code === CLIENT_CODES.CLOSED || this.code === CLIENT_CODES.UNSAFE_INTEGER) return false
    return this.status === 0 || this.status >= 500 || this.status === 429 || this.code === CLIENT_CODES.BAD_RESPONSE || this.code === CLIENT_CODES.ID_REGRESSION
  }
}

/**
 * Failures of the connection itself (Node's error codes, which undici passes through): no
 * request reached the server, and the same connection made again at once fails the same way.
 */
const CONNECT_FAILURES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND'])

/**
 * The system code of a NETWORK error whose connection failed (`ECONNREFUSED`, `ENOTFOUND`, ...),
 * read from its `cause`; undefined for any other error. A transport of one's own gets the fail
 * fast by passing the socket's error as the `cause`.
 */
export function connectFailure (err: LeafClientError): string | undefined {
  if (err.code !== CLIENT_CODES.NETWORK) return undefined
  const code = (err.cause as { code?: unknown } | undefined)?.code
  return typeof code === 'string' && CONNECT_FAILURES.has(code) ? code : undefined
}

export function isLeafClientError (err: unknown): err is LeafClientError {
  return err instanceof LeafClientError
}

/** The error of a non-200 answer: its `{"error","message"}` body when it is Leaf's. */
export function errorFromAnswer (status: number, body: string, server: string): LeafClientError {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    parsed = undefined
  }
  const leaf = parsed as { error?: unknown, message?: unknown } | undefined
  if (leaf !== undefined && leaf !== null && typeof leaf.error === 'string') {
    const message = typeof leaf.message === 'string' ? leaf.message : leaf.error
    return new LeafClientError(leaf.error, `${server}: ${status} ${leaf.error}: ${message}`, { status, server })
  }
  return new LeafClientError(CLIENT_CODES.BAD_RESPONSE, `${server}: ${status} without Leaf's error body: ${body.slice(0, 200)}`, { status, server })
}
