import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import Database from 'better-sqlite3'
import type { RowDataPacket } from 'mysql2/promise'
import type { StoreConfig } from '../../config/jdbc-url.js'
import type { MysqlRunner, Statement } from '../../segment/stores/mysql-pool.js'
import { createMysqlRunner } from '../../segment/stores/mysql-hosts.js'
import { describeStore } from '../../segment/stores/create-store.js'
import type { Layout } from '../layout.js'
import { checkLayoutRecord } from './layout-record.js'
import type { Claimed, LeaseStore, PoolSlot } from './lease-store.js'
import { LeaseRefused } from '../../errors.js'

// The db-lease pool: one row per (pool, worker id) in `leaf_worker_lease`, beside leaf_alloc.
// `owner` is the token of one claim (NULL: released); `generation` counts the claims and
// renewals, so that a claimant can tell a live holder from a stopped one without trusting the
// database's clock (recyclable-lease.ts), and `lease_ms` is the TTL that holder asked for (a
// claimant watches it that long at least); `issued_until` is the last millisecond, by the
// holders' clocks, that any holder of the id may have issued, and only ever rises;
// `released_until` is the millisecond the last holder actually reached, written by its own
// release, and read only while that release is the row's last write (`released_at` still
// equals `expires_at`). docs/worker-ids.md argues each statement against late, repeated and
// lost arrival.

export const LEASE_TABLE = 'leaf_worker_lease'

/** The MySQL DDL, as shipped in sql/leaf_worker_lease.sql (test/worker-id-sources.test.ts compares them). */
export const MYSQL_LEASE_DDL = `CREATE TABLE IF NOT EXISTS \`leaf_worker_lease\` (
  \`pool\` varchar(128) NOT NULL,
  \`worker_id\` int(11) NOT NULL,
  \`owner\` varchar(64) DEFAULT NULL,
  \`address\` varchar(255) DEFAULT NULL,
  \`expires_at\` datetime(3) NOT NULL,
  \`issued_until\` bigint(20) NOT NULL DEFAULT '0',
  \`generation\` bigint(20) NOT NULL DEFAULT '0',
  \`lease_ms\` int(11) DEFAULT NULL,
  \`released_until\` bigint(20) DEFAULT NULL,
  \`released_at\` datetime(3) DEFAULT NULL,
  \`update_time\` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (\`pool\`, \`worker_id\`)
) ENGINE=InnoDB`

