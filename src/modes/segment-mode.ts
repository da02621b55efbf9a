import { randomUUID } from 'node:crypto'
import type { StoreConfig } from '../config/jdbc-url.js'
import type { Config } from '../config/load-config.js'
import { codedError, driverError, isPermanentStoreError, MysqlError, SqlState } from '../database/driver-errors.js'
import { driverCause } from '../database/errors.js'
import { StartRefused } from '../errors.js'
import type { Logger } from '../logger.js'
import { createHostFence, type HostFence } from '../segment/host-fence.js'
import { createMaxIdGuard, type MaxIdGuard, type Regression } from '../segment/max-id-guard.js'
import { createSegmentGenerator, type SegmentGenerator, type SegmentGeneratorOptions } from '../segment/segment-generator.js'
import { canLoseWrites, type SegmentStore } from '../segment/store.js'
import { describeStore } from '../database/describe-store.js'
import { createStore } from '../segment/stores/create-store.js'
import { describeTls, tlsRefusal } from '../database/tls-options.js'
import { readWarmState, stateFolderProblem, writeWarmState, type WarmState } from '../segment/warm-state.js'
import { withTimeout } from '../timers.js'

/** How long a graceful stop may spend giving unused IDs back (part of the 10 s drain). */
export const GIVE_BACK_BUDGET_MS = 3000

export interface SegmentMode {
  store: SegmentStore
  generator: SegmentGenerator
  /** What the max_id guard saw: a hold after a store failover, the last regression. */
  guard: MaxIdGuard
  /** A MySQL host list's census: writable hosts, stores left (segment/host-fence.ts). */
  hosts?: HostFence
  /** Gives back what is unused; `saveState: false` (a start that failed) leaves the warm-start file as it is. */
  close (options?: { saveState?: boolean }): Promise<void>
}

/** What to do about a permanent error, by its code. */
const REMEDIES: Record<string, string> = {
  ER_ACCESS_DENIED_ERROR: 'check leaf.jdbc.username and leaf.jdbc.password (or the user and password in leaf.jdbc.url)',
  ER_BAD_DB_ERROR: 'create the database, or correct the one named in leaf.jdbc.url',
  [MysqlError.NO_SUCH_TABLE]: 'create the table with sql/leaf_alloc.sql',
  [MysqlError.DBACCESS_DENIED]: 'grant the user SELECT, INSERT and UPDATE on that database (and DELETE, and CREATE once, for the optional leaf_alloc_parked)',
  [MysqlError.TABLEACCESS_DENIED]: 'grant the user SELECT, INSERT and UPDATE on leaf_alloc',
  [MysqlError.BAD_FIELD]: 'leaf_alloc does not have Leaf\'s columns: see sql/leaf_alloc.sql',
  [SqlState.INVALID_PASSWORD]: 'check leaf.jdbc.username and leaf.jdbc.password (or the user and password in leaf.jdbc.url)',
  [SqlState.INVALID_AUTHORIZATION_SPECIFICATION]: 'the server has no pg_hba.conf entry letting this user in from this host, or the role may not log in',
  [SqlState.INVALID_CATALOG_NAME]: 'create the database, or correct the one named in leaf.jdbc.url',
  [SqlState.UNDEFINED_TABLE]: 'create the table with sql/leaf_alloc.postgres.sql',
  [SqlState.INSUFFICIENT_PRIVILEGE]: 'grant the user SELECT, INSERT and UPDATE on leaf_alloc (and DELETE, and CREATE once, for the optional leaf_alloc_parked)',
  [SqlState.UNDEFINED_COLUMN]: 'leaf_alloc does not have Leaf\'s columns: see sql/leaf_alloc.postgres.sql',
}

/**
 * Error 1698: the account signs in by a plugin no TCP client can pass (unix_socket,
 * auth_socket), so "set leaf.jdbc.password" would be wrong with or without a password.
 */
function noPasswordRemedy (store: StoreConfig): string {
  const why = 'this user signs in without a password (such as IDENTIFIED VIA unix_socket, for the server\'s own socket only)'
  const use = 'set leaf.jdbc.username to a user IDENTIFIED BY a password'
  return store.kind === 'mysql' && store.password !== ''
    ? `${why}, so the password given is not used: ${use}`
    : `${why}: ${use}, and set leaf.jdbc.password`
}

