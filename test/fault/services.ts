import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import mysql, { type Pool } from 'mysql2/promise'
import { ROOT } from '../helpers/server-process.js'

// A private MariaDB and a private ZooKeeper for the fault suite: each with its own data
// folder and loopback port, so stopping them disturbs nothing else on the machine.

/** Debian installs it in /usr/sbin, which a non-root PATH may lack. */
const MARIADBD = existsSync('/usr/sbin/mariadbd') ? '/usr/sbin/mariadbd' : 'mariadbd'

const children = new Set<ChildProcess>()
// If the suite dies, the processes it started go with it (by pid, nothing else).
process.once('exit', () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
})

/** Registers a child process so that it is killed if the suite exits first. */
export function track (child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

export { freePort } from '../helpers/ports.js'

/** Polls `check` every `everyMs` until it returns true; false when `timeoutMs` passed first. */
export async function waitUntil (check: () => boolean | Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (true) {
    if (await Promise.resolve().then(check).catch(() => false)) return true
    if (Date.now() >= deadline) return false
    await sleep(everyMs)
  }
}

function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

export class PrivateMariaDb {
  readonly dataDir: string
  readonly tmpDir: string
  private child: ChildProcess | undefined
  private admin: Pool | undefined
  /** performance.now() of the last failed ping of the latest start: it came back after this. */
  lastDownAt = 0
  /** performance.now() of the first successful ping of the latest start. */
  upAt = 0

  /** `env`: the server's environment beyond the suite's own (a preloaded libfaketime, say). */
  constructor (readonly dir: string, readonly port: number, private readonly env: Record<string, string> = {}) {
    this.dataDir = join(dir, 'data')
    this.tmpDir = join(dir, 'tmp')
  }

  /** `mysql://` URL of the `leaf` database for the server's leaf.jdbc.url. */
  url (port = this.port): string {
    return `mysql://leaf:leaf@127.0.0.1:${port}/leaf`
  }

  get running (): boolean {
    return this.child !== undefined
  }

  /** mariadb-install-db, start, then the `leaf` database, user and table. */
  async init (): Promise<void> {
    // A temporary folder of its own: in the shared /tmp, another test's cleanup can remove a
    // bootstrap's temporary table under it ("Could not remove temporary table", then abort).
    mkdirSync(this.tmpDir, { recursive: true })
    const install = spawnSync('mariadb-install-db', [
      '--no-defaults', '--user=root', `--datadir=${this.dataDir}`, `--tmpdir=${this.tmpDir}`,
      '--auth-root-authentication-method=normal', '--skip-test-db',
    ], { encoding: 'utf8' })
    if (install.status !== 0) throw new Error(`mariadb-install-db failed:\n${install.stdout}\n${install.stderr}`)
    await this.start()
    const conn = await mysql.createConnection({ host: '127.0.0.1', port: this.port, user: 'root', multipleStatements: true })
    await conn.query(`
      CREATE DATABASE leaf;
      CREATE USER 'leaf'@'%' IDENTIFIED BY 'leaf';
      GRANT ALL PRIVILEGES ON leaf.* TO 'leaf'@'%';
      USE leaf;
      ${readFileSync(join(ROOT, 'sql/leaf_alloc.sql'), 'utf8')}`)
    await conn.end()
  }

  async start (): Promise<void> {
    if (this.child !== undefined) throw new Error('MariaDB already running')
    const child = track(spawn(MARIADBD, [
      '--no-defaults', '--user=root', `--datadir=${this.dataDir}`, `--tmpdir=${this.tmpDir}`, `--port=${this.port}`,
      '--bind-address=127.0.0.1', `--socket=${join(this.dir, 'mysqld.sock')}`,
      `--pid-file=${join(this.dir, 'mysqld.pid')}`, `--log-error=${join(this.dir, 'error.log')}`,
      '--skip-name-resolve', '--innodb-buffer-pool-size=64M', '--max-connections=500',
    ], { stdio: 'ignore', env: { ...process.env, ...this.env } }))
    this.child = child
    child.once('exit', () => { if (this.child === child) this.child = undefined })
    const up = await waitUntil(async () => {
      if (this.child !== child || await this.ping()) return true
      this.lastDownAt = performance.now()
      return false
    }, 60_000, 20)
    if (!up || this.child !== child) throw new Error(`MariaDB did not start on port ${this.port}; see ${join(this.dir, 'error.log')}`)
    this.upAt = performance.now()
  }

  /** SIGKILL is a crash (recovery at the next start); SIGTERM a clean shutdown. */
  async stop (signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    const child = this.child
    if (child === undefined) return
    await this.admin?.end().catch(() => {})
    this.admin = undefined
    child.kill(signal)
    await exited(child)
    this.child = undefined
  }

  /** True when a fresh connection runs a query. */
  ping (): Promise<boolean> {
    return pingMariaDb(this.port)
  }

  /** A query as root on the `leaf` database (rejects while the server is down). */
  async query<T = unknown> (sql: string, values?: unknown[]): Promise<T> {
    this.admin ??= mysql.createPool({
      host: '127.0.0.1',
      port: this.port,
      user: 'root',
      database: 'leaf',
      connectionLimit: 2,
      connectTimeout: 1000,
      supportBigNumbers: true,
      bigNumberStrings: true,
    })
    const [rows] = await this.admin.query(sql, values)
    return rows as T
  }

  async addTag (tag: string, step: number, maxId = 1n): Promise<void> {
    await this.query('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)', [tag, String(maxId), step, 'fault suite'])
  }

  async maxId (tag: string): Promise<bigint> {
    const rows = await this.query<{ max_id: string }[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', [tag])
    if (rows[0] === undefined) throw new Error(`no tag ${tag}`)
    return BigInt(rows[0].max_id)
  }
}

export class PrivateZooKeeper {
  private child: ChildProcess | undefined
  /** How many times it was started, for the log file names. */
  private starts = 0

  constructor (readonly dir: string, readonly port: number, readonly tickTimeMs = 200) {}

  get address (): string {
    return `127.0.0.1:${this.port}`
  }

  get running (): boolean {
    return this.child !== undefined
  }

  async start (): Promise<void> {
    if (this.child !== undefined) throw new Error('ZooKeeper already running')
    mkdirSync(join(this.dir, 'data'), { recursive: true })
    // As scripts/test-services.sh, with a short tick: sessions may be as short as 2 ticks.
    writeFileSync(join(this.dir, 'zoo.cfg'), [
      `tickTime=${this.tickTimeMs}`,
      'initLimit=10',
      'syncLimit=5',
      `dataDir=${join(this.dir, 'data')}`,
      `clientPort=${this.port}`,
      'clientPortAddress=127.0.0.1',
      `minSessionTimeout=${2 * this.tickTimeMs}`,
      'maxSessionTimeout=60000',
      'admin.enableServer=false',
      '4lw.commands.whitelist=ruok,srvr,stat',
      '',
    ].join('\n'))
    const log = createWriteStream(join(this.dir, `zookeeper-${++this.starts}.out`))
    // ZooKeeper's own log, at INFO with times, into zookeeper-<n>.out (kept with the servers'
    // logs): its connection and session lines (a refused or expired session, a closed
    // connection) are what a failed ZooKeeper scenario is read against. Debian's classpath holds
    // several SLF4J bindings and the first one found is the no-op one, so slf4j-simple goes first.
    const child = track(spawn('java', [
      `-Dzookeeper.log.dir=${this.dir}`,
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=info', '-Dorg.slf4j.simpleLogger.showDateTime=true',
      '-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd\'T\'HH:mm:ss.SSSZ',
      '-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
      '-cp', '/etc/zookeeper/conf:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/*',
      'org.apache.zookeeper.server.quorum.QuorumPeerMain', join(this.dir, 'zoo.cfg'),
    ], { stdio: ['ignore', 'pipe', 'pipe'] }))
    child.stdout?.pipe(log)
    child.stderr?.pipe(log)
    this.child = child
    child.once('exit', () => { if (this.child === child) this.child = undefined })
    const up = await waitUntil(async () => this.child !== child || await this.serving(), 60_000, 100)
    if (!up || this.child !== child) throw new Error(`ZooKeeper did not start on port ${this.port}; see ${this.dir}`)
  }

  async stop (signal: 'SIGTERM' | 'SIGKILL' = 'SIGKILL'): Promise<void> {
    const child = this.child
    if (child === undefined) return
    child.kill(signal)
    await exited(child)
    this.child = undefined
  }

  /** `srvr` answers with a Mode line only once the server serves requests. */
  serving (): Promise<boolean> {
    return new Promise((resolve) => {
      let out = ''
      const socket = connect(this.port, '127.0.0.1', () => socket.end('srvr'))
      socket.setTimeout(1000, () => socket.destroy())
      socket.on('data', (c: Buffer) => { out += c.toString() })
      socket.on('error', () => resolve(false))
      socket.on('close', () => resolve(/Mode: /.test(out)))
    })
  }
}

const LIBFAKETIME = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1', '/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1', '/usr/lib/faketime/libfaketimeMT.so.1']

/**
 * The environment that runs a process under Debian's libfaketime with its clock offset read
 * from `file` (e.g. `+12s`), re-read every second: writing the file steps that process's clock.
 * Its monotonic clock is left alone.
 */
export function steppableClock (file: string, offset = '+0'): Record<string, string> {
  writeFileSync(file, `${offset}\n`)
  return { LD_PRELOAD: libfaketime(), FAKETIME_TIMESTAMP_FILE: file, FAKETIME_CACHE_DURATION: '1', FAKETIME_DONT_FAKE_MONOTONIC: '1' }
}

/**
 * The environment that runs a process with its clock `offset` ahead (`+4s`), as `faketime -f`
 * does, but preloaded into the process itself: the faketime wrapper forks, and a wrapper killed
 * before its child leaves its named semaphore behind, which fails a later wrapper that gets the
 * same pid ("sem_open: File exists").
 */
export function offsetClock (offset: string): Record<string, string> {
  return { LD_PRELOAD: libfaketime(), FAKETIME: offset }
}

function libfaketime (): string {
  const lib = LIBFAKETIME.find((path) => existsSync(path))
  if (lib === undefined) throw new Error(`libfaketime not found (${LIBFAKETIME.join(', ')}): scripts/test-services.sh installs it with the faketime package`)
  return lib
}

/** True when root runs `SELECT 1` on a fresh connection to the MariaDB on `port`. */
export async function pingMariaDb (port: number): Promise<boolean> {
  try {
    const conn = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 1000 })
    try {
      await conn.query('SELECT 1')
    } finally {
      conn.destroy()
    }
    return true
  } catch {
    return false
  }
}
