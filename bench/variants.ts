import { copyFileSync, cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ROOT } from '../scripts/run-info.js'

// Builds of the service without one of its engine tricks, for the bench's with/without rows:
// a copy of dist/ in a folder of its own (with the package.json, config/ and node_modules it
// reads, linked), one module of it replaced. The trick stays only while the row shows its gain.

export interface Variant {
  /** The row's name. */
  name: string
  /** The source module the variant goes without. */
  module: string
  /** The variant's dist/server.js. */
  server: string
  remove (): void
}

/** src/metrics/hot-metrics.ts replaced by prom-client's own metrics (bench/variants/prom-hot-metrics.mjs). */
export function withoutHotMetrics (): Variant {
  const dir = mkdtempSync(join(tmpdir(), 'leaf-variant-'))
  cpSync(join(ROOT, 'dist'), join(dir, 'dist'), { recursive: true })
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'))
  symlinkSync(join(ROOT, 'config'), join(dir, 'config'))
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  const replaced = join(dir, 'dist/metrics/hot-metrics.js')
  if (!existsSync(replaced)) throw new Error(`${replaced} is not in the build: the variant would replace nothing`)
  copyFileSync(join(ROOT, 'bench/variants/prom-hot-metrics.mjs'), replaced)
  return {
    name: 'without hot-metrics.ts',
    module: 'src/metrics/hot-metrics.ts',
    server: join(dir, 'dist/server.js'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
