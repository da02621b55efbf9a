import type { SizingOptions } from './batch-size.js'
import { settle, type LeafClientOptions } from './client-options.js'
import { CLIENT_CODES, LeafClientError } from './errors.js'
import { countIds } from './id-ranges.js'
import { REAL_CLOCK } from './clock.js'
import type { Batch } from './held-batches.js'
import { HighWaterMarks } from './high-water.js'
import { KeyBuffer, type KeyStats } from './key-buffer.js'
import { Refusals } from './refusals.js'
import { ServerRing } from './servers.js'
import { createUndiciTransport, type Mode } from './transport.js'

export interface ServerStats {
  server: string
  requests: number
  failures: number
  /** IDs this server handed out to the client. */
  ids: number
  /** Answers refused with ID_REGRESSION: IDs that went back (counted in `failures` too). */
  refused: number
  /** The instances that answered through this URL (their Leaf-Instance names; the URL when one sent none). */
  instances: string[]
  /** In its backoff now. */
  down: boolean
}

export interface ClientStats {
  requests: number
  failures: number
  ids: number
  refused: number
  servers: ServerStats[]
  /** Per `<mode>/<key>`. */
  keys: Record<string, KeyStats>
}

export interface LeafClient {
  /** The next ID: from the local buffer when it holds one, else after one fetch. */
  nextId (mode: Mode, key: string): Promise<bigint>
  /** `count` IDs, increasing while they come from one server. */
  nextIds (mode: Mode, key: string, count: number): Promise<bigint[]>
  /** The next ID from the local buffer, synchronously; undefined when it is empty (a fetch starts). */
  tryNextId (mode: Mode, key: string): bigint | undefined
  /** As tryNextId as a number, with no bigint made; throws UNSAFE_INTEGER for an ID past 2^53. */
  tryNextNumber (mode: Mode, key: string): number | undefined
  /** As nextId as a number; rejects with UNSAFE_INTEGER for an ID past 2^53. */
  nextNumber (mode: Mode, key: string): Promise<number>
  /** As nextId, in decimal. */
  nextIdString (mode: Mode, key: string): Promise<string>
  /** As nextIds, in decimal. */
  nextIdStrings (mode: Mode, key: string, count: number): Promise<string[]>
  stats (): ClientStats
  /** Ends the pools and drops the buffers (their IDs are lost, as Leaf's are); calls under way reject with CLOSED. */
  close (): Promise<void>
}

interface ServerCounters { requests: number, failures: number, ids: number, refused: number, instances: Set<string> }

/** Most IDs one nextIds call may ask for (its array is made up front). */
export const MAX_IDS_PER_CALL = 10_000_000

