// What the drivers' errors say, read in one place: mysql2 (ER_*, PROTOCOL_*), node-postgres
// (the server's SQLSTATE, such as 28P01), Node's
// sockets and files (ECONNREFUSED, ETIMEDOUT, ...), better-sqlite3 (SQLITE_*) and
// node-zookeeper-client (an Exception with a numeric code and a name such as
// CONNECTION_LOSS). Such an error says all there is in its code and message: its stack is
// the driver's own frames, noise in a log line written every few seconds.

/** A statement that got no answer (mysql-pool.ts): whether it may still run on the server. */
export interface UnansweredError extends Error {
  /** false once its server thread was killed (it ran before, or never will). */
  mayStillRun: boolean
}

/** True when `err` is a statement's that got no answer and may still run (false when it was settled, or answered). */
export function mayStillRun (err: unknown): boolean {
  return (err as Partial<UnansweredError> | undefined)?.mayStillRun === true
}

export interface DriverError {
  code: string
  message: string
}

const DRIVER_CODE = /^(?:E[A-Z0-9]+|ER_[A-Z0-9_]+|PROTOCOL_[A-Z0-9_]+|HANDSHAKE_[A-Z0-9_]+|SQLITE_[A-Z0-9_]+)$/

/** node-postgres: an error the server sent carries its SQLSTATE, five digits and capitals. */
const SQLSTATE = /^[0-9A-Z]{5}$/

/** The error's code and message when a driver raised it, else undefined. */
export function driverError (err: unknown): DriverError | undefined {
  if (typeof err !== 'object' || err === null) return undefined
  const { code, name, message, severity } = err as { code?: unknown, name?: unknown, message?: unknown, severity?: unknown }
  const text = typeof message === 'string' ? message : ''
  if (typeof code === 'string' && DRIVER_CODE.test(code)) return { code, message: text }
  if (typeof code === 'string' && typeof severity === 'string' && SQLSTATE.test(code)) return { code, message: text }
  // node-zookeeper-client: `code` is a number, the name says what it is.
  if (typeof code === 'number' && typeof name === 'string' && /^[A-Z][A-Z_]+$/.test(name) &&
    typeof (err as { getCode?: unknown }).getCode === 'function') return { code: name, message: text }
  return undefined
}

// Plain words for the codes seen most, for /readyz: a reason anyone may read carries the
// code and these words, never the driver's message (it may name users and hosts).
const WORDS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ETIMEDOUT: 'no answer in time',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name lookup failed',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  PROTOCOL_CONNECTION_LOST: 'connection lost',
  PROTOCOL_SEQUENCE_TIMEOUT: 'no answer in time',
  ER_ACCESS_DENIED_ERROR: 'access denied',
  ER_DBACCESS_DENIED_ERROR: 'access to the database denied',
  ER_TABLEACCESS_DENIED_ERROR: 'access to the table denied',
  ER_BAD_DB_ERROR: 'unknown database',
  ER_NO_SUCH_TABLE: 'no such table',
  ER_CON_COUNT_ERROR: 'too many connections',
  ER_LOCK_WAIT_TIMEOUT: 'lock wait timeout',
  SQLITE_BUSY: 'the file is locked by another process',
  SQLITE_CANTOPEN: 'the file cannot be opened',
  SQLITE_NOTADB: 'not a database file',
  SQLITE_READONLY: 'the file is read-only',
  // PostgreSQL's SQLSTATEs, by their condition names.
  '28P01': 'invalid_password',
  28000: 'invalid_authorization_specification',
  '3D000': 'invalid_catalog_name: unknown database',
  '42P01': 'undefined_table: no such table',
  42501: 'insufficient_privilege',
  42703: 'undefined_column',
  53300: 'too_many_connections',
  '57P01': 'admin_shutdown',
  '57P03': 'cannot_connect_now: the server is starting or stopping',
  57014: 'query_canceled',
  25006: 'read_only_sql_transaction: a standby',
}

/** `CODE (plain words)` for a driver error, the bare code for other codes, else the message. */
export function describeCause (err: unknown): string {
  const known = driverError(err)
  if (known !== undefined) return WORDS[known.code] === undefined ? known.code : `${known.code} (${WORDS[known.code]})`
  const { code, message } = (err ?? {}) as { code?: unknown, message?: unknown }
  if (typeof code === 'string') return code
  return typeof message === 'string' ? message : String(err)
}

// Errors no retry can mend: a wrong password, a database or table that does not exist, a
// user without rights. A start that meets one ends with a line saying so; anything else
// (refused, reset, timed out) may pass, and is retried in the background.
const PERMANENT_SERVER = new Set([
  'ER_ACCESS_DENIED_ERROR',
  'ER_ACCESS_DENIED_NO_PASSWORD_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  'ER_TABLEACCESS_DENIED_ERROR',
  'ER_COLUMNACCESS_DENIED_ERROR',
  'ER_SPECIFIC_ACCESS_DENIED_ERROR',
  'ER_HOST_NOT_PRIVILEGED',
  'ER_HOST_IS_BLOCKED',
  'ER_NOT_SUPPORTED_AUTH_MODE',
  'ER_ACCOUNT_HAS_BEEN_LOCKED',
  'ER_MUST_CHANGE_PASSWORD_LOGIN',
  'ER_BAD_DB_ERROR',
  'ER_NO_SUCH_TABLE',
  'ER_BAD_FIELD_ERROR',
  // PostgreSQL: a wrong password, no pg_hba.conf entry, no such database, table or column, no rights.
  '28P01',
  '28000',
  '3D000',
  '42P01',
  '42501',
  '42703',
])
/** SQLite is a local file: only a lock held by another process passes. */
const TRANSIENT_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED'])
/** What opening a file or making its folder fails with, for good. */
const PERMANENT_FILE = new Set(['EACCES', 'EPERM', 'ENOTDIR', 'EISDIR', 'EEXIST', 'EROFS', 'ENOENT', 'ENAMETOOLONG'])

/**
 * Whether a store's error at start is permanent: MySQL's and PostgreSQL's access and schema errors; for the
 * embedded SQLite store (`sqlite: true`), every SQLite and file error but a lock.
 */
export function isPermanentStoreError (err: unknown, { sqlite = false } = {}): boolean {
  const known = driverError(err)
  if (known === undefined) return false
  if (PERMANENT_SERVER.has(known.code)) return true
  if (!sqlite) return false
  if (known.code.startsWith('SQLITE_')) return !TRANSIENT_SQLITE.has(known.code)
  return PERMANENT_FILE.has(known.code)
}
