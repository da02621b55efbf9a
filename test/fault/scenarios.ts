import type { Report, Suite } from './harness.js'
import { threeInstances } from './scenarios/s1-three-instances.js'
import { mariadbOutage } from './scenarios/s2-mariadb-outage.js'
import { mariadbDrained } from './scenarios/s3-mariadb-drained.js'
import { slowDb } from './scenarios/s4-slow-db.js'
import { zookeeperOutage } from './scenarios/s5-zookeeper-outage.js'
import { killRestart } from './scenarios/s6-kill-restart.js'
import { sigterm } from './scenarios/s7-sigterm.js'
import { hostileInput } from './scenarios/s8-hostile-input.js'
import { soak } from './scenarios/s9-soak.js'
import { zookeeperLate } from './scenarios/s10-zookeeper-late.js'
import { mysqlBlackhole } from './scenarios/s11-mysql-blackhole.js'
import { CHURN_STARTS, leaseChurn } from './scenarios/s12-lease-churn.js'
import { leasePausedHolder } from './scenarios/s13-lease-paused-holder.js'
import { leasePartition } from './scenarios/s14-lease-partition.js'
import { leaseClockAhead } from './scenarios/s15-lease-clock-ahead.js'
import { horizonOutage } from './scenarios/s16-horizon-outage.js'
import { rollingRestart } from './scenarios/s17-rolling-restart.js'
import { crashHolding } from './scenarios/s18-crash-holding.js'
import { lateStatements } from './scenarios/s19-late-statements.js'
import { lateHandBack } from './scenarios/s20-late-hand-back.js'
import { databaseClockStep } from './scenarios/s21-database-clock-step.js'
import { zookeeperLeaderKilled } from './scenarios/s22-zookeeper-leader-killed.js'
import { zookeeperQuorumLost } from './scenarios/s23-zookeeper-quorum-lost.js'
import { galeraConflicts } from './scenarios/s24-galera-conflicts.js'
import { asyncPromotion } from './scenarios/s25-async-promotion.js'
import { postgresRestart } from './scenarios/s26-postgres-restart.js'
import { splitBrain } from './scenarios/s27-split-brain.js'
import { handEditTwoMarks } from './scenarios/s30-hand-edit-two-marks.js'
import { cutOffPromotion } from './scenarios/s31-cut-off-promotion.js'
import { postgresPromotion } from './scenarios/s32-postgres-promotion.js'
import { clientFreshStore } from './scenarios/s33-client-fresh-store.js'
import { reviewAttack } from './scenarios/s34-split-fenced-restart.js'

export interface Scenario {
  id: number
  title: string
  run (suite: Suite, report: Report): Promise<void>
  /** Its own bound on the run time, when the suite's default would cut it. */
  timeoutMs?: number
}