export function createLeafClient (options: LeafClientOptions): LeafClient {
  const settings = settle(options)
  const clock = options.clock ?? REAL_CLOCK
  const transport = options.transport ?? createUndiciTransport({ servers: settings.servers, token: options.token, connections: settings.connections })
  const ring = new ServerRing(settings.servers, settings, clock.now)
  const sizing: SizingOptions = { minBatch: settings.minBatch, maxBatch: settings.maxBatch, targetIntervalMs: settings.targetFetchIntervalMs }
  // Snowflake batches must be used before they age out: aim for a fetch per half of that.
  const snowflakeSizing: SizingOptions = { ...sizing, targetIntervalMs: Math.min(settings.targetFetchIntervalMs, settings.snowflakeMaxAgeMs / 2) }
  const buffers = { segment: new Map<string, KeyBuffer>(), snowflake: new Map<string, KeyBuffer>() }
  const perServer = new Map<string, ServerCounters>(settings.servers.map((s) => [s, { requests: 0, failures: 0, ids: 0, refused: 0, instances: new Set() }]))
  const marks = new HighWaterMarks()
  /** Instances already named in a warning: one per instance, the rest are counted. */
  const warned = new Set<string>()
  let closed: LeafClientError | undefined
  /** balance 'sticky': the server that last answered each `<mode>/<key>`. */
  const sticky = new Map<string, string>()
  // The last key looked up per mode: a hot loop on one key skips the map.
  let lastSegmentKey: string | undefined
  let lastSegment: KeyBuffer | undefined
  let lastSnowflakeKey: string | undefined
  let lastSnowflake: KeyBuffer | undefined

  /** A 4xx answer is the same on every server, so it is not retried. */
  async function fetchBatch (mode: Mode, key: string, count: number, deadline: number, onAttemptFailed: (err: LeafClientError) => void): Promise<Batch> {
    const stickyKey = `${mode}/${key}`
    let prefer = settings.balance === 'sticky' ? sticky.get(stickyKey) : undefined
    let last: LeafClientError | undefined
    let attempts = 0
    const tried = new Set<string>()
    const refusals = new Refusals(settings.servers, settings.refusedRounds, settings.backoffMs, clock.now())
    const giveUp = (): LeafClientError => refusals.unreachable ? refusals.error(attempts, clock.now()) : exhausted(last, attempts, deadline)
    for (;;) {
      if (closed !== undefined) throw closed
      const remaining = deadline - clock.now()
      if (remaining <= 0) throw giveUp()
      let server: string
      const step = refusals.next()
      if (step === undefined) {
        const picked = ring.pick(prefer)
        server = picked.server
        if (picked.waitMs > 0 && tried.size >= ring.size) {
          // Every server failed in this call: wait for the first backoff to end, within the budget.
          if (picked.waitMs >= remaining) throw exhausted(last, attempts, deadline)
          await clock.sleep(picked.waitMs)
          continue
        }
      } else {
        // Only refused connections so far: round after round, then UNREACHABLE (see Refusals).
        if (step.kind === 'give-up') throw refusals.error(attempts, clock.now())
        if (step.pauseMs > 0) {
          if (step.pauseMs >= remaining) throw refusals.error(attempts, clock.now())
          await clock.sleep(step.pauseMs)
          continue
        }
        server = step.server
      }
      tried.add(server)
      attempts++
      const counters = perServer.get(server) as ServerCounters
      counters.requests++
      const fetchedAt = clock.now()
      const asked = Math.min(count, sizing.maxBatch)
      const ticket = marks.sent(stickyKey)
      try {
        const answer = await transport.fetchIds(server, mode, key, asked, Math.min(remaining, settings.requestTimeoutMs))
        // A server that sends no name (Java Leaf, an older Leaf-TS) is taken as one instance.
        const instance = answer.instance ?? server
        counters.instances.add(instance)
        const refused = marks.accept(ticket, instance, answer.ranges)
        if (refused !== undefined) throw wentBack(server, instance, refused, counters)
        ring.succeeded(server)
        const ranges = answer.ranges
        const n = countIds(ranges)
        counters.ids += n
        if (settings.balance === 'sticky') sticky.set(stickyKey, server)
        return { ranges, count: n, fetchedAt, server }
      } catch (err) {
        marks.ended(ticket)
        const e = err instanceof LeafClientError ? err : new LeafClientError(CLIENT_CODES.NETWORK, `${server}: ${String(err)}`, { server, cause: err })
        counters.failures++
        if (lowerMaxBatch(e, asked)) continue
        // Cut short by the call's own budget: not the server's failure, and not the call's error
        // (servers that refused stay UNREACHABLE or NETWORK, not a TIMEOUT of 3 ms).
        if (e.code === CLIENT_CODES.TIMEOUT && remaining < settings.requestTimeoutMs) throw giveUp()
        if (!e.retryable) throw withAttempts(e, attempts)
        ring.failed(server)
        refusals.failed(server, e)
        last = withAttempts(e, attempts)
        onAttemptFailed(last)
        prefer = undefined
      }
    }
  }

  /** Refused like a bad answer: the caller gets another server's IDs, or ID_REGRESSION, never a repeated ID. */
  function wentBack (server: string, instance: string, why: string, counters: ServerCounters): LeafClientError {
    counters.refused++
    const e = new LeafClientError(CLIENT_CODES.ID_REGRESSION, `${server}: 200 refused: ${why}`, { status: 200, server })
    if (!warned.has(instance)) {
      warned.add(instance)
      process.emitWarning(`${e.message} (further refusals are counted in stats().servers[].refused)`, { type: 'LeafClientWarning', code: CLIENT_CODES.ID_REGRESSION })
    }
    return e
  }

  /** A server whose `leaf.batch.max` is below ours says so in INVALID_COUNT's message: use its maximum. */
  function lowerMaxBatch (e: LeafClientError, asked: number): boolean {
    if (e.code !== 'INVALID_COUNT') return false
    const max = /from 1 to (\d+)/.exec(e.message)
    const theirs = max === null ? NaN : Number(max[1])
    if (!(theirs >= 1 && theirs < asked)) return false
    sizing.maxBatch = snowflakeSizing.maxBatch = theirs
    sizing.minBatch = snowflakeSizing.minBatch = Math.min(sizing.minBatch, theirs)
    return true
  }

  function exhausted (last: LeafClientError | undefined, attempts: number, deadline: number): LeafClientError {
    const budget = `within ${settings.timeoutMs} ms`
    if (last === undefined) return new LeafClientError(CLIENT_CODES.TIMEOUT, `no server answered ${budget}`, { attempts })
    return new LeafClientError(last.code, `every server failed ${budget} (${attempts} requests); last: ${last.message}`, {
      status: last.status, server: last.server, attempts, cause: last,
    })
  }

  function buffer (mode: Mode, key: string): KeyBuffer {
    if (closed !== undefined) throw closed
    const map = buffers[mode]
    if (map === undefined) throw new TypeError(`mode must be 'segment' or 'snowflake', not ${String(mode)}`)
    let b = map.get(key)
    if (b === undefined) {
      if (typeof key !== 'string') throw new TypeError('key must be a string')
      const isSnowflake = mode === 'snowflake'
      b = new KeyBuffer({
        sizing: isSnowflake ? snowflakeSizing : sizing,
        maxAgeMs: isSnowflake ? settings.snowflakeMaxAgeMs : Infinity,
        timeoutMs: settings.timeoutMs,
        clock,
        fetch: (count, deadline, onAttemptFailed) => fetchBatch(mode, key, count, deadline, onAttemptFailed),
      })
      map.set(key, b)
    }
    return b
  }

  function segmentBuffer (key: string): KeyBuffer {
    if (key === lastSegmentKey && lastSegment !== undefined) return lastSegment
    const b = buffer('segment', key)
    lastSegmentKey = key
    lastSegment = b
    return b
  }

  function snowflakeBuffer (key: string): KeyBuffer {
    if (key === lastSnowflakeKey && lastSnowflake !== undefined) return lastSnowflake
    const b = buffer('snowflake', key)
    lastSnowflakeKey = key
    lastSnowflake = b
    return b
  }

  const bufferOf = (mode: Mode, key: string): KeyBuffer => mode === 'segment' ? segmentBuffer(key) : mode === 'snowflake' ? snowflakeBuffer(key) : buffer(mode, key)

  /** Without prefetch. The deadline is a timer, which keeps the process alive while the call waits. */
  function direct (mode: Mode, key: string, count: number): Promise<bigint[]> {
    if (closed !== undefined) return Promise.reject(closed)
    const deadline = clock.now() + settings.timeoutMs
    let last: LeafClientError | undefined
    return new Promise((resolve, reject) => {
      const cancel = clock.timer(() => reject(exhausted(last, last?.attempts ?? 0, deadline)), settings.timeoutMs)
      fetchAll(mode, key, count, deadline, (e) => { last = e }).then(
        (ids) => { cancel(); resolve(ids) },
        (err: unknown) => { cancel(); reject(err) })
    })
  }

  async function fetchAll (mode: Mode, key: string, count: number, deadline: number, onAttemptFailed: (err: LeafClientError) => void): Promise<bigint[]> {
    const ids = new Array<bigint>(count)
    let filled = 0
    while (filled < count) {
      const batch = await fetchBatch(mode, key, count - filled, deadline, onAttemptFailed)
      for (const r of batch.ranges) {
        for (let id = r.first; id <= r.last && filled < count; id++) ids[filled++] = id
      }
    }
    return ids
  }

  function checkCount (count: number): void {
    if (!Number.isInteger(count) || count < 0 || count > MAX_IDS_PER_CALL) throw new RangeError(`count must be an integer from 0 to ${MAX_IDS_PER_CALL}, not ${count}`)
  }

  const client: LeafClient = {
    nextId (mode, key) {
      try {
        if (!settings.prefetch) return direct(mode, key, 1).then(first)
        return bufferOf(mode, key).nextId()
      } catch (err) {
        return Promise.reject(err)
      }
    },
    nextIds (mode, key, count) {
      try {
        checkCount(count)
        if (count === 0) return Promise.resolve([])
        if (!settings.prefetch) return direct(mode, key, count)
        return bufferOf(mode, key).nextIds(count)
      } catch (err) {
        return Promise.reject(err)
      }
    },
    tryNextId (mode, key) {
      if (!settings.prefetch) {
        if (closed !== undefined) throw closed
        return undefined
      }
      return bufferOf(mode, key).tryNextId()
    },
    tryNextNumber (mode, key) {
      if (!settings.prefetch) {
        if (closed !== undefined) throw closed
        return undefined
      }
      return bufferOf(mode, key).tryNextNumber()
    },
    nextNumber (mode, key) {
      try {
        if (!settings.prefetch) return direct(mode, key, 1).then((ids) => toNumber(first(ids)))
        return bufferOf(mode, key).nextNumber()
      } catch (err) {
        return Promise.reject(err)
      }
    },
    nextIdString (mode, key) {
      return client.nextId(mode, key).then(String)
    },
    nextIdStrings (mode, key, count) {
      return client.nextIds(mode, key, count).then((ids) => ids.map(String))
    },
    stats () {
      const servers = settings.servers.map((server) => {
        const { requests, failures, ids, refused, instances } = perServer.get(server) as ServerCounters
        return { server, requests, failures, ids, refused, instances: [...instances], down: ring.isDown(server) }
      })
      const keys: Record<string, KeyStats> = {}
      for (const mode of ['segment', 'snowflake'] as const) {
        for (const [key, b] of buffers[mode]) keys[`${mode}/${key}`] = b.keyStats()
      }
      const sum = (f: (s: ServerStats) => number) => servers.reduce((a, s) => a + f(s), 0)
      return { requests: sum((s) => s.requests), failures: sum((s) => s.failures), ids: sum((s) => s.ids), refused: sum((s) => s.refused), servers, keys }
    },
    async close () {
      if (closed !== undefined) return
      closed = new LeafClientError(CLIENT_CODES.CLOSED, 'the client is closed')
      for (const map of Object.values(buffers)) {
        for (const b of map.values()) b.close(closed)
        map.clear()
      }
      lastSegment = lastSnowflake = undefined
      await transport.close()
    },
  }
  return client
}

function first (ids: bigint[]): bigint {
  return ids[0] as bigint
}

function toNumber (id: bigint): number {
  if (id > BigInt(Number.MAX_SAFE_INTEGER) || id < -BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new LeafClientError(CLIENT_CODES.UNSAFE_INTEGER, `ID ${id} is past 2^53: a number cannot hold it exactly; use nextId for a bigint`)
  }
  return Number(id)
}

function withAttempts (e: LeafClientError, attempts: number): LeafClientError {
  if (e.attempts === attempts) return e
  return new LeafClientError(e.code, e.message, { status: e.status, server: e.server, attempts, cause: e.cause })
}
