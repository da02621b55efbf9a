import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { basename, dirname, join, posix } from 'node:path'
import mysql from 'mysql2/promise'
import semver from 'semver'
import t from 'tap'
import { parse as parseYaml, parseAllDocuments } from 'yaml'
import { ENTRY, EXTERNAL, OUTFILE, buildServer, bundledPackages } from '../../scripts/build-server.js'
import { DEFAULT_SQLITE_PATH, parseJdbcUrl } from '../../src/config/jdbc-url.js'
import { KEYS, envName } from '../../src/config/keys.js'
import { loadConfig } from '../../src/config/load-config.js'
import { decodeSnowflakeId } from '../../src/snowflake/leaf-ids.js'
import { readWorkerCache } from '../../src/snowflake/worker-id/cache-file.js'
import { tempDir } from '../helpers/config.js'
import { TEST_MYSQL } from '../helpers/mysql.js'
import { DASHBOARD_FILE, asPromql, dashboardPanels, dashboardQueries, readDashboard, selectors } from '../helpers/monitoring.js'
import { ROOT, SERVER_JS, get, startServer } from '../helpers/server-process.js'
import { TEST_ZK, inspector, uniqueName } from '../helpers/zookeeper.js'
import { freePort } from '../helpers/ports.js'

// The image (Dockerfile), the stack (docker-compose.yml) and Prometheus' config checked for
// what a schema cannot see, then leaf1's exact environment run against the local services.
// scripts/check-packaging.sh validates the same files against their schemas.

const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

// --- Dockerfile ----------------------------------------------------------------------------

interface Instruction { keyword: string, args: string }
interface Stage { name: string, base: string, instructions: Instruction[] }

/** Logical instructions: comments dropped, `\` continuations joined. */
function instructions (text: string): Instruction[] {
  const result: Instruction[] = []
  let pending = ''
  for (const line of text.split('\n')) {
    const trimmed = line.trim()
    if (trimmed.startsWith('#') || trimmed === '') continue
    if (trimmed.endsWith('\\')) {
      pending += trimmed.slice(0, -1) + ' '
      continue
    }
    const whole = pending + trimmed
    pending = ''
    const m = /^(\S+)\s+([\s\S]*)$/.exec(whole)
    if (m !== null) result.push({ keyword: (m[1] as string).toUpperCase(), args: (m[2] as string).trim() })
  }
  return result
}

function stages (text: string): Stage[] {
  const globals: Record<string, string> = {}
  const result: Stage[] = []
  for (const ins of instructions(text)) {
    if (ins.keyword === 'FROM') {
      const [image = '', , name = String(result.length)] = ins.args.split(/\s+/)
      const base = image.replace(/\$\{?(\w+)\}?/g, (_, arg: string) => globals[arg] ?? '')
      result.push({ name, base, instructions: [] })
    } else if (result.length === 0 && ins.keyword === 'ARG') {
      const [arg = '', value = ''] = ins.args.split('=')
      globals[arg] = value
    } else {
      result.at(-1)?.instructions.push(ins)
    }
  }
  return result
}

const dockerfile = read('Dockerfile')
const imageStages = stages(dockerfile)
const runtime = imageStages.at(-1) as Stage

function all (stage: Stage, keyword: string): string[] {
  return stage.instructions.filter((i) => i.keyword === keyword).map((i) => i.args)
}

/** The exec form of CMD and of HEALTHCHECK's CMD. */
const cmd = JSON.parse(all(runtime, 'CMD')[0] ?? 'null') as string[] | null
const healthcheck = /^(?:--\S+\s+)*CMD\s+(\[[\s\S]*\])$/.exec(all(runtime, 'HEALTHCHECK')[0] ?? '')
const healthcheckCmd = JSON.parse(healthcheck?.[1] ?? 'null') as string[] | null
const workdir = all(runtime, 'WORKDIR').at(-1) ?? '/'

// --- docker-compose.yml --------------------------------------------------------------------

interface Service {
  image?: string
  build?: string | { context: string, dockerfile?: string }
  pull_policy?: string
  environment?: Record<string, string | number | boolean | null> | string[]
  volumes?: string[]
  ports?: string[]
  depends_on?: string[] | Record<string, { condition: string }>
  healthcheck?: { test?: string | string[], disable?: boolean }
  profiles?: string[]
}
interface Compose { services: Record<string, Service>, volumes?: Record<string, unknown>, [key: string]: unknown }

const compose = parseYaml(read('docker-compose.yml')) as Compose
const REPLICAS = ['leaf1', 'leaf2']

function service (name: string): Service {
  const s = compose.services[name]
  if (s === undefined) throw new Error(`docker-compose.yml has no service ${name}`)
  return s
}

function environment (name: string): Record<string, string> {
  const env = service(name).environment ?? {}
  const pairs = Array.isArray(env) ? env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]) : Object.entries(env)
  return Object.fromEntries(pairs.map(([k, v]) => [k, v === null || v === undefined ? '' : String(v)]))
}

/** `source:target[:mode]` of a service's volumes, by target. */
function mounts (name: string): Map<string, string> {
  return new Map((service(name).volumes ?? []).map((v) => {
    const [source = '', target = ''] = v.split(':')
    return [target, source]
  }))
}