/**
 * Opens the store and loads the tags. An error no retry can mend refuses the start in one
 * line; an unreachable store is retried in the background, answering NOT_READY meanwhile.
 */
export async function startSegmentMode (
  config: Config,
  logger: Logger,
  extra: Pick<SegmentGeneratorOptions, 'clock'> = {}
): Promise<SegmentMode> {
  const { segment } = config
  const { stateFile } = segment
  const unwritable = stateFile === undefined ? undefined : stateFolderProblem(stateFile)
  if (unwritable !== undefined) throw new StartRefused(`leaf.segment.state-file: ${unwritable}: make the folder writable, or set leaf.segment.state-file to a file in a writable folder (or to off)`, { code: 'STATE_FILE_UNWRITABLE' })
  const warm = stateFile === undefined ? undefined : openWarmState(stateFile, logger)
  // A new id each run: what this stop parks, the next start takes (see SegmentGeneratorOptions.handover).
  const parkAs = randomUUID()
  const where = describeStore(segment.store)
  // The marks hold for the store they were taken on: not for another database or file.
  const storeKey = segment.store.kind === 'sqlite' ? `sqlite:${segment.store.path}` : `${segment.store.kind} database ${segment.store.database}`
  let store: SegmentStore | undefined
  const hostList = warm?.hostList?.where === storeKey ? warm.hostList : undefined
  const fence = segment.store.kind !== 'mysql'
    ? undefined
    : createHostFence({
      logger,
      left: hostList?.left,
      trusted: segment.trustedStores,
      census: () => store?.hosts?.() ?? Promise.resolve([]),
      inUse: () => store?.hostInUse?.() ?? '',
    })
  try {
    // The embedded store opens (and creates) its file here, synchronously.
    store = createStore(segment.store, { ...segment, logger, ...(fence === undefined ? {} : { gate: fence, startAt: hostList?.inUse }) })
  } catch (err) {
    throw storeRefusal(where, err, segment.store) ?? err
  }
  // Bounded past the pool's own bound (a connection, its setup, the query and the kill of an
  // unanswered one: database/mysql-pool.ts) in case a driver is not.
  const pingTimeoutMs = segment.connectTimeoutMs + 3 * segment.queryTimeoutMs + 1000
  const pingError = await withTimeout(store.ping(), pingTimeoutMs, `no answer within ${pingTimeoutMs} ms`).then(() => undefined, (err: unknown) => err)
  const refused = pingError === undefined ? undefined : storeRefusal(where, pingError, segment.store)
  if (refused !== undefined) {
    await store.close()
    throw refused
  }
  /** The start's reading of the replication: undefined when it could not be read. */
  let topology: string | undefined
  if (pingError === undefined && store.topology !== undefined) {
    await withTimeout(store.topology(), pingTimeoutMs, `no answer within ${pingTimeoutMs} ms`).then(
      (line) => {
        topology = line
        logger.info({ store: where, topology: line }, 'segment store replication')
      },
      (err: unknown) => logger.warn({ store: where, err: (err as Error).message }, 'segment store replication not readable'))
  }
  if (pingError !== undefined) {
    const known = codedError(pingError)
    logger.warn({ store: where, ...(known === undefined ? { err: pingError } : known) },
      'database unreachable at start: answering NOT_READY and retrying in the background')
  }
  // One host cannot split against itself: the census is for lists (a store left is still refused).
  const censused = fence !== undefined && segment.store.kind === 'mysql' && segment.store.hosts.length > 1 ? fence : undefined
  if (censused !== undefined) await checkHostsAtStart(censused, store, where, logger)
  const saved = warm?.guard?.where === storeKey ? warm.guard : undefined
  if (warm?.guard !== undefined && saved === undefined) {
    logger.info({ file: stateFile, was: warm.guard.where, now: storeKey }, 'warm-start file written for another store: its max_id marks are dropped')
  }
  const onRegression = fence === undefined
    ? undefined
    : (r: Regression) => {
        if (r.cause === 'store changed' && r.from !== undefined) leftStore(r.from)
      }
  const guard = createMaxIdGuard({ store, logger, holdMs: segment.failoverHoldMs, monotonic: () => performance.now(), saved, onRegression })
  const opened = store
  const hostListState = () => fence === undefined ? undefined : { where: storeKey, inUse: opened.hostInUse?.(), left: fence.leftStores() }
  /** A store left: kept in the warm-start file at once, not only at the next graceful stop (a crash would lose it). */
  function leftStore (from: string): void {
    if (fence === undefined) return
    fence.leave(from)
    if (stateFile === undefined) return
    try {
      writeWarmState(stateFile, { ...(warm ?? { owner: parkAs, tags: [] }), hostList: hostListState() })
    } catch (err) {
      logger.warn({ file: stateFile, err: (err as Error).message }, 'warm-start file not written: the store left is remembered by this life only')
    }
  }
  const censusTimer = censused === undefined ? undefined : setInterval(() => { censused.check().catch(() => {}) }, segment.refreshIntervalMs)
  censusTimer?.unref()
  const topologyTimer = boundServing(store, guard, topology, segment.failoverHoldMs, segment.refreshIntervalMs, pingTimeoutMs, logger)
  const generator = createSegmentGenerator({
    store: fence === undefined ? store : fencedStore(store, fence),
    logger,
    guard,
    waitTimeoutMs: segment.waitTimeoutMs,
    refreshIntervalMs: segment.refreshIntervalMs,
    bufferSeconds: segment.bufferSeconds,
    maxBufferedSegments: segment.maxBufferedSegments,
    handover: stateFile === undefined ? undefined : { claimFrom: warm?.owner, parkAs },
    clock: extra.clock,
  })
  const ready = await generator.init()
  const tls = storeTls(segment.store, store)
  logger.info({ store: where, ...(tls === undefined ? {} : { tls }), ready, bufferSeconds: segment.bufferSeconds, stateFile: stateFile ?? '(none)' }, 'segment mode enabled')
  if (warm !== undefined && warm.tags.length > 0) warmStart(generator, warm.tags, ready, logger)
  return {
    store,
    generator,
    guard,
    ...(fence === undefined ? {} : { hosts: fence }),
    async close ({ saveState = true } = {}) {
      clearInterval(censusTimer)
      if (topologyTimer !== undefined) {
        topologyTimer.stopped = true
        clearTimeout(topologyTimer.current)
      }
      const { giveBacks, warmTags } = await generator.shutdown(GIVE_BACK_BUDGET_MS)
      for (const g of giveBacks) {
        if (g.unused === 0n) continue
        const lost = g.unused - g.returned - g.parked
        logger.info({ key: g.key, unused: String(g.unused), returned: String(g.returned), parked: String(g.parked), lost: String(lost), reason: g.reason },
          lost === 0n ? 'unused IDs given back' : 'unused IDs given back in part: the rest is lost')
      }
      if (stateFile !== undefined && saveState) {
        try {
          const hostList = hostListState()
          writeWarmState(stateFile, { owner: parkAs, tags: warmTags, guard: { ...guard.state(), where: storeKey }, ...(hostList === undefined ? {} : { hostList }) })
          logger.info({ file: stateFile, tags: warmTags.length }, 'warm-start file written')
        } catch (err) {
          logger.warn({ file: stateFile, err: (err as Error).message }, 'warm-start file not written: the next start loads every tag on its first request, and takes nothing parked')
        }
      }
      await store.close()
    },
  }
}

