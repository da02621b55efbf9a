import type { AddressInfo } from 'node:net'
import { hostname } from 'node:os'

/** The response header by which an instance names itself on the ID routes. */
export const INSTANCE_HEADER = 'leaf-instance'

/**
 * The name this instance gives in the Leaf-Instance header: `leaf.instance.name`, else
 * `<host name>:<port>`, the place clients reach it (Leaf's own notion of an instance is
 * ip:port). A client keeps a high-water mark per name and key, so the name must stay the same
 * when the process restarts, whatever store it then finds: a restart on a fresh store must
 * come back under the name the client knows (docs/operations.md, "The instance name").
 *
 * With `server.port=0` the port is known only once the server listens: until then (an
 * injected request) the name says port 0 and is not kept.
 */
export function instanceNamer (configured: string, port: number, address: () => AddressInfo | string | null): () => string {
  if (configured !== '') return () => configured
  // A host name outside visible ASCII (it can be set to anything) would make setHeader throw.
  const host = encodeURI(hostname())
  if (port !== 0) {
    const name = `${host}:${port}`
    return () => name
  }
  let name: string | undefined
  return () => {
    if (name !== undefined) return name
    const a = address()
    if (a === null || typeof a === 'string') return `${host}:0`
    name = `${host}:${a.port}`
    return name
  }
}