const containerPort = loadConfig({ cwd: ROOT, env: {} }).config.server.port

const pkg = JSON.parse(read('package.json')) as { engines: { node: string }, overrides?: Record<string, unknown>, scripts: Record<string, string> }
const engines = new semver.Range(pkg.engines.node)

t.test('the image: build, deps and runtime stages on one slim base of a Node LTS line package.json states', async (t) => {
  t.same(imageStages.map((s) => s.name), ['build', 'deps', 'runtime'], 'the runtime stage is last, so it is the default target')
  for (const stage of imageStages) t.match(stage.base, /^node:\d+-[a-z]+-slim$/, `${stage.name}: ${stage.base}`)
  t.equal(new Set(imageStages.map((s) => s.base)).size, 1, 'native modules built on the runtime\'s base')
  const major = Number(/^node:(\d+)-/.exec(runtime.base)?.[1])
  t.ok(major % 2 === 0 && major >= 26, `node:${major}: an LTS line, the current one (26) or later`)
  t.ok(semver.satisfies(`${major}.0.0`, engines) && semver.satisfies(`${major}.99.0`, engines), `the whole ${major}.x line is in engines (${pkg.engines.node})`)

  const [build, deps] = imageStages as [Stage, Stage, Stage]
  const buildRuns = all(build, 'RUN').join('\n')
  t.match(buildRuns, /npm ci\b/)
  t.match(buildRuns, /npm run build\b/)
  const copied = all(build, 'COPY').flatMap((c) => c.split(/\s+/).slice(0, -1))
  for (const needed of ['tsconfig.json', 'src', 'scripts/build-server.ts']) {
    t.ok(copied.includes(needed), `the build stage copies ${needed}`)
  }

  const depsRuns = all(deps, 'RUN').join('\n')
  t.match(depsRuns, /apt-get install [^\n]*\bpython3\b/)
  t.match(depsRuns, /apt-get install [^\n]*\bmake\b/)
  t.match(depsRuns, /apt-get install [^\n]*\bg\+\+/)
  t.match(depsRuns, /npm ci --omit=dev\b/)
  t.match(depsRuns, /require\('better-sqlite3'\)/, 'the image build fails if the native module does not load')

  const runtimeRuns = all(runtime, 'RUN').join('\n')
  t.notMatch(runtimeRuns, /apt-get|npm (ci|install)/, 'runtime installs nothing: no compiler, no dev dependency')
  const copies = all(runtime, 'COPY')
  t.ok(copies.some((c) => /^--from=deps\s+\S*node_modules\s/.test(c)), 'node_modules from deps')
  t.ok(copies.some((c) => /^--from=build\s+\S*dist\s/.test(c)), 'dist from build')
  t.ok(copies.some((c) => /^config\s/.test(c)), 'config/leaf.properties baked in')
  t.ok(copies.some((c) => /^package\.json\s/.test(c)), 'package.json, whose "type": "module" makes dist/*.js ES modules')
})

t.test('engines: the Node running these tests, and every line stated, satisfy every production dependency\'s engines', async (t) => {
  t.ok(semver.satisfies(process.version, engines), `this Node (${process.version}) is in engines (${pkg.engines.node})`)
  // The lowest version of each line stated (20.19.0, 22.12.0 ...), and the newest of each.
  const lines = engines.set.map((comparators) => semver.minVersion(new semver.Range(comparators.map((c) => c.value).join(' ')))?.version as string)
  t.ok(lines.length >= 2, `lines stated: ${lines.join(', ')}`)
  const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { version?: string, dev?: boolean, engines?: { node?: string } | string[] }> }
  const refused: string[] = []
  for (const [path, entry] of Object.entries(lock.packages)) {
    const wanted = Array.isArray(entry.engines) ? undefined : entry.engines?.node
    if (path === '' || entry.dev === true || wanted === undefined) continue
    for (const line of lines) {
      for (const version of [line, `${semver.major(line)}.99.0`]) {
        if (!semver.satisfies(version, wanted)) refused.push(`${path.replace(/^.*node_modules\//, '')}@${entry.version} wants node ${wanted}: not ${version}`)
      }
    }
  }
  t.same(refused, [], 'no production dependency refuses a Node version package.json promises')
  t.same(pkg.overrides, { 'light-my-request': { cookie: '1.1.1' } }, 'cookie@2 (Node >= 22 only) is overridden by cookie 1.1.1 under light-my-request (README, Development)')
})

t.test('the image runs as a user that is not root and owns its data folders', async (t) => {
  const user = all(runtime, 'USER').at(-1)
  t.ok(user !== undefined && !/^(root|0)(:|$)/.test(user), `USER ${user}`)
  const dataDir = posix.join(workdir, dirname(DEFAULT_SQLITE_PATH))
  const cacheDir = environment('leaf1').LEAF_SNOWFLAKE_CACHE_DIR ?? ''
  const prepare = all(runtime, 'RUN').join('\n')
  for (const dir of [dataDir, cacheDir]) {
    t.match(prepare, new RegExp(`mkdir -p [^\\n]*${dir}(\\s|$)`), `${dir} created`)
  }
  t.match(prepare, new RegExp(`chown -R ${user}:${user} [^\\n]*${dataDir}`), `${dataDir} (the embedded store) writable by ${user}`)
  t.match(prepare, new RegExp(`chown -R ${user}:${user} [^\\n]*${dirname(cacheDir)}(\\s|$)`), `${cacheDir} (a named volume takes its owner) writable by ${user}`)
})

