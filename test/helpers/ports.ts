import { createServer } from 'node:net'

/**
 * Ports a test gives to a server it starts (a private MariaDB or ZooKeeper, a Prometheus, a
 * proxy that must come up on a port chosen earlier). They come from below 32768: this machine's
 * ephemeral range is 32768-60999, and a port taken from it could meanwhile be given to some
 * client socket, so that the server would fail with EADDRINUSE. Servers that can take port 0
 * and report theirs should do that instead.
 */
const LOW = 20_000
const HIGH = 32_767

function bindable (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** A loopback port below the ephemeral range that nothing listens on right now. */
export async function freePort (): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW + 1))
    if (await bindable(port)) return port
  }
  throw new Error(`no free loopback port in ${LOW}-${HIGH}`)
}
