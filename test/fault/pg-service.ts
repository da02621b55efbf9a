import { spawnSync } from 'node:child_process'
import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { ROOT } from '../helpers/server-process.js'
import { sleep } from './services.js'

// A private PostgreSQL 15 for the fault suite, started by the same code as the tests' one
// (scripts/private-postgres.sh): its own data folder and loopback port, killed by its
// postmaster's pid and stopped by its folder, never by name.

const SCRIPT = join(ROOT, 'scripts/private-postgres.sh')

function script (...args: string[]): { ok: boolean, out: string } {
  const run = spawnSync('bash', [SCRIPT, ...args], { encoding: 'utf8', timeout: 90_000 })
  return { ok: run.status === 0, out: `${run.stdout}${run.stderr}`.trim() }
}

export class PrivatePostgres {
  readonly dir: string
  private admin: pg.Pool | undefined
  /** performance.now() when the latest start answered. */
  upAt = 0

  constructor (readonly port: number) {
    // Under the system's temporary folder, open to the server's user (the suite's own scratch folder is 0700).
    this.dir = mkdtempSync(join(tmpdir(), 'leaf-fault-pg-'))
    chmodSync(this.dir, 0o755)
  }

  /** `postgres://` URL of the `leaf` database, for leaf.jdbc.url. */
  url (): string {
    return `postgres://leaf:leaf@127.0.0.1:${this.port}/leaf`
  }

  /** initdb, start, role, database and sql/*.postgres.sql; after a kill, tried again until the old backends are gone. */
  async start (timeoutMs = 30_000): Promise<void> {
    const deadline = performance.now() + timeoutMs
    for (;;) {
      const { ok, out } = script('start', this.dir, String(this.port))
      if (ok) break
      if (performance.now() > deadline) throw new Error(`private PostgreSQL did not start: ${out}`)
      await sleep(100)
    }
    this.upAt = performance.now()
    this.admin ??= new pg.Pool({ connectionString: this.url(), max: 2, connectionTimeoutMillis: 1000, query_timeout: 2000 })
    this.admin.on('error', () => {})
  }

  /** The postmaster killed with SIGKILL, by the pid in its own postmaster.pid. */
  kill (): number {
    const { ok, out } = script('pid', this.dir)
    const pid = Number(out)
    if (!ok || !Number.isInteger(pid) || pid <= 1) throw new Error(`no postmaster pid in ${this.dir}: ${out}`)
    process.kill(pid, 'SIGKILL')
    return pid
  }

  async addTag (tag: string, step: number): Promise<void> {
    await this.admin?.query('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ($1, 1, $2)', [tag, step])
  }

  async maxId (tag: string): Promise<bigint> {
    if (this.admin === undefined) throw new Error('not started')
    const { rows } = await this.admin.query<{ max_id: string }>('SELECT max_id FROM leaf_alloc WHERE biz_tag = $1', [tag])
    if (rows[0] === undefined) throw new Error(`no tag ${tag}`)
    return BigInt(rows[0].max_id)
  }

  /** pg_ctl stop on its folder, then the folder removed. */
  async stop (): Promise<void> {
    await this.admin?.end().catch(() => {})
    this.admin = undefined
    script('stop', this.dir)
    rmSync(this.dir, { recursive: true, force: true })
  }
}
