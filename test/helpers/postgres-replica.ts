import { execFile, spawnSync } from 'node:child_process'
import { appendFileSync, chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { freePort } from './ports.js'
import { ROOT } from './server-process.js'
import { createProxy, type TcpProxy } from './tcp-proxy.js'

// A private PostgreSQL 15 primary and a physical streaming replica of it (pg_basebackup), for
// the promotion tests: the replica streams through a TCP proxy of the test's, so that lag()
// cuts it off (whatever the primary commits from then on never reaches it: a promotion loses
// it), and `vip` is a proxy the Leaf-TS instances reach the primary through, moved to the
// replica by the test after the promotion, as a virtual IP is. Each server is found, killed and
// stopped by its own folder and pid, never by name; as root, it runs as the user postgres.

const PG_BIN = process.env.LEAF_PG_BIN ?? '/usr/lib/postgresql/15/bin'
const SCRIPT = join(ROOT, 'scripts/private-postgres.sh')
const run = promisify(execFile)
const asRoot = process.getuid?.() === 0

/** `cmd` as the server's user (initdb and the server refuse root). */
function asServer (cmd: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]
}

/** A folder under the system's temporary folder that the server's user may use. */
function serverFolder (prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  chmodSync(dir, 0o755)
  if (asRoot) spawnSync('chown', ['postgres:postgres', dir])
  return dir
}

export class PgServerNode {
  private admin: pg.Pool | undefined
  constructor (readonly dir: string, readonly port: number) {}

  /** A superuser session over the server's own socket (local trust). */
  pool (): pg.Pool {
    if (this.admin === undefined) {
      this.admin = new pg.Pool({ host: this.dir, port: this.port, user: 'postgres', database: 'leaf', max: 2, connectionTimeoutMillis: 2000, query_timeout: 120_000 })
      this.admin.on('error', () => {})
    }
    return this.admin
  }

  async query<T extends pg.QueryResultRow = pg.QueryResultRow> (sql: string, values?: unknown[]): Promise<T[]> {
    return (await this.pool().query<T>(sql, values)).rows
  }

  async addTag (tag: string, step: number): Promise<void> {
    await this.query('INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ($1, 1, $2)', [tag, step])
  }

  async maxId (tag: string): Promise<bigint> {
    const rows = await this.query<{ max_id: string }>('SELECT max_id FROM leaf_alloc WHERE biz_tag = $1', [tag])
    if (rows[0] === undefined) throw new Error(`no tag ${tag}`)
    return BigInt(rows[0].max_id)
  }

  /** The timeline WAL is written on now (null on a standby), and the last checkpoint's. */
  async timelines (): Promise<{ now: number | null, checkpoint: number }> {
    const rows = await this.query<{ wal: string | null, checkpoint: number }>(
      'SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END AS wal, (SELECT timeline_id FROM pg_control_checkpoint()) AS checkpoint')
    const wal = rows[0]?.wal ?? null
    return { now: wal === null ? null : Number.parseInt(wal.slice(0, 8), 16), checkpoint: Number(rows[0]?.checkpoint) }
  }

  /** The postmaster killed with SIGKILL, by the pid in its own postmaster.pid. */
  kill (): number {
    const pid = Number(readFileSync(join(this.dir, 'data/postmaster.pid'), 'utf8').split('\n')[0])
    if (!Number.isInteger(pid) || pid <= 1) throw new Error(`no postmaster pid in ${this.dir}`)
    process.kill(pid, 'SIGKILL')
    return pid
  }

  async closePool (): Promise<void> {
    await this.admin?.end().catch(() => {})
    this.admin = undefined
  }

  /** pg_ctl stop on its folder (immediate: a killed server's leftovers are gone anyway), then the folder removed. */
  async stop (): Promise<void> {
    await this.closePool()
    const [cmd, args] = asServer(join(PG_BIN, 'pg_ctl'), ['-D', join(this.dir, 'data'), '-m', 'immediate', '-w', 'stop'])
    await run(cmd, args).catch(() => undefined)
    rmSync(this.dir, { recursive: true, force: true })
  }
}