/** Before the first allocation: a list whose hosts all answer writable refuses the start. */
async function checkHostsAtStart (fence: HostFence, store: SegmentStore, where: string, logger: Logger): Promise<void> {
  await fence.check()
  const refusal = fence.startRefusal()
  if (refusal !== undefined) {
    await store.close()
    throw new StartRefused(`segment store ${where}: ${refusal}`, { code: 'STORE_SPLIT' })
  }
  const { hosts, inUse, left } = fence.view()
  logger.info({ store: where, inUse, hosts: hosts.map((h) => `${h.host} ${h.state}${h.store === undefined ? '' : ` (${h.store})`}`), left }, 'segment store hosts')
}

/** The store, its allocations refused (STORE_SPLIT) while more than one host answers writable. */
function fencedStore (store: SegmentStore, fence: HostFence): SegmentStore {
  return {
    ...store,
    async allocate (key, adapted) {
      const refused = fence.blocked()
      if (refused !== undefined) throw refused
      const allocation = await store.allocate(key, adapted)
      fence.allocated(allocation?.store)
      return allocation
    },
  }
}

interface TopologyTimer { current: NodeJS.Timeout | undefined, stopped: boolean }

/**
 * Bounds serving where the store can lose committed allocations
 * (docs/production.md#an-instance-cut-off-from-the-store); bounded until the replication is read.
 */
