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

/** Which requests of a client are batches: its `n`-th asks for `batch` IDs when n % every === every - 1, else for one. */
export function batchMix (every: number, batch: number): (n: number) => number | undefined {
  return (n) => n % every === every - 1 ? batch : undefined
}

/** `n` keep-alive clients, one connection each. */
export function httpClients (n: number): HttpClient[] {
  return Array.from({ length: n }, () => new HttpClient())
}

export interface BackgroundLoadOptions {
  clients: number
  /** Requests per second over all clients; unpaced when absent. */
  ratePerSecond?: number
  /** Bounds on the whole run, in case stop() never comes: 200,000 requests and 90 s unless given. */
  maxRequests?: number
  maxMs?: number
  /** Checked before each request: true ends the load before stop(). */
  until?: () => boolean
}

export interface BackgroundLoad {
  /** No new request; waits for those in flight, closes the clients; what runLoad counted. */
  stop (): Promise<LoadResult>
}

/**
 * A load that runs beside the scenario until stop(): `o.clients` clients of their own, client
 * `c`'s `n`-th request sent by `step(client, c, n)` (`false` ends that client).
 */
export function backgroundLoad (o: BackgroundLoadOptions, step: (client: HttpClient, c: number, n: number) => Promise<unknown>): BackgroundLoad {
  const clients = httpClients(o.clients)
  const state = { stopped: false }
  const done = runLoad({
    clients: o.clients,
    maxRequests: o.maxRequests ?? 200_000,
    maxMs: o.maxMs ?? 90_000,
    ratePerSecond: o.ratePerSecond,
    stop: () => state.stopped || o.until?.() === true,
    step: (c, n) => step(clients[c] as HttpClient, c, n),
  })
  let ended: Promise<LoadResult> | undefined
  return {
    stop () {
      state.stopped = true
      ended ??= done.finally(() => { for (const client of clients) client.close() })
      return ended
    },
  }
}
