import type { StoreConfig } from '../../config/jdbc-url.js'
import type { SegmentStore } from '../store.js'
import { createMysqlStore } from './mysql-store.js'
import { createSqliteStore } from './sqlite-store.js'

export function createStore (store: StoreConfig, mysql: { connectTimeoutMs: number, poolSize: number, queryTimeoutMs: number }): SegmentStore {
  return store.kind === 'sqlite'
    ? createSqliteStore(store.path)
    : createMysqlStore({ ...store, ...mysql })
}

/** Where the store is, for logs: never the password. */
export function describeStore (store: StoreConfig): string {
  return store.kind === 'sqlite'
    ? `sqlite:${store.path}`
    : `mysql://${store.user}@${store.host}:${store.port}/${store.database}`
}
