import { ConfigError } from './keys.js'

export type StoreConfig =
  | { kind: 'sqlite', path: string }
  | { kind: 'mysql', host: string, port: number, user: string, password: string, database: string }

export const DEFAULT_SQLITE_PATH = './data/leaf.db'
const URL_KEY = 'leaf.jdbc.url'

/**
 * Turns `leaf.jdbc.url` into a store config. Accepts Java Leaf's JDBC form as-is
 * (`jdbc:mysql://host:3306/leaf?useUnicode=true&characterEncoding=utf8`), a plain
 * `mysql://user:pass@host:port/db` URL and `sqlite:PATH`; empty means the embedded store.
 */
export function parseJdbcUrl (url: string, username: string, password: string): StoreConfig {
  const value = url.trim()
  if (value === '') return { kind: 'sqlite', path: DEFAULT_SQLITE_PATH }
  if (value.startsWith('sqlite:')) {
    const path = value.slice('sqlite:'.length)
    if (path === '') throw new ConfigError(URL_KEY, 'sqlite: needs a file path, e.g. sqlite:./data/leaf.db')
    return { kind: 'sqlite', path }
  }
  const mysqlUrl = value.replace(/^jdbc:(mysql|mariadb):/, 'mysql:').replace(/^mariadb:/, 'mysql:')
  if (!mysqlUrl.startsWith('mysql://')) {
    const scheme = value.includes(':') ? value.slice(0, value.indexOf(':')) : value
    throw new ConfigError(URL_KEY, `unknown scheme "${scheme}" (use jdbc:mysql://, mysql:// or sqlite:)`)
  }
  let parsed: URL
  try {
    parsed = new URL(mysqlUrl)
  } catch {
    throw new ConfigError(URL_KEY, 'is not a valid URL')
  }
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part)
    } catch {
      throw new ConfigError(URL_KEY, `has a malformed percent-encoding in its ${what}`)
    }
  }
  const database = decode(parsed.pathname.replace(/^\//, ''), 'database')
  if (parsed.hostname === '') throw new ConfigError(URL_KEY, 'has no host')
  if (database === '' || database.includes('/')) throw new ConfigError(URL_KEY, 'must name one database, e.g. .../leaf')
  const port = parsed.port === '' ? 3306 : Number(parsed.port)
  // JDBC URLs may carry the credentials as query parameters; the URL wins over the keys.
  const user = decode(parsed.username, 'user') || parsed.searchParams.get('user') || username
  const pass = decode(parsed.password, 'password') || parsed.searchParams.get('password') || password
  return { kind: 'mysql', host: parsed.hostname.replace(/^\[|\]$/g, ''), port, user, password: pass, database }
}
