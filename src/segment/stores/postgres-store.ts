import type pg from 'pg'
import { codeOf, SqlState } from '../../database/driver-errors.js'
import { createPostgresRunner, pgStoreId, type PgServer, type PostgresOptions } from '../../database/postgres-pool.js'
import { IdSpaceEnded, type AdaptedStep, type Allocation, type LeafAllocRow, type SegmentStore, type UnusedRange } from '../store.js'

// Java Leaf's table on PostgreSQL. Each reservation is one UPDATE ... RETURNING, with the
// identity of the server that ran it (docs/production.md#postgresql-the-timeline-the-server-writes-on-now).
// Under READ COMMITTED a concurrent UPDATE waits and then applies: no conflict to repeat, unlike Galera.

/** update_time in UTC whatever the session's zone (the pool's sessions are UTC anyway). */
const NOW_UTC = "(now() AT TIME ZONE 'UTC')"
const SELECT_ROWS = 'SELECT biz_tag, max_id, step, description, update_time FROM leaf_alloc'

/**
 * Leaf's step rule in one statement. `step > 0`: a hand-edited step of 0 or less must not move
 * max_id (the generator refuses it); with an adapted step, Leaf's custom step, unless the
 * table's step is no longer the one it was adapted from.
 */
function allocateStatement (key: string, adapted: AdaptedStep | undefined): { sql: string, values: unknown[] } {
  const by = adapted === undefined ? 'step' : 'CASE WHEN step = $2::int THEN $3::int ELSE step END'
  return {
    sql: `UPDATE leaf_alloc SET max_id = max_id + ${by}, update_time = ${NOW_UTC} WHERE biz_tag = $1 AND step > 0 RETURNING biz_tag, max_id, step`,
    values: adapted === undefined ? [key] : [key, adapted.tableStep, adapted.step],
  }
}

/** The DDL of sql/leaf_alloc_parked.postgres.sql (test/integration/stores.test.ts compares them). */
export const PG_PARKED_DDL = `CREATE TABLE IF NOT EXISTS leaf_alloc_parked (
  biz_tag   varchar(128)   NOT NULL,
  first_id  bigint         NOT NULL,
  end_id    bigint         NOT NULL,
  owner     varchar(64)    NOT NULL,
  parked_at timestamptz(3) NOT NULL DEFAULT now(),
  PRIMARY KEY (biz_tag, first_id)
);
CREATE INDEX IF NOT EXISTS leaf_alloc_parked_owner_tag ON leaf_alloc_parked (owner, biz_tag)`

interface RowRecord { biz_tag: string, max_id: string, step: number, description: string | null, update_time: Date }

function toRow (r: RowRecord): LeafAllocRow {
  return { key: r.biz_tag, maxId: BigInt(r.max_id), step: Number(r.step), description: r.description, updateTime: r.update_time }
}

/** What a failover of this server can cost, from its standbys: one line for the start's log. */
export function describePgTopology (standbys: number, synchronousNames: string): string {
  if (standbys === 0) return 'a single server, no standby streaming from it: no replica to fail over to'
  return synchronousNames.trim() === ''
    ? `asynchronous streaming replication (${standbys} standby(s)): a promotion may lose the last allocations; the max_id guard catches them, holding allocations for leaf.segment.failover-hold-ms`
    : `synchronous streaming replication (${standbys} standby(s), synchronous_standby_names = '${synchronousNames}'): a promoted synchronous standby holds every allocation an instance received`
}

