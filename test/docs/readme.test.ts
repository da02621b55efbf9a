import { readFileSync } from 'node:fs'
import t from 'tap'
import { KEYS, envName } from '../../src/config/keys.js'
import { tableUnder } from '../helpers/markdown.js'

// The README is the front door: short, its commands the real ones, its few keys real keys.
// The detail lives in docs/ (test/docs/docs.test.ts holds those pages to the code).

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')

t.test('the README stays short: at most 160 lines', async (t) => {
  const lines = readme.split('\n').length - (readme.endsWith('\n') ? 1 : 0)
  t.ok(lines <= 160, `README.md has ${lines} lines; move detail to docs/`)
})

t.test('the README\'s test command is the one CI runs', async (t) => {
  const ci = readFileSync(new URL('../../.ci/run', import.meta.url), 'utf8')
  const command = /Run all tests[\s\S]*?```sh\n(.+)\n```/.exec(readme)?.[1]
  t.equal(command, 'npm ci && npm test')
  t.match(ci, new RegExp(`^${command?.replace(/[.*+?^${}()|[\]\\&]/g, '\\$&')}$`, 'm'))
})

t.test('the README\'s start command is the one that builds and starts the server', async (t) => {
  const command = /Start the server[\s\S]*?```sh\n(.+)\n```/.exec(readme)?.[1]
  t.equal(command, 'npm ci && npm run build && npm start')
  const scripts = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts
  t.equal(scripts.start, 'node dist/server.js')
  t.ok(scripts.build?.startsWith('npm run build:server'), 'build compiles the server')
})

t.test('the README\'s short configuration table names real keys, with their variables and defaults', async (t) => {
  const rows = tableUnder(readme, 'Configuration')
  t.ok(rows.length >= 5, 'the keys most users set')
  for (const [key = '', env = '', def = ''] of rows) {
    const name = key.replace(/`/g, '')
    const spec = (KEYS as Record<string, { default: string }>)[name]
    t.ok(spec, `${name} is a key of src/config/keys.ts`)
    t.same({ env: env.replace(/`/g, ''), def: def.replace(/`/g, '') }, { env: envName(name), def: spec?.default === '' ? '(empty)' : spec?.default }, name)
  }
})

t.test('the README\'s tag example inserts into the columns of sql/leaf_alloc.sql', async (t) => {
  const sql = readFileSync(new URL('../../sql/leaf_alloc.sql', import.meta.url), 'utf8')
  const insert = /```sql\n(INSERT INTO leaf_alloc\((.+?)\) VALUES.+)\n```/.exec(readme)
  t.ok(insert, 'the README has the INSERT')
  for (const column of (insert?.[2] ?? '').split(',').map((c) => c.trim())) {
    t.match(sql, new RegExp(`^\\s+\`${column}\` `, 'm'), `${column} is a column of leaf_alloc`)
  }
})