function boundServing (store: SegmentStore, guard: MaxIdGuard, topology: string | undefined, holdMs: number, everyMs: number, timeoutMs: number, logger: Logger): TopologyTimer | undefined {
  // No hold (failover-hold-ms=0): no peer waits, and no bound could be shorter than its wait.
  if (store.topology === undefined || holdMs === 0) return undefined
  const apply = (line: string) => {
    const bounded = canLoseWrites(line)
    guard.boundServing(bounded ? holdMs : undefined)
    logger.info({ bounded, boundMs: bounded ? holdMs : undefined },
      bounded
        ? 'replication can lose allocations: buffered IDs are served only within leaf.segment.failover-hold-ms of the last refresh that reached the store'
        : 'replication loses no allocation: buffered IDs are served through a database outage')
    // Refreshes further apart than the hold let the bound pass between two of them.
    if (bounded && holdMs < 2 * everyMs) {
      logger.warn({ failoverHoldMs: holdMs, refreshIntervalMs: everyMs },
        'leaf.segment.failover-hold-ms is under two leaf.segment.refresh-interval-ms: on this replication the buffer stops serving (STORE_UNCONFIRMED) between refreshes; leave failover-hold-ms empty (its default) or shorten the refresh interval')
    }
  }
  if (topology !== undefined) {
    apply(topology)
    return undefined
  }
  guard.boundServing(holdMs)
  const timer: TopologyTimer = { current: undefined, stopped: false }
  const read = () => {
    if (timer.stopped) return
    timer.current = setTimeout(() => {
      withTimeout((store.topology as () => Promise<string>)(), timeoutMs, `no answer within ${timeoutMs} ms`).then((line) => {
        if (timer.stopped) return
        logger.info({ topology: line }, 'segment store replication')
        apply(line)
      }, () => read())
    }, everyMs)
    timer.current.unref()
  }
  read()
  return timer
}

/** The file's state; undefined when there is none, or none readable (a warning says so). */
function openWarmState (file: string, logger: Logger): WarmState | undefined {
  try {
    return readWarmState(file)
  } catch (err) {
    logger.warn({ file, err: (err as Error).message }, 'warm-start file unreadable: every tag loads on its first request, nothing parked is taken, and it is rewritten at the next graceful stop')
    return undefined
  }
}

function warmStart (generator: SegmentGenerator, tags: string[], ready: boolean, logger: Logger): void {
  if (!ready) {
    logger.warn({ tags: tags.length }, 'warm start skipped: the tag list is not loaded (database unreachable)')
    return
  }
  const started = performance.now()
  generator.warm(tags).then(() => {
    logger.info({ tags: tags.length, ms: Math.round(performance.now() - started) }, 'warm start: hot tags loaded')
  }, (err: unknown) => logger.warn({ err }, 'warm start failed'))
}

/** The store's TLS mode and its latest session's protocol and cipher, for logs and /cache; undefined for SQLite. */
export function storeTls (config: StoreConfig, store: SegmentStore): string | undefined {
  return config.kind === 'sqlite' || config.tls === undefined ? undefined : describeTls(config.tls, store.tlsSession?.())
}

/** A StartRefused for a permanent error: where, the code, the driver's message and what to do. */
export function storeRefusal (where: string, err: unknown, store: StoreConfig): StartRefused | undefined {
  const sqlite = store.kind === 'sqlite'
  const tls = sqlite ? undefined : tlsRefusal(err, store.tls)
  if (tls !== undefined) return new StartRefused(`segment store ${where}: ${tls}`, { code: 'STORE_TLS_REFUSED', cause: driverCause(err) })
  if (!isPermanentStoreError(err, { sqlite })) return undefined
  const known = driverError(err)
  if (known === undefined) return undefined
  const remedy = known.code === 'ER_ACCESS_DENIED_NO_PASSWORD_ERROR'
    ? noPasswordRemedy(store)
    : REMEDIES[known.code] ?? (sqlite ? 'check the file leaf.jdbc.url names (sqlite:PATH)' : undefined)
  return new StartRefused(`segment store ${where}: ${known.code}: ${known.message.replace(/\s+/g, ' ')}${remedy === undefined ? '' : `: ${remedy}`}`, { code: 'STORE_REFUSED', cause: driverCause(err) })
}