t.test('the image\'s CMD runs the server the build produces; HEALTHCHECK and EXPOSE match it', async (t) => {
  t.same(cmd, ['node', 'dist/server.js'], 'exec form: node is PID 1 and gets SIGTERM itself')
  // npm run build:server bundles src/server.ts into the file the image runs.
  t.equal(OUTFILE, join(ROOT, cmd?.[1] ?? ''), 'the build writes src/server.ts\'s bundle to the CMD\'s file')
  t.equal(ENTRY, join(ROOT, 'src/server.ts'))
  t.match(pkg.scripts['build:server'], /scripts\/build-server\.ts/, 'npm run build:server runs scripts/build-server.ts')
  t.equal(join(ROOT, cmd?.[1] ?? ''), SERVER_JS, 'the file the end-to-end tests run')
  t.ok(existsSync(SERVER_JS), 'dist/server.js exists after npm run build')
  t.ok(existsSync(join(ROOT, 'config/leaf.properties')), `${workdir}/config/leaf.properties is the default config`)

  t.equal(healthcheckCmd?.[0], 'node', 'HEALTHCHECK in exec form with node: the slim image has no curl')
  t.match(healthcheckCmd?.join(' '), /\/healthz/)
  t.same(all(runtime, 'EXPOSE'), [String(containerPort)], 'EXPOSE the shipped server.port')
  t.same(all(runtime, 'STOPSIGNAL'), ['SIGTERM'])
  t.same(all(runtime, 'ENV').filter((e) => /\b(LEAF|SERVER)_/.test(e)), [], 'no configuration baked into the environment: a mounted leaf.properties is not overridden')
})

t.test('.dockerignore keeps local state out of the build context, and nothing the image copies', async (t) => {
  const ignored = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
  for (const path of ['node_modules', 'data', '.tap', 'coverage', 'test-output', 'dist', '.git']) {
    t.ok(ignored.includes(path), `${path} ignored`)
  }
  const sources = imageStages.flatMap((s) => all(s, 'COPY')).filter((c) => !c.startsWith('--from=')).flatMap((c) => c.split(/\s+/).slice(0, -1))
  t.ok(sources.length > 0)
  for (const source of sources) {
    t.ok(existsSync(join(ROOT, source)), `${source} exists`)
    t.notOk(ignored.includes(source), `${source} is in the context`)
  }
})

t.test('the built server bundles and imports only production dependencies (the image omits dev ones)', async (t) => {
  const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> }
  const bundled = [...bundledPackages(await buildServer({ write: false }))].sort()
  t.ok(bundled.includes('node_modules/fastify') && bundled.includes('node_modules/mysql2'), `bundled: ${bundled.join(', ')}`)
  // What fastify, mysql2 ... bring with them: production packages of the lockfile, none dev-only.
  const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { dev?: boolean }> }
  t.same(bundled.filter((p) => lock.packages[p] === undefined || lock.packages[p]?.dev === true), [], 'every bundled package is a production package of the lockfile')
  const code = readFileSync(SERVER_JS, 'utf8')
  const imported = new Set<string>()
  // Its own imports, and the require() calls of the CommonJS packages bundled into it.
  for (const m of code.matchAll(/^import\s[^'"]*['"]([^'"]+)['"]|\b__require\(["']([^"']+)["']\)/gm)) {
    const spec = (m[1] ?? m[2]) as string
    if (spec.startsWith('node:') || builtinModules.includes(spec)) continue
    imported.add(spec.split('/').slice(0, spec.startsWith('@') ? 2 : 1).join('/'))
  }
  // pino-pretty is not imported: pino's worker thread loads it by name, on a terminal.
  t.same([...imported].sort(), EXTERNAL.filter((p) => p !== 'pino-pretty').sort(), 'dist/server.js imports only the packages left out of the bundle')
  t.same(EXTERNAL.filter((p) => !(p in pkg.dependencies)), [], 'the packages left out are production dependencies: the image installs them')
})

