import { nextBackoffMs } from '../../backoff.js'
import type { RowDataPacket, ResultSetHeader } from 'mysql2/promise'
import { createMysqlRunner, type MysqlOptions } from '../../database/mysql-hosts.js'
import type { Statement } from '../../database/mysql-pool.js'
import { channels } from '../../channels.js'
import { codeOf, MysqlError } from '../../database/driver-errors.js'
import { driverCause } from '../../database/errors.js'
import { storeIdOf } from '../../database/server-identity.js'
import { sleep } from '../../timers.js'
import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type SegmentStore, type UnusedRange } from '../store.js'

export interface MysqlStoreOptions extends MysqlOptions {
  /** Random in [0, 1), for the retries' jitter; injectable for tests. */
  random?: () => number
}

/**
 * Galera's certification conflict (ER_LOCK_DEADLOCK: two nodes moved one row at once, this
 * transaction lost) and a lock wait that timed out: the transaction was rolled back whole, so
 * it is repeated at once, in a new one, up to ALLOCATE_RETRIES times.
 */
const RETRIED = new Set<unknown>([MysqlError.LOCK_DEADLOCK, MysqlError.LOCK_WAIT_TIMEOUT])
/**
 * Five repeats: at the 27% conflict rate measured between two nodes moving one row flat out,
 * six losses in a row happen once in 2,600 allocations (0.27^6), and then the generator's own
 * backoff takes over. Their waits add up to at most 10 + 20 + 40 + 80 + 160 = 310 ms.
 */
export const ALLOCATE_RETRIES = 5
const RETRY_BASE_MS = 10

// Java Leaf's statements (LEAF-REFERENCE.md), each reservation as one transaction. They are
// sent as one multi-statement round trip, so a slow network costs one delay per segment (one
// per statement on Galera: mysql-pool.ts's transaction()).
// `step > 0`: a hand-edited step of 0 or less must not move max_id (the generator refuses it);
// with an adapted step, Leaf's custom step, unless the table's step is no longer the one it was
// adapted from.
function allocateStatements (key: string, adapted: AdaptedStep | undefined): Statement[] {
  return [
    { sql: 'START TRANSACTION' },
    adapted === undefined
      ? { sql: 'UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = ? AND step > 0', values: [key] }
      : { sql: 'UPDATE leaf_alloc SET max_id = max_id + IF(step = ?, ?, step) WHERE biz_tag = ? AND step > 0', values: [adapted.tableStep, adapted.step, key] },
    { sql: 'SELECT biz_tag, max_id, step FROM leaf_alloc WHERE biz_tag = ?', values: [key] },
    { sql: 'COMMIT' },
  ]
}

/** The MySQL DDL, as shipped in sql/leaf_alloc_parked.sql (test/integration/stores.test.ts compares them). */
export const MYSQL_PARKED_DDL = `CREATE TABLE IF NOT EXISTS \`leaf_alloc_parked\` (
  \`biz_tag\` varchar(128) NOT NULL,
  \`first_id\` bigint(20) NOT NULL,
  \`end_id\` bigint(20) NOT NULL,
  \`owner\` varchar(64) NOT NULL,
  \`parked_at\` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (\`biz_tag\`, \`first_id\`),
  KEY \`owner_tag\` (\`owner\`, \`biz_tag\`)
) ENGINE=InnoDB`

// The owner's rows, locked, and every row of the owner and every too old one of the tag
// deleted, in one transaction: a second claimer waits for the lock, then finds nothing.
function claimParkedStatements (key: string, owner: string, micros: number): Statement[] {
  return [
    { sql: 'START TRANSACTION' },
    {
      sql: 'SELECT first_id, end_id, parked_at >= NOW(3) - INTERVAL ? MICROSECOND AS fresh FROM leaf_alloc_parked WHERE biz_tag = ? AND owner = ? ORDER BY first_id FOR UPDATE',
      values: [micros, key, owner],
    },
    { sql: 'DELETE FROM leaf_alloc_parked WHERE biz_tag = ? AND (owner = ? OR parked_at < NOW(3) - INTERVAL ? MICROSECOND)', values: [key, owner, micros] },
    { sql: 'COMMIT' },
  ]
}

