import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitUntil } from '../fault/services.js'
import { freePort } from './ports.js'
import { LEAF_SETUP_SQL, MariaDbNode } from './mariadb-node.js'

// A private MariaDB Galera cluster on loopback (3 nodes by default), for what a certification
// conflict, a dead node and a lost quorum look like to Leaf's segment transactions. Each node
// has its own folder, client port, gcomm port, IST port and SST port. The nodes run as the
// `mysql` OS user (rsync SST refuses root), so their folders are that user's and the cluster's
// folder is traversable (0755). Short EVS timeouts: a killed node is evicted in about 3 s.

export { errnoOf } from './mariadb-node.js'

const PROVIDERS = ['/usr/lib/galera/libgalera_smm.so', '/usr/lib/libgalera_smm.so', '/usr/lib64/galera-4/libgalera_smm.so', '/usr/lib64/galera/libgalera_smm.so']

/** Debian's galera-4 package puts the provider in /usr/lib/galera. */
export function galeraProvider (): string {
  const found = PROVIDERS.find((path) => existsSync(path))
  if (found === undefined) throw new Error(`libgalera_smm.so not found (${PROVIDERS.join(', ')}): install the galera-4 package (and rsync)`)
  return found
}

/** Provider options that make a dead peer noticed within seconds (defaults: 5 s suspect, 15 s inactive). */
export const FAST_EVS = 'evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;evs.install_timeout=PT3S'

export interface GaleraPorts {
  /** The client (SQL) port. */
  port: number
  /** gcomm (group communication): base_port and gmcast.listen_addr. */
  gcomm: number
  /** ist.recv_addr: incremental state transfer to this node. */
  ist: number
  /** wsrep_sst_receive_address: the rsync daemon of a full state transfer to this node. */
  sst: number
}

export class GaleraNode extends MariaDbNode {
  constructor (dir: string, readonly index: number, readonly ports: GaleraPorts, clusterAddress: string, provider: string, sstMethod: string, extra: string[] = []) {
    super({
      dir,
      port: ports.port,
      osUser: 'mysql',
      installOptions: ['innodb-log-file-size=16M'],
      options: [
        'binlog-format=ROW',
        'default-storage-engine=InnoDB',
        'innodb-autoinc-lock-mode=2',
        'innodb-flush-log-at-trx-commit=2',
        'wsrep-on=ON',
        `wsrep-provider=${provider}`,
        'wsrep-cluster-name=leaf-test',
        `wsrep-cluster-address=${clusterAddress}`,
        `wsrep-node-name=node${index}`,
        `wsrep-node-address=127.0.0.1:${ports.gcomm}`,
        `wsrep-sst-receive-address=127.0.0.1:${ports.sst}`,
        `wsrep-sst-method=${sstMethod}`,
        'wsrep-slave-threads=2',
        `wsrep-provider-options="base_port=${ports.gcomm};gmcast.listen_addr=tcp://127.0.0.1:${ports.gcomm};ist.recv_addr=127.0.0.1:${ports.ist};gcache.size=32M;${FAST_EVS}"`,
        ...extra,
      ],
    })
  }

  /** SHOW STATUS values of this node: wsrep_cluster_size, wsrep_ready, wsrep_local_state_comment... */
  async wsrep (): Promise<Record<string, string>> {
    return this.status('wsrep_%')
  }

  /** True when the node is Synced, ready and in a primary component. */
  async synced (): Promise<boolean> {
    const s = await this.wsrep()
    return s.wsrep_ready === 'ON' && s.wsrep_local_state_comment === 'Synced' && s.wsrep_cluster_status === 'Primary'
  }

  /** wsrep_cluster_size as this node sees it. */
  async clusterSize (): Promise<number> {
    return Number((await this.status('wsrep_cluster_size')).wsrep_cluster_size)
  }

  /** wsrep_cluster_state_uuid as this node sees it. */
  async clusterStateUuid (): Promise<string> {
    return (await this.status('wsrep_cluster_state_uuid')).wsrep_cluster_state_uuid ?? ''
  }

  /**
   * Starts the node and waits until it is Synced in a primary component: a node that was killed
   * rejoins (IST from gcache, or an SST). `newCluster`: bootstrap a new cluster (--wsrep-new-cluster).
   */
  override start ({ newCluster = false, timeoutMs = 60_000 }: { newCluster?: boolean, timeoutMs?: number } = {}): Promise<void> {
    return super.start({ args: newCluster ? ['--wsrep-new-cluster'] : [], timeoutMs, ready: () => this.synced() })
  }

  /** Makes this node's component primary on its own (pc.bootstrap=YES): the way back from a lost quorum. */
  async bootstrapPrimary (): Promise<void> {
    await this.query("SET GLOBAL wsrep_provider_options = 'pc.bootstrap=YES'")
  }
}