t.test('the stack: MySQL and ZooKeeper healthy before the replicas start, Prometheus after', async (t) => {
  t.same(Object.keys(compose.services).sort(), ['grafana', 'leaf-pg', 'leaf1', 'leaf2', 'mysql', 'postgres', 'prometheus', 'zookeeper'])
  t.same(Object.entries(compose.services).filter(([, s]) => s.profiles !== undefined).map(([name, s]) => [name, s.profiles]),
    [['postgres', ['postgres']], ['leaf-pg', ['postgres']]], 'only the PostgreSQL pair is in a profile: a plain `docker compose up` is unchanged')
  // docker-compose 1.29 (scripts/check-packaging.sh) rejects `name:`; Compose v2 warns on `version:`.
  t.same(Object.keys(compose).filter((k) => !k.startsWith('x-')).sort(), ['services', 'volumes'])
  t.match(service('mysql').image, /^mysql:8\.\d+$/)
  t.match(service('zookeeper').image, /^zookeeper:3\.[89]$/)
  for (const name of ['mysql', 'zookeeper', 'prometheus']) {
    const hc = service(name).healthcheck
    t.ok(hc?.test !== undefined && hc.disable !== true, `${name} has a healthcheck`)
  }
  t.match(service('mysql').healthcheck?.test, [/^CMD/, /--protocol=tcp[\s\S]*leaf_alloc/], 'MySQL is healthy once the table exists and it listens on TCP')
  t.match(service('zookeeper').healthcheck?.test, [/^CMD/, /srvr[\s\S]*2181/])

  for (const name of REPLICAS) {
    const s = service(name)
    t.notOk(s.healthcheck, `${name} keeps the image's HEALTHCHECK`)
    t.match(s.depends_on, { mysql: { condition: 'service_healthy' }, zookeeper: { condition: 'service_healthy' } }, `${name} waits for healthy services`)
  }
  t.same(service('leaf1').ports, [`8080:${containerPort}`])
  t.same(service('leaf2').ports, [`8081:${containerPort}`])
  t.same(service('prometheus').ports, ['9090:9090'])
  t.same(Object.keys(service('prometheus').depends_on ?? {}).sort(), REPLICAS)
})

t.test('the replicas run one image, built once from this Dockerfile and tagged', async (t) => {
  const [leaf1, leaf2] = REPLICAS.map(service) as [Service, Service]
  t.same(leaf1.build, '.', 'leaf1 builds this Dockerfile')
  t.match(leaf1.image, /^[a-z0-9][a-z0-9._-]*:[\w.-]+$/, 'and tags the image')
  t.equal(leaf1.pull_policy, 'build', 'built from the checkout, never pulled')
  t.equal(leaf2.image, leaf1.image, 'leaf2 runs that image')
  t.equal(leaf2.build, undefined, 'leaf2 does not build it a second time')
  t.equal(leaf2.pull_policy, 'never', 'nor pulls it: no registry has it')
  t.same((leaf2.depends_on as Record<string, unknown>).leaf1, { condition: 'service_started' }, 'leaf1, which builds it, comes first')
  t.same(Object.entries(compose.services).filter(([, s]) => s.build !== undefined).map(([name]) => name), ['leaf1'], 'the only build of the stack')
})

/** The compose URLs carry no TLS parameter: TLS when the server offers it (MySQL 8 makes its own certificate; the postgres image has none). */
const PREFER = { mode: 'prefer', modeFrom: 'default' }

t.test('MySQL creates Leaf\'s table from sql/ on first start, for the replicas\' user', async (t) => {
  const m = mounts('mysql')
  const scripts = readdirSync(join(ROOT, 'sql')).filter((f) => f.endsWith('.sql') && !f.endsWith('.postgres.sql'))
  t.same([...m].filter(([target]) => target.startsWith('/docker-entrypoint-initdb.d/')).sort(), scripts.map((f) => [`/docker-entrypoint-initdb.d/${f}`, `./sql/${f}`]).sort(),
    'every MySQL script of sql/, and none of PostgreSQL\'s')
  t.ok(scripts.some((f) => /CREATE TABLE IF NOT EXISTS `leaf_alloc`/.test(read(`sql/${f}`))), 'sql/ creates leaf_alloc')
  t.ok(Object.hasOwn(compose.volumes ?? {}, m.get('/var/lib/mysql') ?? ''), 'data on a named volume')

  const db = environment('mysql')
  for (const name of REPLICAS) {
    const env = environment(name)
    t.same(parseJdbcUrl(env.LEAF_JDBC_URL ?? '', env.LEAF_JDBC_USERNAME ?? '', env.LEAF_JDBC_PASSWORD ?? ''), {
      kind: 'mysql', hosts: [{ host: 'mysql', port: 3306 }], database: db.MYSQL_DATABASE, user: db.MYSQL_USER, password: db.MYSQL_PASSWORD, tls: PREFER,
    }, `${name} reaches the database the init scripts ran against`)
  }
})