/** Columns a table made by an earlier version lacks, with their MySQL and SQLite types. */
const ADDED_COLUMNS: [name: string, mysql: string, sqlite: string][] = [
  ['generation', "bigint(20) NOT NULL DEFAULT '0'", 'INTEGER NOT NULL DEFAULT 0'],
  ['lease_ms', 'int(11) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
  ['released_until', 'bigint(20) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
  ['released_at', 'datetime(3) DEFAULT NULL', 'INTEGER DEFAULT NULL'],
]

const SQLITE_LEASE_DDL = `CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool           VARCHAR(128) NOT NULL,
  worker_id      INTEGER      NOT NULL,
  owner          VARCHAR(64)  DEFAULT NULL,
  address        VARCHAR(255) DEFAULT NULL,
  expires_at     INTEGER      NOT NULL,
  issued_until   INTEGER      NOT NULL DEFAULT 0,
  generation     INTEGER      NOT NULL DEFAULT 0,
  lease_ms       INTEGER      DEFAULT NULL,
  released_until INTEGER      DEFAULT NULL,
  released_at    INTEGER      DEFAULT NULL,
  PRIMARY KEY (pool, worker_id)
)`

const ER_NO_SUCH_TABLE = 1146
const ER_BAD_FIELD_ERROR = 1054
const ER_DUP_FIELDNAME = 1060

// One transaction per claim: the row is made (free) if it never was and locked; what it was
// is read (the wait comes from it); then it is taken when it is free, or when it is the very
// holder the claimant watched stand still (`owner`, `generation`, `expires_at` as seen) and the
// database says it expired too; the owner read back says who won.
// (A transaction's statements: one round trip, or one per statement on Galera, whose
// multi-statement commits can hide a conflict: segment/stores/mysql-pool.ts.)
function claimStatements (pool: string, workerId: number, owner: string, address: string, ttlMs: number, micros: number, seen: ReturnType<typeof parseSeen>): Statement[] {
  const [seenOwner, seenGeneration, seenExpires] = seen
  return [
    { sql: 'START TRANSACTION' },
    { sql: 'INSERT INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool', values: [pool, workerId] },
    { sql: 'SELECT owner, issued_until, released_until, released_at = expires_at AS clean FROM leaf_worker_lease WHERE pool = ? AND worker_id = ? FOR UPDATE', values: [pool, workerId] },
    {
      sql: 'UPDATE leaf_worker_lease SET owner = ?, address = ?, generation = generation + 1, lease_ms = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND ' +
        'WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR (owner = ? AND generation = ? AND expires_at = ? AND expires_at < NOW(3)))',
      values: [owner, address, ttlMs, micros, pool, workerId, seenOwner, seenGeneration, seenExpires],
    },
    { sql: 'SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', values: [pool, workerId] },
    { sql: 'COMMIT' },
  ]
}
const MYSQL_RENEW =
  'UPDATE leaf_worker_lease SET expires_at = NOW(3) + INTERVAL ? MICROSECOND, issued_until = GREATEST(issued_until, ?), generation = generation + 1, lease_ms = ? ' +
  'WHERE pool = ? AND worker_id = ? AND owner = ?'
// NOW(3) is one value within a statement: released_at equals expires_at until the row's next write.
// A released_until of NULL (a claim that never answered) sends the next holder to issued_until.
const MYSQL_RELEASE =
  'UPDATE leaf_worker_lease SET owner = NULL, expires_at = NOW(3), released_at = NOW(3), released_until = ?, ' +
  'issued_until = GREATEST(issued_until, COALESCE(?, 0)), generation = generation + 1 WHERE pool = ? AND worker_id = ? AND owner = ?'
const MYSQL_LIST =
  'SELECT worker_id, owner, generation, lease_ms, CAST(expires_at AS CHAR) AS expires, TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 AS expires_in ' +
  'FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?'

/** What a claim read of the row before it took it. */
interface Before { owner: string | null, issued_until: number | string, released_until: number | string | null, clean: number | null }

/** The last millisecond the id's previous holders may have issued, from the row as the claim found it. */
function previousIssuedUntil (row: Before | undefined): number {
  if (row === undefined) return 0
  // Released by its holder, and untouched since: the millisecond that holder actually reached
  // (which covers the holders before it: it waited for them). Otherwise the recorded bound.
  if (row.owner === null && Number(row.clean) === 1 && row.released_until !== null) return Number(row.released_until)
  return Number(row.issued_until)
}

/** The holder as seen by list(), in the form claim() takes it over from: [owner, generation, expires_at]. */
type Seen = [owner: string, generation: string, expires: string | number]

function parseSeen (from: string | undefined): Seen | [null, null, null] {
  if (from === undefined) return [null, null, null]
  const v = JSON.parse(from) as unknown
  if (!Array.isArray(v) || v.length !== 3) throw new Error(`not a holder seen by list(): ${from}`)
  return v as Seen
}

export interface DbLeaseStoreOptions {
  store: StoreConfig
  /** leaf.name: one table holds the pools of several services. */
  pool: string
  ttlMs: number
  connectTimeoutMs: number
  queryTimeoutMs: number
  /** Recorded by the pool's first instance; another layout refuses to start (layout-record.ts). */
  layout: Layout
}

// The row with worker id -1 records the pool's ID layout in `address` (no claim ever lists it).
const LAYOUT_ROW = -1

export async function createDbLeaseStore (o: DbLeaseStoreOptions): Promise<LeaseStore> {
  return o.store.kind === 'sqlite' ? createSqliteLeaseStore(o, o.store.path) : await createMysqlLeaseStore(o)
}

function slotOf (workerId: number, owner: string | null, generation: number | string, leaseMs: number | null, expires: string | number, expiresInMs: number): PoolSlot {
  if (owner === null) return { workerId, state: 'free', expiresInMs }
  const version = JSON.stringify([owner, String(generation), expires] satisfies Seen)
  return { workerId, state: expiresInMs >= 0 ? 'held' : 'expired', expiresInMs, version, ttlMs: leaseMs ?? undefined }
}

/** Adds the columns a table of an earlier version lacks (ALTER TABLE), or refuses with what to run. */
async function upgradeMysqlTable (run: MysqlRunner['run'], where: string): Promise<void> {
  try {
    await run(`SELECT ${ADDED_COLUMNS.map(([name]) => name).join(', ')} FROM ${LEASE_TABLE} LIMIT 0`)
    return
  } catch (err) {
    if ((err as { errno?: number }).errno !== ER_BAD_FIELD_ERROR) throw err
  }
  for (const [name, type] of ADDED_COLUMNS) {
    try {
      await run(`ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${name} ${type}`)
    } catch (err) {
      if ((err as { errno?: number }).errno === ER_DUP_FIELDNAME) continue
      throw new LeaseRefused(`${where}: the table predates the lease generations and cannot be altered (${(err as Error).message}): ` +
        `run ${ADDED_COLUMNS.map(([n, t]) => `ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${n} ${t};`).join(' ')}`)
    }
  }
}

async function createMysqlLeaseStore (o: DbLeaseStoreOptions): Promise<LeaseStore> {
  if (o.store.kind !== 'mysql') throw new Error('not a MySQL store')
  const { run, close } = createMysqlRunner({ ...o.store, connectTimeoutMs: o.connectTimeoutMs, queryTimeoutMs: o.queryTimeoutMs, poolSize: 2 })
  const where = `${describeStore(o.store)} ${LEASE_TABLE} (pool ${o.pool})`
  try {
    await run(`SELECT 1 FROM ${LEASE_TABLE} LIMIT 1`)
  } catch (err) {
    if ((err as { errno?: number }).errno !== ER_NO_SUCH_TABLE) {
      await close()
      throw err
    }
    try {
      await run(MYSQL_LEASE_DDL)
    } catch (ddlErr) {
      await close()
      throw new LeaseRefused(`${where}: the table does not exist and cannot be created (${(ddlErr as Error).message}): run sql/leaf_worker_lease.sql`)
    }
  }
  try {
    await upgradeMysqlTable(run, where)
    const read = async () => (await run<RowDataPacket[]>('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?', [o.pool, LAYOUT_ROW]))[0]?.address as string | null | undefined
    let recorded = await read()
    if (recorded === undefined) {
      const used = (await run<RowDataPacket[]>('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1', [o.pool])).length > 0
      checkLayoutRecord(where, undefined, used, o.layout)
      await run('INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, NOW(3)) ON DUPLICATE KEY UPDATE pool = pool', [o.pool, LAYOUT_ROW, o.layout.signature])
      recorded = await read()
    }
    checkLayoutRecord(where, recorded ?? '', true, o.layout)
  } catch (err) {
    await close()
    throw err
  }
  const micros = o.ttlMs * 1000
  return {
    where,
    ttlMs: () => o.ttlMs,
    async list (min, max) {
      const rows = await run<RowDataPacket[]>(MYSQL_LIST, [o.pool, min, max])
      return rows.map((r) => slotOf(Number(r.worker_id), r.owner as string | null, r.generation as string, r.lease_ms === null ? null : Number(r.lease_ms), r.expires as string, Number(r.expires_in)))
    },
    async claim (workerId, owner, address, from): Promise<Claimed | undefined> {
      const results = await run<unknown[]>(claimStatements(o.pool, workerId, owner, address, o.ttlMs, micros, parseSeen(from)))
      const before = (results[2] as RowDataPacket[])[0] as Before | undefined
      const row = (results[4] as RowDataPacket[])[0]
      return row?.owner === owner ? { issuedUntil: previousIssuedUntil(before) } : undefined
    },
    async renew (workerId, owner, issuedUntil) {
      const result = await run<{ affectedRows: number }>(MYSQL_RENEW, [micros, issuedUntil, o.ttlMs, o.pool, workerId, owner])
      return result.affectedRows === 1
    },
    async release (workerId, owner, issuedUntil) {
      await run(MYSQL_RELEASE, [issuedUntil ?? null, issuedUntil ?? null, o.pool, workerId, owner])
    },
    close,
  }
}

/** The embedded store's pool: the same rows in the SQLite file, for the instances of one host. */
function createSqliteLeaseStore (o: DbLeaseStoreOptions, path: string): LeaseStore {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const db = new Database(path, { timeout: 5000 })
  db.pragma('journal_mode = WAL')
  db.exec(SQLITE_LEASE_DDL)
  const columns = new Set((db.pragma(`table_info(${LEASE_TABLE})`) as { name: string }[]).map((c) => c.name))
  for (const [name, , type] of ADDED_COLUMNS) {
    if (columns.has(name)) continue
    try {
      db.exec(`ALTER TABLE ${LEASE_TABLE} ADD COLUMN ${name} ${type}`)
    } catch (err) {
      // Another instance starting on the same file added it first.
      if (!/duplicate column name/.test((err as Error).message)) throw err
    }
  }
  // The host's clock in ms, read by SQLite itself.
  const NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
  const insert = db.prepare(`INSERT OR IGNORE INTO leaf_worker_lease (pool, worker_id, expires_at) VALUES (?, ?, ${NOW})`)
  const before = db.prepare<[string, number], Before>(
    'SELECT owner, issued_until, released_until, released_at = expires_at AS clean FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?')
  const take = db.prepare(`UPDATE leaf_worker_lease SET owner = ?, address = ?, generation = generation + 1, lease_ms = ?, expires_at = ${NOW} + ?
    WHERE pool = ? AND worker_id = ? AND (owner IS NULL OR (owner = ? AND generation = ? AND expires_at = ? AND expires_at < ${NOW}))`)
  const read = db.prepare<[string, number], { owner: string | null }>('SELECT owner FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?')
  const renew = db.prepare(`UPDATE leaf_worker_lease SET expires_at = ${NOW} + ?, issued_until = MAX(issued_until, ?), generation = generation + 1, lease_ms = ?
    WHERE pool = ? AND worker_id = ? AND owner = ?`)
  // One NOW per statement here too: SQLite reads the clock once per statement ('now' is stable within it).
  const release = db.prepare(`UPDATE leaf_worker_lease SET owner = NULL, expires_at = ${NOW}, released_at = ${NOW}, released_until = ?,
    issued_until = MAX(issued_until, COALESCE(?, 0)), generation = generation + 1 WHERE pool = ? AND worker_id = ? AND owner = ?`)
  const list = db.prepare<[number, string, number, number], { worker_id: number, owner: string | null, generation: number, lease_ms: number | null, expires_at: number, expires_in: number }>(
    'SELECT worker_id, owner, generation, lease_ms, expires_at, expires_at - ? AS expires_in FROM leaf_worker_lease WHERE pool = ? AND worker_id BETWEEN ? AND ?')
  const now = db.prepare(`SELECT ${NOW} AS now`).pluck()
  const where = `sqlite:${path} ${LEASE_TABLE} (pool ${o.pool})`
  try {
    db.transaction(() => {
      const recorded = db.prepare('SELECT address FROM leaf_worker_lease WHERE pool = ? AND worker_id = ?').pluck().get(o.pool, LAYOUT_ROW) as string | null | undefined
      if (recorded === undefined) {
        checkLayoutRecord(where, undefined, db.prepare('SELECT 1 FROM leaf_worker_lease WHERE pool = ? AND worker_id >= 0 LIMIT 1').get(o.pool) !== undefined, o.layout)
        db.prepare(`INSERT INTO leaf_worker_lease (pool, worker_id, address, expires_at) VALUES (?, ?, ?, ${NOW})`).run(o.pool, LAYOUT_ROW, o.layout.signature)
      } else {
        checkLayoutRecord(where, recorded ?? '', true, o.layout)
      }
    }).immediate()
  } catch (err) {
    db.close()
    throw err
  }
  db.pragma('busy_timeout = 100')
  const claim = db.transaction((workerId: number, owner: string, address: string, from: string | undefined) => {
    insert.run(o.pool, workerId)
    const found = before.get(o.pool, workerId)
    const [seenOwner, seenGeneration, seenExpires] = parseSeen(from)
    take.run(owner, address, o.ttlMs, o.ttlMs, o.pool, workerId, seenOwner, seenGeneration === null ? null : Number(seenGeneration), seenExpires)
    return read.get(o.pool, workerId)?.owner === owner ? { issuedUntil: previousIssuedUntil(found) } : undefined
  })
  return {
    where,
    ttlMs: () => o.ttlMs,
    async list (min, max) {
      return list.all(now.get() as number, o.pool, min, max).map((r) => slotOf(r.worker_id, r.owner, r.generation, r.lease_ms, r.expires_at, r.expires_in))
    },
    async claim (workerId, owner, address, from) {
      return claim.immediate(workerId, owner, address, from)
    },
    async renew (workerId, owner, issuedUntil) {
      return renew.run(o.ttlMs, issuedUntil, o.ttlMs, o.pool, workerId, owner).changes === 1
    },
    async release (workerId, owner, issuedUntil) {
      release.run(issuedUntil ?? null, issuedUntil ?? null, o.pool, workerId, owner)
    },
    async close () {
      db.close()
    },
  }
}
