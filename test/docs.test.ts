import { readFileSync } from 'node:fs'
import t from 'tap'
import { KEYS, envName } from '../src/config/keys.js'
import { ERRORS } from '../src/errors.js'

// The pages of docs/ held to the code: the errors table is src/errors.ts's; the configuration
// table lists every key of src/config/keys.ts.

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8')

/** Rows of the first markdown table in a `## heading` section of `text`, without its header. */
function tableUnder (text: string, heading: string): string[][] {
  const start = text.indexOf(`\n## ${heading}\n`)
  const end = text.indexOf('\n## ', start + 1)
  const lines = text.slice(start, end === -1 ? undefined : end).split('\n')
  const first = lines.findIndex((l) => l.startsWith('|'))
  const table = lines.slice(first)
  const after = table.findIndex((l) => !l.startsWith('|'))
  return table.slice(2, after === -1 ? undefined : after).map((l) => l.split('|').slice(1, -1).map((c) => c.trim()))
}

t.test('docs/operations.md\'s error table is the errors module\'s', async (t) => {
  const rows = tableUnder(read('docs/operations.md'), 'Errors')
  const documented = Object.fromEntries(rows.map(([status, code]) => [code?.replace(/`/g, ''), Number(status)]))
  const actual = Object.fromEntries(Object.entries(ERRORS).map(([code, e]) => [code, e.status]))
  t.same(documented, actual)
})

t.test('docs/configuration.md lists every key with its variable and default', async (t) => {
  const rows = tableUnder(read('docs/configuration.md'), 'Every key')
  const documented = Object.fromEntries(rows.map(([key, env, def]) => [key?.replace(/`/g, ''), { env: env?.replace(/`/g, ''), def: def?.replace(/`/g, '') }]))
  for (const [key, spec] of Object.entries(KEYS)) {
    t.same(documented[key], { env: envName(key), def: spec.default === '' ? '(empty)' : spec.default }, key)
  }
  t.equal(rows.length, Object.keys(KEYS).length, 'no extra rows')
})