export interface GaleraOptions {
  /** wsrep_sst_method: rsync (the default) or mariabackup (needs the mariadb-backup package). */
  sstMethod?: string
  /** The provider library; galeraProvider() finds Debian's. */
  provider?: string
  /** More `[mysqld]` options for every node (`wsrep-slave-threads=4`, say). */
  options?: string[]
}

export class GaleraCluster {
  readonly nodes: GaleraNode[]

  constructor (readonly dir: string, ports: GaleraPorts[], { sstMethod = 'rsync', provider = galeraProvider(), options = [] }: GaleraOptions = {}) {
    const address = `gcomm://${ports.map((p) => `127.0.0.1:${p.gcomm}`).join(',')}`
    this.nodes = ports.map((p, i) => new GaleraNode(join(dir, `node${i}`), i, p, address, provider, sstMethod, options))
  }

  /** A cluster of `size` nodes in a fresh temp folder on free ports (not started: call init()). */
  static async create ({ size = 3, dir, ...options }: { size?: number, dir?: string } & GaleraOptions = {}): Promise<GaleraCluster> {
    const home = dir ?? mkdtempSync(join(tmpdir(), 'leaf-galera-'))
    // mkdtemp makes it 0700: the nodes run as `mysql` and must reach their folders.
    chmodSync(home, 0o755)
    const taken = new Set<number>()
    const port = async () => {
      let p = await freePort()
      while (taken.has(p)) p = await freePort()
      taken.add(p)
      return p
    }
    const ports: GaleraPorts[] = []
    for (let i = 0; i < size; i++) ports.push({ port: await port(), gcomm: await port(), ist: await port(), sst: await port() })
    return new GaleraCluster(home, ports, options)
  }

  /** Node `i`, from 0. */
  node (i: number): GaleraNode {
    const node = this.nodes[i]
    if (node === undefined) throw new Error(`no node ${i} (the cluster has ${this.nodes.length})`)
    return node
  }

  get size (): number {
    return this.nodes.length
  }

  /**
   * Installs all nodes, bootstraps the first (--wsrep-new-cluster), creates the `leaf`
   * database, user and table there, then starts the others one after the other (each joins by
   * SST) and waits until all see the full cluster.
   */
  async init (): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.install()))
    const first = this.node(0)
    await first.start({ newCluster: true })
    const conn = await first.connect({ user: 'root', password: '', database: undefined, multipleStatements: true })
    try {
      await conn.query(LEAF_SETUP_SQL)
    } finally {
      await conn.end()
    }
    for (const node of this.nodes.slice(1)) await node.start()
    await this.waitForSize(this.nodes.length)
  }

  /** The running nodes. */
  running (): GaleraNode[] {
    return this.nodes.filter((n) => n.running)
  }

  /**
   * Waits until every running node (or those of `on`) reports wsrep_cluster_size `n`, and
   * returns how long that took (ms). Throws after `timeoutMs`.
   */
  async waitForSize (n: number, { timeoutMs = 30_000, on = this.running() }: { timeoutMs?: number, on?: GaleraNode[] } = {}): Promise<number> {
    const start = performance.now()
    const ok = await waitUntil(async () => {
      const sizes = await Promise.all(on.map((node) => node.clusterSize()))
      return sizes.every((s) => s === n)
    }, timeoutMs, 100)
    if (!ok) {
      const sizes = await Promise.all(on.map((node) => node.clusterSize().catch((e: Error) => e.message)))
      throw new Error(`wsrep_cluster_size did not become ${n} within ${timeoutMs} ms: ${JSON.stringify(sizes)}`)
    }
    return performance.now() - start
  }

  /** wsrep_cluster_state_uuid of each running node. */
  clusterStateUuids (): Promise<string[]> {
    return Promise.all(this.running().map((n) => n.clusterStateUuid()))
  }

  /** The cluster's state UUID, as the running nodes agree on it; throws if they do not. */
  async clusterStateUuid (): Promise<string> {
    const uuids = [...new Set(await this.clusterStateUuids())]
    if (uuids.length !== 1) throw new Error(`the nodes do not agree on wsrep_cluster_state_uuid: ${uuids.join(', ')}`)
    return uuids[0] as string
  }

  /** Kills every node and removes the cluster's folder (`keep`: leaves it, for a look at the logs). */
  async close ({ keep = false }: { keep?: boolean } = {}): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()))
    if (!keep) rmSync(this.dir, { recursive: true, force: true, maxRetries: 5 })
  }

  /** Node `i`'s error log (empty if it has none yet). */
  log (i: number): string {
    try {
      return readFileSync(this.node(i).errorLog, 'utf8')
    } catch {
      return ''
    }
  }
}