t.test('the postgres profile: PostgreSQL 15 creates Leaf\'s tables from sql/*.postgres.sql, and leaf-pg reaches it', async (t) => {
  const pgService = service('postgres')
  t.match(pgService.image, /^postgres:15(\.\d+)*$/)
  t.match(pgService.healthcheck?.test, [/^CMD/, /-h 127\.0\.0\.1[\s\S]*leaf_alloc/], 'healthy once the table exists and it listens on TCP')
  const m = mounts('postgres')
  const scripts = readdirSync(join(ROOT, 'sql')).filter((f) => f.endsWith('.postgres.sql'))
  t.same(scripts.sort(), ['leaf_alloc.postgres.sql', 'leaf_alloc_parked.postgres.sql', 'leaf_worker_lease.postgres.sql', 'worker_node.postgres.sql'])
  t.same([...m].filter(([target]) => target.startsWith('/docker-entrypoint-initdb.d/')).sort(), scripts.map((f) => [`/docker-entrypoint-initdb.d/${f}`, `./sql/${f}`]).sort(),
    'every PostgreSQL script of sql/')
  t.ok(Object.hasOwn(compose.volumes ?? {}, m.get('/var/lib/postgresql/data') ?? ''), 'data on a named volume')
  const db = environment('postgres')
  const env = environment('leaf-pg')
  t.same(parseJdbcUrl(env.LEAF_JDBC_URL ?? '', env.LEAF_JDBC_USERNAME ?? '', env.LEAF_JDBC_PASSWORD ?? ''), {
    kind: 'postgres', host: 'postgres', port: 5432, database: db.POSTGRES_DB, user: db.POSTGRES_USER, password: db.POSTGRES_PASSWORD, tls: PREFER,
  }, 'leaf-pg reaches the database the init scripts ran against')
  const known = new Set(Object.keys(KEYS).map(envName))
  t.same(Object.keys(env).filter((k) => !known.has(k)), [], 'no unknown variable')
  t.equal(env.LEAF_SNOWFLAKE_WORKER_ID_SOURCE, 'db-lease', 'worker ids leased in PostgreSQL too')
  const leafPg = service('leaf-pg')
  t.equal(leafPg.image, service('leaf1').image, 'the image leaf1 builds')
  t.equal(leafPg.pull_policy, 'never')
  t.match(leafPg.depends_on, { postgres: { condition: 'service_healthy' }, leaf1: { condition: 'service_started' } })
  t.same(leafPg.ports, [`8082:${containerPort}`])
})

t.test('every variable the replicas get is a configuration key; both modes on; distinct identities', async (t) => {
  const known = new Set(Object.keys(KEYS).map(envName))
  const identities = new Set<string>()
  const cacheVolumes = new Set<string>()
  for (const name of REPLICAS) {
    const env = environment(name)
    t.same(Object.keys(env).filter((k) => !known.has(k)), [], `${name}: no unknown variable`)
    const { config } = loadConfig({ cwd: ROOT, env })
    t.match(config, {
      segment: { enabled: true, store: { kind: 'mysql', hosts: [{ host: 'mysql' }] } },
      snowflake: { enabled: true, zkAddress: 'zookeeper:2181' },
    }, `${name}: both modes, on the stack's MySQL and ZooKeeper`)
    identities.add(`${config.snowflake.ip}:${config.snowflake.port}`)
    const volume = mounts(name).get(config.snowflake.cacheDir)
    t.ok(volume !== undefined && Object.hasOwn(compose.volumes ?? {}, volume), `${name}: worker-id cache on a named volume`)
    cacheVolumes.add(volume ?? '')
  }
  t.equal(identities.size, REPLICAS.length, `ZooKeeper identities ${[...identities].join(', ')}: distinct worker ids`)
  t.equal(cacheVolumes.size, REPLICAS.length, 'one cache volume per replica')
  const [first, second] = REPLICAS.map((name) => ({ ...environment(name), LEAF_SNOWFLAKE_IP: 'any' }))
  t.same(first, second, 'the replicas differ only in identity')
})

// --- Kubernetes examples (config/kubernetes) ----------------------------------------------

interface K8sEnv { name: string, value?: string, valueFrom?: unknown }
interface K8sWorkload {
  kind: string
  spec: { template: { spec: { terminationGracePeriodSeconds?: number, containers: Array<{ env: K8sEnv[], readinessProbe?: { httpGet?: { path?: string } } }> } } }
}

function workload (file: string): { env: Record<string, string>, fromCluster: string[], doc: K8sWorkload } {
  const doc = parseAllDocuments(read(`config/kubernetes/${file}`)).map((d) => d.toJS() as K8sWorkload).find((d) => d.kind === 'StatefulSet' || d.kind === 'Deployment')
  if (doc === undefined) throw new Error(`${file}: no StatefulSet or Deployment`)
  const container = doc.spec.template.spec.containers[0]
  const env: Record<string, string> = {}
  const fromCluster: string[] = []
  for (const e of container?.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value
    else fromCluster.push(e.name)
  }
  return { env, fromCluster, doc }
}

t.test('the Kubernetes examples: only configuration keys, a valid configuration, the source each shows', async (t) => {
  const known = new Set(Object.keys(KEYS).map(envName))
  const cases = [
    { file: 'statefulset.yaml', kind: 'StatefulSet', source: 'statefulset', cluster: { LEAF_JDBC_URL: 'mysql://leaf:leaf@db:3306/leaf' } },
    { file: 'db-lease.yaml', kind: 'Deployment', source: 'db-lease', cluster: { LEAF_JDBC_URL: 'mysql://leaf:leaf@db:3306/leaf', LEAF_SNOWFLAKE_IP: '10.1.2.3' } },
  ] as const
  for (const c of cases) {
    const { env, fromCluster, doc } = workload(c.file)
    t.equal(doc.kind, c.kind, `${c.file}: a ${c.kind}`)
    t.same([...Object.keys(env), ...fromCluster].filter((k) => !known.has(k)), [], `${c.file}: no unknown variable`)
    t.same(fromCluster.sort(), Object.keys(c.cluster).sort(), `${c.file}: what the cluster fills in`)
    const { config } = loadConfig({ cwd: ROOT, env: { ...env, ...c.cluster } })
    t.equal(config.snowflake.workerIdSource, c.source, `${c.file}: source ${c.source}`)
    t.ok(config.snowflake.enabled && config.segment.enabled, `${c.file}: both modes`)
    t.equal(doc.spec.template.spec.containers[0]?.readinessProbe?.httpGet?.path, '/readyz', `${c.file}: readiness from /readyz`)
    t.ok((doc.spec.template.spec.terminationGracePeriodSeconds ?? 30) >= 10, `${c.file}: time to release the lease at SIGTERM`)
  }
})

