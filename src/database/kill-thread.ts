import type mysql from 'mysql2/promise'
import type { DatabaseTls } from '../config/database-tls.js'
import { codeOf, MysqlError } from './driver-errors.js'
import { compareServers, IDENTITY_SQL, identityOf, type ServerIdentity } from './server-identity.js'
import { openMysqlConnection } from './tls-options.js'

// Ends a statement that got no answer (mysql-pool.ts says why).

export interface KillOptions {
  host: string
  port: number
  user: string
  password: string
  /** Bounds the whole kill, its connection's opening included. */
  queryTimeoutMs: number
  tls?: DatabaseTls
}

export type KillResult =
  | { outcome: 'killed' }
  | { outcome: 'restarted' }
  | { outcome: 'not-killed', reason: string, cause?: unknown }

const notKilled = (reason: string, cause?: unknown): KillResult => cause === undefined ? { outcome: 'not-killed', reason } : { outcome: 'not-killed', reason, cause }

/** Only once its connection is seen to reach the very server process `identity` names (null: nothing is killed). */
export async function killThread (options: KillOptions, threadId: number, identity: ServerIdentity | null): Promise<KillResult> {
  const { queryTimeoutMs } = options
  let conn: mysql.Connection | undefined
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<KillResult>((resolve) => { timer = setTimeout(() => resolve(notKilled(`no answer within ${queryTimeoutMs} ms`)), queryTimeoutMs) })
  const attempt = (async (): Promise<KillResult> => {
    if (identity === null) return notKilled('the server it ran on did not say who it is')
    try {
      conn = await openMysqlConnection({
        host: options.host, port: options.port, user: options.user, password: options.password, connectTimeout: queryTimeoutMs, multipleStatements: true,
      }, options.tls)
      const [results] = await conn.query({ sql: IDENTITY_SQL, timeout: queryTimeoutMs }) as unknown as [unknown[]]
      const now = identityOf(results)
      if (now === undefined) return notKilled('the server did not say who it is')
      switch (compareServers(identity, now, threadId)) {
        case 'other': return notKilled(`the kill reached another server (${now.host}:${now.port} started at ${now.started}, not ${identity.host}:${identity.port} started at ${identity.started})`)
        case 'unclear': return notKilled(`its server restarted, or another answered (started at ${now.started}, not ${identity.started}), and its thread ids are past ${threadId}`)
        case 'restarted': return { outcome: 'restarted' }
        case 'same': break
      }
      await conn.query({ sql: 'KILL CONNECTION ?', values: [threadId], timeout: queryTimeoutMs })
      return { outcome: 'killed' }
    } catch (err) {
      if (codeOf(err) === MysqlError.NO_SUCH_THREAD) return { outcome: 'killed' }
      return notKilled((err as Error).message, err)
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
