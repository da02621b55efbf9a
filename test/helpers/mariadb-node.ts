import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import mysql, { type Connection, type ConnectionOptions, type Pool } from 'mysql2/promise'
import { pingMariaDb, sleep, track, waitUntil } from '../fault/services.js'
import { ROOT } from './server-process.js'

// One private MariaDB server process, the building block of test/helpers/replica-pair.ts and
// test/helpers/galera.ts. As PrivateMariaDb in test/fault/services.ts (its own folder, port,
// socket, pid file and error log; killed with the tests if they die first), but its options come
// from a my.cnf of its own in that folder, passed with --defaults-file: so no other option file
// is read, and scripts the server runs (Galera's SST scripts read the server's option file)
// see the same options as the server.

/** Debian installs it in /usr/sbin, which a non-root PATH may lack. */
export const MARIADBD = existsSync('/usr/sbin/mariadbd') ? '/usr/sbin/mariadbd' : 'mariadbd'

/** Leaf's table and seed rows. */
export const LEAF_ALLOC_SQL = readFileSync(join(ROOT, 'sql/leaf_alloc.sql'), 'utf8')

/** The `leaf` database, user (no global privileges: read_only applies to it) and table, as root. */
export const LEAF_SETUP_SQL = `
  CREATE DATABASE leaf;
  CREATE USER 'leaf'@'%' IDENTIFIED BY 'leaf';
  GRANT ALL PRIVILEGES ON leaf.* TO 'leaf'@'%';
  USE leaf;
  ${LEAF_ALLOC_SQL}`

export interface MariaDbNodeOptions {
  /** The node's folder: data/, my.cnf, socket, pid file, error log. */
  dir: string
  port: number
  /**
   * The OS user mariadbd runs as (`--user`) when the tests run as root. Galera's rsync SST
   * fails as root, so its nodes run as `mysql`, and their folder is then made the `mysql` user's.
   * Tests that do not run as root run the server as themselves (and there is no `--user`).
   */
  osUser?: 'root' | 'mysql'
  /** `[mysqld]` options beyond the basic ones, as `name=value` or `name` lines. */
  options?: string[]
  /** Options mariadb-install-db must create the data folder with (the redo log size, say). */
  installOptions?: string[]
}

function run (command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = ''
    const child = track(spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] }))
    child.stdout?.on('data', (c: Buffer) => { out += c.toString() })
    child.stderr?.on('data', (c: Buffer) => { out += c.toString() })
    child.once('error', reject)
    child.once('exit', (code, signal) => {
      if (code === 0) resolve()
      else reject(new Error(`${command} ${args.join(' ')} failed (${signal ?? code}):\n${out}`))
    })
  })
}

function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

/** The `errno` of a mysql2 error (1290, 1213, 1047...), undefined for anything else. */
export function errnoOf (err: unknown): number | undefined {
  const errno = (err as { errno?: unknown } | null)?.errno
  return typeof errno === 'number' ? errno : undefined
}

export class MariaDbNode {
  readonly dir: string
  readonly dataDir: string
  readonly port: number
  readonly osUser: 'root' | 'mysql'
  /** Whether the tests run as root: only then is `--user` given (and the folder chown'ed). */
  private readonly asRoot: boolean
  private readonly options: string[]
  private readonly installOptions: string[]
  private child: ChildProcess | undefined
  private admin: Pool | undefined
  private leafPool: Pool | undefined
  private sysPool: Pool | undefined

  constructor (opts: MariaDbNodeOptions) {
    this.dir = opts.dir
    this.dataDir = join(opts.dir, 'data')
    this.port = opts.port
    this.osUser = opts.osUser ?? 'root'
    this.asRoot = process.getuid?.() === 0
    this.options = opts.options ?? []
    this.installOptions = opts.installOptions ?? []
  }

  get cnfFile (): string { return join(this.dir, 'my.cnf') }
  get errorLog (): string { return join(this.dir, 'error.log') }
  get socket (): string { return join(this.dir, 'mysqld.sock') }

  /** `mysql://` URL of the `leaf` database as the `leaf` user, for leaf.jdbc.url. */
  get url (): string {
    return `mysql://leaf:leaf@127.0.0.1:${this.port}/leaf`
  }

  get running (): boolean {
    return this.child !== undefined
  }

  /** The mariadbd process id while it runs. */
  get pid (): number | undefined {
    return this.child?.pid
  }

  /** The folder, my.cnf and a fresh data folder (mariadb-install-db); the server is not started. */
  async install (): Promise<void> {
    // A temp folder of its own, not the shared /tmp: three mariadb-install-db run side by side
    // there once failed with "Could not remove temporary table '/tmp/#sql-temptable-...'".
    const tmp = join(this.dir, 'tmp')
    mkdirSync(tmp, { recursive: true })
    writeFileSync(this.cnfFile, [
      '[mysqld]',
      ...(this.asRoot ? [`user=${this.osUser}`] : []),
      `datadir=${this.dataDir}`,
      `port=${this.port}`,
      'bind-address=127.0.0.1',
      `socket=${this.socket}`,
      `pid-file=${join(this.dir, 'mysqld.pid')}`,
      `log-error=${this.errorLog}`,
      'skip-name-resolve',
      `tmpdir=${tmp}`,
      'innodb-buffer-pool-size=64M',
      'max-connections=300',
      ...this.installOptions,
      ...this.options,
      '',
    ].join('\n'))
    const chown = () => !this.asRoot || this.osUser === 'root' ? Promise.resolve() : run('chown', ['-R', `${this.osUser}:${this.osUser}`, this.dir])
    await chown()
    await run('mariadb-install-db', [
      '--no-defaults', ...(this.asRoot ? [`--user=${this.osUser}`] : []), `--datadir=${this.dataDir}`,
      '--auth-root-authentication-method=normal', '--skip-test-db', `--tmpdir=${tmp}`, ...this.installOptions.map((o) => `--${o}`),
    ])
    await chown()
  }

