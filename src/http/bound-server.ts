import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { Socket } from 'node:net'
import type { ServerConfig } from '../config/load-config.js'
import { StartRefused } from '../errors.js'

type Handler = (request: IncomingMessage, response: ServerResponse) => void

/** Every limit that keeps a client from holding a connection: docs/configuration.md#connections */
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
 * Closes a connection whose answer has sat unsent for `idleMs` (0: never). On a timer, not
 * Node's socket timeout, which costs ~1,900 instructions per ID request (docs/configuration.md#connections).
 */
function closeStalledAnswers (server: Server, idleMs: number): void {
  if (idleMs === 0) return
  const sockets = new Set<Socket>()
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

/** Node checks these timeouts every 30 s by default: a connection would outlive its timeout by that much. */
function checkingIntervalMs ({ headersTimeoutMs, requestTimeoutMs }: ServerConfig): number {
  const shortest = Math.min(...[headersTimeoutMs, requestTimeoutMs].filter((ms) => ms > 0))
  return Math.max(10, Math.min(1000, Math.floor(shortest / 10)))
}

export interface BoundServer {
  server: Server
  /** Until then each request is answered 503 NOT_READY. */
  serve (handler: Handler): void
}

/** Listens first, so that a second process on a port in use stops having written nothing (no warm-start file, no ZooKeeper node). */
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
