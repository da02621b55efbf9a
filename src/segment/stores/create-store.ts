import type { StoreConfig } from '../../config/jdbc-url.js'
import type { Logger } from '../../logger.js'
import type { SegmentStore } from '../store.js'
import { createMysqlStore, type MysqlStoreOptions } from './mysql-store.js'
import { createPostgresStore } from './postgres-store.js'
import { createSqliteStore } from './sqlite-store.js'

/**
 * The pool bounds (leaf.jdbc.*) of the networked stores; for a MySQL host
 * list, the host to start at and the gate that refuses stores and moves (segment/host-fence.ts).
 */
export type PoolOptions = { connectTimeoutMs: number, poolSize: number, queryTimeoutMs: number, logger?: Logger } & Pick<MysqlStoreOptions, 'startAt' | 'gate'>

export function createStore (store: StoreConfig, pool: PoolOptions): SegmentStore {
  switch (store.kind) {
    case 'sqlite': return createSqliteStore(store.path, { embeddedDefault: store.embeddedDefault === true, logger: pool.logger })
    case 'postgres': return createPostgresStore({ ...store, connectTimeoutMs: pool.connectTimeoutMs, poolSize: pool.poolSize, queryTimeoutMs: pool.queryTimeoutMs, logger: pool.logger })
    case 'mysql': return createMysqlStore({ ...store, ...pool })
  }
}
