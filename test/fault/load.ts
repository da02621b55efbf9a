import { Agent, request } from 'node:http'
import { sleep } from './services.js'

// The load driver: keep-alive HTTP clients over loopback, and a loop bounded in requests
// and time, optionally paced to a rate.

export interface Answer {
  /** 0 when there was no HTTP answer (connection refused or reset, timeout). */
  status: number
  body: string
  headers: Record<string, string | string[] | undefined>
  /** The transport error when status is 0. */
  error: string | undefined
  /** performance.now() when sent and how long until the whole answer was in. */
  sentAt: number
  ms: number
}

/** One client's connections: a keep-alive agent of its own. */
export class HttpClient {
  private readonly agent: Agent

  constructor (maxSockets = 1) {
    this.agent = new Agent({ keepAlive: true, maxSockets })
  }

  /** Never rejects: a failure is an answer with status 0. Only 127.0.0.1 is accepted. */
  get (url: string, { timeoutMs = 15_000, headers = {} }: { timeoutMs?: number, headers?: Record<string, string> } = {}): Promise<Answer> {
    if (!url.startsWith('http://127.0.0.1:')) throw new Error(`not a loopback URL: ${url}`)
    const sentAt = performance.now()
    return new Promise((resolve) => {
      let settled = false
      const finish = (status: number, body: string, hdrs: Answer['headers'], error?: string) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resolve({ status, body, headers: hdrs, error, sentAt, ms: performance.now() - sentAt })
      }
      const req = request(url, { agent: this.agent, headers }, (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (c: string) => { body += c })
        res.on('end', () => finish(res.statusCode ?? 0, body, res.headers))
        res.on('error', (err) => finish(0, '', {}, err.message))
      })
      const timer = setTimeout(() => {
        finish(0, '', {}, `no answer within ${timeoutMs} ms`)
        req.destroy()
      }, timeoutMs)
      req.on('error', (err: NodeJS.ErrnoException) => finish(0, '', {}, err.code ?? err.message))
      req.end()
    })
  }

  close (): void {
    this.agent.destroy()
  }
}

export interface LoadOptions {
  clients: number
  /** Upper bound on requests over all clients. */
  maxRequests: number
  /** Upper bound on the run's duration. */
  maxMs: number
  /** Upper bound on each client's requests. */
  perClient?: number
  /** Requests per second over all clients; unpaced when absent. */
  ratePerSecond?: number
  /** Checked before each request: true ends the run. */
  stop?: () => boolean
  /** Sends client `client`'s `n`-th request and checks its answer; `false` ends that client. */
  step: (client: number, n: number) => Promise<unknown>
}

export interface LoadResult { requests: number, ms: number }

/** Runs `clients` sequential request loops at once until a bound, `stop` or the steps end. */
export async function runLoad ({ clients, maxRequests, maxMs, perClient = Infinity, ratePerSecond, stop, step }: LoadOptions): Promise<LoadResult> {
  const start = performance.now()
  let issued = 0
  await Promise.all(Array.from({ length: clients }, async (_, client) => {
    for (let n = 0; n < perClient; n++) {
      if (issued >= maxRequests || performance.now() - start >= maxMs || stop?.() === true) return
      const slot = issued++
      if (ratePerSecond !== undefined) {
        const due = start + slot * 1000 / ratePerSecond
        const wait = due - performance.now()
        if (wait > 0) await sleep(wait)
      }
      if (await step(client, n) === false) return
    }
  }))
  return { requests: issued, ms: performance.now() - start }
}