export const SCENARIOS: Scenario[] = [
  { id: 1, title: '3 instances, both modes, 300k IDs', run: threeInstances },
  { id: 2, title: 'MariaDB down 20 s, buffer outlasts it', run: mariadbOutage },
  { id: 3, title: 'MariaDB down until the buffer drains', run: mariadbDrained },
  { id: 4, title: 'slow DB: +200 ms per packet', run: slowDb },
  { id: 5, title: 'ZooKeeper stopped under snowflake load', run: zookeeperOutage },
  { id: 6, title: 'SIGKILL + restart under load', run: killRestart },
  { id: 7, title: 'SIGTERM under load', run: sigterm },
  { id: 8, title: 'hostile input, 20k requests', run: hostileInput },
  { id: 9, title: 'soak: 60 s mixed load, unpaced', run: soak },
  { id: 10, title: 'ZooKeeper late at start, connection resets', run: zookeeperLate },
  { id: 11, title: 'MySQL connections blackholed', run: mysqlBlackhole },
  // Each start of node dist/server.js costs about 0.4 CPU-s on this 2-core machine (bench/start-cpu.ts).
  { id: 12, title: `worker-id lease churn: ${CHURN_STARTS} starts per lease source, pool of 8 near exhaustion`, run: leaseChurn, timeoutMs: 120_000 + CHURN_STARTS * 2 * 1000 },
  { id: 13, title: 'lease holder paused past its TTL, both lease sources', run: leasePausedHolder },
  { id: 14, title: 'lease holder cut from its store, both lease sources', run: leasePartition },
  { id: 15, title: 'lease holder\'s clock 8 s ahead, then killed', run: leaseClockAhead },
  { id: 16, title: 'MariaDB down under a 30 s buffer horizon', run: horizonOutage, timeoutMs: 300_000 },
  { id: 17, title: 'rolling restart: 3 instances x 10 rounds, SIGTERM', run: rollingRestart, timeoutMs: 600_000 },
  { id: 18, title: 'SIGKILL of an instance holding a chain of segments', run: crashHolding },
  { id: 19, title: 'each lease and segment write held past its timeout, then delivered', run: lateStatements, timeoutMs: 300_000 },
  { id: 20, title: 'a hand-back delivered 9 s late, after its timeout (issue 25\'s sequence)', run: lateHandBack, timeoutMs: 300_000 },
  { id: 21, title: 'the database host\'s clock steps 12 s ahead under a db-lease holder', run: databaseClockStep },
  { id: 22, title: 'ZooKeeper leader killed under snowflake load, each ZooKeeper source', run: zookeeperLeaderKilled },
  { id: 23, title: 'ZooKeeper quorum lost longer than the lease TTL, then restored', run: zookeeperQuorumLost },
  { id: 24, title: 'Galera: two instances on two nodes, 200+ conflicts, then the first node killed', run: galeraConflicts },
  { id: 25, title: 'an async replica promoted without the last allocations, two instances on a host list', run: asyncPromotion },
  { id: 26, title: 'PostgreSQL killed and restarted under segment load, two instances', run: postgresRestart },
  { id: 27, title: 'split brain: old primary back writable, a 2.5 s blip on one instance\'s path to the promoted host', run: splitBrain('blip') },
  { id: 28, title: 'split brain: old primary back writable, one instance restarted with its warm-start file', run: splitBrain('restart') },
  { id: 29, title: 'split brain: old primary back writable, a new instance with no warm-start file', run: splitBrain('new instance') },
  { id: 30, title: 'max_id lowered by hand below the marks of two instances under load', run: handEditTwoMarks },
  { id: 31, title: 'an instance cut off from every host across an async promotion, longer than the hold', run: cutOffPromotion },
  { id: 32, title: 'a PostgreSQL promotion with a lagging end-of-recovery checkpoint, two instances behind a VIP', run: postgresPromotion },
  { id: 33, title: 'a client whose only server comes back on a fresh store', run: clientFreshStore },
  { id: 34, title: 'split brain: an old primary fenced by SET GLOBAL, restarted writable, a cut past the hold', run: reviewAttack('fenced-then-restarted') },
]

/**
 * How the suite runs them: the stages one after another; in a stage, its lanes at once, each
 * lane its scenarios in order on a suite of its own (a private MariaDB and ZooKeeper, made for
 * the lane's first scenario and kept across stages). Scenario 12 runs alone: its 600 server
 * starts keep both cores busy, and beside it the paced loads of others fall short (scenario 4
 * sent 13,914 of its 15,000 requests in a trial). The rest run in three lanes (issue 40: `npm
 * test` in under 15 minutes with `npm ci`): the three heaviest (9, 17, 24) one per lane and
 * first, then the others, longest first, each to the lane with the least time so far, by the
 * times of the run published on 364b6ca: about 281 s per lane. The whole suite used 63% of the
 * two cores that way (533 CPU-s in 423 s, all 34 passing), and took 422.7 s against 572.7 s in
 * two lanes on the same code and machine the same hour. Scenario 23 runs alone after them: its
 * check that the load never paused more than 500 ms (so that "every request refused" covers the
 * whole window) failed once beside the three lanes (a pause of 884 ms), never alone. Scenario 14
 * follows it alone, for the same reason: beside the lanes its first WORKER_LEASE_LOST reached the
 * client 2.71 s after the cut (answers delayed up to 1.71 s; the server refuses by its own clock),
 * against its 2 s bound, and 1.77 s alone.
 */
export const STAGES: number[][][] = [
  [[12]],
  [[9, 20, 29, 31, 33, 4, 30, 8, 26, 22, 18], [17, 10, 19, 16, 11, 25, 5, 32, 1], [24, 34, 27, 28, 2, 21, 15, 13, 6, 7]],
  [[23, 14, 3]],
]

const staged = STAGES.flat(2).sort((a, b) => a - b)
if (staged.join() !== SCENARIOS.map((s) => s.id).sort((a, b) => a - b).join()) {
  throw new Error(`STAGES must name every scenario once: it names ${staged.join(', ')}`)
}
