import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import mysql from 'mysql2/promise'

/**
 * The MySQL server the tests use: the MariaDB scripts/test-services.sh starts, or the one
 * LEAF_TEST_MYSQL_URL names (`mysql://user:pass@host:port`, no database: each test creates its
 * own `leaf_test_*` database, so the user needs CREATE and DROP on `leaf%`).
 */
export const TEST_MYSQL = process.env.LEAF_TEST_MYSQL_URL || 'mysql://leaf:leaf@127.0.0.1:3306'
const server = new URL(TEST_MYSQL)
export const TEST_MYSQL_HOST = server.hostname
export const TEST_MYSQL_PORT = Number(server.port || 3306)

export interface TestDatabase {
  name: string
  /** A `mysql://` URL to the database, for leaf.jdbc.url. */
  url: string
  /** The same as Java Leaf would be configured: a jdbc:mysql:// URL plus user and password. */
  jdbc: { url: string, username: string, password: string }
  query<T = unknown> (sql: string, values?: unknown[]): Promise<T>
  drop (): Promise<void>
}

/** A fresh database with Leaf's table and seed rows from sql/leaf_alloc.sql. */
export async function createTestDatabase (): Promise<TestDatabase> {
  const name = `leaf_test_${randomBytes(4).toString('hex')}`
  const server = new URL(TEST_MYSQL)
  const conn = await mysql.createConnection({
    uri: TEST_MYSQL,
    multipleStatements: true,
    supportBigNumbers: true,
    bigNumberStrings: true,
  })
  await conn.query(`CREATE DATABASE \`${name}\``)
  await conn.query(`USE \`${name}\``)
  await conn.query(readFileSync(new URL('../../sql/leaf_alloc.sql', import.meta.url), 'utf8'))
  return {
    name,
    url: `${TEST_MYSQL}/${name}`,
    jdbc: {
      url: `jdbc:mysql://${server.host}/${name}?useUnicode=true&characterEncoding=utf8`,
      username: decodeURIComponent(server.username),
      password: decodeURIComponent(server.password),
    },
    async query<T> (sql: string, values?: unknown[]) {
      const [rows] = await conn.query(sql, values)
      return rows as T
    },
    async drop () {
      await conn.query(`DROP DATABASE IF EXISTS \`${name}\``)
      await conn.end()
    },
  }
}
