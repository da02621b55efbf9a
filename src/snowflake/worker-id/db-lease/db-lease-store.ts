import type { LeaseStore } from '../lease-store.js'
import type { DbLeaseStoreOptions } from './db-lease-rows.js'
import { createMysqlLeaseStore } from './db-lease-mysql.js'
import { createPostgresLeaseStore } from './db-lease-postgres.js'
import { createSqliteLeaseStore } from './db-lease-sqlite.js'

// The db-lease pool in the database of leaf.jdbc.url: one statement set per engine, each with
// the same semantics (db-lease-rows.ts describes the rows; docs/worker-ids.md argues each
// statement against late, repeated and lost arrival).

export { LEASE_TABLE, type DbLeaseStoreOptions } from './db-lease-rows.js'
export { MYSQL_LEASE_DDL } from './db-lease-mysql.js'
export { PG_LEASE_DDL } from './db-lease-postgres.js'

export async function createDbLeaseStore (options: DbLeaseStoreOptions): Promise<LeaseStore> {
  switch (options.store.kind) {
    case 'sqlite': return createSqliteLeaseStore(options, options.store.path, options.store.embeddedDefault === true)
    case 'postgres': return await createPostgresLeaseStore(options, options.store)
    case 'mysql': return await createMysqlLeaseStore(options, options.store)
  }
}