export function createPostgresStore (options: PostgresOptions): SegmentStore {
  const { query, returning, transaction, identify, close, tlsSession } = createPostgresRunner(options)
  /** Set once leaf_alloc_parked turned out missing and not creatable: no hand-over. */
  let noParkedTable = false

  /** Runs `fn` on leaf_alloc_parked, creating the table first when it is missing; undefined when it may not be. */
  async function onParkedTable<T> (fn: () => Promise<T>): Promise<T | undefined> {
    if (noParkedTable) return undefined
    try {
      return await fn()
    } catch (err) {
      if (codeOf(err) === SqlState.INSUFFICIENT_PRIVILEGE) {
        noParkedTable = true
        return undefined
      }
      if (codeOf(err) !== SqlState.UNDEFINED_TABLE) throw err
    }
    try {
      await query(PG_PARKED_DDL)
    } catch (err) {
      // Two instances creating it at once: the loser's CREATE fails on the catalog's unique index.
      if (codeOf(err) !== SqlState.UNIQUE_VIOLATION) {
        noParkedTable = true
        return undefined
      }
    }
    return await fn()
  }

  async function getRow (key: string): Promise<LeafAllocRow | undefined> {
    const { rows } = await query<RowRecord>(`${SELECT_ROWS} WHERE biz_tag = $1`, [key])
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  return {
    tlsSession,
    async getAllTags () {
      const { rows } = await query<{ biz_tag: string, max_id: string }>('SELECT biz_tag, max_id FROM leaf_alloc')
      return rows.map((r) => ({ key: r.biz_tag, maxId: BigInt(r.max_id) }))
    },
    async allocate (key, adapted): Promise<Allocation | undefined> {
      const { sql, values } = allocateStatement(key, adapted)
      let answer: pg.QueryResult<{ biz_tag: string, max_id: string, step: number }> & { server: PgServer | null }
      try {
        answer = await returning(sql, values)
      } catch (err) {
        // `max_id + step` past bigint's range.
        if (codeOf(err) === SqlState.NUMERIC_VALUE_OUT_OF_RANGE) throw new IdSpaceEnded(key, { cause: err })
        throw err
      }
      const row = answer.rows[0]
      if (row === undefined) {
        // Nothing moved: no such tag, or a step below 1, which the generator refuses as it
        // does from the other stores (a read: max_id is left alone either way).
        const found = await getRow(key)
        return found === undefined ? undefined : { key: found.key, maxId: found.maxId, step: found.step }
      }
      return { key: row.biz_tag, maxId: BigInt(row.max_id), step: Number(row.step), ...(answer.server === null ? {} : { store: pgStoreId(answer.server) }) }
    },
    async raiseMaxId (key, atLeast) {
      const { rowCount } = await query(`UPDATE leaf_alloc SET max_id = GREATEST(max_id, $2::bigint), update_time = ${NOW_UTC} WHERE biz_tag = $1`, [key, String(atLeast)])
      return rowCount === 1
    },
    async identity () {
      const server = await identify()
      return server === null ? undefined : pgStoreId(server)
    },
    async giveBack (key, end, firstUnused) {
      const { rowCount } = await query(`UPDATE leaf_alloc SET max_id = $2::bigint, update_time = ${NOW_UTC} WHERE biz_tag = $1 AND max_id = $3::bigint`,
        [key, String(firstUnused), String(end)])
      return rowCount === 1
    },
    async park (key, owner, ranges) {
      if (ranges.length === 0) return true
      const values = ranges.flatMap((r) => [key, String(r.first), String(r.end), owner])
      const rowsSql = ranges.map((_, i) => `($${4 * i + 1}, $${4 * i + 2}::bigint, $${4 * i + 3}::bigint, $${4 * i + 4})`).join(', ')
      const done = await onParkedTable(() => query(`INSERT INTO leaf_alloc_parked (biz_tag, first_id, end_id, owner) VALUES ${rowsSql}`, values))
      return done !== undefined
    },
    async claimParked (key, owner, maxAgeMs) {
      // The owner's rows, locked, and every row of the owner and every too old one of the tag
      // deleted, in one transaction: a second claimer waits for the locks, then finds nothing.
      const micros = String(maxAgeMs * 1000)
      const rows = await onParkedTable(() => transaction(async (q) => {
        const found = await q("SELECT first_id, end_id, parked_at >= now() - $3::bigint * interval '1 microsecond' AS fresh FROM leaf_alloc_parked WHERE biz_tag = $1 AND owner = $2 ORDER BY first_id FOR UPDATE",
          [key, owner, micros])
        await q("DELETE FROM leaf_alloc_parked WHERE biz_tag = $1 AND (owner = $2 OR parked_at < now() - $3::bigint * interval '1 microsecond')", [key, owner, micros])
        return found.rows as { first_id: string, end_id: string, fresh: boolean }[]
      }))
      if (rows === undefined) return undefined
      return rows.filter((r) => r.fresh).map((r): UnusedRange => ({ first: BigInt(r.first_id), end: BigInt(r.end_id) }))
    },
    async getAllRows () {
      const { rows } = await query<RowRecord>(SELECT_ROWS)
      return rows.map(toRow)
    },
    getTag: getRow,
    async createTag (tag) {
      const { rows } = await query<RowRecord>('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES ($1, $2::bigint, $3, $4) ' +
        'ON CONFLICT (biz_tag) DO NOTHING RETURNING biz_tag, max_id, step, description, update_time', [tag.key, String(tag.maxId), tag.step, tag.description])
      return rows[0] === undefined ? undefined : toRow(rows[0])
    },
    async updateTag (key, changes) {
      const sets: string[] = []
      const values: unknown[] = [key]
      if (changes.step !== undefined) { values.push(changes.step); sets.push(`step = $${values.length}`) }
      if (changes.description !== undefined) { values.push(changes.description); sets.push(`description = $${values.length}`) }
      if (sets.length === 0) return await getRow(key)
      const { rows } = await query<RowRecord>(`UPDATE leaf_alloc SET ${sets.join(', ')}, update_time = ${NOW_UTC} WHERE biz_tag = $1 RETURNING biz_tag, max_id, step, description, update_time`, values)
      return rows[0] === undefined ? undefined : toRow(rows[0])
    },
    async topology () {
      const { rows } = await query<{ standbys: string, names: string }>("SELECT (SELECT count(*) FROM pg_stat_replication) AS standbys, current_setting('synchronous_standby_names') AS names")
      return describePgTopology(Number(rows[0]?.standbys ?? 0), rows[0]?.names ?? '')
    },
    async ping () {
      await query('SELECT 1 FROM leaf_alloc LIMIT 1')
    },
    close,
  }
}
