import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { RowDataPacket } from 'mysql2/promise'
import { freePort } from './ports.js'
import { LEAF_SETUP_SQL, MariaDbNode } from './mariadb-node.js'

// A private MariaDB primary and its replica (GTID replication), on loopback ports of their own,
// for what a failover does to leaf_alloc: the replica runs read_only until promote(), lag()
// holds writes back from it, and a promote() after killPrimary() loses what it had not applied
// (its max_id goes back: the regression the product must detect).

export { MariaDbNode, errnoOf } from './mariadb-node.js'

const REPL_USER = 'repl'
const REPL_PASSWORD = 'repl'

export class ReplicaPair {
  readonly primary: MariaDbNode
  readonly replica: MariaDbNode
  /** True between lag() and catchUp(): the replica's SQL thread is stopped. */
  lagging = false

  /**
   * `dir`: the pair's folder (a fresh one under the OS temp folder by default), `ports`: the
   * servers' client ports. ReplicaPair.create() picks free ones.
   */
  constructor (readonly dir: string, readonly ports: { primary: number, replica: number }) {
    const common = [
      'gtid-strict-mode=1', 'binlog-format=ROW', 'log-slave-updates=1',
      // Replication starts from the beginning of the primary's binlog; a start that finds the
      // relay log of a killed run resets it.
      'relay-log-recovery=1', 'skip-slave-start=1',
    ]
    this.primary = new MariaDbNode({
      dir: join(dir, 'primary'),
      port: ports.primary,
      options: ['server-id=1', `log-bin=${join(dir, 'primary', 'data', 'mysql-bin')}`, ...common],
    })
    this.replica = new MariaDbNode({
      dir: join(dir, 'replica'),
      port: ports.replica,
      options: ['server-id=2', `log-bin=${join(dir, 'replica', 'data', 'mysql-bin')}`, 'relay-log=relay-bin', 'read-only=1', ...common],
    })
  }

  /** A pair in a fresh temp folder on free ports (not started: call init()). */
  static async create (dir?: string): Promise<ReplicaPair> {
    const home = dir ?? mkdtempSync(join(tmpdir(), 'leaf-replica-pair-'))
    chmodSync(home, 0o755)
    const primary = await freePort()
    let replica = await freePort()
    while (replica === primary) replica = await freePort()
    return new ReplicaPair(home, { primary, replica })
  }

  get primaryUrl (): string { return this.primary.url }
  get replicaUrl (): string { return this.replica.url }

  /**
   * Installs and starts both servers, creates the replication user, the `leaf` database, user
   * and table on the primary, points the replica at it (MASTER_USE_GTID=slave_pos) and waits
   * until the replica has it all.
   */
  async init (): Promise<void> {
    await Promise.all([this.primary.install(), this.replica.install()])
    await Promise.all([this.primary.start(), this.replica.start()])
    const conn = await this.primary.connect({ user: 'root', password: '', database: undefined, multipleStatements: true })
    try {
      await conn.query(`
        CREATE USER '${REPL_USER}'@'%' IDENTIFIED BY '${REPL_PASSWORD}';
        GRANT REPLICATION SLAVE ON *.* TO '${REPL_USER}'@'%';
        ${LEAF_SETUP_SQL}`)
    } finally {
      await conn.end()
    }
    // The replica has no `leaf` database until it replicates one: a connection without one.
    const replica = await this.replica.connect({ user: 'root', password: '', database: undefined })
    try {
      await replica.query(`CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${this.ports.primary},
        MASTER_USER='${REPL_USER}', MASTER_PASSWORD='${REPL_PASSWORD}', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos`)
      await replica.query('START SLAVE')
    } finally {
      await replica.end()
    }
    await this.catchUp()
  }

  /**
   * Waits until the replica has applied all the primary wrote so far, then stops its SQL thread
   * (STOP SLAVE SQL_THREAD): what the primary writes from now on reaches the replica's relay log
   * but is not applied, until catchUp().
   */
  async lag (): Promise<void> {
    await this.catchUp()
    await this.replica.query('STOP SLAVE SQL_THREAD')
    this.lagging = true
  }

  /** Starts the replica's threads and waits (up to `timeoutS`) until it has the primary's binlog position. */
  async catchUp (timeoutS = 30): Promise<void> {
    const conn = await this.replica.connect({ user: 'root', password: '', database: undefined })
    try {
      await conn.query('START SLAVE')
      this.lagging = false
      const pos = await this.primary.variable('gtid_binlog_pos')
      const [rows] = await conn.query<RowDataPacket[]>('SELECT MASTER_GTID_WAIT(?, ?) AS waited', [pos, timeoutS])
      if (Number(rows[0]?.waited) === 0) return
      const [status] = await conn.query<RowDataPacket[]>('SHOW SLAVE STATUS')
      throw new Error(`the replica did not reach the primary's ${pos} within ${timeoutS} s: ${JSON.stringify(status[0])}`)
    } finally {
      await conn.end()
    }
  }

  /** The primary crashes (SIGKILL to its pid). */
  killPrimary (): Promise<void> {
    return this.primary.kill()
  }

  /** The replica becomes a writable primary: STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0. */
  async promote (): Promise<void> {
    await this.replica.query('STOP SLAVE')
    await this.replica.query('RESET SLAVE ALL')
    await this.replica.query('SET GLOBAL read_only = 0')
    this.lagging = false
  }

  /**
   * Starts the old primary again, as it was: writable, with its own binlog and data (the writes
   * the replica never applied included), replicating from nobody.
   */
  restartPrimary (): Promise<void> {
    return this.primary.start()
  }

  /** `@@server_id` of each side: 1 and 2. */
  async serverIds (): Promise<{ primary: number, replica: number }> {
    return { primary: Number(await this.primary.variable('server_id')), replica: Number(await this.replica.variable('server_id')) }
  }

  /** Kills both servers and removes the pair's folder (`keep`: leaves it, for a look at the logs). */
  async close ({ keep = false }: { keep?: boolean } = {}): Promise<void> {
    await Promise.all([this.primary.kill(), this.replica.kill()])
    if (!keep) rmSync(this.dir, { recursive: true, force: true, maxRetries: 5 })
  }
}
