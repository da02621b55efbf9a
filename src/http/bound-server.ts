import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { StartRefused } from '../errors.js'

/**
 * Node's HTTP server options for the service's server, whoever creates it (app.ts hands them
 * to Fastify too): an ID service has no use for Host, so a request without one reaches the
 * routes (and gets the JSON shape) rather than Node's bare 400.
 */
export const HTTP_SERVER_OPTIONS = { requireHostHeader: false } as const
/** Fastify's default: longer than the load balancers' idle timeouts, so they close first. */
const KEEP_ALIVE_TIMEOUT_MS = 72_000

type Handler = (request: IncomingMessage, response: ServerResponse) => void

export interface BoundServer {
  server: Server
  /** From now on every request goes to `handler` (the app's); until then each is answered 503 NOT_READY. */
  serve (handler: Handler): void
}

/**
 * Listens on the port before anything else of the start runs (server.ts), so that a second
 * process on a port in use stops here, having written nothing: no warm-start file, no
 * give-back, no ZooKeeper node. The app takes the server over with Fastify's serverFactory.
 */
export async function bindPort (host: string, port: number): Promise<BoundServer> {
  let handler: Handler = answerStarting
  const server = createServer(HTTP_SERVER_OPTIONS, (request, response) => handler(request, response))
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host, port }, () => {
      server.off('error', reject)
      resolve()
    })
  }).catch((err: unknown) => { throw bindRefusal(host, port, err) ?? err })
  return { server, serve (next) { handler = next } }
}

/** Before the modes have started: the process lives (/healthz), nothing is ready. */
function answerStarting (request: IncomingMessage, response: ServerResponse): void {
  const healthz = request.url === '/healthz'
  const body = healthz
    ? { status: 'ok' }
    : request.url === '/readyz'
      ? { status: 'not ready', reason: 'starting: the enabled modes are not started yet', modes: {} }
      : { error: 'NOT_READY', message: 'The server is starting.' }
  response.writeHead(healthz ? 200 : 503, { 'content-type': 'application/json; charset=utf-8' })
  response.end(JSON.stringify(body))
}

const hostPort = (host: string, port: number) => `${host.includes(':') ? `[${host}]` : host}:${port}`

/** One line naming the key and the fix, for the errors an operator's configuration causes. */
function bindRefusal (host: string, port: number, err: unknown): StartRefused | undefined {
  const code = (err as NodeJS.ErrnoException).code
  const at = hostPort(host, port)
  switch (code) {
    case 'EADDRINUSE':
      return new StartRefused(`server.port ${port}: ${at} is already in use (EADDRINUSE): stop the process listening there, or set server.port (SERVER_PORT, --server.port) to a free port`)
    case 'EACCES':
      return new StartRefused(`server.port ${port}: listening on ${at} is not permitted (EACCES): use a port above 1023, or give the process the right to bind it`)
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new StartRefused(`server.host ${host}: not an address of this machine (${code}): set server.host (SERVER_HOST, --server.host) to one of its addresses, or 0.0.0.0`)
  }
  return undefined
}
