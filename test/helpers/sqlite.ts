import Database from 'better-sqlite3'

/** Opens the SQLite file at `path`, runs `fn` on it and closes it, whatever `fn` does. */
export function withSqlite<T> (path: string, fn: (db: Database.Database) => T, options?: Database.Options): T {
  const db = new Database(path, options)
  try {
    return fn(db)
  } finally {
    db.close()
  }
}
