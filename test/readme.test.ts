import { readFileSync } from 'node:fs'
import t from 'tap'
import { KEYS, envName } from '../src/config/keys.js'
import { ERRORS } from '../src/errors.js'

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')

/** Rows of the first markdown table in a `## heading` section, without its header. */
function tableUnder (heading: string): string[][] {
  const start = readme.indexOf(`\n## ${heading}\n`)
  const end = readme.indexOf('\n## ', start + 1)
  const lines = readme.slice(start, end === -1 ? undefined : end).split('\n')
  const first = lines.findIndex((l) => l.startsWith('|'))
  const table = lines.slice(first)
  const after = table.findIndex((l) => !l.startsWith('|'))
  return table.slice(2, after === -1 ? undefined : after).map((l) => l.split('|').slice(1, -1).map((c) => c.trim()))
}

t.test('the README\'s error table is the errors module\'s', async (t) => {
  const rows = tableUnder('Errors')
  const documented = Object.fromEntries(rows.map(([status, code]) => [code?.replace(/`/g, ''), Number(status)]))
  const actual = Object.fromEntries(Object.entries(ERRORS).map(([code, e]) => [code, e.status]))
  t.same(documented, actual)
})

t.test('the README\'s configuration table lists every key with its variable and default', async (t) => {
  const rows = tableUnder('Configuration')
  const documented = Object.fromEntries(rows.map(([key, env, def]) => [key?.replace(/`/g, ''), { env: env?.replace(/`/g, ''), def: def?.replace(/`/g, '') }]))
  for (const [key, spec] of Object.entries(KEYS)) {
    t.same(documented[key], { env: envName(key), def: spec.default === '' ? '(empty)' : spec.default }, key)
  }
  t.equal(rows.length, Object.keys(KEYS).length, 'no extra rows')
})

t.test('the README\'s test command is the one CI runs', async (t) => {
  const ci = readFileSync(new URL('../.ci/run', import.meta.url), 'utf8')
  const command = /Run all tests[\s\S]*?```sh\n(.+)\n```/.exec(readme)?.[1]
  t.equal(command, 'npm ci && npm test')
  t.match(ci, new RegExp(`^${command?.replace(/[.*+?^${}()|[\]\\&]/g, '\\$&')}$`, 'm'))
})
