import type { StoreConfig } from '../../config/jdbc-url.js'
import type { Logger } from '../../logger.js'
import type { SegmentStore } from '../store.js'
import { createMysqlStore, type MysqlStoreOptions } from './mysql-store.js'
import { createSqliteStore } from './sqlite-store.js'

/** Told of what a store does on its own: an allocation repeated after a conflict. */
export type StoreHooks = Pick<MysqlStoreOptions, 'onRetry'>

export function createStore (store: StoreConfig, mysql: { connectTimeoutMs: number, poolSize: number, queryTimeoutMs: number, logger?: Logger } & StoreHooks): SegmentStore {
  return store.kind === 'sqlite'
    ? createSqliteStore(store.path)
    : createMysqlStore({ ...store, ...mysql })
}

/** Where the store is, for logs: never the password. */
export function describeStore (store: StoreConfig): string {
  return store.kind === 'sqlite'
    ? `sqlite:${store.path}`
    : `mysql://${store.user}@${store.hosts.map((h) => `${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}`).join(',')}/${store.database}`
}
