import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { randomInt } from 'node:crypto'
import Database from 'better-sqlite3'
import type { ResultSetHeader } from 'mysql2/promise'
import type { StoreConfig } from '../../config/jdbc-url.js'
import type { Logger } from '../../logger.js'
import { createMysqlRunner } from '../../segment/stores/mysql-hosts.js'
import { describeStore } from '../../segment/stores/create-store.js'
import type { ResolvedConfig } from '../settings.js'
import { firstNonLoopbackIPv4 } from './local-ip.js'
import type { LeaseStatus, WorkerIdSource, WorkerLease } from './source.js'
import { LeaseRefused } from '../../errors.js'

// The disposable source, Baidu UidGenerator's DisposableWorkerIdAssigner: every start inserts
// one row into WORKER_NODE and takes the row's auto-increment ID as its worker id. No id is
// ever handed out twice, so there is nothing to renew or release: the store is needed at start
// only, and the ids run out after max starts (then, as with UidGenerator, a new table or wider
// worker bits).

export const WORKER_NODE_TABLE = 'WORKER_NODE'

/** The MySQL DDL, Baidu's, as shipped in sql/worker_node.sql (test/disposable.test.ts compares them). */
export const MYSQL_WORKER_NODE_DDL = `CREATE TABLE IF NOT EXISTS WORKER_NODE (
  ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',
  HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',
  PORT VARCHAR(64) NOT NULL COMMENT 'port',
  TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',
  LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',
  MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',
  CREATED TIMESTAMP NOT NULL COMMENT 'created time',
  PRIMARY KEY(ID)
) COMMENT='DB WorkerID Assigner for UID Generator', ENGINE = INNODB`

// AUTOINCREMENT: without it SQLite hands the largest ID out again once its row is deleted.
const SQLITE_WORKER_NODE_DDL = `CREATE TABLE IF NOT EXISTS WORKER_NODE (
  ID          INTEGER     PRIMARY KEY AUTOINCREMENT,
  HOST_NAME   VARCHAR(64) NOT NULL,
  PORT        VARCHAR(64) NOT NULL,
  TYPE        INT         NOT NULL,
  LAUNCH_DATE DATE        NOT NULL,
  MODIFIED    TIMESTAMP   NOT NULL,
  CREATED     TIMESTAMP   NOT NULL
)`

// MODIFIED and CREATED are given, as Baidu's mapper gives them: MariaDB may have no default for
// a second TIMESTAMP column. Dates are the database's, in UTC (the runner's sessions are).
const MYSQL_INSERT = 'INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES (?, ?, ?, CURDATE(), NOW(), NOW())'
const SQLITE_INSERT = "INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES (?, ?, ?, date('now'), datetime('now'), datetime('now'))"

const ER_NO_SUCH_TABLE = 1146
/** HOST_NAME and PORT are VARCHAR(64): a longer value would fail the insert in strict mode. */
const COLUMN_LENGTH = 64

export interface DisposableWorkerIdOptions {
  store: StoreConfig
  /** Baidu records the IP (or the container's host name). */
  hostName: string
  /** Baidu: the port in a container, else `${Date.now()}-${random}`. */
  port: string
  /** Baidu's WorkerNodeType: 1 CONTAINER, 2 ACTUAL. */
  type: 1 | 2
  /** The worker ids allowed: max is the layout's largest worker id or leaf.snowflake.worker-id.max. */
  min: number
  max: number
  connectTimeoutMs: number
  queryTimeoutMs: number
  /** leaf.snowflake.borrow-ahead-ms: how far ahead of its clock an earlier start may have issued. */
  borrowAheadMs?: number
  clock?: () => number
  logger: Logger
}

type Row = [hostName: string, port: string, type: number]

/** leaf.snowflake.worker-id.source=disposable. */
export function disposableSource (config: ResolvedConfig, logger: Logger, clock: () => number): WorkerIdSource {
  const s = config.snowflake
  return {
    kind: 'disposable',
    acquire: async () => await acquireDisposableWorkerId({
      store: config.segment.store,
      // As UidGenerator: the host's address, and a port no other start shares.
      hostName: s.ip || firstNonLoopbackIPv4() || '127.0.0.1',
      port: `${s.port}-${Date.now()}-${randomInt(100_000)}`,
      type: process.env.KUBERNETES_SERVICE_HOST !== undefined ? 1 : 2,
      min: s.workerIdMin,
      max: s.workerIdMax,
      connectTimeoutMs: config.segment.connectTimeoutMs,
      queryTimeoutMs: config.segment.queryTimeoutMs,
      borrowAheadMs: s.borrowAheadMs,
      clock,
      logger,
    }),
  }
}