interface K8sDoc {
  kind: string
  metadata: { name: string }
  stringData?: Record<string, string>
  spec?: {
    clusterIP?: string
    serviceName?: string
    selector?: { app?: string, matchLabels?: { app?: string } }
    template?: { metadata: { labels: { app: string } }, spec: { containers: Array<{ env: Array<{ name: string, value?: string, valueFrom?: { secretKeyRef?: { name: string, key: string } } }>, volumeMounts?: Array<{ mountPath: string }> }> } }
  }
}

t.test('each Kubernetes example applies on its own: every Secret and Service it names is in it, every Service selects its pods', async (t) => {
  for (const file of ['statefulset.yaml', 'db-lease.yaml', 'production.yaml']) {
    const docs = parseAllDocuments(read(`config/kubernetes/${file}`)).map((d) => d.toJS() as K8sDoc)
    const pods = docs.find((d) => d.kind === 'StatefulSet' || d.kind === 'Deployment')
    const template = pods?.spec?.template
    if (pods === undefined || template === undefined) {
      t.fail(`${file}: no StatefulSet or Deployment`)
      continue
    }
    const app = template.metadata.labels.app
    t.equal(pods.spec?.selector?.matchLabels?.app, app, `${file}: the ${pods.kind} selects its own pods`)
    const services = docs.filter((d) => d.kind === 'Service')
    t.ok(services.length > 0 && services.every((s) => s.spec?.selector?.app === app), `${file}: a Service for clients, every Service selecting the pods`)
    if (pods.kind === 'StatefulSet') {
      t.equal(services.find((s) => s.metadata.name === pods.spec?.serviceName)?.spec?.clusterIP, 'None', `${file}: serviceName ${pods.spec?.serviceName} is a headless Service of the file`)
    }
    const refs = template.spec.containers.flatMap((c) => c.env.flatMap((e) => e.valueFrom?.secretKeyRef ?? []))
    t.ok(refs.length > 0, `${file}: the database URL from a Secret`)
    for (const ref of refs) {
      const secret = docs.find((d) => d.kind === 'Secret' && d.metadata.name === ref.name)
      t.ok(secret?.stringData?.[ref.key] !== undefined, `${file}: Secret ${ref.name} with key ${ref.key} is in the file`)
      if (ref.key === 'url') t.doesNotThrow(() => parseJdbcUrl(secret?.stringData?.[ref.key] ?? '', '', ''), `${file}: the Secret's URL parses`)
    }
  }
})

t.test('the production manifest is complete: every Secret and Service it names is in it, and its configuration loads', async (t) => {
  const docs = parseAllDocuments(read('config/kubernetes/production.yaml')).map((d) => d.toJS() as K8sDoc)
  const byKind = (kind: string) => docs.filter((d) => d.kind === kind)
  const set = byKind('StatefulSet')[0]
  t.ok(set !== undefined, 'a StatefulSet')
  if (set?.spec?.template === undefined) return
  const app = set.spec.template.metadata.labels.app
  const governing = byKind('Service').find((d) => d.metadata.name === set.spec?.serviceName)
  t.equal(governing?.spec?.clusterIP, 'None', `its serviceName ${set.spec.serviceName} is a headless Service of the file`)
  t.ok(byKind('Service').every((d) => d.spec?.selector?.app === app), 'every Service selects its pods')
  t.equal(byKind('PodDisruptionBudget')[0]?.spec?.selector?.matchLabels?.app, app, 'a disruption budget for them')
  const container = set.spec.template.spec.containers[0]
  const env: Record<string, string> = {}
  for (const e of container?.env ?? []) {
    const ref = e.valueFrom?.secretKeyRef
    if (ref === undefined) {
      env[e.name] = e.value ?? ''
      continue
    }
    const secret = byKind('Secret').find((d) => d.metadata.name === ref.name)
    t.ok(secret?.stringData?.[ref.key] !== undefined, `${e.name}: Secret ${ref.name} with key ${ref.key} is in the file`)
    env[e.name] = secret?.stringData?.[ref.key] ?? ''
  }
  const known = new Set(Object.keys(KEYS).map(envName))
  t.same(Object.keys(env).filter((k) => !known.has(k)), [], 'no unknown variable')
  const { config } = loadConfig({ cwd: ROOT, env })
  t.match(config.segment.store, { kind: 'mysql', hosts: [{ host: 'mysql-0.mysql' }, { host: 'mysql-1.mysql' }, { host: 'mysql-2.mysql' }] }, 'the host list')
  const mounts = (container?.volumeMounts ?? []).map((m) => m.mountPath)
  t.ok(mounts.some((m) => config.segment.stateFile?.startsWith(`${m}/`)), `the warm-start file ${config.segment.stateFile} is on a volume`)
  t.ok(mounts.includes(config.snowflake.cacheDir), 'so is the worker-id cache')
  t.equal(config.snowflake.workerIdSource, 'statefulset')
})