export class PgReplicaPair {
  private constructor (
    readonly primary: PgServerNode,
    readonly replica: PgServerNode,
    /** The replica's path to the primary's WAL. */
    readonly stream: TcpProxy,
    /** Where clients reach "the primary": the primary until moveVip(). */
    readonly vip: TcpProxy
  ) {}

  /** initdb and start the primary (role leaf, database leaf, sql/*.postgres.sql), then its replica, streaming. */
  static async create (): Promise<PgReplicaPair> {
    const primary = new PgServerNode(serverFolder('leaf-pg-primary-'), await freePort())
    const replica = new PgServerNode(serverFolder('leaf-pg-replica-'), await freePort())
    let stream: TcpProxy | undefined
    let vip: TcpProxy | undefined
    try {
      await run('bash', [SCRIPT, 'start', primary.dir, String(primary.port)], { timeout: 90_000 })
      await primary.query("CREATE ROLE repl REPLICATION LOGIN PASSWORD 'repl'")
      stream = await createProxy(primary.port)
      vip = await createProxy(primary.port)
      const data = join(replica.dir, 'data')
      const [bb, bbArgs] = asServer(join(PG_BIN, 'pg_basebackup'), ['-d', `host=127.0.0.1 port=${stream.port} user=repl password=repl`, '-D', data, '-R', '-X', 'stream', '-c', 'fast'])
      await run(bb, bbArgs, { timeout: 90_000 })
      // Its own socket folder; walreceiver retries a lost stream every second, not 5.
      appendFileSync(join(data, 'postgresql.conf'), `unix_socket_directories = '${replica.dir}'\nwal_retrieve_retry_interval = 1s\n`)
      const [ctl, ctlArgs] = asServer(join(PG_BIN, 'pg_ctl'), ['-D', data, '-o', `-p ${replica.port}`, '-l', join(replica.dir, 'postgres.log'), '-w', '-t', '60', 'start'])
      // Not spawnSync: the replica's stream runs through this process's proxy.
      await run(ctl, ctlArgs, { timeout: 90_000 })
      return new PgReplicaPair(primary, replica, stream, vip)
    } catch (err) {
      await stream?.close()
      await vip?.close()
      await replica.stop()
      await primary.stop()
      throw err
    }
  }

  /** `jdbc:postgresql://` URL of the database leaf through the VIP. */
  jdbcUrl (): string {
    return `jdbc:postgresql://127.0.0.1:${this.vip.port}/leaf`
  }

  /** Waits until the replica has replayed everything the primary wrote so far. */
  async caughtUp (timeoutMs = 30_000): Promise<void> {
    const [{ lsn }] = await this.primary.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn') as [{ lsn: string }]
    const deadline = performance.now() + timeoutMs
    for (;;) {
      const [row] = await this.replica.query<{ behind: boolean }>('SELECT pg_last_wal_replay_lsn() < $1::pg_lsn AS behind', [lsn])
      if (row?.behind === false) return
      if (performance.now() > deadline) throw new Error(`the replica did not replay up to ${lsn} within ${timeoutMs} ms`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  /** The replica cut off from the primary's WAL: what the primary commits from now on is lost by a promotion. */
  lag (): void {
    this.stream.block()
  }

  /** pg_promote(), waiting until the replica writes (its new timeline). */
  async promote (): Promise<void> {
    const [row] = await this.replica.query<{ done: boolean }>('SELECT pg_promote(true, 60) AS done')
    if (row?.done !== true) throw new Error('pg_promote() did not complete within 60 s')
  }

  /** The VIP moved to the replica: open connections cut, new ones reach it. */
  moveVip (): void {
    this.vip.block()
    this.vip.retarget(this.replica.port)
    this.vip.unblock()
  }

  async close (): Promise<void> {
    await this.vip.close()
    await this.stream.close()
    await this.replica.stop()
    await this.primary.stop()
  }
}
