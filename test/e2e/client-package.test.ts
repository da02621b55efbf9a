import { spawn } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, posix, relative, sep } from 'node:path'
import semver from 'semver'
import t from 'tap'
import { linkTargets } from '../helpers/markdown.js'
import { ROOT, startServer } from '../helpers/server-process.js'
import { seedSqlite } from '../helpers/sqlite.js'

// `@leaf-ts/client` as a user gets it: `npm pack` on an unbuilt copy of client/ (its prepack
// builds it), the tarball installed into a fresh project outside the workspace, then loaded
// there by `import` and by `require()` against a real server, and type-checked under each
// TypeScript resolution a user may have. Needs the built server (`npm run build`); undici and
// @types/node come from the npm cache, or the registry when the cache lacks them.

/** Far longer than a step takes here (a pack builds with tsc; an install from the cache). */
const STEP_LIMIT_MS = 120_000

interface Result { code: number | null, signal: NodeJS.Signals | null, stdout: string, stderr: string }

/**
 * An environment for a child as a user's shell would give it: no npm_* variables from the npm
 * that started tap (a nested npm would take npm_config_* as its own settings).
 */
const childEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_') && k !== 'NODE_OPTIONS'))

/**
 * Runs a command through `env -u NODE_OPTIONS`: tap puts its process-info hook into every
 * child's NODE_OPTIONS whatever env spawn is given, and that hook's exit handler turns an exit
 * code 13 into 0. Killed after STEP_LIMIT_MS.
 */
