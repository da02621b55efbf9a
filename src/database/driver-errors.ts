import { DatabaseError, UnansweredStatement } from './errors.js'
import { TimeoutError } from '../timers.js'

// The drivers' errors (mysql2, node-postgres, Node's sockets and files, better-sqlite3,
// node-zookeeper-client), read in one place. Their stacks are the drivers' frames: logged without.

/** MySQL/MariaDB server errors by mysql2's `code` (errno in the comments): which error it is goes by `code`. */
export const MysqlError = {
  /** 1044 */
  DBACCESS_DENIED: 'ER_DBACCESS_DENIED_ERROR',
  /** 1047 as Galera uses it: WSREP has not yet prepared node for application use. */
  WSREP_NOT_READY: 'ER_UNKNOWN_COM_ERROR',
  /** 1054 */
  BAD_FIELD: 'ER_BAD_FIELD_ERROR',
  /** 1060 */
  DUP_FIELDNAME: 'ER_DUP_FIELDNAME',
  /** 1062 */
  DUP_ENTRY: 'ER_DUP_ENTRY',
  /** 1094: the thread had ended already. */
  NO_SUCH_THREAD: 'ER_NO_SUCH_THREAD',
  /** 1142 */
  TABLEACCESS_DENIED: 'ER_TABLEACCESS_DENIED_ERROR',
  /** 1143 */
  COLUMNACCESS_DENIED: 'ER_COLUMNACCESS_DENIED_ERROR',
  /** 1146 */
  NO_SUCH_TABLE: 'ER_NO_SUCH_TABLE',
  /** 1205 */
  LOCK_WAIT_TIMEOUT: 'ER_LOCK_WAIT_TIMEOUT',
  /** 1213; on Galera also a certification conflict between two nodes. */
  LOCK_DEADLOCK: 'ER_LOCK_DEADLOCK',
  /** 1290: `--read-only` refused a write. */
  READ_ONLY: 'ER_OPTION_PREVENTS_STATEMENT',
  /** 1690: a value past its column's range (`max_id + step` past BIGINT's). */
  DATA_OUT_OF_RANGE: 'ER_DATA_OUT_OF_RANGE',
  /** 1267, 1270, 1271: a value's characters cannot be compared in the column's charset (an emoji against utf8mb3). */
  CANT_AGGREGATE_2COLLATIONS: 'ER_CANT_AGGREGATE_2COLLATIONS',
  CANT_AGGREGATE_3COLLATIONS: 'ER_CANT_AGGREGATE_3COLLATIONS',
  CANT_AGGREGATE_NCOLLATIONS: 'ER_CANT_AGGREGATE_NCOLLATIONS',
  /** 1300 */
  INVALID_CHARACTER_STRING: 'ER_INVALID_CHARACTER_STRING',
  /** 1366: a string the column's charset cannot hold. */
  TRUNCATED_WRONG_VALUE_FOR_FIELD: 'ER_TRUNCATED_WRONG_VALUE_FOR_FIELD',
} as const

/** PostgreSQL SQLSTATEs by their condition names. */
export const SqlState = {
  NUMERIC_VALUE_OUT_OF_RANGE: '22003',
  /** A character the database's encoding cannot hold (U+0000 included). */
  CHARACTER_NOT_IN_REPERTOIRE: '22021',
  UNTRANSLATABLE_CHARACTER: '22P05',
  UNIQUE_VIOLATION: '23505',
  /** A standby (or default_transaction_read_only) refused a write. */
  READ_ONLY_SQL_TRANSACTION: '25006',
  INVALID_AUTHORIZATION_SPECIFICATION: '28000',
  INVALID_PASSWORD: '28P01',
  INVALID_CATALOG_NAME: '3D000',
  INSUFFICIENT_PRIVILEGE: '42501',
  UNDEFINED_TABLE: '42P01',
  UNDEFINED_COLUMN: '42703',
} as const

const UNSTORABLE = new Set<unknown>([
  MysqlError.CANT_AGGREGATE_2COLLATIONS, MysqlError.CANT_AGGREGATE_3COLLATIONS, MysqlError.CANT_AGGREGATE_NCOLLATIONS,
  MysqlError.INVALID_CHARACTER_STRING, MysqlError.TRUNCATED_WRONG_VALUE_FOR_FIELD,
  SqlState.CHARACTER_NOT_IN_REPERTOIRE, SqlState.UNTRANSLATABLE_CHARACTER,
])

/** The store refused a value it cannot hold or compare in its charset: no row can have it, and asking again cannot help. */
export function isUnstorableValue (err: unknown): boolean {
  return UNSTORABLE.has(codeOf(err))
}

export function codeOf (err: unknown): unknown {
  return (err as { code?: unknown } | null | undefined)?.code
}

export interface DriverError {
  code: string
  message: string
}

const DRIVER_CODE = /^(?:E[A-Z0-9]+|ER_[A-Z0-9_]+|PROTOCOL_[A-Z0-9_]+|HANDSHAKE_[A-Z0-9_]+|SQLITE_[A-Z0-9_]+)$/

/** node-postgres: an error the server sent carries its SQLSTATE, five digits and capitals. */
const SQLSTATE = /^[0-9A-Z]{5}$/