  /**
   * Starts mariadbd and waits until root runs a query on a fresh connection, and then until
   * `ready` (if given) says yes. `args`: command-line options for this start only
   * (`--wsrep-new-cluster`). Throws, with the end of the error log, if the server exits first.
   */
  async start ({ args = [], timeoutMs = 60_000, ready }: { args?: string[], timeoutMs?: number, ready?: () => Promise<boolean> } = {}): Promise<void> {
    if (this.child !== undefined) throw new Error(`MariaDB on port ${this.port} already running`)
    const child = track(spawn(MARIADBD, [`--defaults-file=${this.cnfFile}`, ...args], { stdio: 'ignore' }))
    this.child = child
    child.once('exit', () => { if (this.child === child) this.child = undefined })
    const check = ready ?? (() => Promise.resolve(true))
    const up = await waitUntil(async () => this.child !== child || (await this.ping() && await check()), timeoutMs, 50)
    if (this.child !== child || !up) {
      if (this.child === child) await this.stop('SIGKILL')
      throw new Error(`MariaDB did not start on port ${this.port}${up ? ' (it exited)' : ''}; ${this.errorLog} ends:\n${this.logTail()}`)
    }
  }

  /** SIGKILL is a crash (recovery at the next start); SIGTERM a clean shutdown. */
  async stop (signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    await this.endPools()
    const child = this.child
    if (child === undefined) return
    child.kill(signal)
    await exited(child)
    if (this.child === child) this.child = undefined
  }

  /** A crash: SIGKILL to the server's pid, then waits for it to be gone. */
  kill (): Promise<void> {
    return this.stop('SIGKILL')
  }

  /** True when root runs `SELECT 1` on a fresh connection. */
  ping (): Promise<boolean> {
    return pingMariaDb(this.port)
  }

  /**
   * A fresh connection, by default as `leaf` on the `leaf` database with big numbers as strings;
   * `opts` overrides that (`{ user: 'root', password: '' }`, `{ multipleStatements: true }`).
   */
  connect (opts: ConnectionOptions = {}): Promise<Connection> {
    return mysql.createConnection({
      host: '127.0.0.1',
      port: this.port,
      user: 'leaf',
      password: 'leaf',
      database: 'leaf',
      connectTimeout: 2000,
      supportBigNumbers: true,
      bigNumberStrings: true,
      ...opts,
    })
  }

  /** A query as root on the `leaf` database (rejects while the server is down). */
  async query<T = unknown> (sql: string, values?: unknown[]): Promise<T> {
    this.admin ??= this.pool('root', '')
    const [rows] = await this.admin.query(sql, values)
    return rows as T
  }

  /** A query as the `leaf` user (no SUPER: read_only applies) on the `leaf` database. */
  async leafQuery<T = unknown> (sql: string, values?: unknown[]): Promise<T> {
    this.leafPool ??= this.pool('leaf', 'leaf')
    const [rows] = await this.leafPool.query(sql, values)
    return rows as T
  }

  /** A query as root on no database (works before the `leaf` database exists). */
  async rootQuery<T = unknown> (sql: string, values?: unknown[]): Promise<T> {
    this.sysPool ??= this.pool('root', '', null)
    const [rows] = await this.sysPool.query(sql, values)
    return rows as T
  }

  /** A global variable (`server_id`, `read_only`, `gtid_binlog_pos`) as a string. */
  async variable (name: string): Promise<string> {
    const rows = await this.rootQuery<{ value: string | number | null }[]>(`SELECT @@GLOBAL.${name} AS value`)
    return String(rows[0]?.value ?? '')
  }

  /** `SHOW GLOBAL STATUS` of the variables named `like` (`wsrep_%`) as name -> value. */
  async status (like: string): Promise<Record<string, string>> {
    const rows = await this.rootQuery<{ Variable_name: string, Value: string }[]>('SHOW GLOBAL STATUS LIKE ?', [like])
    return Object.fromEntries(rows.map((r) => [r.Variable_name, r.Value]))
  }

  async addTag (tag: string, step: number, maxId = 1n): Promise<void> {
    await this.query('INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)', [tag, String(maxId), step, 'test'])
  }

  async maxId (tag: string): Promise<bigint> {
    const rows = await this.query<{ max_id: string }[]>('SELECT max_id FROM leaf_alloc WHERE biz_tag = ?', [tag])
    if (rows[0] === undefined) throw new Error(`no tag ${tag} on port ${this.port}`)
    return BigInt(rows[0].max_id)
  }

  /** The last lines of the error log, for failure messages. */
  logTail (lines = 30): string {
    try {
      return readFileSync(this.errorLog, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
    } catch {
      return '(no error log)'
    }
  }

  private pool (user: string, password: string, database: string | null = 'leaf'): Pool {
    return mysql.createPool({
      host: '127.0.0.1',
      port: this.port,
      user,
      password,
      ...(database === null ? {} : { database }),
      connectionLimit: 2,
      connectTimeout: 1000,
      supportBigNumbers: true,
      bigNumberStrings: true,
    })
  }

  private async endPools (): Promise<void> {
    const pools = [this.admin, this.leafPool, this.sysPool]
    this.admin = undefined
    this.leafPool = undefined
    this.sysPool = undefined
    // A pool whose server is gone may take a while to end: not waited for past a moment.
    await Promise.race([Promise.all(pools.map((p) => p?.end().catch(() => {}))), sleep(500)])
  }
}
