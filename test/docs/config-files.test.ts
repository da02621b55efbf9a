import { readFileSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { FOREIGN_KEYS, checkEnvironment } from '../../src/config/unknown-keys.js'
import { ROOT } from '../helpers/server-process.js'

// The configuration loader against the repository's own files: every variable its scripts,
// tests and deployments read is one the loader accepts, and docs/migrating.md names every
// foreign key it passes over or refuses. (The loader itself: test/unit/config.test.ts.)

t.test('every LEAF_ or SERVER_ variable the repository\'s scripts, tests and deployments read is accepted', async (t) => {
  // Variables read (process.env.X; $X in shell) or set for a server (compose, Kubernetes, Dockerfile).
  const read = new Set<string>()
  const files = ['scripts', 'test', 'bench', 'config/kubernetes'].flatMap((d) => readdirSync(join(ROOT, d), { recursive: true, encoding: 'utf8' }).map((f) => join(d, f)))
  const forms: [RegExp, RegExp][] = [
    [/\.(ts|mjs|js)$/, /process\.env\.((?:LEAF|SERVER)_\w+)/g],
    [/\.sh$/, /\$\{?((?:LEAF|SERVER)_\w+)/g],
    [/\.ya?ml$/, /^\s*(?:- name: )?((?:LEAF|SERVER)_\w+)\b/gm],
    [/Dockerfile$/, /\b((?:LEAF|SERVER)_\w+)/g],
  ]
  for (const file of [...files, 'Dockerfile', 'docker-compose.yml']) {
    const pattern = forms.find(([name]) => name.test(file))?.[1]
    if (pattern === undefined || statSync(join(ROOT, file)).isDirectory()) continue
    for (const m of readFileSync(join(ROOT, file), 'utf8').matchAll(pattern)) read.add(m[1] as string)
  }
  t.ok(read.has('LEAF_TEST_MYSQL_URL') && read.has('LEAF_PG_BIN') && read.has('LEAF_JDBC_URL'), `found them (${[...read].sort().join(', ')})`)
  // (A key's variable is read as the key: its values are tested in test/unit/config.test.ts.)
  for (const name of read) t.same(checkEnvironment({ [name]: 'any value' }), [], name)
})

t.test('docs/migrating.md lists every Java Leaf and Spring Boot key the loader passes over or refuses', async (t) => {
  const page = readFileSync(join(ROOT, 'docs/migrating.md'), 'utf8')
  for (const { key } of FOREIGN_KEYS) t.ok(page.includes(`\`${key}`), key)
})