// A table the user may not read, write or delete from (a DBA made it with fewer grants):
// the hand-over is off, as without the table, rather than every first load failing.
const ACCESS_DENIED = new Set<unknown>([MysqlError.DBACCESS_DENIED, MysqlError.TABLEACCESS_DENIED, MysqlError.COLUMNACCESS_DENIED])
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

const TOPOLOGY_SQL = "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'log_bin', 'rpl_semi_sync_master_enabled', 'rpl_semi_sync_master_wait_point'); " +
  "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'Rpl_semi_sync_master_clients', 'Slaves_connected')"

function nameValues (rows: RowDataPacket[] | undefined): Map<string, string> {
  return new Map((rows ?? []).map((r) => [String(r.Variable_name).toLowerCase(), String(r.Value)]))
}

/** What a failover of this replication can cost: one line (docs/production.md says more). */
export function describeTopology (variables: Map<string, string>, status: Map<string, string>): string {
  const on = (name: string) => variables.get(name)?.toUpperCase() === 'ON'
  if (on('wsrep_on')) {
    return `Galera cluster of ${status.get('wsrep_cluster_size') ?? '?'} node(s): a committed allocation is on every node, a node's loss loses none; conflicts between nodes are repeated at once`
  }
  if (on('rpl_semi_sync_master_enabled')) {
    const point = variables.get('rpl_semi_sync_master_wait_point') ?? 'AFTER_COMMIT'
    const clients = status.get('rpl_semi_sync_master_clients') ?? '?'
    return point.toUpperCase() === 'AFTER_SYNC'
      ? `semi-synchronous replication (AFTER_SYNC, ${clients} replica(s) acknowledging): a promoted replica holds every allocation an instance received`
      : `semi-synchronous replication (${point}, ${clients} replica(s) acknowledging): a promotion may lose allocations already served; the max_id guard catches them (AFTER_SYNC would not lose them)`
  }
  if (on('log_bin')) {
    return `asynchronous replication possible (binary log on, ${status.get('slaves_connected') ?? '?'} replica(s) connected): a promotion may lose the last allocations; the max_id guard catches them, holding allocations for leaf.segment.failover-hold-ms`
  }
  return 'a single server, no binary log: no replica to fail over to'
}

function toRow (r: RowDataPacket): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

