import { LeafError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { HostState } from '../database/host-census.js'
import type { HostGate } from '../database/mysql-hosts.js'

// Keeps a host list (`h1,h2`) from splitting: an old primary back writable beside the replica
// promoted in its place, each allocating the same ranges. The rules and their interleavings:
// docs/production.md#host-lists-that-cannot-split.

/** While more than one store of the list answers writable. */
export interface Split {
  /** `host:port (store)` */
  hosts: string[]
  since: Date
}

export interface HostFenceView {
  hosts: HostState[]
  checkedAt?: Date
  split?: Split
  /** Stores this instance failed over from and will not write through. */
  left: string[]
  inUse?: string
}

export interface HostFenceOptions {
  logger: Logger
  /** Stores left by earlier runs (the warm-start file). */
  left?: readonly string[]
  /** leaf.segment.trusted-stores: dropped from the `left` of earlier runs. */
  trusted?: readonly string[]
  census: () => Promise<HostState[]>
  inUse?: () => string
  onSplit?: (split: boolean) => void
}

export interface HostFence extends HostGate {
  check (): Promise<void>
  /** A store this instance failed over from (the guard's "store changed"). */
  leave (store: string): void
  /** After an allocation was served (by `store`, its identity): from now on a move needs a host seen read-only. */
  allocated (store?: string): void
  /** STORE_SPLIT while more than one store answers writable; undefined otherwise. */
  blocked (): LeafError | undefined
  /** The line that refuses the start when every host answered writable, as more than one store. */
  startRefusal (): string | undefined
  /** What the warm-start file keeps: the stores left (those of earlier runs, less the trusted ones). */
  leftStores (): string[]
  view (): HostFenceView
}

const describeHost = (h: HostState) => `${h.host} (${h.store ?? '?'})`

/** The writable hosts, and whether they are more than one store (a Galera cluster's nodes are one). */
function writable (hosts: readonly HostState[]): { hosts: HostState[], stores: number } {
  const up = hosts.filter((h) => h.state === 'writable')
  return { hosts: up, stores: new Set(up.map((h) => h.server ?? h.host)).size }
}

export function createHostFence (options: HostFenceOptions): HostFence {
  const { logger, census, inUse, onSplit } = options
  const trusted = new Set(options.trusted ?? [])
  // Trust lets back only what earlier runs left: a failover in this run is remembered again.
  const left = new Set((options.left ?? []).filter((s) => !trusted.has(s)))
  let hosts: HostState[] = []
  let checkedAt: Date | undefined
  let split: Split | undefined
  /** One census at a time: a refresh and a move at once share it. */
  let running: Promise<void> | undefined
  /** Hosts seen read-only at a census of this run: replicas, which a promotion may make the primary. */
  const seenReadOnly = new Set<string>()
  const storeOf = new Map<string, string>()
  /** Stores this run wrote through: the host it started at, and each it moved to. */
  const used = new Set<string>()
  /** Store identities (HostState.store) a census of this run saw writable beside another: no replica to promote. */
  const wereSplit = new Set<string>()
  const idOf = new Map<string, string>()
  /** Store identities this run's allocations went to (not only statements: a start host may have had none). */
  const allocatedOn = new Set<string>()
  let hasAllocated = false

  function record (states: HostState[]): void {
    hosts = states
    checkedAt = new Date()
    for (const h of states) {
      if (h.state === 'read-only') seenReadOnly.add(h.host)
      if (h.server !== undefined) storeOf.set(h.host, h.server)
      if (h.store !== undefined) idOf.set(h.host, h.store)
    }
    const w = writable(states)
    if (w.stores > 1) {
      for (const h of w.hosts) if (h.store !== undefined) wereSplit.add(h.store)
      if (split === undefined) {
        split = { hosts: w.hosts.map(describeHost), since: checkedAt }
        logger.error({ writable: split.hosts, hosts: states.map((h) => `${describeHost(h)} ${h.state}`) },
          'more than one host of leaf.jdbc.url answers writable: two instances could allocate the same IDs, one on each; nothing is allocated until all but one are read-only (SET GLOBAL read_only = 1 on the old primary, and read_only=1 in its my.cnf: a restart makes it writable again)')
        onSplit?.(true)
      } else {
        split.hosts = w.hosts.map(describeHost)
      }
    } else if (split !== undefined) {
      logger.warn({ was: split.hosts, hosts: states.map((h) => `${describeHost(h)} ${h.state}`) }, 'at most one host of leaf.jdbc.url answers writable again: allocations resume')
      split = undefined
      onSplit?.(false)
    }
  }

  async function check (): Promise<void> {
    if (running === undefined) running = census().then(record).finally(() => { running = undefined })
    await running
  }

  function blocked (): LeafError | undefined {
    if (split === undefined) return undefined
    return new LeafError('STORE_SPLIT', `More than one host of leaf.jdbc.url answers writable (${split.hosts.join(', ')}, since ${split.since.toISOString()}): nothing is allocated until all but one are read-only.`)
  }

  return {
    check,
    blocked,
    refuses (store) {
      return left.has(store)
    },
    async beforeMove (to, from) {
      await check()
      const refused = blocked()
      if (refused !== undefined) {
        logger.warn({ to, writable: split?.hosts }, 'host list not moved: more than one host answers writable')
        throw refused
      }
      const fromStore = storeOf.get(from)
      if (fromStore !== undefined) used.add(fromStore)
      const target = hosts.find((h) => h.host === to)
      const toStore = storeOf.get(to)
      const onlyWritable = !hasAllocated && target?.state === 'writable' && writable(hosts).stores === 1
      // A host that never answered read-only (or not at all) in this run, of a store it never
      // wrote through, may be an old primary back.
      const allowed = seenReadOnly.has(to) || (toStore !== undefined && used.has(toStore)) || onlyWritable || target?.state === 'read-only'
      // An old primary fenced with SET GLOBAL read_only = 1 answers read-only, until a restart.
      const fencedNow = (id: string) => {
        const of = hosts.filter((h) => idOf.get(h.host) === id)
        return of.length > 0 && of.every((h) => h.state === 'read-only')
      }
      const toId = idOf.get(to)
      if (allowed && toId !== undefined && wereSplit.has(toId) && !allocatedOn.has(toId) && [...wereSplit].some((id) => id !== toId && !fencedNow(id))) {
        logger.warn({ from, to, state: target?.state }, 'host list not moved: this instance saw that host writable beside another (an old primary); restart it to start there, or make it read-only')
        throw Object.assign(new LeafError('STORE_NOT_MOVED', `${from} does not answer, and ${to} was seen writable beside another host by this instance (an old primary): not moved to; restart the instance, or make ${to} read-only.`), { reason: 'HOST_WAS_IN_A_SPLIT' })
      }
      if (allowed && toStore !== undefined) used.add(toStore)
      if (!allowed) {
        logger.warn({ from, to, state: target?.state }, 'host list not moved: this instance never saw that host as a replica (read-only); restart it to start there, or make it read-only')
        throw Object.assign(new LeafError('STORE_NOT_MOVED', `${from} does not answer, and ${to} was never seen read-only (a replica) by this instance (it may be an old primary): not moved to; restart the instance, or make ${to} read-only.`), { reason: 'HOST_NOT_SEEN_AS_REPLICA' })
      }
    },
    allocated (store) {
      hasAllocated = true
      if (store !== undefined) allocatedOn.add(store)
    },
    leave (store) {
      if (left.has(store)) return
      left.add(store)
      logger.warn({ store, left: [...left] }, 'segment store left in a failover: nothing is allocated on it again (the warm-start file keeps it; leaf.segment.trusted-stores lets it back)')
    },
    startRefusal () {
      const w = writable(hosts)
      if (hosts.length < 2 || w.hosts.length < hosts.length || w.stores < 2) return undefined
      return `every host of leaf.jdbc.url answers writable (${w.hosts.map(describeHost).join(', ')}): two instances would hand out the same IDs, one on each; make all but the primary read-only (SET GLOBAL read_only = 1, and read_only=1 in their my.cnf), then start again`
    },
    leftStores () {
      return [...left]
    },
    view () {
      return {
        hosts,
        ...(checkedAt === undefined ? {} : { checkedAt }),
        ...(split === undefined ? {} : { split }),
        left: [...left],
        ...(inUse === undefined ? {} : { inUse: inUse() }),
      }
    },
  }
}
