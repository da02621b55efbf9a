import { readFileSync } from 'node:fs'
import t from 'tap'

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')

t.test('the README\'s test command is the one CI runs', async (t) => {
  const ci = readFileSync(new URL('../.ci/run', import.meta.url), 'utf8')
  const command = /Run all tests[\s\S]*?```sh\n(.+)\n```/.exec(readme)?.[1]
  t.equal(command, 'npm ci && npm test')
  t.match(ci, new RegExp(`^${command?.replace(/[.*+?^${}()|[\]\\&]/g, '\\$&')}$`, 'm'))
})
