import { copyFileSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { buildServer } from '../scripts/build-server.js'
import { ROOT } from '../scripts/run-info.js'

// Builds of the service without one of its engine tricks, for the bench's with/without rows:
// the server bundled again with one source module replaced, into a folder of its own (with the
// package.json, config/ and node_modules it reads, linked). The trick stays only while the row
// shows its gain.

export interface Variant {
  /** The row's name. */
  name: string
  /** The source module the variant goes without. */
  module: string
  /** The variant's dist/server.js. */
  server: string
  remove (): void
}

/**
 * A temporary folder a server build runs from as if from the repository: the package.json
 * copied (its "type" makes dist/*.js ES modules), config/ and node_modules linked.
 */
export function serverFolder (prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'))
  symlinkSync(join(ROOT, 'config'), join(dir, 'config'))
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  return dir
}

/** src/metrics/hot-metrics.ts replaced by prom-client's own metrics (bench/variants/prom-hot-metrics.mjs). */
export async function withoutHotMetrics (): Promise<Variant> {
  const dir = serverFolder('leaf-variant-')
  const module = 'src/metrics/hot-metrics.ts'
  const server = join(dir, 'dist/server.js')
  // buildServer refuses a replacement the bundle does not contain.
  await buildServer({ outfile: server, replace: { [module]: 'bench/variants/prom-hot-metrics.mjs' } })
  return {
    name: 'without hot-metrics.ts',
    module,
    server,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
