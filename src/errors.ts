// Every error a client can see, with its HTTP status. The errors table of docs/operations.md is
// checked against this one by test/docs/docs.test.ts.
export const ERRORS = {
  INVALID_KEY: { status: 400, message: 'The key must be 1 to 128 characters long.' },
  INVALID_COUNT: { status: 400, message: 'count must be an integer from 1 to the configured batch maximum.' },
  INVALID_ID: { status: 400, message: 'The value is not a decimal 64-bit integer.' },
  INVALID_BODY: { status: 400, message: 'The request body is not valid.' },
  UNAUTHORIZED: { status: 401, message: 'This route needs a token: Authorization: Bearer <token>, or Basic with the token as the password.' },
  INVALID_TOKEN: { status: 401, message: 'The token given does not match leaf.admin.token or leaf.admin.view-token: check it (sent as Bearer <token>, or as Basic\'s password).' },
  FORBIDDEN: { status: 403, message: 'The view token opens the views only: tag management needs leaf.admin.token.' },
  KEY_NOT_FOUND: { status: 404, message: 'The key is not in the leaf_alloc table: insert a row into leaf_alloc or POST /api/segment/tags.' },
  NOT_FOUND: { status: 404, message: 'No such route.' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'The ID routes answer GET and POST only: a HEAD would use up an ID for an answer without it.' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request (its headers, or all of it) did not arrive in time.' },
  KEY_EXISTS: { status: 409, message: 'The key is already in the leaf_alloc table.' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'The request body is too large.' },
  HEADERS_TOO_LARGE: { status: 431, message: 'The request line and headers are too large.' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'The request body must be JSON: send Content-Type: application/json.' },
  MODE_DISABLED: { status: 503, message: 'This ID mode is disabled on this instance.' },
  NOT_READY: { status: 503, message: 'The generator is not initialised yet.' },
  SEGMENTS_NOT_READY: { status: 503, message: 'Both segments are used up and the database did not answer in time.' },
  STORE_SPLIT: { status: 503, message: 'More than one host of leaf.jdbc.url answers writable: nothing is allocated until all but one are read-only.' },
  STORE_NOT_MOVED: { status: 503, message: 'The host in use of leaf.jdbc.url does not answer, and the next one may be an old primary: nothing is allocated there.' },
  STORE_UNAVAILABLE: { status: 503, message: 'The database did not answer.' },
  STORE_UNCONFIRMED: { status: 503, message: 'The segment store has not been reached within the serving bound; buffered IDs are not served until it is.' },
  CLOCK_BACKWARDS: { status: 503, message: 'The clock moved backwards; no ID is issued until it catches up.' },
  SNOWFLAKE_NOT_READY: { status: 503, message: 'Snowflake mode holds no worker id yet (ZooKeeper unreachable at start): it retries in the background; segment mode is not affected.' },
  WORKER_ID_UNAVAILABLE: { status: 503, message: 'This instance holds no worker id it may issue snowflake IDs with now.' },
  WORKER_LEASE_LOST: { status: 503, message: 'This instance\'s worker-id lease ran out or was taken; no snowflake ID until it leases one again.' },
  SEQUENCE_EXHAUSTED: { status: 503, message: 'Every ID of the current time unit is issued (a layout in seconds under a burst); try again.' },
  SHUTTING_DOWN: { status: 503, message: 'This instance is shutting down: send the request to another one (this connection is closed).' },
  ID_SPACE_EXHAUSTED: { status: 503, message: 'The layout\'s time field has run out; no snowflake ID can be made.' },
  INVALID_FIELD: { status: 400, message: 'A field of the ID to make is out of range.' },
  INVALID_LAYOUT: { status: 400, message: 'The layout spec is not valid.' },
  BAD_REQUEST: { status: 400, message: 'The request is malformed.' },
  INTERNAL: { status: 500, message: 'Internal error.' },
} as const satisfies Record<string, { status: number, message: string }>

export type ErrorCode = keyof typeof ERRORS

export interface LeafErrorOptions extends ErrorOptions {
  /** Answered beside `error` and `message` (INVALID_FIELD's `field`, Leaf's `errorMsg`). */
  fields?: Record<string, string>
}

export class LeafError extends Error {
  readonly code: ErrorCode
  readonly statusCode: number
  readonly fields: Record<string, string> | undefined

  constructor (code: ErrorCode, message: string = ERRORS[code].message, options?: LeafErrorOptions) {
    super(message, options)
    this.name = 'LeafError'
    this.code = code
    this.statusCode = ERRORS[code].status
    this.fields = options?.fields
  }
}

export function isLeafError (err: unknown): err is LeafError {
  return err instanceof LeafError
}

export interface StartRefusedOptions {
  /** Stable, given by each thrower (`PORT_IN_USE`, `STORE_REFUSED` ...); START_REFUSED when none is. */
  code?: string
  cause?: unknown
}

/** A start that must not go on (its message says why); the server exits 1 with that line. */
export class StartRefused extends Error {
  readonly code: string
  constructor (message: string, { code = 'START_REFUSED', cause }: StartRefusedOptions = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = 'StartRefused'
    this.code = code
  }
}

/** Why a worker id may not be leased (or kept): the stable part of a LeaseRefused. */
export type LeaseRefusedCode =
  /** Every id of the range is leased, and none expires within one TTL. */
  | 'LEASE_POOL_EXHAUSTED'
  /** A previous holder ran further ahead than leaf.snowflake.max-clock-drift-ms, or this clock is off its live peers'. */
  | 'LEASE_CLOCK_DRIFT'
  /** The clock is behind a time recorded for the id (the cache file, ZooKeeper, the pool). */
  | 'LEASE_CLOCK_BEHIND'
  /** The pool's store failed or did not answer in time. */
  | 'LEASE_STORE_UNAVAILABLE'
  /** The pool's table is missing (or too old) and cannot be created (or altered). */
  | 'LEASE_TABLE_MISSING'
  /** The pool records another ID layout. */
  | 'LEASE_LAYOUT_MISMATCH'
  /** The store grants a lease shorter than 3 heartbeat intervals. */
  | 'LEASE_TTL_TOO_SHORT'
  /** The worker id lies outside leaf.snowflake.worker-id.min/max (or the layout's worker bits). */
  | 'LEASE_ID_OUT_OF_RANGE'
  /** Another live instance holds the id, or ZooKeeper holds another id for this address. */
  | 'LEASE_HELD_ELSEWHERE'
  /** This instance has no identity to lease under: no address, port 0, no StatefulSet ordinal. */
  | 'LEASE_NO_IDENTITY'
  /** ZooKeeper is unreachable and the cache file cannot stand in for it. */
  | 'LEASE_CACHE_UNUSABLE'
  /** The worker-id cache file cannot be written. */
  | 'LEASE_CACHE_UNWRITABLE'
  /** ZooKeeper refused leaf.snowflake.zk.auth (AUTH_FAILED) or access to the tree (NO_AUTH). */
  | 'LEASE_AUTH_REFUSED'

/** No worker id may be leased (or kept): the pool, the clock or another live holder says IDs could repeat. */
export class LeaseRefused extends StartRefused {
  declare readonly code: LeaseRefusedCode

  constructor (code: LeaseRefusedCode, message: string, options?: { cause?: unknown }) {
    super(message, { code, cause: options?.cause })
    this.name = 'LeaseRefused'
  }
}
