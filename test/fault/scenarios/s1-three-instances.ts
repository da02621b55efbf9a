import { join } from 'node:path'
import { decodeSnowflakeId } from '../../../src/snowflake/leaf-ids.js'
import { scenarioSetup, startLeaf, takeIds, type Report, type Suite } from '../harness.js'
import { batchMix, httpClients, runLoad } from '../load.js'

const INSTANCES = 3
const CLIENTS_PER_INSTANCE = 8
// Per client: 2,000 single requests and 50 batches of 210 = 12,500 IDs; 24 clients = 300,000.
const REQUESTS_PER_CLIENT = 2050
const BATCH_EVERY = 41
const BATCH = 210
const EXPECTED_IDS = INSTANCES * CLIENTS_PER_INSTANCE * (REQUESTS_PER_CLIENT - REQUESTS_PER_CLIENT / BATCH_EVERY + REQUESTS_PER_CLIENT / BATCH_EVERY * BATCH)

/**
 * 1. Three instances with both modes share the MariaDB and ZooKeeper; 8 clients each
 * alternate segment (two tags, steps 1,000 and 5,000: many loads race between instances)
 * and snowflake requests, singles and batches.
 */
export async function threeInstances (suite: Suite, report: Report): Promise<void> {
  const { name, tags, cacheDir } = await scenarioSetup(suite, 's1', { step: [1000, 5000] })
  const leaves = await Promise.all(Array.from({ length: INSTANCES }, (_, i) => startLeaf(suite, `i${i}`, {
    name,
    segment: suite.db.url(),
    snowflake: { zk: suite.zk.address, port: 7001 + i, cacheDir: join(cacheDir, String(i)) },
  })))
  const clients = httpClients(INSTANCES * CLIENTS_PER_INSTANCE)
  const batch = batchMix(BATCH_EVERY, BATCH)
  const workerIds = leaves.map(() => new Set<number>())

  const result = await runLoad({
    clients: clients.length,
    maxRequests: clients.length * REQUESTS_PER_CLIENT,
    perClient: REQUESTS_PER_CLIENT,
    maxMs: 150_000,
    async step (c, n) {
      const instance = Math.floor(c / CLIENTS_PER_INSTANCE)
      const leaf = leaves[instance]
      const client = clients[c]
      if (leaf === undefined || client === undefined) return false
      const mode = n % 2 === 0 ? 'segment' : 'snowflake'
      const key = mode === 'segment' ? tags[(n >> 1) % 2] as string : 'fault-s1'
      const { ids } = await takeIds(report, client, leaf.url, mode, key, batch(n), `i${instance}c${c}`)
      if (mode === 'snowflake' && ids !== undefined) for (const id of ids) workerIds[instance]?.add(decodeSnowflakeId(id).workerId)
    },
  })
  for (const client of clients) client.close()

  report.note(`${result.requests} requests in ${(result.ms / 1000).toFixed(1)} s (${Math.round(result.requests / result.ms * 1000)}/s)`)
  report.check(report.ledger.ids === EXPECTED_IDS, `${report.ledger.ids} IDs checked, expected ${EXPECTED_IDS}`)
  const ids = workerIds.map((s) => [...s])
  report.check(ids.every((s) => s.length === 1) && new Set(ids.flat()).size === INSTANCES,
    `each instance must have one worker id of its own: ${JSON.stringify(ids)}`)
  for (const tag of tags) {
    const maxId = await suite.db.maxId(tag)
    const sorted = report.ledger.sorted(`segment:${tag}`)
    const last = sorted[sorted.length - 1]
    report.check(sorted[0] !== undefined && sorted[0] >= 1n && last !== undefined && last < maxId,
      `${tag}: every ID inside a reserved range [1, ${maxId}): got ${sorted[0]}..${last}`)
  }
}
