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
 *
 * `holdStatements(rule)` speaks just enough of the MySQL or ZooKeeper protocol to find requests:
 * the next `count` requests (client to server) that `rule.match` matches (MySQL: a COM_QUERY's
 * SQL; ZooKeeper: the operation's name, `multi`, `setData`, `ping`...) are held, with everything
 * their connection sends after them, for `holdMs`, and then delivered to the server, even when
 * the client has given up and closed the connection meanwhile: as a retransmitted segment or a
 * congested link delivers bytes already sent. The server then runs the request unless its
 * connection was ended first. The connection's end is passed on after them.
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
  /** Holds the next statements matching `rule` (see above); the returned list fills as they come. */
  holdStatements (rule: HoldRule): HeldStatement[]
  /** New connections go to `port` from now on; open ones keep theirs. */
  retarget (port: number): void
  close (): Promise<void>
}

export interface HoldRule {
  match: RegExp
  holdMs: number
  /** How many matching statements to hold (default 1). */
  count?: number
}

export interface HeldStatement {
  /** The SQL, or the ZooKeeper operation's name. */
  request: string
  /** performance.now() when the proxy held it, and when it passed it on to the server. */
  heldAt: number
  deliveredAt: number | undefined
  /** The client had closed its connection before the statement was delivered. */
  clientGoneFirst: boolean
  /** The server had closed its side before: the bytes went nowhere. */
  serverGoneFirst: boolean
  /** Resolves once it has been written to the server (or the server's side was gone). */
  delivered: Promise<void>
}

const COM_QUERY = 0x03
/** ZooKeeper's operation codes (its OpCode class), for the ones a lease sends. */
const ZOOKEEPER_OPS: Record<number, string> = {
  1: 'create', 2: 'delete', 3: 'exists', 4: 'getData', 5: 'setData', 8: 'getChildren', 11: 'ping', 12: 'getChildren2', 13: 'check', 14: 'multi', [-11]: 'closeSession',
}

export type Protocol = 'mysql' | 'zookeeper'

/** The length of the packet at the start of `buffer` (undefined: not all of its header is in), and what request it is. */
const FRAMING: Record<Protocol, { size (buffer: Buffer): number | undefined, request (packet: Buffer, index: number): string | undefined }> = {
  mysql: {
    size: (b) => b.length < 4 ? undefined : 4 + b.readUIntLE(0, 3),
    // A command packet has sequence id 0; the handshake's packets do not.
    request: (p) => p.length >= 5 && p[3] === 0 && p[4] === COM_QUERY ? p.subarray(5).toString('utf8') : undefined,
  },
  zookeeper: {
    size: (b) => b.length < 4 ? undefined : 4 + b.readInt32BE(0),
    // The first packet of a connection is the ConnectRequest, which has no request header.
    request: (p, index) => index === 0 || p.length < 12 ? undefined : ZOOKEEPER_OPS[p.readInt32BE(8)] ?? `op ${p.readInt32BE(8)}`,
  },
}

/**
 * `targetHost`: where the service runs (127.0.0.1 unless a test service elsewhere is given);
 * `port`: the proxy's own loopback port, 0 for any free one; `protocol`: what the service speaks,
 * for holdStatements().
 */
