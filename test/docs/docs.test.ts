import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { KEYS, envName } from '../../src/config/keys.js'
import { ERRORS } from '../../src/errors.js'
import { documentedErrors } from '../fault/harness.js'
import { anchors, linkTargets, tableUnder } from '../helpers/markdown.js'

// The pages of docs/ held to the code: the errors table is src/errors.ts's, in status order;
// the configuration table lists every key of src/config/keys.ts; every relative link of
// the README, docs/ and the client's README reaches a file and, with a #fragment, a heading;
// and so does every docs/ page a source comment names.

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

t.test('docs/operations.md\'s error table is the errors module\'s, in status order', async (t) => {
  const rows = tableUnder(read('docs/operations.md'), 'Errors')
  const documented = rows.map(([status, code]) => [Number(status), code?.replace(/`/g, '')] as const)
  const actual = Object.entries(ERRORS).map(([code, e]) => [e.status, code] as const)
  t.same(Object.fromEntries(documented.map(([s, c]) => [c, s])), Object.fromEntries(actual.map(([s, c]) => [c, s])), 'the same codes with the same statuses')
  t.equal(documented.length, actual.length, 'each code once')
  const sorted = [...documented].sort(([s1, c1], [s2, c2]) => s1 - s2 || (c1 ?? '').localeCompare(c2 ?? ''))
  t.same(documented, sorted, 'ascending status, then code')
})

t.test('the fault suite reads the same errors table', async (t) => {
  const byStatus = new Map<number, Set<string>>()
  for (const [code, e] of Object.entries(ERRORS)) byStatus.set(e.status, (byStatus.get(e.status) ?? new Set()).add(code))
  t.same(documentedErrors(), byStatus)
})

t.test('docs/configuration.md lists every key with its variable and default', async (t) => {
  const rows = tableUnder(read('docs/configuration.md'), 'Every key')
  const documented = Object.fromEntries(rows.map(([key, env, def]) => [key?.replace(/`/g, ''), { env: env?.replace(/`/g, ''), def: def?.replace(/`/g, '') }]))
  for (const [key, spec] of Object.entries(KEYS)) {
    t.same(documented[key], { env: envName(key), def: spec.default === '' ? '(empty)' : spec.default }, key)
  }
  t.equal(rows.length, Object.keys(KEYS).length, 'no extra rows')
})

/** Files that another branch adds; their links are checked once they exist. */
const PENDING = new Set<string>([])

const PAGES = ['README.md', 'client/README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]

/** What is wrong with a relative link of `page`, or undefined when it resolves. */
function brokenLink (page: string, target: string): string | undefined {
  const [path = '', fragment] = target.split('#', 2)
  const file = path === '' ? join(ROOT, page) : join(dirname(join(ROOT, page)), decodeURIComponent(path))
  const name = relative(ROOT, file)
  if (!existsSync(file)) return PENDING.has(name) ? undefined : `${name} does not exist`
  if (fragment === undefined) return undefined
  if (statSync(file).isDirectory() || !file.endsWith('.md')) return `#${fragment} on ${name}, which is not a markdown page`
  return anchors(readFileSync(file, 'utf8')).has(fragment) ? undefined : `${name} has no heading #${fragment}`
}

t.test('every relative link of the README, docs/ and client/README.md resolves', async (t) => {
  t.ok(PAGES.includes('docs/operations.md') && PAGES.length >= 12, `pages found: ${PAGES.join(', ')}`)
  for (const page of PAGES) {
    const targets = linkTargets(read(page)).filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
    const broken = targets.map((target) => [target, brokenLink(page, target)]).filter(([, why]) => why !== undefined)
    t.same(broken, [], `${page}: ${targets.length} relative links`)
  }
})

/** The .ts files under `dir`, recursively. */
function sources (dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const path = `${dir}/${e.name}`
    return e.isDirectory() ? sources(path) : e.name.endsWith('.ts') ? [path] : []
  })
}

t.test('every docs/ page (and #heading) a comment of src/ or client/src names exists', async (t) => {
  const named = sources('src').concat(sources('client/src')).flatMap((file) =>
    [...read(file).matchAll(/(?:client\/)?(?:docs\/[\w.-]+\.md|README\.md)(?:#[\w-]+)?/g)].map((m) => [file, m[0]] as const))
  t.ok(named.filter(([, target]) => target.includes('#')).length >= 20, `${named.length} named, with headings among them`)
  const broken = named.map(([file, target]) => [file, target, brokenLink('README.md', target)]).filter(([, , why]) => why !== undefined)
  t.same(broken, [])
})

t.test('the README links every page of docs/, the client\'s README and the licence', async (t) => {
  const targets = new Set(linkTargets(read('README.md')).map((target) => target.split('#')[0]))
  for (const page of [...PAGES.filter((p) => p.startsWith('docs/')), 'client/README.md', 'LICENSE']) t.ok(targets.has(page), page)
})

t.test('the link check finds what it must', async (t) => {
  t.same(linkTargets('[a](x.md) `[b](y.md)` [c](https://e.org) [d](#h "title")\n```\n[e](z.md)\n```\n'), ['x.md', 'https://e.org', '#h'])
  t.same([...anchors('# A `b` (c), d\n## A `b` (c), d\n```\n# not a heading\n```\n### The fleet\'s [id](x.md)\n')], ['a-b-c-d', 'a-b-c-d-1', 'the-fleets-id'])
  t.equal(brokenLink('docs/operations.md', 'nowhere.md'), 'docs/nowhere.md does not exist')
  t.equal(brokenLink('docs/operations.md', '#no-such-heading'), 'docs/operations.md has no heading #no-such-heading')
  t.equal(brokenLink('docs/operations.md', '../package.json#x'), '#x on package.json, which is not a markdown page')
  t.equal(brokenLink('README.md', 'docs/operations.md#errors'), undefined)
})
