import type mysql from 'mysql2/promise'
import type { DatabaseTls } from '../config/database-tls.js'
import { compareServers, IDENTITY_SQL, identityOf, type ServerIdentity } from './server-identity.js'
import { openMysqlConnection } from './tls-options.js'

// The end of a statement that got no answer (mysql-pool.ts says why it is needed): its server
// thread killed from a connection of its own, once that connection is seen to reach the same
// server process.

/** What a kill needs of its server's pool options. */
export interface KillOptions {
  host: string
  port: number
  user: string
  password: string
  /** Bounds the whole kill, its connection's opening included. */
  queryTimeoutMs: number
  /** The store's TLS: the kill's connection uses it too. */
  tls?: DatabaseTls
}

/** MySQL's ER_NO_SUCH_THREAD: the thread had ended already. */
const ER_NO_SUCH_THREAD = 1094

/**
 * KILL CONNECTION over a connection of its own, within the query timeout, once that
 * connection is seen to reach the very server process `identity` names: 'killed', or
 * 'restarted' (that process is gone), or why not.
 */
export async function killThread (options: KillOptions, threadId: number, identity: ServerIdentity | null | undefined): Promise<string> {
  const { queryTimeoutMs } = options
  let conn: mysql.Connection | undefined
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<string>((resolve) => { timer = setTimeout(() => resolve(`no answer within ${queryTimeoutMs} ms`), queryTimeoutMs) })
  const attempt = (async (): Promise<string> => {
    if (identity === undefined) return 'unsent'
    if (identity === null) return 'the server it ran on did not say who it is'
    try {
      conn = await openMysqlConnection({
        host: options.host, port: options.port, user: options.user, password: options.password, connectTimeout: queryTimeoutMs, multipleStatements: true,
      }, options.tls)
      const [results] = await conn.query({ sql: IDENTITY_SQL, timeout: queryTimeoutMs }) as unknown as [unknown[]]
      const now = identityOf(results)
      if (now === undefined) return 'the server did not say who it is'
      const same = compareServers(identity, now, threadId)
      if (same === 'other') return `the kill reached another server (${now.host}:${now.port} started at ${now.started}, not ${identity.host}:${identity.port} started at ${identity.started})`
      if (same === 'unclear') return `its server restarted, or another answered (started at ${now.started}, not ${identity.started}), and its thread ids are past ${threadId}`
      if (same === 'restarted') return 'restarted'
      await conn.query({ sql: 'KILL CONNECTION ?', values: [threadId], timeout: queryTimeoutMs })
      return 'killed'
    } catch (e) {
      if ((e as { errno?: number }).errno === ER_NO_SUCH_THREAD) return 'killed'
      return (e as Error).message
    }
  })()
  try {
    return await Promise.race([attempt, timeout])
  } finally {
    clearTimeout(timer)
    // Never left open: a kill that did not finish in time is abandoned with its connection.
    attempt.finally(() => conn?.destroy()).catch(() => {})
    if (conn !== undefined) conn.destroy()
  }
}
