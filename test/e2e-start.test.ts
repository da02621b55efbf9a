import { join } from 'node:path'
import t from 'tap'
import { tempDir } from './helpers/config.js'
import { ROOT, get, startServer } from './helpers/server-process.js'

// The first hour: how `node dist/server.js` starts, or refuses to, as an operator sees it.

/** The JSON log lines of a server's output. */
function logLines (output: string[]): Record<string, unknown>[] {
  return output.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>]
    } catch {
      return []
    }
  })
}

t.test('started from another folder, the server finds the shipped config/leaf.properties and logs its path', async (t) => {
  const cwd = tempDir()
  const server = await startServer({ cwd, shippedConfig: true, args: ['--server.port=0', `--leaf.snowflake.cache.dir=${tempDir()}`] })
  t.teardown(() => server.stop())
  const loaded = logLines(server.output).find((l) => typeof l.msg === 'string' && l.msg.startsWith('configuration loaded'))
  t.match(loaded, { level: 30, file: join(ROOT, 'config/leaf.properties'), from: 'shipped', msg: `configuration loaded from ${join(ROOT, 'config/leaf.properties')}` })
  t.match(await get(`${server.url}/api/segment/get/order`), { status: 200, body: '1' }, 'segment mode on, as the shipped file says')
  t.equal((await get(`${server.url}/api/snowflake/get/x`)).status, 200, 'snowflake mode on, as the shipped file says')
})
