import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { track, waitUntil } from '../fault/services.js'
import { tempDir } from './config.js'
import { freePort } from './ports.js'

// A real ZooKeeper ensemble on loopback: N servers (server.1..N), each with its own dataDir and
// myid, its own zoo.cfg, log file and client, quorum and election ports, each started and
// SIGKILLed on its own by its own pid. Built as PrivateZooKeeper (test/fault/services.ts): Debian's
// jars, slf4j-simple first, a short tick so that an election takes well under a second.
//
// Every java process is killed when the test ends, however it ends: stop() kills them; track()
// kills them at a normal exit; and a reaper (a small node process of its own, in its own process
// group) kills the pids it was told of when its stdin closes, which is when this process dies,
// even of a signal (a tap timeout) or of SIGKILL, which run no exit handler.

export type ZooKeeperMode = 'leader' | 'follower' | 'observer' | 'standalone'

export interface EnsembleNode {
  /** Its index in `nodes` (0-based); its myid is index + 1. */
  readonly index: number
  readonly myid: number
  readonly clientPort: number
  readonly quorumPort: number
  readonly electionPort: number
  readonly dir: string
  /** The process's id while it runs. */
  readonly pid: number | undefined
  readonly running: boolean
}

export interface EnsembleOptions {
  /** How many servers; 3 by default. */
  size?: number
  /** ZooKeeper's tick (ms); 200 by default. Sessions may be as short as 2 ticks. */
  tickTimeMs?: number
  /** The parent folder; a fresh temp folder by default. */
  dir?: string
}

/** What a node's `srvr` says: its Mode, or undefined when it does not serve (down, or electing). */
export function srvr (port: number, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve) => {
    let out = ''
    const socket = connect(port, '127.0.0.1', () => socket.end('srvr'))
    socket.setTimeout(timeoutMs, () => socket.destroy())
    socket.on('data', (c: Buffer) => { out += c.toString() })
    socket.on('error', () => {})
    socket.on('close', () => resolve(out))
  })
}

const REAPER = `
const pids = new Set()
let buffered = ''
process.stdin.on('data', (chunk) => {
  buffered += chunk
  const lines = buffered.split('\\n')
  buffered = lines.pop()
  for (const line of lines) {
    const pid = Number(line.slice(1))
    if (line[0] === '+') pids.add(pid)
    else if (line[0] === '-') pids.delete(pid)
  }
})
process.stdin.on('close', () => {
  for (const pid of pids) { try { process.kill(pid, 'SIGKILL') } catch {} }
  process.exit(0)
})
`

class Node implements EnsembleNode {
  child: ChildProcess | undefined
  starts = 0
  constructor (
    readonly index: number,
    readonly clientPort: number,
    readonly quorumPort: number,
    readonly electionPort: number,
    readonly dir: string
  ) {}

  get myid (): number { return this.index + 1 }
  get pid (): number | undefined { return this.child?.pid }
  get running (): boolean { return this.child !== undefined }
}

export class ZooKeeperEnsemble {
  readonly dir: string
  readonly tickTimeMs: number
  private readonly all: Node[]
  private reaper: ChildProcess | undefined

  private constructor (dir: string, tickTimeMs: number, nodes: Node[]) {
    this.dir = dir
    this.tickTimeMs = tickTimeMs
    this.all = nodes
  }

  /** Picks the ports and writes each node's folder, myid and zoo.cfg; starts nothing. */
  static async create (o: EnsembleOptions = {}): Promise<ZooKeeperEnsemble> {
    const size = o.size ?? 3
    const dir = o.dir ?? tempDir('leaf-zk-ensemble-')
    const ports = new Set<number>()
    // freePort() checks one port at a time: the set keeps two nodes from drawing the same one.
    while (ports.size < 3 * size) ports.add(await freePort())
    const p = [...ports]
    const nodes = Array.from({ length: size }, (_, i) => new Node(i, p[3 * i] as number, p[3 * i + 1] as number, p[3 * i + 2] as number, join(dir, `zk${i + 1}`)))
    const ensemble = new ZooKeeperEnsemble(dir, o.tickTimeMs ?? 200, nodes)
    for (const node of nodes) ensemble.configure(node)
    return ensemble
  }

  get nodes (): readonly EnsembleNode[] {
    return this.all
  }

  get size (): number {
    return this.all.length
  }

  /** How many nodes make a quorum. */
  get majority (): number {
    return Math.floor(this.all.length / 2) + 1
  }

  /** The connect string of every node: `127.0.0.1:p1,127.0.0.1:p2,...`. */
  get address (): string {
    return this.all.map((n) => this.addressOf(n.index)).join(',')
  }

  /** The connect string of one node alone. */
  addressOf (index: number): string {
    return `127.0.0.1:${this.node(index).clientPort}`
  }

  private node (index: number): Node {
    const node = this.all[index]
    if (node === undefined) throw new Error(`no node ${index} in an ensemble of ${this.all.length}`)
    return node
  }

  private configure (node: Node): void {
    const data = join(node.dir, 'data')
    mkdirSync(data, { recursive: true })
    writeFileSync(join(data, 'myid'), `${node.myid}\n`)
    const t = this.tickTimeMs
    writeFileSync(join(node.dir, 'zoo.cfg'), [
      `tickTime=${t}`,
      // A follower has initLimit ticks to sync with a new leader, syncLimit ticks to answer it.
      'initLimit=10',
      'syncLimit=5',
      `dataDir=${data}`,
      `clientPort=${node.clientPort}`,
      'clientPortAddress=127.0.0.1',
      `minSessionTimeout=${2 * t}`,
      'maxSessionTimeout=60000',
      'admin.enableServer=false',
      '4lw.commands.whitelist=ruok,srvr,stat',
      'reconfigEnabled=false',
      ...this.all.map((n) => `server.${n.myid}=127.0.0.1:${n.quorumPort}:${n.electionPort}`),
      '',
    ].join('\n'))
  }

