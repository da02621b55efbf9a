import { connect, createServer, type Server, type Socket } from 'node:net'

/**
 * A loopback TCP proxy in front of a service (MariaDB, ZooKeeper). `delayMs` holds every
 * chunk, in both directions, that long before passing it on (order kept: timers of one
 * duration fire in the order they were set). `block()` cuts every connection and resets
 * new ones until `unblock()`: the service is unreachable though it runs. `blackhole()` silences
 * the connections open at the time: from then on they pass no byte, in either direction, and
 * never close (the peer's end or reset is not passed on either), as when a network path dies
 * without a FIN or RST; new connections work normally. `stall(n)` holds the next n connections
 * silent from their start: what they send is read and dropped, nothing reaches the service, and
 * they stay open until their peer ends them (or close()), as a server that accepts and never
 * answers.
 */
export interface TcpProxy {
  readonly port: number
  delayMs: number
  readonly blocked: boolean
  /** Connections accepted so far. */
  readonly accepted: number
  block (): void
  unblock (): void
  /** Silences every connection open now (see above); returns how many. */
  blackhole (): number
  /** Holds the next `count` new connections silent (see above). */
  stall (count: number): void
  /** For each stalled connection its peer has ended, how long (ms) it was held. */
  readonly stalledEndedAfterMs: readonly number[]
  close (): Promise<void>
}

/**
 * `targetHost`: where the service runs (127.0.0.1 unless a test service elsewhere is given);
 * `port`: the proxy's own loopback port, 0 for any free one.
 */
export async function createProxy (targetPort: number, { delayMs = 0, targetHost = '127.0.0.1', port = 0 } = {}): Promise<TcpProxy> {
  const open = new Set<Socket>()
  // Sockets of silenced connections: kept open until close(), which destroys them.
  const silenced = new Set<Socket>()
  let blocked = false
  let accepted = 0
  let toStall = 0
  let closing = false
  const stalledEndedAfterMs: number[] = []

  const server: Server = createServer((client) => {
    if (blocked) {
      client.resetAndDestroy()
      return
    }
    accepted++
    if (toStall > 0) {
      toStall--
      const at = performance.now()
      silenced.add(client)
      client.resume()
      client.on('error', () => {})
      client.once('close', () => { if (!closing) stalledEndedAfterMs.push(performance.now() - at) })
      return
    }
    const upstream = connect(targetPort, targetHost)
    open.add(client)
    open.add(upstream)
    pipe(client, upstream)
    pipe(upstream, client)
    const done = () => {
      open.delete(client)
      open.delete(upstream)
    }
    client.once('close', done)
    upstream.once('close', done)
  })
  // Delay each chunk by the delay in force when it arrived; an end or error is passed on after
  // the data before it.
  function pipe (from: Socket, to: Socket): void {
    const later = (fn: () => void) => {
      const ms = proxy.delayMs
      if (ms > 0) setTimeout(fn, ms)
      else fn()
    }
    const live = () => !silenced.has(from)
    from.on('data', (chunk: Buffer) => later(() => { if (live() && !to.destroyed) to.write(chunk) }))
    from.on('end', () => later(() => { if (live() && !to.destroyed) to.end() }))
    from.on('error', () => later(() => { if (live()) to.destroy() }))
    from.on('close', (hadError) => later(() => { if (!live()) return; if (hadError) to.destroy(); else to.end() }))
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => resolve())
  })
  const address = server.address()
  if (typeof address !== 'object' || address === null) throw new Error('proxy has no port')

  const proxy: TcpProxy = {
    port: address.port,
    delayMs,
    get blocked () { return blocked },
    get accepted () { return accepted },
    block () {
      blocked = true
      for (const socket of open) socket.destroy()
      open.clear()
    },
    unblock () {
      blocked = false
    },
    blackhole () {
      const count = open.size / 2
      for (const socket of open) silenced.add(socket)
      open.clear()
      return count
    },
    stall (count) {
      toStall = count
    },
    stalledEndedAfterMs,
    close () {
      closing = true
      for (const socket of open) socket.destroy()
      for (const socket of silenced) socket.destroy()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
  return proxy
}
