import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { Socket } from 'node:net'
import type { ServerConfig } from '../config/load-config.js'
import { StartRefused } from '../errors.js'

type Handler = (request: IncomingMessage, response: ServerResponse) => void

/**
 * The service's HTTP (or, with server.tls.*, HTTPS) server, whoever creates it: bindPort, or
 * Fastify through app.ts's serverFactory when there is no bound server (tests). Every limit that
 * keeps a client from holding a connection is set here, from the server.* keys.
 */
export function createServiceServer (settings: ServerConfig, handler: Handler): Server {
  const options: ServerOptions = {
    // An ID service has no use for Host: a request without one reaches the routes (and gets
    // the JSON shape) rather than Node's bare 400.
    requireHostHeader: false,
    headersTimeout: settings.headersTimeoutMs,
    requestTimeout: settings.requestTimeoutMs,
    keepAliveTimeout: settings.keepAliveTimeoutMs,
    connectionsCheckingInterval: checkingIntervalMs(settings),
  }
  const server = settings.tls === undefined
    ? createHttpServer(options, handler)
    // The HTTP timeouts start after the handshake: bound the handshake by the headers timeout.
    : createHttpsServer({ ...options, ...settings.tls, ...(settings.headersTimeoutMs > 0 ? { handshakeTimeout: settings.headersTimeoutMs } : {}) }, handler)
  closeStalledAnswers(server, settings.idleTimeoutMs)
  // Past it, Node closes each new connection as it is accepted (and emits 'drop').
  server.maxConnections = settings.maxConnections
  return server
}

/**
 * Closes a connection whose answer has sat unsent for `idleMs` (0: never): the client stopped
 * reading, or vanished without a FIN, and the answer it left holds memory and a descriptor
 * (a batch of a million IDs is 19 MB). A request still arriving is the headers and request
 * timeouts' business, an idle keep-alive connection the keep-alive timeout's. Checked on a
 * timer over the open connections rather than by Node's socket timeout (server.setTimeout),
 * which re-arms a timer at every read and write: about 1,900 CPU instructions more per ID
 * request (bench/count-build.ts, 64,600 against 66,500).
 */
function closeStalledAnswers (server: Server, idleMs: number): void {
  if (idleMs === 0) return
  const sockets = new Set<Socket>()
  /** Per connection with bytes waiting: what had gone out when it was last seen to move, and when. */
  const waiting = new Map<Socket, { sent: number, since: number }>()
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => {
      sockets.delete(socket)
      waiting.delete(socket)
    })
  })
  const timer = setInterval(() => {
    const now = performance.now()
    for (const socket of sockets) {
      if (socket.writableLength === 0) {
        waiting.delete(socket)
        continue
      }
      // bytesWritten counts what is queued too: what went out is the rest.
      const sent = socket.bytesWritten - socket.writableLength
      const seen = waiting.get(socket)
      if (seen === undefined || seen.sent !== sent) waiting.set(socket, { sent, since: now })
      else if (now - seen.since >= idleMs) socket.destroy()
    }
  }, Math.max(10, Math.min(1000, Math.floor(idleMs / 4))))
  timer.unref()
  server.once('close', () => clearInterval(timer))
}

/**
 * Node checks the headers and request timeouts on a timer, every 30 s by default, so a
 * connection would outlive its timeout by up to that much: check ten times per the shortest
 * of them, at most once a second (the check walks only connections with a request open).
 */
function checkingIntervalMs ({ headersTimeoutMs, requestTimeoutMs }: ServerConfig): number {
  const shortest = Math.min(...[headersTimeoutMs, requestTimeoutMs].filter((ms) => ms > 0))
  return Math.max(10, Math.min(1000, Math.floor(shortest / 10)))
}

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
export async function bindPort (settings: ServerConfig): Promise<BoundServer> {
  const { host, port } = settings
  let handler: Handler = answerStarting
  const server = createServiceServer(settings, (request, response) => handler(request, response))
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
      return new StartRefused(`server.port ${port}: ${at} is already in use (EADDRINUSE): stop the process listening there, or set server.port (SERVER_PORT, --server.port) to a free port`, { code: 'PORT_IN_USE', cause: err })
    case 'EACCES':
      return new StartRefused(`server.port ${port}: listening on ${at} is not permitted (EACCES): use a port above 1023, or give the process the right to bind it`, { code: 'PORT_NOT_PERMITTED', cause: err })
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new StartRefused(`server.host ${host}: not an address of this machine (${code}): set server.host (SERVER_HOST, --server.host) to one of its addresses, or 0.0.0.0`, { code: 'HOST_NOT_LOCAL', cause: err })
  }
  return undefined
}