export function createMysqlStore (options: MysqlStoreOptions): SegmentStore {
  const { run, query, identify, close, hosts, hostInUse, tlsSession } = createMysqlRunner(options)
  const { random = Math.random } = options
  /** Set once leaf_alloc_parked turned out missing and not creatable: no hand-over. */
  let noParkedTable = false

  /** Runs `fn` on leaf_alloc_parked, creating the table first when it is missing; undefined when it may not be. */
  async function onParkedTable<T> (fn: () => Promise<T>): Promise<T | undefined> {
    if (noParkedTable) return undefined
    try {
      return await fn()
    } catch (err) {
      if (ACCESS_DENIED.has(codeOf(driverCause(err)))) {
        noParkedTable = true
        return undefined
      }
      if (codeOf(err) !== MysqlError.NO_SUCH_TABLE) throw err
    }
    try {
      await run(MYSQL_PARKED_DDL)
    } catch {
      noParkedTable = true
      return undefined
    }
    return await fn()
  }

  async function allocate (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    let waitMs = 0
    for (let attempt = 1; ; attempt++) {
      try {
        return await allocateOnce(key, adapted)
      } catch (err) {
        const reason = codeOf(err)
        if (typeof reason !== 'string' || !RETRIED.has(reason) || attempt > ALLOCATE_RETRIES) throw err
        channels.storeRetry.publish({ key, reason, attempt, host: hostInUse() })
        options.logger?.debug({ key, reason, attempt }, 'allocation conflict: repeated at once in a new transaction')
        // Full jitter: two instances that collided do not collide again in step.
        waitMs = nextBackoffMs(waitMs, RETRY_BASE_MS)
        await sleep(random() * waitMs)
      }
    }
  }

  async function allocateOnce (key: string, adapted?: AdaptedStep): Promise<Allocation | undefined> {
    let answer: Awaited<ReturnType<typeof query<unknown[]>>>
    try {
      answer = await query<unknown[]>(allocateStatements(key, adapted))
    } catch (err) {
      // `max_id + step` past BIGINT's range.
      if (codeOf(err) === MysqlError.DATA_OUT_OF_RANGE) throw new IdSpaceEnded(key, { cause: err })
      throw err
    }
    const rows = (answer.result as [ResultSetHeader, ResultSetHeader, RowDataPacket[], ResultSetHeader])[2]
    const row = rows[0]
    if (row === undefined) return undefined
    return { key: row.biz_tag, maxId: BigInt(row.max_id), step: Number(row.step), ...(answer.server === null ? {} : { store: storeIdOf(answer.server) }) }
  }

  async function getRow (key: string): Promise<LeafAllocRow | undefined> {
    const rows = await run<RowDataPacket[]>(`${SELECT_ROWS} WHERE biz_tag = ?`, [key])
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  return {
    async getAllTags () {
      const rows = await run<RowDataPacket[]>('SELECT biz_tag, max_id FROM leaf_alloc')
      return rows.map((r) => ({ key: r.biz_tag as string, maxId: BigInt(r.max_id) }))
    },
    allocate,
    async raiseMaxId (key, atLeast) {
      // CAST: GREATEST of a BIGINT and a string is computed in DOUBLE, which rounds past 2^53.
      const result = await run<ResultSetHeader>('UPDATE leaf_alloc SET max_id = GREATEST(max_id, CAST(? AS SIGNED)) WHERE biz_tag = ?', [String(atLeast), key])
      return result.affectedRows === 1
    },
    async identity () {
      const server = await identify()
      return server === null ? undefined : storeIdOf(server)
    },
    async giveBack (key, end, firstUnused) {
      const result = await run<ResultSetHeader>('UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ? AND max_id = ?',
        [String(firstUnused), key, String(end)])
      return result.affectedRows === 1
    },
    async park (key, owner, ranges) {
      if (ranges.length === 0) return true
      const values = ranges.flatMap((r) => [key, String(r.first), String(r.end), owner])
      const done = await onParkedTable(() => run(`INSERT INTO leaf_alloc_parked (biz_tag, first_id, end_id, owner) VALUES ${ranges.map(() => '(?, ?, ?, ?)').join(', ')}`, values))
      return done !== undefined
    },
    async claimParked (key, owner, maxAgeMs) {
      const micros = maxAgeMs * 1000
      const results = await onParkedTable(() => run<unknown[]>(claimParkedStatements(key, owner, micros)))
      if (results === undefined) return undefined
      const rows = (results as [ResultSetHeader, RowDataPacket[]])[1]
      return rows.filter((r) => Number(r.fresh) === 1).map((r): UnusedRange => ({ first: BigInt(r.first_id), end: BigInt(r.end_id) }))
    },
    async getAllRows (): Promise<LeafAllocRow[]> {
      const rows = await run<RowDataPacket[]>(SELECT_ROWS)
      return rows.map(toRow)
    },
    getTag: getRow,
    async createTag (tag) {
      try {
        await run('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)',
          [tag.key, String(tag.maxId), tag.step, tag.description])
      } catch (err) {
        if (codeOf(err) === MysqlError.DUP_ENTRY) return undefined
        throw err
      }
      return getRow(tag.key)
    },
    async updateTag (key, changes) {
      const sets: string[] = []
      const values: unknown[] = []
      if (changes.step !== undefined) { sets.push('step = ?'); values.push(changes.step) }
      if (changes.description !== undefined) { sets.push('description = ?'); values.push(changes.description) }
      if (sets.length > 0) await run(`UPDATE leaf_alloc SET ${sets.join(', ')} WHERE biz_tag = ?`, [...values, key])
      return getRow(key)
    },
    async topology () {
      const [variables, status] = await run<RowDataPacket[][]>(TOPOLOGY_SQL)
      return describeTopology(nameValues(variables), nameValues(status))
    },
    async ping () {
      await run('SELECT 1 FROM leaf_alloc LIMIT 1')
    },
    hosts,
    hostInUse,
    tlsSession,
    close,
  }
}
