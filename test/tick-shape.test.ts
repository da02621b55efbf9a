import { execFileSync } from 'node:child_process'
import t from 'tap'
import { keepTickShape } from '../src/tick-shape.js'

t.test('a nextTick record is kept, once', async (t) => {
  const kept = keepTickShape() as { callback?: unknown, args?: unknown } | undefined
  t.ok(kept, 'Node made a TickObject and the hook saw it')
  t.type(kept?.callback, 'function')
  t.equal(kept?.args, undefined)
  t.equal(keepTickShape(), kept, 'the same record on a second call')
})

// The point of keeping it: after a full GC with no other record alive, new records still get
// the hidden class the kept one has, so V8's feedback for nextTick's literal stays monomorphic.
// Checked in a child process, with V8's own map comparison.
t.test('new records keep the kept record\'s hidden class across a full GC', async (t) => {
  const code = `
    const { createHook } = await import('node:async_hooks')
    const { keepTickShape } = await import(${JSON.stringify(new URL('../src/tick-shape.ts', import.meta.url).href)})
    const kept = keepTickShape()
    await new Promise((resolve) => setImmediate(resolve))
    globalThis.gc()
    globalThis.gc()
    let fresh
    const hook = createHook({ init (_id, type, _t, resource) { if (type === 'TickObject') fresh = resource } }).enable()
    process.nextTick(() => {})
    hook.disable()
    process.stdout.write(JSON.stringify({ kept: kept !== undefined, fresh: fresh !== undefined, same: %HaveSameMap(kept, fresh) }))
  `
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--allow-natives-syntax', '--expose-gc', '--input-type=module', '-e', code], { encoding: 'utf8' })
  t.same(JSON.parse(out), { kept: true, fresh: true, same: true })
})
