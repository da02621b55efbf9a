import { Pool } from 'undici'
import { CLIENT_CODES, errorFromAnswer, LeafClientError } from './errors.js'
import { parseIdRanges, type IdRange } from './id-ranges.js'

export type Mode = 'segment' | 'snowflake'

/** A server's answer of IDs: its runs, and the instance that made them. */
export interface FetchedIds {
  ranges: IdRange[]
  /** The `Leaf-Instance` header: the instance behind the URL; undefined when it sends none (Java Leaf, an older Leaf-TS). */
  instance: string | undefined
}

/** How the client asks one server for IDs; tests give their own. */
export interface Transport {
  /**
   * `count` IDs of (mode, key) from `server` (a base URL from `servers`), as ranges, with the
   * instance that answered. Rejects with a LeafClientError: the server's code, or NETWORK,
   * TIMEOUT, BAD_RESPONSE.
   */
  fetchIds (server: string, mode: Mode, key: string, count: number, timeoutMs: number): Promise<FetchedIds>
  close (): Promise<void>
}

export interface UndiciTransportOptions {
  servers: readonly string[]
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string | undefined
  /** Keep-alive connections per server at most. */
  connections?: number
  /** How long an idle connection is kept open. */
  keepAliveTimeoutMs?: number
}

interface Target { pool: Pool, prefix: string }

/** How a Leaf-TS server names the instance that answered (undici gives header names in lower case). */
const INSTANCE_HEADER = 'leaf-instance'

/**
 * One keep-alive undici Pool per server, over the batch route `GET /api/<mode>/get/<key>?count=N`
 * with its `text/plain` answer (one decimal ID per line: no JSON pass, no number per ID). A
 * batch is Leaf-TS's own route, answered in lines for every Accept header but Leaf-TS's JSON
 * opt-in (`application/vnd.leaf-ts+json`), which the client does not send.
 * A server URL may carry a path prefix (`http://gateway/leaf`) for a server behind a proxy.
 */
export function createUndiciTransport (options: UndiciTransportOptions): Transport {
  const headers: Record<string, string> = { accept: 'text/plain' }
  if (options.token !== undefined && options.token !== '') headers.authorization = `Bearer ${options.token}`
  const targets = new Map<string, Target>()
  for (const server of options.servers) {
    const url = new URL(server)
    targets.set(server, {
      pool: new Pool(url.origin, {
        connections: options.connections ?? 16,
        keepAliveTimeout: options.keepAliveTimeoutMs ?? 30_000,
        pipelining: 1,
      }),
      prefix: url.pathname.replace(/\/+$/, ''),
    })
  }

  async function fetchIds (server: string, mode: Mode, key: string, count: number, timeoutMs: number): Promise<FetchedIds> {
    const target = targets.get(server)
    if (target === undefined) throw new LeafClientError(CLIENT_CODES.NETWORK, `${server}: not one of the client's servers`, { server })
    const abort = new AbortController()
    const timer = setTimeout(() => abort.abort(), timeoutMs)
    try {
      const { statusCode, headers: answered, body } = await target.pool.request({
        method: 'GET',
        path: `${target.prefix}/api/${mode}/get/${encodeURIComponent(key)}?count=${count}`,
        headers,
        signal: abort.signal,
      })
      const text = await body.text()
      if (statusCode !== 200) throw errorFromAnswer(statusCode, text, server)
      const ranges = parseIdRanges(text)
      if (ranges === undefined) throw new LeafClientError(CLIENT_CODES.BAD_RESPONSE, `${server}: 200 without decimal IDs: ${text.slice(0, 200)}`, { status: statusCode, server })
      const instance = answered[INSTANCE_HEADER]
      return { ranges, instance: Array.isArray(instance) ? instance.join(', ') : instance }
    } catch (err) {
      if (err instanceof LeafClientError) throw err
      if (abort.signal.aborted) throw new LeafClientError(CLIENT_CODES.TIMEOUT, `${server}: no answer within ${Math.ceil(timeoutMs)} ms`, { server, cause: err })
      const e = err as { code?: string, message?: string }
      throw new LeafClientError(CLIENT_CODES.NETWORK, `${server}: ${e.code ?? 'error'}: ${e.message ?? String(err)}`, { server, cause: err })
    } finally {
      clearTimeout(timer)
    }
  }

  return {
    fetchIds,
    async close () {
      await Promise.all([...targets.values()].map((t) => t.pool.destroy()))
    },
  }
}
