// A driver's error is never changed: where the plumbing has more to say, it wraps it as `cause`.

/** Stable: logs, /readyz and tests read them. */
export type DatabaseErrorCode =
  | 'LEAF_STATEMENT_UNANSWERED'
  | 'LEAF_STORE_LEFT'
  | 'LEAF_SERVER_READ_ONLY'
  | 'LEAF_NO_CONNECTION_FREE'

export class DatabaseError extends Error {
  readonly code: DatabaseErrorCode

  constructor (code: DatabaseErrorCode, message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'DatabaseError'
    this.code = code
  }
}

/** Unless settled, an unanswered statement may run at any later time: docs/worker-ids.md#every-statement-arriving-late-twice-or-never */
export type StatementFate =
  /** It never left: no connection, or the connection's first round trip failed. Another host may run it. */
  | { state: 'not-sent' }
  /** Its server thread was killed, or its server restarted since: it ran before, or never will. */
  | { state: 'ended', how: 'killed' | 'restarted', threadId: number }
  /** It may still run on the server: `why` it could not be settled. */
  | { state: 'may-still-run', why: string }

export class UnansweredStatement extends DatabaseError {
  readonly fate: StatementFate

  constructor (message: string, fate: StatementFate, options: { cause: unknown }) {
    super('LEAF_STATEMENT_UNANSWERED', message, options)
    this.name = 'UnansweredStatement'
    this.fate = fate
  }
}

/** Refused before a statement left (read-only, or a store failed over from): another host may take it. */
export class ServerRefused extends DatabaseError {
  constructor (code: 'LEAF_STORE_LEFT' | 'LEAF_SERVER_READ_ONLY', message: string) {
    super(code, message)
    this.name = 'ServerRefused'
  }
}

/** The fate of the statement `err` failed, where the pool knows it; undefined for an answer (a server error). */
export function fateOf (err: unknown): StatementFate | undefined {
  return err instanceof UnansweredStatement ? err.fate : undefined
}

export function mayStillRun (err: unknown): boolean {
  return fateOf(err)?.state === 'may-still-run'
}

export function driverCause (err: unknown): unknown {
  return err instanceof UnansweredStatement ? err.cause : err
}