t.test('Prometheus scrapes /metrics of both replicas on their container port', async (t) => {
  t.equal(mounts('prometheus').get('/etc/prometheus/prometheus.yml'), './config/prometheus.yml')
  interface ScrapeConfig { job_name: string, metrics_path?: string, static_configs?: { targets: string[] }[] }
  const prometheus = parseYaml(read('config/prometheus.yml')) as { scrape_configs: ScrapeConfig[], rule_files?: string[] }
  // promtool resolves rule_files against the config's folder here; Prometheus does in the container.
  const ruleFiles = (prometheus.rule_files ?? []).map((f) => posix.resolve('/etc/prometheus', f))
  t.same(ruleFiles.map((f) => mounts('prometheus').get(f)), ['./config/alerts.yml'], 'the alerting rules are mounted where prometheus.yml names them')
  const targets = prometheus.scrape_configs.flatMap((c) => {
    t.equal(c.metrics_path ?? '/metrics', '/metrics', `${c.job_name}: /metrics`)
    return (c.static_configs ?? []).flatMap((s) => s.targets)
  })
  t.same(targets.sort(), REPLICAS.map((name) => `${name}:${containerPort}`))
})

t.test('Grafana: the stack\'s Prometheus as its datasource, the Leaf-TS dashboard provisioned from config/grafana', async (t) => {
  const grafana = service('grafana')
  t.match(grafana.image, /^grafana\/grafana-oss:\d+\.\d+\.\d+$/, 'a pinned version')
  t.same(grafana.ports, ['3000:3000'])
  t.same(grafana.depends_on, { prometheus: { condition: 'service_healthy' } })
  t.match(environment('grafana'), { GF_AUTH_ANONYMOUS_ENABLED: 'true', GF_AUTH_ANONYMOUS_ORG_ROLE: 'Viewer', GF_SECURITY_ADMIN_PASSWORD: /.+/ },
    'anyone sees the dashboards; the admin password is in the file (docs/monitoring.md)')
  const m = mounts('grafana')
  t.ok(Object.hasOwn(compose.volumes ?? {}, m.get('/var/lib/grafana') ?? ''), 'its database on a named volume')
  for (const volume of grafana.volumes ?? []) {
    if (volume.startsWith('./')) t.match(volume, /:ro$/, `${volume}: read-only`)
  }

  interface Datasource { name: string, type: string, uid?: string, url: string, isDefault?: boolean }
  const datasourceDir = m.get('/etc/grafana/provisioning/datasources')
  t.equal(datasourceDir, './config/grafana/provisioning/datasources')
  const datasources = readdirSync(join(ROOT, datasourceDir ?? '')).flatMap((f) => (parseYaml(read(`${datasourceDir}/${f}`)) as { datasources: Datasource[] }).datasources)
  const prometheusPort = (service('prometheus').ports ?? [])[0]?.split(':')[1]
  t.match(datasources, [{ type: 'prometheus', url: `http://prometheus:${prometheusPort}`, isDefault: true }], 'Prometheus by its service name, on its container port')
  t.equal(datasources.length, 1)

  interface Provider { name: string, type: string, options: { path: string } }
  const providerDir = m.get('/etc/grafana/provisioning/dashboards')
  t.equal(providerDir, './config/grafana/provisioning/dashboards')
  const providers = readdirSync(join(ROOT, providerDir ?? '')).flatMap((f) => (parseYaml(read(`${providerDir}/${f}`)) as { providers: Provider[] }).providers)
  t.equal(providers.length, 1)
  const dashboardsDir = m.get(providers[0]?.options.path ?? '')
  t.equal(dashboardsDir, './config/grafana/dashboards', 'the provider reads the mounted dashboards folder')
  t.same(readdirSync(join(ROOT, dashboardsDir ?? '')), [basename(DASHBOARD_FILE)], 'one dashboard there: the one test/e2e/monitoring.test.ts runs')
  const home = environment('grafana').GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH ?? ''
  t.equal(posix.dirname(home), providers[0]?.options.path, 'the home dashboard is in that folder')
  t.ok(existsSync(join(ROOT, dashboardsDir ?? '', posix.basename(home))), `${home} exists`)
})

/** Grafana's reference to the dashboard's datasource variable. */
const DATASOURCE_VARIABLE = '$' + '{datasource}'

