import Database from 'better-sqlite3'
import { createSqliteStore } from '../../src/segment/stores/sqlite-store.js'

/** Opens the SQLite file at `path`, runs `fn` on it and closes it, whatever `fn` does. */
export function withSqlite<T> (path: string, fn: (db: Database.Database) => T, options?: Database.Options): T {
  const db = new Database(path, options)
  try {
    return fn(db)
  } finally {
    db.close()
  }
}

/**
 * Makes `path` a store with the demo tags (`order`, `leaf-segment-test`), as the embedded
 * default's first start does: a test's own SQLite file gets no tags from the server (only the
 * default does), so a test that serves them seeds them here. Returns `path`.
 */
export function seedSqlite (path: string): string {
  // (close() runs the database's close synchronously: the file is whole when this returns.)
  createSqliteStore(path, { embeddedDefault: true }).close().catch(() => {})
  return path
}