function run (command: string, args: string[], cwd: string): Promise<Result> {
  const proc = spawn('env', ['-u', 'NODE_OPTIONS', command, ...args], { cwd, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  proc.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  proc.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const kill = setTimeout(() => proc.kill('SIGKILL'), STEP_LIMIT_MS)
  return new Promise((resolve, reject) => {
    proc.once('error', (err) => { clearTimeout(kill); reject(err) })
    proc.once('close', (code, signal) => { clearTimeout(kill); resolve({ code, signal, stdout, stderr }) })
  })
}

/** The exit, and stderr when it failed. */
const describe = (r: Result) => `exit ${r.code}${r.signal === null ? '' : ` (${r.signal})`}${r.code === 0 || r.stderr === '' ? '' : `; stderr: ${r.stderr.trim().slice(0, 2000)}`}`

const work = mkdtempSync(join(tmpdir(), 'leaf-client-package-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

// --- the tarball ------------------------------------------------------------------------

// client/ without its build output, beside the root tsconfig.json it extends and the
// node_modules its build resolves from: its prepack must build it, and the shared checkout's
// client/dist (which other tests import) is never rebuilt under them.
const checkout = join(work, 'checkout')
const clientCopy = join(checkout, 'client')
mkdirSync(checkout)
cpSync(join(ROOT, 'tsconfig.json'), join(checkout, 'tsconfig.json'))
symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir')
const clientDir = join(ROOT, 'client')
cpSync(clientDir, clientCopy, {
  recursive: true,
  filter: (src) => !['dist', 'node_modules'].includes(relative(clientDir, src).split(sep)[0] ?? ''),
})
symlinkSync(join(clientDir, 'node_modules'), join(clientCopy, 'node_modules'), 'dir')

interface PackEntry { filename: string, files: { path: string }[] }

let tarball: string | undefined
let files: string[] = []

t.test('npm pack on an unbuilt client builds it, and the tarball holds only what a user needs', async (t) => {
  const pack = await run('npm', ['pack', '--json', '--pack-destination', work], clientCopy)
  t.equal(pack.code, 0, `npm pack: ${describe(pack)}`)
  const packed = pack.code === 0 ? (JSON.parse(pack.stdout) as PackEntry[])[0] : undefined
  tarball = packed === undefined ? undefined : join(work, packed.filename)
  files = packed?.files.map((f) => f.path).sort() ?? []
  for (const needed of ['package.json', 'README.md', 'LICENSE', 'dist/index.js', 'dist/index.d.ts']) {
    t.ok(files.includes(needed), `the tarball holds ${needed}`)
  }
  // What a user needs: the manifest, the README, the LICENSE, the built modules and their
  // declarations; the TypeScript sources only as what the source maps point to.
  const unexpected = files.filter((f) => !['package.json', 'README.md', 'LICENSE'].includes(f) &&
    !/^dist\/[\w-]+\.(?:js|d\.ts|js\.map|d\.ts\.map)$/.test(f) && !/^src\/[\w-]+\.ts$/.test(f))
  t.same(unexpected, [], 'nothing else (no tests, no configs)')
  t.same(files.filter((f) => /\.test\.|(?:^|\/)test\//.test(f)), [], 'no tests')
  // Every map's sources ship beside it, and every map a module names.
  const copied = (path: string) => readFileSync(join(clientCopy, path), 'utf8')
  const maps = files.filter((f) => f.endsWith('.map'))
  const missingSources = maps.flatMap((map) => (JSON.parse(copied(map)) as { sources: string[] }).sources
    .map((s) => posix.normalize(posix.join(posix.dirname(map), s))).filter((s) => !files.includes(s)).map((s) => `${map} -> ${s}`))
  t.same(missingSources, [], `the sources of all ${maps.length} maps are in the tarball`)
  const modules = files.filter((f) => /\.(?:js|d\.ts)$/.test(f))
  const missingMaps = modules.flatMap((f) => [...copied(f).matchAll(/\/\/# sourceMappingURL=(\S+)/g)]
    .map((m) => posix.join(posix.dirname(f), m[1] as string)).filter((m) => !files.includes(m)))
  t.same(missingMaps, [], `the maps the ${modules.length} modules name are in the tarball`)
  // require() of an ES module works unflagged from Node 20.19, 22.12 and 23: the package
  // claims no Node version where CommonJS users could not load it.
  const { engines } = JSON.parse(copied('package.json')) as { engines: { node: string } }
  t.ok(semver.subset(engines.node, '^20.19.0 || ^22.12.0 || >=23.0.0'), `engines ${engines.node}: only versions with require(esm)`)
  t.same(readFileSync(join(clientCopy, 'LICENSE')), readFileSync(join(ROOT, 'LICENSE')), 'the LICENSE is the repository\'s')
  // Links relative to the repository would break in node_modules: every link is absolute.
  const links = linkTargets(copied('README.md'))
  t.same(links.filter((l) => !/^https?:\/\//.test(l)), [], `the README links to absolute URLs only (${links.length} links)`)
})

t.test('npm publish --dry-run is clean', async (t) => {
  const publish = await run('npm', ['publish', '--dry-run'], clientCopy)
  t.equal(publish.code, 0, `npm publish --dry-run: ${describe(publish)}`)
  // No npm user is logged in here, and a dry run says so; any other warning (a field npm
  // corrects, a file it leaves out) is a fault of the package.
  const warnings = publish.stderr.split('\n').filter((l) => /^npm warn/i.test(l) && !/requires you to be logged in/.test(l))
  t.same(warnings, [], 'no warning but the missing login')
  t.match(publish.stderr, /public access/, 'a scoped package published with public access')
})

// --- a project of its own ---------------------------------------------------------------

const project = join(work, 'project')
mkdirSync(project)
writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'leaf-client-user', version: '1.0.0', private: true }, null, 2))
const typesNode = (JSON.parse(readFileSync(join(ROOT, 'node_modules/@types/node/package.json'), 'utf8')) as { version: string }).version
let installed = false

t.test('the tarball installs into a project outside the workspace', async (t) => {
  if (tarball === undefined) return t.fail('no tarball was packed')
  const install = await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball, `@types/node@${typesNode}`], project)
  t.equal(install.code, 0, `npm install: ${describe(install)}`)
  installed = install.code === 0
  t.equal(relative(ROOT, project).split(sep)[0], '..', `the project (${project}) is outside ${ROOT}`)
})

const TAKE = `
const leaf = createLeafClient({ servers: [process.argv[2]], timeoutMs: 10000 })
const segment = await leaf.nextIds('segment', 'order', 3)
const snowflake = await leaf.nextIds('snowflake', 'order', 3)
let closed
await leaf.close()
try { await leaf.nextId('segment', 'order') } catch (err) { closed = isLeafClientError(err) ? err.code : String(err) }
process.stdout.write(JSON.stringify({ segment: segment.map(String), snowflake: snowflake.map(String), closed, from: RESOLVED }) + '\\n')
`
const SCRIPTS = {
  'esm.mjs': `import { createLeafClient, isLeafClientError } from '@leaf-ts/client'
const RESOLVED = import.meta.resolve('@leaf-ts/client')
${TAKE}`,
  // CommonJS has no top-level await: the same body in an async function.
  'cjs.cjs': `const { createLeafClient, isLeafClientError } = require('@leaf-ts/client')
const RESOLVED = require.resolve('@leaf-ts/client')
async function main () {${TAKE}}
main().catch((err) => { console.error(err); process.exitCode = 1 })
`,
}

t.test('ESM import and CommonJS require both take IDs from a real server', async (t) => {
  if (!installed) return t.fail('not installed')
  for (const [name, text] of Object.entries(SCRIPTS)) writeFileSync(join(project, name), text)
  const dir = mkdtempSync(join(tmpdir(), 'leaf-client-package-server-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const server = await startServer({
    cwd: dir,
    args: ['--server.port=0', '--leaf.segment.enable=true', '--leaf.snowflake.enable=true',
      '--leaf.snowflake.worker.id=1', `--leaf.snowflake.cache.dir=${dir}`, `--leaf.jdbc.url=sqlite:${seedSqlite(join(dir, 'leaf.db'))}`],
  })
  t.teardown(() => server.stop())
  const seen = new Set<bigint>()
  for (const name of Object.keys(SCRIPTS)) {
    const r = await run(process.execPath, [name, server.url], project)
    t.equal(r.code, 0, `${name}: ${describe(r)}`)
    // Empty: no ExperimentalWarning for require() of an ES module (Node 20.19+, 22.13+ and
    // 23.5+ print none unless asked; 22.12 did), no other warning.
    t.equal(r.stderr, '', `${name}: nothing on stderr`)
    const answer = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}') as { segment?: string[], snowflake?: string[], closed?: string, from?: string }
    t.equal(answer.segment?.length, 3, `${name}: 3 segment IDs`)
    t.equal(answer.snowflake?.length, 3, `${name}: 3 snowflake IDs`)
    const ids = [...answer.segment ?? [], ...answer.snowflake ?? []].map(BigInt)
    t.same(ids.filter((id) => seen.has(id)), [], `${name}: IDs unique across both scripts (${ids.join(', ')})`)
    for (const id of ids) seen.add(id)
    t.equal(answer.closed, 'CLOSED', `${name}: a call after close() rejects with a LeafClientError, CLOSED`)
    const from = answer.from?.startsWith('file:') === true ? new URL(answer.from).pathname : answer.from
    t.equal(from, join(project, 'node_modules/@leaf-ts/client/dist/index.js'), `${name}: loaded the installed package's dist/index.js`)
  }
})

// The types a user writes against: an error if they resolve to nothing (TS7016 under strict),
// and an unused @ts-expect-error if they resolve to `any`.
const USE_TS = `import { createLeafClient, isLeafClientError, LeafClientError, type LeafClient, type LeafClientOptions } from '@leaf-ts/client'

const options: LeafClientOptions = { servers: ['http://127.0.0.1:8080'], timeoutMs: 1000, balance: 'sticky' }
const leaf: LeafClient = createLeafClient(options)

export async function take (): Promise<bigint> {
  try {
    const ids: bigint[] = await leaf.nextIds('segment', 'order', 10)
    const maybe: bigint | undefined = leaf.tryNextId('snowflake', 'order')
    return maybe ?? ids[0] ?? await leaf.nextId('segment', 'order')
  } catch (err) {
    if (isLeafClientError(err)) {
      const code: string = err.code
      throw new LeafClientError(code, err.message, { status: err.status, server: err.server, attempts: err.attempts, cause: err })
    }
    throw err
  }
}

// @ts-expect-error: not a mode
export const wrong = leaf.nextId('uuid', 'order')
`

/**
 * [moduleResolution, module, file]: a .mts is an ES module under every mode, a .cts CommonJS,
 * and a .ts in this project (no "type") CommonJS. node16 refuses a .cts importing an ES-only
 * package (TS1479: Node 16 had no require(esm)); nodenext (TypeScript 5.8+) allows it. node10 is
 * the older tools' resolution, which ignores `exports` and reads `types`.
 */
const TS_CASES: [string, string, string][] = [
  ['node10', 'commonjs', 'use.ts'],
  ['node16', 'node16', 'use.mts'],
  ['nodenext', 'nodenext', 'use.mts'],
  ['nodenext', 'nodenext', 'use.cts'],
  ['bundler', 'esnext', 'use.mts'],
  ['bundler', 'esnext', 'use.cts'],
]
t.test('TypeScript checks a file using the client under node16, nodenext, bundler and node10', async (t) => {
  if (!installed) return t.fail('not installed')
  writeFileSync(join(project, 'use.mts'), USE_TS)
  writeFileSync(join(project, 'use.cts'), USE_TS)
  writeFileSync(join(project, 'use.ts'), USE_TS)
  const tsc = join(ROOT, 'node_modules/typescript/bin/tsc')
  for (const [resolution, module, file] of TS_CASES) {
    const r = await run(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', 'false', '--target', 'es2022',
      '--lib', 'es2022', '--types', 'node', '--moduleResolution', resolution, '--module', module, file], project)
    t.equal(r.code, 0, `moduleResolution ${resolution}, module ${module}, ${file}: ${describe(r)}${r.stdout === '' ? '' : `; ${r.stdout.trim().slice(0, 2000)}`}`)
  }
})
