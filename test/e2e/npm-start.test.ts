import { spawn } from 'node:child_process'
import t from 'tap'
import { tempDir } from '../helpers/config.js'
import { emptyConfigFile, tempInstall } from '../helpers/server-process.js'

// `npm start --key=value` without `--`: npm keeps the option for itself (an npm_config_
// variable) and the server used to start without it. The built server, started by npm as a
// user starts it, refuses with the fix. (npm passes a dotted name, npm_config_leaf.x, only
// through a shell that keeps such names: bash here; Debian's dash drops it. docs/configuration.md.)

/** A refusal comes before the port is bound; a server that starts anyway is killed by then. */
const KILL_AFTER_MS = 20_000

const install = tempInstall()

function npmStart (args: string[]): Promise<{ code: number | null, stderr: string }> {
  const proc = spawn('npm', ['start', ...args], {
    cwd: install.dir,
    // No npm_* variable of the process running the tests; a server that did start would listen
    // on a port of its own on loopback, on the built-in defaults.
    env: { PATH: process.env.PATH ?? '', HOME: tempDir('leaf-npm-home-'), LEAF_CONFIG: emptyConfigFile(), SERVER_HOST: '127.0.0.1', SERVER_PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  })
  let stderr = ''
  proc.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  proc.stdout.resume()
  const kill = setTimeout(() => process.kill(-(proc.pid as number), 'SIGKILL'), KILL_AFTER_MS)
  return new Promise((resolve) => proc.once('close', (code) => { clearTimeout(kill); resolve({ code, stderr }) }))
}

t.test('npm start --leaf-segment-enable=true: refused, saying to write it after --', async (t) => {
  const run = await npmStart(['--leaf-segment-enable=true'])
  t.equal(run.code, 1, 'exit code 1')
  t.match(run.stderr, 'leaf-ts: configuration error: leaf.segment.enable: given to npm, not to the server (npm kept it as npm_config_leaf_segment_enable); write the server\'s options after "--": npm start -- --leaf.segment.enable=true\n')
})

t.test('npm start --leaf.x=y through a shell that passes dotted names on: refused too', async (t) => {
  const run = await npmStart(['--script-shell=bash', '--leaf.x=y'])
  t.equal(run.code, 1, 'exit code 1')
  t.match(run.stderr, 'leaf-ts: configuration error: leaf.x: given to npm, not to the server (npm kept it as npm_config_leaf.x); write the server\'s options after "--": npm start -- --leaf.x=y\n')
})

t.test('npm start -- --leaf.x=y: the option reaches the server, which judges it', async (t) => {
  const run = await npmStart(['--', '--leaf.x=y'])
  t.equal(run.code, 1, 'exit code 1')
  t.match(run.stderr, 'leaf-ts: configuration error: leaf.x: not a configuration key (command line)')
  t.notMatch(run.stderr, 'given to npm')
})
