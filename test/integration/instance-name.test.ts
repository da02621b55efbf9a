import { hostname } from 'node:os'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config/load-config.js'
import { instanceNamer } from '../../src/http/instance-name.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'

// The Leaf-Instance header: every answer of the ID routes names the instance, by which the
// client keeps a high-water mark per instance and key (client/README.md).

async function app (values: Record<string, string | number | boolean>) {
  const instance = await buildApp(testConfig(values), { logger: silentLogger })
  t.teardown(() => instance.close())
  return instance
}

t.test('every answer of the ID routes carries Leaf-Instance: IDs of both modes, single and batch, text and JSON, and errors', async (t) => {
  const server = await app({ 'leaf.segment.enable': true, 'leaf.snowflake.enable': true, 'leaf.snowflake.cache.dir': tempDir(), 'leaf.instance.name': 'leaf-a.example:8080' })
  const json = { accept: 'application/vnd.leaf-ts+json' }
  const answers = [
    ['/api/segment/get/order', {}, 200], ['/api/segment/get/order?count=3', {}, 200],
    ['/api/segment/get/order', json, 200], ['/api/segment/get/order?count=3', json, 200],
    ['/api/snowflake/get/k', {}, 200], ['/api/snowflake/get/k?count=3', json, 200],
    ['/api/segment/get/no-such-tag', {}, 404], ['/api/segment/get/order?count=0', {}, 400],
  ] as const
  for (const [url, headers, status] of answers) {
    const res = await server.inject({ url, headers })
    t.equal(res.statusCode, status, `${url} ${JSON.stringify(headers)}`)
    t.equal(res.headers['leaf-instance'], 'leaf-a.example:8080', `${url} ${JSON.stringify(headers)}: named`)
  }
  const disabled = await app({ 'leaf.segment.enable': false, 'leaf.instance.name': 'b' })
  const res = await disabled.inject('/api/segment/get/order')
  t.equal(res.json().error, 'MODE_DISABLED')
  t.equal(res.headers['leaf-instance'], 'b', 'a 503 too')
})

t.test('by default the name is the host name and the port: the same across restarts, whatever the store', async (t) => {
  const first = await app({ 'leaf.segment.enable': true, 'server.port': 18_080 })
  const second = await app({ 'leaf.segment.enable': true, 'server.port': 18_080 }) // another (fresh) SQLite file
  const a = (await first.inject('/api/segment/get/order')).headers['leaf-instance']
  t.equal(a, `${hostname()}:18080`)
  t.equal((await second.inject('/api/segment/get/order')).headers['leaf-instance'], a, 'a second process life on a fresh store: the same name')

  const listening = await app({ 'leaf.segment.enable': true, 'server.port': 0 })
  t.equal((await listening.inject('/api/segment/get/order')).headers['leaf-instance'], `${hostname()}:0`, 'server.port=0, not listening yet')
  await listening.listen({ host: '127.0.0.1', port: 0 })
  const port = (listening.server.address() as { port: number }).port
  const answer = await fetch(`http://127.0.0.1:${port}/api/segment/get/order?count=2`)
  t.equal(answer.headers.get('leaf-instance'), `${hostname()}:${port}`, 'server.port=0: the port it listens on')
})

t.test('instanceNamer: the configured name, else host:port; a host name outside ASCII is encoded', async (t) => {
  t.equal(instanceNamer('x', 8080, () => null)(), 'x')
  t.equal(instanceNamer('', 8080, () => null)(), `${encodeURI(hostname())}:8080`)
  let address: { port: number, address: string, family: string } | null = null
  const name = instanceNamer('', 0, () => address)
  t.equal(name(), `${encodeURI(hostname())}:0`)
  address = { port: 4321, address: '127.0.0.1', family: 'IPv4' }
  t.equal(name(), `${encodeURI(hostname())}:4321`)
  address = null
  t.equal(name(), `${encodeURI(hostname())}:4321`, 'kept once known')
})

t.test('leaf.instance.name must be a header value', async (t) => {
  const dir = tempDir()
  t.equal(loadConfig({ cwd: dir, argv: ['--leaf.instance.name= leaf-1 '] }).config.instanceName, 'leaf-1', 'trimmed')
  t.equal(loadConfig({ cwd: dir, argv: [] }).config.instanceName, '', 'empty by default')
  t.throws(() => loadConfig({ cwd: dir, argv: ['--leaf.instance.name=caf\u00e9'] }), { name: 'ConfigError', key: 'leaf.instance.name' })
  t.throws(() => loadConfig({ cwd: dir, argv: [`--leaf.instance.name=${'x'.repeat(201)}`] }), { name: 'ConfigError', key: 'leaf.instance.name' })
})