/** An UnansweredStatement reads as its driver's code, with the pool's message. */
export function driverError (err: unknown): DriverError | undefined {
  if (err instanceof UnansweredStatement) {
    const known = driverError(err.cause)
    return known === undefined ? undefined : { code: known.code, message: err.message }
  }
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

// For /readyz, which anyone may read: never the driver's message (it may name users and hosts).
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
  [MysqlError.DBACCESS_DENIED]: 'access to the database denied',
  [MysqlError.TABLEACCESS_DENIED]: 'access to the table denied',
  ER_BAD_DB_ERROR: 'unknown database',
  [MysqlError.NO_SUCH_TABLE]: 'no such table',
  ER_CON_COUNT_ERROR: 'too many connections',
  [MysqlError.LOCK_WAIT_TIMEOUT]: 'lock wait timeout',
  SQLITE_BUSY: 'the file is locked by another process',
  SQLITE_CANTOPEN: 'the file cannot be opened',
  SQLITE_NOTADB: 'not a database file',
  SQLITE_READONLY: 'the file is read-only',
  [SqlState.INVALID_PASSWORD]: 'invalid_password',
  [SqlState.INVALID_AUTHORIZATION_SPECIFICATION]: 'invalid_authorization_specification',
  [SqlState.INVALID_CATALOG_NAME]: 'invalid_catalog_name: unknown database',
  [SqlState.UNDEFINED_TABLE]: 'undefined_table: no such table',
  [SqlState.INSUFFICIENT_PRIVILEGE]: 'insufficient_privilege',
  [SqlState.UNDEFINED_COLUMN]: 'undefined_column',
  53300: 'too_many_connections',
  '57P01': 'admin_shutdown',
  '57P03': 'cannot_connect_now: the server is starting or stopping',
  57014: 'query_canceled',
  [SqlState.READ_ONLY_SQL_TRANSACTION]: 'read_only_sql_transaction: a standby',
  // Ours (errors.ts, timers.ts).
  LEAF_TIMEOUT: 'no answer in time',
  LEAF_SERVER_READ_ONLY: 'read-only or a standby: nothing is written through it',
  LEAF_STORE_LEFT: 'a store this instance failed over from',
  LEAF_NO_CONNECTION_FREE: 'no connection of the pool free in time',
}

export function describeCause (err: unknown): string {
  if (err instanceof UnansweredStatement) return describeCause(err.cause)
  const code = driverError(err)?.code ?? codeOf(err)
  if (typeof code === 'string') return WORDS[code] === undefined ? code : `${code} (${WORDS[code]})`
  const { message } = (err ?? {}) as { message?: unknown }
  return typeof message === 'string' ? message : String(err)
}

/** An error whose code and message say all (a driver's, or ours): logged without its stack. */
export function codedError (err: unknown): DriverError | undefined {
  if (err instanceof UnansweredStatement) return { code: codedError(err.cause)?.code ?? err.code, message: err.message }
  if (err instanceof DatabaseError || err instanceof TimeoutError) return { code: err.code, message: err.message }
  return driverError(err)
}

// Errors no retry can mend end the start; anything else (refused, reset, timed out) is retried.
const PERMANENT_SERVER = new Set<string>([
  'ER_ACCESS_DENIED_ERROR',
  'ER_ACCESS_DENIED_NO_PASSWORD_ERROR',
  MysqlError.DBACCESS_DENIED,
  MysqlError.TABLEACCESS_DENIED,
  MysqlError.COLUMNACCESS_DENIED,
  'ER_SPECIFIC_ACCESS_DENIED_ERROR',
  'ER_HOST_NOT_PRIVILEGED',
  'ER_HOST_IS_BLOCKED',
  'ER_NOT_SUPPORTED_AUTH_MODE',
  'ER_ACCOUNT_HAS_BEEN_LOCKED',
  'ER_MUST_CHANGE_PASSWORD_LOGIN',
  'ER_BAD_DB_ERROR',
  MysqlError.NO_SUCH_TABLE,
  MysqlError.BAD_FIELD,
  // PostgreSQL: a wrong password, no pg_hba.conf entry, no such database, table or column, no rights.
  SqlState.INVALID_PASSWORD,
  SqlState.INVALID_AUTHORIZATION_SPECIFICATION,
  SqlState.INVALID_CATALOG_NAME,
  SqlState.UNDEFINED_TABLE,
  SqlState.INSUFFICIENT_PRIVILEGE,
  SqlState.UNDEFINED_COLUMN,
])
/** SQLite is a local file: only a lock held by another process passes. */
const TRANSIENT_SQLITE = new Set(['SQLITE_BUSY', 'SQLITE_LOCKED'])
const PERMANENT_FILE = new Set(['EACCES', 'EPERM', 'ENOTDIR', 'EISDIR', 'EEXIST', 'EROFS', 'ENOENT', 'ENAMETOOLONG'])

/** For the embedded SQLite store, every SQLite and file error but a lock is permanent. */
export function isPermanentStoreError (err: unknown, { sqlite = false } = {}): boolean {
  const known = driverError(err)
  if (known === undefined) return false
  if (PERMANENT_SERVER.has(known.code)) return true
  if (!sqlite) return false
  if (known.code.startsWith('SQLITE_')) return !TRANSIENT_SQLITE.has(known.code)
  return PERMANENT_FILE.has(known.code)
}
