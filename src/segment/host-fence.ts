import { LeafError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { HostState } from '../database/host-census.js'
import type { HostGate } from '../database/mysql-hosts.js'

// What keeps a host list (leaf.jdbc.url's `h1,h2`) from splitting: two instances allocating
// the same ranges, one on an old primary that came back writable, the other on the replica
// promoted in its place. docs/production.md (Host lists) walks through the interleavings.
// - Every store this instance failed over from (the max_id guard saw "store changed") is
//   remembered, in the warm-start file too, and nothing is sent to it again (the host list
//   refuses it as it refuses a read-only host), unless leaf.segment.trusted-stores names it:
//   that lets back a store left by an earlier life; a failover of this life away from it is
//   remembered again (a key left set after the switchover back must not disarm the next one).
// - Every host of the list is read (its read_only and identity, database/host-census.ts) at the
//   start, at each refresh, and before the first statement on another host. While more than
//   one store answers writable, nothing is allocated anywhere (STORE_SPLIT); the buffers serve
//   on. A host that does not answer is unknown, not writable: this instance cannot reach it,
//   so it cannot write through it either; a peer that reaches it and the promoted host sees
//   both writable; a peer that reaches only the old primary refuses it if it left it, and the
//   one left open is a new instance, with no memory, that reaches the old primary alone.
// - A move goes only to a host this life saw read-only at some census (a replica, since
//   promoted), or to a store this life already wrote through (back to a primary after a blip;
//   another node of its Galera cluster, another address of its server); before this life's
//   first allocation, also to the one writable store. An old primary that was down all this
//   life and comes back writable is never moved to: a new instance started after the failover
//   has no store left to remember, and a blip on its path to the promoted host would otherwise
//   take it there. (A store this life left is refused by its identity anyway.) Nor is a store
//   a census of this life saw writable beside another (a split), unless an allocation of this
//   life went to it, or every other store of that split answers read-only now: an old primary
//   fenced with SET GLOBAL read_only = 1 answers read-only like a replica, and a restart gives
//   it its my.cnf's read_only = 0 again.
// - At the start, a list whose hosts all answer writable refuses the start (startRefusal()).

/** While more than one store of the list answers writable. */
export interface Split {
  /** `host:port (store)` of each writable host. */
  hosts: string[]
  since: Date
}

export interface HostFenceView {
  /** The last census: every host of the list. */
  hosts: HostState[]
  checkedAt?: Date
  split?: Split
  /** Stores this instance failed over from and will not write through. */
  left: string[]
  /** The host statements go to now. */
  inUse?: string
}

export interface HostFenceOptions {
  logger: Logger
  /** Stores left by earlier lives (the warm-start file). */
  left?: readonly string[]
  /** leaf.segment.trusted-stores: dropped from the `left` of earlier lives. */
  trusted?: readonly string[]
  /** The census: the store's hosts(). */
  census: () => Promise<HostState[]>
  /** The store's hostInUse(). */
  inUse?: () => string
  /** Told when a split starts (true) or ends (false), for the metrics. */
  onSplit?: (split: boolean) => void
}

export interface HostFence extends HostGate {
  /** Reads every host now. */
  check (): Promise<void>
  /** A store this instance failed over from (the guard's "store changed"). */
  leave (store: string): void
  /** After an allocation was served (by `store`, its identity): from now on a move needs a host seen read-only. */
  allocated (store?: string): void
  /** STORE_SPLIT while more than one store answers writable; undefined otherwise. */
  blocked (): LeafError | undefined
  /**
   * At the start: the one line that refuses it when every host answered writable (more than
   * one store among them); undefined otherwise.
   */
  startRefusal (): string | undefined
  /** What the warm-start file keeps: the stores left (those of earlier lives that are trusted excepted). */
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
  const left = new Set((options.left ?? []).filter((s) => !trusted.has(s)))
  let hosts: HostState[] = []
  let checkedAt: Date | undefined
  let split: Split | undefined
  /** One census at a time: a refresh and a move at once share it. */
  let running: Promise<void> | undefined
  /** Hosts seen read-only at a census of this life: replicas, which a promotion may make the primary. */
  const seenReadOnly = new Set<string>()
  /** Each host's store (HostState.server) at the last census it answered. */
  const storeOf = new Map<string, string>()
  /** Stores this life wrote through: the host it started at, and each it moved to. */
  const used = new Set<string>()
  /** Store identities (HostState.store) a census of this life saw writable beside another: no replica to promote. */
  const wereSplit = new Set<string>()
  /** Each host's store identity at the last census it answered. */
  const idOf = new Map<string, string>()
  /** Store identities this life's allocations went to (not only statements: a start host may have had none). */
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
      // A host that never answered read-only (or not at all) in this life, of a store it never
      // wrote through, may be an old primary back.
      const allowed = seenReadOnly.has(to) || (toStore !== undefined && used.has(toStore)) || onlyWritable || target?.state === 'read-only'
      // A store every host of which answers read-only now: fenced.
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
