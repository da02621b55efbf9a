import { readFileSync } from 'node:fs'
import t from 'tap'
import { keepTickShape, keptTickRecord } from '../src/tick-shape.js'

t.test('a nextTick record is kept', async (t) => {
  keepTickShape()
  await new Promise((resolve) => setImmediate(resolve))
  const kept = keptTickRecord() as { callback?: unknown, args?: unknown } | undefined
  t.type(kept?.callback, 'function', 'the record of a nextTick')
  t.equal(kept?.args, undefined)
  keepTickShape()
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(keptTickRecord(), kept, 'the same record after a second call')
})

t.test('the entry point imports it before anything else', async (t) => {
  const source = readFileSync(new URL('../src/server.ts', import.meta.url), 'utf8')
  t.match(/^import .*$/m.exec(source)?.[0], "import './tick-shape.js'")
})
