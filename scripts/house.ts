import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

// The house of src/ as docs/development.md draws it: the layers (the rule) and the rooms with
// their arrows (what the imports are), both blocks generated here from the code and from LAYERS.
// test/docs/layering.test.ts fails when the code breaks the rule or the page is not the code's;
// `node --import tsx scripts/house.ts --write` redraws the page's blocks.

export const SRC = fileURLToPath(new URL('../src/', import.meta.url))
export const DOC = fileURLToPath(new URL('../docs/development.md', import.meta.url))

/** The layers from the top: a module imports only from its own layer or the ones below. An entry is a file of src/ or a folder ending in '/'. */
export const LAYERS: { entries: string[], what: string }[] = [
  { entries: ['server.ts'], what: 'the process: config, logger, listen, shutdown' },
  { entries: ['app.ts'], what: 'the Fastify app from a config object' },
  { entries: ['metrics/', 'http/'], what: 'what the world sees: /metrics, routes, pages' },
  { entries: ['modes/'], what: 'each mode\'s store or lease wired to its generator' },
  { entries: ['segment/', 'snowflake/'], what: 'the generators, stores and worker-id leases' },
  { entries: ['database/', 'log-throttle.ts'], what: 'the database plumbing both modes share; the log throttle reads its driver errors' },
  { entries: ['config/', 'layout/', 'backoff.ts', 'channels.ts', 'errors.ts', 'timers.ts', 'logger.ts', 'id-range.ts', 'version.ts'], what: 'plain building blocks, any room may use them' },
]

export function sources (dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    return e.isDirectory() ? sources(path) : e.name.endsWith('.ts') ? [path] : []
  }).sort()
}

/** The src/ files a module imports (static imports and re-exports, types included). */
export function importsOf (file: string, text = readFileSync(file, 'utf8')): string[] {
  const specs = [...text.matchAll(/^(?:import|export)\b[^'";]*?\bfrom\s+'(\.[^']+)'|^import\s+'(\.[^']+)'/gm)].map((m) => (m[1] ?? m[2]) as string)
  return specs.map((spec) => resolve(dirname(file), spec.replace(/\.js$/, '.ts')))
}

/** Each src/ module and the src/ modules it imports. */
export function importGraph (): Map<string, string[]> {
  return new Map(sources().map((file) => [file, importsOf(file)]))
}

/** The layer of a src/ file, 0 at the bottom; throws for a file in no layer. */
export function layerOf (file: string): number {
  return layerOfPath(relative(SRC, file))
}

/** The layer of a path below src/ (a file, or a room such as `snowflake/worker-id/`). */
function layerOfPath (path: string): number {
  const top = path.includes('/') ? `${path.split('/')[0]}/` : path
  const fromTop = LAYERS.findIndex((layer) => layer.entries.includes(top))
  if (fromTop === -1) throw new Error(`${path} is in no layer: add ${top} to LAYERS in scripts/house.ts, then run it with --write`)
  return LAYERS.length - 1 - fromTop
}

/** A file's room: its folder (`snowflake/worker-id/`), or the file itself at the top of src/. */
export function roomOf (file: string): string {
  const path = relative(SRC, file)
  return path.includes('/') ? `${dirname(path)}/` : path
}

const BASE = new Set(LAYERS.at(-1)?.entries)
const inBase = (room: string) => BASE.has(room.includes('/') ? `${room.split('/')[0]}/` : room)

/** The layers block: each layer's entries, then what it holds. */
export function renderLayers (): string {
  return LAYERS.map((l) => {
    const entries = l.entries.join('  ')
    // A long line of entries gets its words on the next line, under the others'.
    return entries.length < 45 ? `${entries.padEnd(45)}${l.what}` : `${entries}\n${' '.repeat(45)}${l.what}`
  }).join('\n')
}

/** The rooms block: each room above the base layer and the rooms it imports (the base layer's left out: any room may use it). */
export function renderRooms (graph = importGraph()): string {
  const arrows = new Map<string, Set<string>>()
  for (const [file, imports] of graph) {
    const from = roomOf(file)
    if (inBase(from)) continue
    const to = arrows.get(from) ?? new Set<string>()
    arrows.set(from, to)
    for (const target of imports) {
      const room = roomOf(target)
      if (room !== from && !inBase(room)) to.add(room)
    }
  }
  const rooms = [...arrows.keys()].sort((a, b) => layerOfPath(b) - layerOfPath(a) || a.localeCompare(b))
  // Rooms line up under the longest name (22 columns at least).
  const width = Math.max(22, ...rooms.map((room) => room.length))
  return rooms.map((room) => {
    const to = [...(arrows.get(room) ?? [])].sort()
    return `${room.padEnd(width)} ${to.length === 0 ? '(imports only the base layer)' : `-> ${to.join('  ')}`}`
  }).join('\n')
}

/** The page with its two blocks drawn from the code (between `<!-- house:NAME -->` and the next fence). */
export function drawn (page: string, graph = importGraph()): string {
  const blocks: Record<string, string> = { layers: renderLayers(), rooms: renderRooms(graph) }
  return page.replace(/(<!-- house:(\w+) -->\n```\n)[\s\S]*?(\n```)/g, (whole, head: string, name: string, tail: string) =>
    name in blocks ? `${head}${blocks[name]}${tail}` : whole)
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const page = readFileSync(DOC, 'utf8')
  if (process.argv.includes('--write')) writeFileSync(DOC, drawn(page))
  else process.stdout.write(`${renderLayers()}\n\n${renderRooms()}\n`)
}