/** A new worker id, never handed out before: the ID of a new WORKER_NODE row. */
export async function acquireDisposableWorkerId (o: DisposableWorkerIdOptions): Promise<WorkerLease> {
  const where = `${describeStore(o.store)} ${WORKER_NODE_TABLE}`
  const row: Row = [o.hostName.slice(0, COLUMN_LENGTH), o.port.slice(0, COLUMN_LENGTH), o.type]
  let workerId: number
  try {
    workerId = o.store.kind === 'sqlite' ? insertSqlite(o.store.path, row) : await insertMysql(o, where, row)
  } catch (err) {
    if (err instanceof LeaseRefused) throw err
    throw new LeaseRefused(`${where}: no WORKER_NODE row could be inserted, so no worker id is taken (${(err as Error).message})`)
  }
  // The row stays: its id is spent either way, as in UidGenerator.
  if (workerId > o.max) {
    throw new LeaseRefused(`${where}: worker id ${workerId} exceeds the max ${o.max} of the range [${o.min}, ${o.max}]: ` +
      'every start takes a new id and none is reused, so the range is used up; as with UidGenerator, use a new WORKER_NODE table or give the worker id more bits')
  }
  if (workerId < o.min) {
    throw new LeaseRefused(`${where}: worker id ${workerId} is below the range [${o.min}, ${o.max}]: raise the table's next ID to at least ${o.min}`)
  }
  o.logger.info({ workerId, table: where }, 'worker id claimed: a new WORKER_NODE row, never handed out again')

  let unavailable: string | undefined
  const lease = {
    workerId,
    // Nothing records how far an earlier start borrowed: it ended before now, and never issued
    // more than borrowAheadMs past its clock. Past that, this start's IDs (a higher worker id
    // in the same unit) are above all of its IDs: a restart never goes back (UidGenerator's #85).
    notBefore: (o.borrowAheadMs ?? 0) > 0 ? (o.clock ?? Date.now)() + (o.borrowAheadMs ?? 0) + 1 : 0,
    issuableUntil: Infinity,
    // Never reached: the id is ours for good, nothing is recorded as IDs are issued.
    extend () {},
    status (): LeaseStatus {
      return {
        source: 'disposable' as LeaseStatus['source'],
        workerId,
        zookeeperConnected: false,
        unavailable,
        lastHeartbeat: undefined,
        foreverPath: undefined,
        temporaryPath: undefined,
        cacheFile: '',
        pool: where,
        range: [o.min, o.max],
      }
    },
    async close () {
      lease.issuableUntil = -Infinity
      unavailable = 'the lease is closed'
    },
  }
  return lease
}

async function insertMysql (o: DisposableWorkerIdOptions, where: string, row: Row): Promise<number> {
  if (o.store.kind !== 'mysql') throw new Error('not a MySQL store')
  const { run, close } = createMysqlRunner({ ...o.store, connectTimeoutMs: o.connectTimeoutMs, queryTimeoutMs: o.queryTimeoutMs, poolSize: 1 })
  try {
    try {
      return Number((await run<ResultSetHeader>(MYSQL_INSERT, row)).insertId)
    } catch (err) {
      if ((err as { errno?: number }).errno !== ER_NO_SUCH_TABLE) throw err
    }
    try {
      await run(MYSQL_WORKER_NODE_DDL)
    } catch (ddlErr) {
      throw new LeaseRefused(`${where}: the table does not exist and cannot be created (${(ddlErr as Error).message}): run sql/worker_node.sql`)
    }
    return Number((await run<ResultSetHeader>(MYSQL_INSERT, row)).insertId)
  } finally {
    await close()
  }
}

/** The embedded store: the same table in the SQLite file, for the instances of one host. */
function insertSqlite (path: string, row: Row): number {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const db = new Database(path, { timeout: 5000 })
  try {
    db.exec(SQLITE_WORKER_NODE_DDL)
    return Number(db.prepare(SQLITE_INSERT).run(...row).lastInsertRowid)
  } finally {
    db.close()
  }
}