t.test('the dashboard: every panel queries Prometheus through the datasource variable; test/e2e/monitoring.test.ts runs each query', async (t) => {
  const dashboard = readDashboard()
  t.match(dashboard, { uid: /^[\w-]{1,40}$/, title: 'Leaf-TS' })
  const datasource = dashboard.templating.list.find((v) => v.type === 'datasource')
  t.match(datasource, { name: 'datasource', query: 'prometheus' }, 'a datasource variable: the dashboard imports into any Grafana')
  const panels = dashboardPanels(dashboard)
  const ids = panels.map((p) => p.id)
  t.equal(new Set(ids).size, ids.length, 'panel ids are unique')
  const exprs: string[] = []
  for (const panel of panels) {
    t.ok((panel.targets ?? []).length > 0, `panel "${panel.title}" has a query`)
    for (const target of panel.targets ?? []) {
      t.match(target, { datasource: { type: 'prometheus', uid: DATASOURCE_VARIABLE }, expr: /\S/ }, `panel "${panel.title}" target ${target.refId}`)
      t.doesNotThrow(() => selectors(asPromql(target.expr ?? '')), `panel "${panel.title}" target ${target.refId}: PromQL that parses (Grafana's variables filled in)`)
      exprs.push(target.expr ?? '')
    }
  }
  t.same(dashboardQueries(dashboard).map((q) => q.expr).slice(0, exprs.length), exprs, 'every panel target is among the queries the real-Prometheus test runs')
  const topics = [/leaf_ids_issued_total/, /histogram_quantile\(0\.5, [^\n]*http_request_duration_seconds_bucket/, /histogram_quantile\(0\.99, [^\n]*http_request_duration_seconds_bucket/,
    /leaf_id_errors_total/, /leaf_segment_buffer_seconds/, /leaf_segment_db_load_seconds_bucket/, /leaf_zookeeper_connected/, /leaf_snowflake_lease_expiry_seconds/]
  for (const topic of topics) t.ok(exprs.some((e) => topic.test(e)), `a panel shows ${topic.source}`)
})

t.test('leaf1\'s environment, on the local MariaDB and ZooKeeper: both routes, healthcheck, metrics, drain', async (t) => {
  const env = environment('leaf1')
  const local = new URL(TEST_MYSQL)
  const jdbc = /^(jdbc:mysql:\/\/)([^/]+)(\/.*)$/.exec(env.LEAF_JDBC_URL ?? '')
  t.equal(jdbc?.[2], 'mysql:3306')
  t.equal(env.LEAF_SNOWFLAKE_ZK_ADDRESS, 'zookeeper:2181')
  const name = uniqueName()
  const cacheDir = tempDir()
  const localEnv = {
    ...env,
    LEAF_JDBC_URL: `${jdbc?.[1]}${local.host}${jdbc?.[3]}`,
    LEAF_JDBC_USERNAME: decodeURIComponent(local.username),
    LEAF_JDBC_PASSWORD: decodeURIComponent(local.password),
    LEAF_SNOWFLAKE_ZK_ADDRESS: TEST_ZK,
    LEAF_SNOWFLAKE_CACHE_DIR: cacheDir,
    LEAF_NAME: name,
  }

  // What /docker-entrypoint-initdb.d does on the first start (the script is idempotent).
  const store = parseJdbcUrl(localEnv.LEAF_JDBC_URL, localEnv.LEAF_JDBC_USERNAME, localEnv.LEAF_JDBC_PASSWORD)
  if (store.kind !== 'mysql') throw new Error('not a MySQL URL')
  const { hosts: [db], user, password, database } = store
  const conn = await mysql.createConnection({ host: db?.host, port: db?.port, user, password, database, multipleStatements: true })
  await conn.query(read('sql/leaf_alloc.sql'))
  await conn.end()

  // The image's CMD from its WORKDIR (here the checkout: the same config/ and dist/).
  const server = await startServer({ env: localEnv, args: ['--server.port=0'] })
  t.teardown(() => server.stop())
  const zkc = await inspector()
  t.teardown(() => zkc.close())

  const first = await get(`${server.url}/api/segment/get/order`)
  t.equal(first.status, 200)
  t.match(first.body, /^\d+$/)
  t.equal((await get(`${server.url}/api/segment/get/order`)).body, String(BigInt(first.body) + 1n))

  const snowflake = await get(`${server.url}/api/snowflake/get/x`)
  t.equal(snowflake.status, 200)
  t.match(snowflake.body, /^\d+$/)
  const identity = `${env.LEAF_SNOWFLAKE_IP}:${env.LEAF_SNOWFLAKE_PORT}`
  const forever = await zkc.children(`/snowflake/${name}/forever`)
  t.same(forever, [`${identity}-0000000000`], 'registered under the compose identity')
  t.equal(decodeSnowflakeId(BigInt(snowflake.body)).workerId, 0)
  t.equal(readWorkerCache(cacheDir)?.workerId, 0, 'worker id cached in LEAF_SNOWFLAKE_CACHE_DIR')

  const healthcheckRun = (port: number) => spawnSync(process.execPath, healthcheckCmd?.slice(1) ?? [], {
    env: { PATH: process.env.PATH, SERVER_PORT: String(port) }, encoding: 'utf8', timeout: 10_000,
  }).status
  t.equal(healthcheckRun(server.port), 0, 'the image\'s HEALTHCHECK passes')
  t.equal(healthcheckRun(await freePort()), 1, 'and fails where nothing answers')
  const metrics = await get(`${server.url}/metrics`)
  t.equal(metrics.status, 200, 'Prometheus can scrape /metrics')
  t.match(metrics.body, /^# (HELP|TYPE) /m)

  t.equal(await server.stop('SIGTERM'), 0, 'SIGTERM drains and exits 0')
  t.same(await zkc.children(`/snowflake/${name}/temporary`), [], 'the ephemeral node is removed at once')
})
