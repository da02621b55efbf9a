import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../src/config/load-config.js'
import { resolveConfig, type ResolvedConfig } from '../../src/config/resolve-config.js'
import { seedSqlite } from './sqlite.js'

/** A fresh folder under the OS temp dir. */
export function tempDir (prefix = 'leaf-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix))
}

/**
 * A config built the way the server builds it (loaded, then its snowflake section resolved),
 * from `key: value` pairs (as on the command line), with no file, both modes off unless
 * turned on and, unless a URL is given, a SQLite store with the demo tags in a fresh folder.
 */
export function testConfig (values: Record<string, string | number | boolean> = {}): ResolvedConfig {
  const dir = tempDir()
  // Both modes off unless turned on (unset, both enable keys are on, as in Java Leaf); a
  // static worker id unless another source is named (snowflake refuses to start with none).
  const all = { 'leaf.jdbc.url': values['leaf.jdbc.url'] ?? `sqlite:${seedSqlite(join(dir, 'leaf.db'))}`, 'server.host': '127.0.0.1', 'server.port': 0, 'leaf.segment.enable': false, 'leaf.snowflake.enable': false, 'leaf.snowflake.worker.id': 0, ...values }
  return resolveConfig(loadConfig({ cwd: dir, argv: Object.entries(all).map(([k, v]) => `--${k}=${v}`) }).config)
}
