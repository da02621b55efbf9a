import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build, type BuildOptions, type Metafile, type Plugin } from 'esbuild'

// `npm run build:server`: src/server.ts and what it imports, one ES module at dist/server.js.
// One file because a server start is mostly module loading: the ~600 files tsc wrote and
// node_modules' own cost about 0.6 CPU-s at each start, the bundle about 0.4 CPU-s
// (docs/development.md). tsc still checks the types first; esbuild only strips them.

const ROOT = fileURLToPath(new URL('..', import.meta.url))
export const ENTRY = join(ROOT, 'src/server.ts')
export const OUTFILE = join(ROOT, 'dist/server.js')

/**
 * Packages loaded from node_modules at run time, not bundled:
 * - better-sqlite3 finds its native addon by path (`bindings`);
 * - pino starts its transports (pino-pretty, on a terminal) in a worker thread that loads
 *   pino's own files by path.
 */
export const EXTERNAL = ['better-sqlite3', 'pino', 'pino-pretty']

/**
 * Optional packages a bundled one requires only on a path the server never takes, and that are
 * not installed: node-postgres' `pg.native` getter loads pg-native. Bundled as a module that
 * throws, as the missing package would, so the bundle imports nothing the image lacks.
 */
const OPTIONAL_ABSENT = ['pg-native']

// Bundled CommonJS packages call require() for Node's own modules: an ES module has none.
const BANNER = "import { createRequire as __leafRequire } from 'node:module'; const require = __leafRequire(import.meta.url);"

export interface BuildServerOptions {
  outfile?: string
  /** Source files (relative to the repository) replaced by another file's code, for the bench's variants. */
  replace?: Record<string, string>
  /** false: return the metafile without writing (the packaging test's view of what is bundled). */
  write?: boolean
}

export async function buildServer ({ outfile = OUTFILE, replace = {}, write = true }: BuildServerOptions = {}): Promise<Metafile> {
  // Emptied as the files are met: what is left was not replaced.
  const byPath = new Map(Object.entries(replace).map(([from, to]) => [resolve(ROOT, from), resolve(ROOT, to)]))
  const options: BuildOptions = {
    entryPoints: [ENTRY],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: EXTERNAL,
    banner: { js: BANNER },
    // Class and function names stay as written (error names, logs).
    keepNames: true,
    sourcemap: 'linked',
    metafile: true,
    write,
    logLevel: 'warning',
    plugins: [replacing(byPath), absent(OPTIONAL_ABSENT)],
  }
  const result = await build(options)
  if (byPath.size > 0) throw new Error(`not in the bundle, so not replaced: ${[...byPath.keys()].join(', ')}`)
  return result.metafile as Metafile
}

/** The packages bundled, as node_modules paths (the keys of package-lock.json's "packages"). */
export function bundledPackages (metafile: Metafile): Set<string> {
  const packages = new Set<string>()
  for (const input of Object.keys(metafile.inputs)) {
    // Up to the last node_modules/: a nested copy is a package of its own.
    const m = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input)
    if (m !== null) packages.add(m[1] as string)
  }
  return packages
}

function replacing (byPath: Map<string, string>): Plugin {
  return {
    name: 'leaf-replace',
    setup (b) {
      b.onLoad({ filter: /\.ts$/ }, (args) => {
        const to = byPath.get(args.path)
        if (to === undefined) return undefined
        byPath.delete(args.path)
        return { contents: readFileSync(to, 'utf8'), loader: 'js', resolveDir: dirname(to) }
      })
    },
  }
}

function absent (names: string[]): Plugin {
  const filter = new RegExp(`^(?:${names.join('|')})$`)
  return {
    name: 'leaf-absent',
    setup (b) {
      b.onResolve({ filter }, (args) => ({ path: args.path, namespace: 'leaf-absent' }))
      b.onLoad({ filter: /.*/, namespace: 'leaf-absent' }, (args) => ({
        contents: `throw new Error(${JSON.stringify(`${args.path} is not installed`)})`, loader: 'js',
      }))
    },
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildServer()
}