export async function createProxy (targetPort: number, { delayMs = 0, targetHost = '127.0.0.1', port = 0, protocol = undefined as Protocol | undefined } = {}): Promise<TcpProxy> {
  const open = new Set<Socket>()
  // Sockets of silenced connections: kept open until close(), which destroys them.
  const silenced = new Set<Socket>()
  let blocked = false
  let accepted = 0
  let toStall = 0
  let closing = false
  const stalledEndedAfterMs: number[] = []
  const rules: { rule: HoldRule, left: number, held: HeldStatement[] }[] = []
  let target = targetPort

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
    const upstream = connect(target, targetHost)
    open.add(client)
    open.add(upstream)
    if (protocol !== undefined) pipeStatements(client, upstream, FRAMING[protocol])
    else pipe(client, upstream)
    pipe(upstream, client)
    // Each side is forgotten when it closes: a held statement keeps the server's side open
    // after the client's has gone, and close() must still end it.
    client.once('close', () => open.delete(client))
    upstream.once('close', () => open.delete(upstream))
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

  /** The rule that holds this packet, if any (a command packet is a COM_QUERY with sequence id 0). */
  function holding (request: string | undefined): { rule: HoldRule, held: HeldStatement[] } | undefined {
    if (rules.length === 0 || request === undefined) return undefined
    const r = rules.find((x) => x.left > 0 && x.rule.match.test(request))
    if (r === undefined) return undefined
    r.left--
    return r
  }

  // Client to server, packet by packet: a held statement and what follows it wait in `queue`.
  function pipeStatements (from: Socket, to: Socket, framing: typeof FRAMING[Protocol]): void {
    let pending: Buffer = Buffer.alloc(0)
    let index = 0
    let queue: Buffer[] | undefined
    let ended = false
    let fromGone = false
    const live = () => !silenced.has(from)
    const send = (chunk: Buffer) => {
      const ms = proxy.delayMs
      const write = () => { if (live() && !to.destroyed) to.write(chunk) }
      if (ms > 0) setTimeout(write, ms)
      else write()
    }
    const finish = (destroy: boolean) => {
      if (!live()) return
      if (destroy) to.destroy()
      else to.end()
    }
    from.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
      while (true) {
        const size = framing.size(pending)
        if (size === undefined || pending.length < size) break
        const packet = pending.subarray(0, size)
        pending = pending.subarray(size)
        if (queue !== undefined) {
          queue.push(packet)
          continue
        }
        const request = framing.request(packet, index++)
        const rule = holding(request)
        if (rule === undefined) {
          send(packet)
          continue
        }
        queue = [packet]
        let deliver = () => {}
        const entry: HeldStatement = {
          request: request ?? '',
          heldAt: performance.now(),
          deliveredAt: undefined,
          clientGoneFirst: false,
          serverGoneFirst: false,
          delivered: new Promise<void>((resolve) => { deliver = resolve }),
        }
        rule.held.push(entry)
        setTimeout(() => {
          const held = queue ?? []
          queue = undefined
          entry.clientGoneFirst = fromGone
          entry.serverGoneFirst = to.destroyed
          entry.deliveredAt = performance.now()
          for (const p of held) if (live() && !to.destroyed) to.write(p)
          if (pending.length > 0 && live() && !to.destroyed) to.write(pending)
          pending = Buffer.alloc(0)
          if (ended) finish(false)
          deliver()
        }, rule.rule.holdMs)
      }
    })
    // A client that goes while a statement is held: its end follows the held bytes.
    const gone = (destroy: boolean) => {
      fromGone = true
      if (queue !== undefined) {
        ended = true
        return
      }
      if (proxy.delayMs > 0) setTimeout(() => finish(destroy), proxy.delayMs)
      else finish(destroy)
    }
    from.on('end', () => gone(false))
    from.on('error', () => {})
    from.on('close', (hadError) => { if (!fromGone) gone(hadError) })
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
    retarget (port) {
      target = port
    },
    blackhole () {
      const count = Math.ceil(open.size / 2)
      for (const socket of open) silenced.add(socket)
      open.clear()
      return count
    },
    stall (count) {
      toStall = count
    },
    stalledEndedAfterMs,
    holdStatements (rule) {
      if (protocol === undefined) throw new Error('holdStatements() needs a proxy made with a protocol')
      const held: HeldStatement[] = []
      rules.push({ rule, left: rule.count ?? 1, held })
      return held
    },
    close () {
      closing = true
      for (const socket of open) socket.destroy()
      for (const socket of silenced) socket.destroy()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
  return proxy
}
