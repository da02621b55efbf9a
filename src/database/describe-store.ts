import type { StoreConfig } from '../config/jdbc-url.js'
import { hostName } from './host-census.js'

/** Where the store is, for logs: never the password. */
export function describeStore (store: StoreConfig): string {
  switch (store.kind) {
    case 'sqlite': return `sqlite:${store.path}`
    case 'postgres': return `postgres://${store.user}@${hostName(store)}/${store.database}`
    case 'mysql': return `mysql://${store.user}@${store.hosts.map(hostName).join(',')}/${store.database}`
  }
}