  /** Tells the reaper to kill `pid` if this process dies first ('+'), or to forget it ('-'). */
  private tellReaper (line: string): void {
    if (this.reaper === undefined) {
      const reaper = spawn(process.execPath, ['-e', REAPER], { stdio: ['pipe', 'ignore', 'ignore'], detached: true })
      reaper.unref()
      ;(reaper.stdin as unknown as { unref?: () => void }).unref?.()
      reaper.stdin?.on('error', () => {})
      this.reaper = reaper
    }
    this.reaper.stdin?.write(`${line}\n`)
  }

  /** Starts node `index` (it serves once a quorum has elected a leader: see waitForQuorum). */
  startNode (index: number): void {
    const node = this.node(index)
    if (node.child !== undefined) throw new Error(`ZooKeeper node ${node.myid} already running (pid ${node.child.pid})`)
    // Its output goes straight to a file: a java whose stdout is a pipe to a dead parent lives on.
    const log = openSync(join(node.dir, `zookeeper-${node.myid}-${++node.starts}.out`), 'a')
    const child = track(spawn('java', [
      `-Dzookeeper.log.dir=${node.dir}`,
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=info', '-Dorg.slf4j.simpleLogger.showDateTime=true',
      '-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd\'T\'HH:mm:ss.SSSZ',
      // A server that found nobody to vote with backs off up to this long (default 60 s)
      // before it asks again: a node left alone for a while would rejoin late.
      '-Dzookeeper.fastleader.maxNotificationInterval=1000',
      '-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
      '-cp', '/etc/zookeeper/conf:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/*',
      'org.apache.zookeeper.server.quorum.QuorumPeerMain', join(node.dir, 'zoo.cfg'),
    ], { stdio: ['ignore', log, log] }))
    closeSync(log)
    const pid = child.pid
    if (pid === undefined) throw new Error(`java did not start for ZooKeeper node ${node.myid}`)
    this.tellReaper(`+${pid}`)
    node.child = child
    child.once('exit', () => {
      this.tellReaper(`-${pid}`)
      if (node.child === child) node.child = undefined
    })
  }

  /** Starts every node that is not running, and waits for a quorum of all of them. */
  async start (timeoutMs = 60_000): Promise<void> {
    for (const node of this.all) if (node.child === undefined) this.startNode(node.index)
    await this.waitForQuorum({ timeoutMs, nodes: this.all.length })
  }

  /** Kills node `index` by its own pid (SIGKILL by default) and waits for it to be gone. */
  async stopNode (index: number, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.node(index).child
    if (child === undefined) return
    const gone = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve()
      else child.once('exit', () => resolve())
    })
    child.kill(signal)
    await gone
  }

  /** A node's mode, as its `srvr` says; undefined while it does not serve (down, or in an election). */
  async mode (index: number): Promise<ZooKeeperMode | undefined> {
    const node = this.node(index)
    if (node.child === undefined) return undefined
    const match = /^Mode: (\w+)/m.exec(await srvr(node.clientPort))
    return match?.[1] as ZooKeeperMode | undefined
  }

  /** Every node's mode, by index. */
  modes (): Promise<(ZooKeeperMode | undefined)[]> {
    return Promise.all(this.all.map((n) => this.mode(n.index)))
  }

  /** The index of the node that says it leads, or undefined when none does. */
  async leader (): Promise<number | undefined> {
    const modes = await this.modes()
    const leaders = modes.flatMap((m, i) => m === 'leader' ? [i] : [])
    return leaders.length === 1 ? leaders[0] : undefined
  }

  /**
   * Waits until the ensemble serves: exactly one node says `Mode: leader` and at least
   * `nodes` (a majority by default) say leader or follower. A follower that has not noticed yet
   * that its leader died still says follower, but no node says leader then. Resolves with
   * performance.now() of the poll that saw it; rejects after `timeoutMs`.
   */
  async waitForQuorum (o: { timeoutMs?: number, nodes?: number, everyMs?: number } = {}): Promise<number> {
    const need = o.nodes ?? this.majority
    let at = 0
    let last: (ZooKeeperMode | undefined)[] = []
    const ok = await waitUntil(async () => {
      const polledAt = performance.now()
      last = await this.modes()
      const leaders = last.filter((m) => m === 'leader').length
      const serving = last.filter((m) => m === 'leader' || m === 'follower').length
      if (leaders !== 1 || serving < need) return false
      at = polledAt
      return true
    }, o.timeoutMs ?? 30_000, o.everyMs ?? 20)
    if (!ok) throw new Error(`no quorum of ${need} within ${o.timeoutMs ?? 30_000} ms (modes: ${JSON.stringify(last)}); logs in ${this.dir}`)
    return at
  }

  /** Waits until node `index` says it serves (leader or follower). */
  async waitServing (index: number, timeoutMs = 30_000): Promise<void> {
    if (!await waitUntil(async () => ['leader', 'follower'].includes(await this.mode(index) ?? ''), timeoutMs, 20)) {
      throw new Error(`ZooKeeper node ${index + 1} does not serve after ${timeoutMs} ms; logs in ${this.node(index).dir}`)
    }
  }

  /** Kills every node; `removeDir` also deletes the folder (its logs with it). */
  async stop (o: { removeDir?: boolean } = {}): Promise<void> {
    await Promise.all(this.all.map((n) => this.stopNode(n.index)))
    // Its stdin closes: it kills what it still knows of (nothing by now) and exits.
    this.reaper?.stdin?.end()
    this.reaper = undefined
    if (o.removeDir === true) rmSync(this.dir, { recursive: true, force: true })
  }
}
