import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import pg from 'pg'

/**
 * The PostgreSQL server the tests use: the private one scripts/test-services.sh starts on
 * 127.0.0.1:25432 (scripts/private-postgres.sh), or the one LEAF_TEST_PG_URL names
 * (`postgres://user:pass@host:port`, no database: each test creates its own `leaf_test_*`
 * database, so the user needs CREATEDB).
 */
export const TEST_PG = process.env.LEAF_TEST_PG_URL || 'postgres://leaf:leaf@127.0.0.1:25432'
const server = new URL(TEST_PG)
export const TEST_PG_HOST = server.hostname
export const TEST_PG_PORT = Number(server.port || 5432)

export interface TestPgDatabase {
  name: string
  /** A `postgres://` URL to the database, for leaf.jdbc.url. */
  url: string
  /** As a Java service would be configured: a jdbc:postgresql:// URL plus user and password. */
  jdbc: { url: string, username: string, password: string }
  query<T extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<T[]>
  drop (): Promise<void>
}

function client (database: string): pg.Client {
  return new pg.Client({ connectionString: `${TEST_PG}/${database}` })
}

/** A fresh database (tap runs files in parallel: one each) with sql/leaf_alloc.postgres.sql loaded. */
export async function createTestPgDatabase (): Promise<TestPgDatabase> {
  const name = `leaf_test_${randomBytes(4).toString('hex')}`
  const admin = client('postgres')
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const conn = client(name)
  await conn.connect()
  await conn.query(readFileSync(new URL('../../sql/leaf_alloc.postgres.sql', import.meta.url), 'utf8'))
  return {
    name,
    url: `${TEST_PG}/${name}`,
    jdbc: {
      url: `jdbc:postgresql://${server.host}/${name}?ssl=false`,
      username: decodeURIComponent(server.username),
      password: decodeURIComponent(server.password),
    },
    async query<T extends pg.QueryResultRow> (sql: string, values?: unknown[]) {
      return (await conn.query<T>(sql, values)).rows
    },
    async drop () {
      await conn.end()
      const admin = client('postgres')
      await admin.connect()
      try {
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      } finally {
        await admin.end()
      }
    },
  }
}
