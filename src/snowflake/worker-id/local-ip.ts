import { networkInterfaces } from 'node:os'

/** Java Leaf's identity address: the first non-loopback IPv4 address of the machine. */
export function firstNonLoopbackIPv4 (): string | undefined {
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? []) {
      if (address.family === 'IPv4' && !address.internal) return address.address
    }
  }
  return undefined
}
