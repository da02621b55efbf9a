import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

// The architecture docs/development.md draws, held: src/ has no import cycle, and a module
// imports only from its own layer or the ones below it. Type-only imports count too: a type
// from a higher layer couples the lower one to it all the same.

const SRC = fileURLToPath(new URL('../src/', import.meta.url))

/** Layers from the bottom; a path is a file of src/ or a folder ending in '/'. */
export const LAYERS: string[][] = [
  ['errors.ts', 'timers.ts', 'logger.ts', 'driver-errors.ts', 'log-throttle.ts', 'id-range.ts', 'version.ts', 'config/'],
  ['segment/', 'snowflake/'],
  ['modes/'],
  ['metrics/', 'http/'],
  ['app.ts'],
  ['server.ts'],
]

/**
 * Upward imports still there, each to go: none since issue 28 moved the layout's parsing out of
 * the config loader (snowflake/settings.ts). One listed here is held to, so that no other comes
 * in; the test fails when one is gone, so that the list shrinks with the code.
 */
const KNOWN_UPWARD: string[] = []

function sources (dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    return e.isDirectory() ? sources(path) : e.name.endsWith('.ts') ? [path] : []
  })
}

/** The src/ files a module imports (static imports and re-exports, types included). */
export function importsOf (file: string, text = readFileSync(file, 'utf8')): string[] {
  const specs = [...text.matchAll(/^(?:import|export)\b[^'";]*?\bfrom\s+'(\.[^']+)'|^import\s+'(\.[^']+)'/gm)].map((m) => (m[1] ?? m[2]) as string)
  return specs.map((spec) => resolve(dirname(file), spec.replace(/\.js$/, '.ts')))
}

/** The layer of a src/ file: the index in LAYERS of the entry that holds it. */
function layerOf (file: string): number {
  const path = relative(SRC, file)
  const top = path.includes('/') ? `${path.split('/')[0]}/` : path
  const layer = LAYERS.findIndex((entries) => entries.includes(top))
  if (layer === -1) throw new Error(`${path} is in no layer: add ${top} to LAYERS (and to docs/development.md)`)
  return layer
}

/** Every cycle of the graph, each as the files along it. */
export function cycles (graph: Map<string, string[]>): string[][] {
  const found: string[][] = []
  const done = new Set<string>()
  const path: string[] = []
  const visit = (file: string) => {
    path.push(file)
    for (const next of graph.get(file) ?? []) {
      const at = path.indexOf(next)
      if (at !== -1) found.push([...path.slice(at), next])
      else if (!done.has(next)) visit(next)
    }
    path.pop()
    done.add(file)
  }
  for (const file of graph.keys()) if (!done.has(file)) visit(file)
  return found
}

const graph = new Map(sources().map((file) => [file, importsOf(file)]))
const name = (file: string) => relative(SRC, file)

t.test('src/ has no import cycle', async (t) => {
  t.ok(graph.size > 40, `${graph.size} modules read`)
  t.same(cycles(graph).map((c) => c.map(name).join(' -> ')), [])
})

t.test('each module imports from its own layer or below', async (t) => {
  const upward = new Set<string>()
  for (const [file, imports] of graph) {
    for (const target of imports) {
      if (layerOf(target) > layerOf(file)) upward.add(`${name(file)} imports ${name(target)}`)
    }
  }
  t.same([...upward].filter((u) => !KNOWN_UPWARD.includes(u)), [], 'no upward import')
  t.same(KNOWN_UPWARD.filter((u) => !upward.has(u)), [], 'every known one still there (else strike it from KNOWN_UPWARD)')
})

t.test('the checks find what they look for', async (t) => {
  const a = '/x/a.ts'
  const b = '/x/b.ts'
  const c = '/x/c.ts'
  t.same(cycles(new Map([[a, [b]], [b, [c]], [c, [a]]])), [[a, b, c, a]], 'a cycle through three modules')
  t.same(cycles(new Map([[a, [b, c]], [b, [c]], [c, []]])), [], 'a diamond is no cycle')
  t.same(importsOf('/x/y/m.ts', "import type { T } from '../t.js'\nimport {\n  a,\n  b,\n} from './ab.js'\nexport { c } from './c.js'\nimport './first.js'\nimport x from 'pkg'\n"),
    ['/x/t.ts', '/x/y/ab.ts', '/x/y/c.ts', '/x/y/first.ts'], 'type imports, multi-line imports, re-exports and bare imports; packages left out')
  t.equal(layerOf(join(SRC, 'config/keys.ts')), 0)
  t.equal(layerOf(join(SRC, 'http/pages.ts')), 3)
})
