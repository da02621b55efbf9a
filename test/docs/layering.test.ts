import { readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import t from 'tap'
import { DOC, LAYERS, SRC, drawn, importGraph, importsOf, layerOf, renderRooms } from '../../scripts/house.js'

// The architecture docs/development.md draws, held: src/ has no import cycle, a module imports
// only from its own layer or the ones below it (LAYERS, scripts/house.ts), and the page's two
// blocks are the ones the code draws. Type-only imports count too: a type from a higher layer
// couples the lower one to it all the same.

/**
 * Upward imports still there, each to go: listed so that no other comes in; the test fails
 * when one is gone, so that the list shrinks with the code. None is left (issue 28 moved the
 * layout's parsing out of config/).
 */
const KNOWN_UPWARD: string[] = []

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

const graph = importGraph()
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

t.test('the two modes never import each other', async (t) => {
  const crossing: string[] = []
  for (const [file, imports] of graph) {
    const from = name(file).split('/')[0]
    if (from !== 'segment' && from !== 'snowflake') continue
    for (const target of imports) {
      const to = name(target).split('/')[0]
      if ((to === 'segment' || to === 'snowflake') && to !== from) crossing.push(`${name(file)} imports ${name(target)}`)
    }
  }
  const reachDatabase = (mode: string) => [...graph].some(([file, imports]) => name(file).startsWith(mode) && imports.some((target) => name(target).startsWith('database/')))
  t.ok(reachDatabase('segment/') && reachDatabase('snowflake/'), 'both modes reach the database through database/')
  t.same(crossing, [], 'src/segment imports nothing from src/snowflake, and the reverse')
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
  t.equal(layerOf(join(SRC, 'database/mysql-pool.ts')), 1)
  t.equal(layerOf(join(SRC, 'http/pages.ts')), 4)
})

t.test('docs/development.md draws the layers and the rooms as the code has them', async (t) => {
  const page = readFileSync(DOC, 'utf8')
  t.match(page, /<!-- house:layers -->\n```/, 'the layers block is marked')
  t.match(page, /<!-- house:rooms -->\n```/, 'the rooms block is marked')
  t.equal(page, drawn(page, graph), 'the page is what `node --import tsx scripts/house.ts --write` draws from the code')
  t.equal(LAYERS.length, 7)
})

t.test('the rooms block follows the imports', async (t) => {
  const a = join(SRC, 'modes/a.ts')
  const b = join(SRC, 'segment/stores/b.ts')
  const c = join(SRC, 'errors.ts')
  t.equal(renderRooms(new Map([[a, [b, c]], [b, [c]], [c, []]])),
    'modes/                 -> segment/stores/\nsegment/stores/        (imports only the base layer)', 'an arrow per room imported, the base layer left out')
})
