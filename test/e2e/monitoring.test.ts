import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { stringify as toYaml } from 'yaml'
import { tempDir } from '../helpers/config.js'
import { seedSqlite, withSqlite } from '../helpers/sqlite.js'
import { ALERTS_FILE, alertRules, asPromql, dashboardQueries, readDashboard, selectors } from '../helpers/monitoring.js'
import { ROOT, get, startServer } from '../helpers/server-process.js'
import { TEST_ZK, uniqueName } from '../helpers/zookeeper.js'
import { freePort } from '../helpers/ports.js'
import { sleep } from '../helpers/time.js'

// The alerting rules and the dashboard against the real thing: dist/server.js (segment mode on
// SQLite, snowflake mode with the zookeeper-lease source on the test ZooKeeper) scraped every
// second by a real Prometheus (Debian's) that loads config/alerts.yml. After traffic, IDs and
// failures both:
// - every dashboard query returns data: at least one series, not all NaN;
// - every series selector inside each rule's expression returns data, and the whole expression
//   evaluates without error (an alert's expression returns data only while it fires);
// - Prometheus evaluates every rule without error, exactly the two alerts the traffic provoked
//   fire (a tag whose loads fail, and SEGMENTS_NOT_READY answered), and the ones a healthy
//   instance must not raise are not even pending.
// A query without data names the series that have none.

const TOKEN = 'monitoring-test-token'
const ADMIN = { authorization: `Bearer ${TOKEN}` }

interface Sample { metric: Record<string, string>, value: [number, string] }
interface QueryAnswer { status: string, error?: string, data?: { resultType: string, result: Sample[] } }

t.test('the alerting rules and the dashboard\'s queries on a real Prometheus scraping a real server', async (t) => {
  const dir = tempDir('leaf-monitoring-')
  const leaf = await startServer({
    args: [
      '--server.port=0',
      '--leaf.segment.enable=true',
      `--leaf.jdbc.url=sqlite:${seedSqlite(join(dir, 'leaf.db'))}`,
      '--leaf.segment.wait-timeout-ms=200',
      `--leaf.admin.token=${TOKEN}`,
      '--leaf.snowflake.enable=true',
      '--leaf.snowflake.worker-id.source=zookeeper-lease',
      `--leaf.snowflake.zk.address=${TEST_ZK}`,
      `--leaf.name=${uniqueName()}`,
      '--leaf.snowflake.ip=127.0.0.1',
      '--leaf.snowflake.port=9001',
      `--leaf.snowflake.cache.dir=${join(dir, 'cache')}`,
    ],
  })
  t.teardown(() => leaf.stop())

  const promPort = await freePort()
  const config = {
    global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
    rule_files: [join(ROOT, ALERTS_FILE)],
    scrape_configs: [{ job_name: 'leaf', static_configs: [{ targets: [`127.0.0.1:${leaf.port}`] }] }],
  }
  writeFileSync(join(dir, 'prometheus.yml'), toYaml(config))
  const prometheus = spawn('prometheus', [
    `--config.file=${join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(dir, 'prometheus-data')}`,
    `--web.listen-address=127.0.0.1:${promPort}`,
    '--log.level=warn',
  ], { stdio: ['ignore', 'ignore', 'pipe'] })
  let promLog = ''
  prometheus.stderr.setEncoding('utf8').on('data', (chunk: string) => { promLog += chunk })
  const promExited = new Promise<void>((resolve) => prometheus.once('exit', () => resolve()))
  t.teardown(async () => {
    prometheus.kill('SIGTERM')
    await promExited
  })
  const prom = `http://127.0.0.1:${promPort}`
  let ready = false
  for (let i = 0; i < 150 && !ready && prometheus.exitCode === null; i++) {
    ready = await get(`${prom}/-/ready`).then((a) => a.status === 200, () => false)
    if (!ready) await sleep(100)
  }
  t.ok(ready, `Prometheus is ready on ${prom}${ready ? '' : `:\n${promLog}`}`)
  if (!ready) return

  const query = async (expr: string): Promise<QueryAnswer> =>
    JSON.parse((await get(`${prom}/api/v1/query?query=${encodeURIComponent(expr)}`)).body) as QueryAnswer
  /** Waits until the instant query's first sample has this value (Prometheus has scraped it). */
  const scraped = async (expr: string, value: number) => {
    for (let i = 0; i < 100; i++) {
      if (Number((await query(expr)).data?.result[0]?.value[1]) === value) return true
      await sleep(200)
    }
    return false
  }

  // Round 1: the first segment of `order`, snowflake IDs, requests that fail with a code, and a
  // tag whose loads will fail (its step set to 0 by hand), not asked for yet: its load failure
  // counter is scraped at 0 first, as in a real deployment.
  const expectSegmentIds = 10 + 300 + 10
  for (let i = 0; i < 10; i++) t.equal((await get(`${leaf.url}/api/segment/get/order`)).status, 200)
  for (let i = 0; i < 20; i++) t.equal((await get(`${leaf.url}/api/snowflake/get/monitoring`)).status, 200)
  t.equal((await get(`${leaf.url}/api/segment/get/no-such-tag`)).status, 404, 'KEY_NOT_FOUND')
  t.equal((await get(`${leaf.url}/api/snowflake/get/k?count=0`)).status, 400, 'INVALID_COUNT')
  const created = await fetch(`${leaf.url}/api/segment/tags`, {
    method: 'POST', headers: { ...ADMIN, 'content-type': 'application/json' }, body: JSON.stringify({ key: 'broken', step: 1000 }),
  })
  t.equal(created.status, 201, 'tag broken created')
  withSqlite(join(dir, 'leaf.db'), (db) => db.prepare('UPDATE leaf_alloc SET step = 0 WHERE biz_tag = ?').run('broken'))
  t.ok(await scraped('leaf_segment_db_load_failures_total{key="broken"}', 0), 'Prometheus has the failure counter of tag broken at 0')

  // Round 2, after a few scrapes: the rates see increases. count=300 uses past 10% of the
  // 2,000-ID step of `order`, so its next segment loads too.
  await sleep(2500)
  t.equal((await get(`${leaf.url}/api/segment/get/order?count=300`)).status, 200)
  for (let i = 0; i < 10; i++) t.equal((await get(`${leaf.url}/api/segment/get/order`)).status, 200)
  for (let i = 0; i < 20; i++) t.equal((await get(`${leaf.url}/api/snowflake/get/monitoring`)).status, 200)
  t.equal((await get(`${leaf.url}/api/segment/get/no-such-tag`)).status, 404, 'KEY_NOT_FOUND')
  for (let i = 0; i < 3; i++) {
    const failed = await get(`${leaf.url}/api/segment/get/broken`)
    t.same([failed.status, JSON.parse(failed.body).error], [503, 'SEGMENTS_NOT_READY'], 'a tag whose loads fail: SEGMENTS_NOT_READY')
  }
  t.ok(await scraped('sum(leaf_ids_issued_total{mode="segment"})', expectSegmentIds), 'Prometheus has scraped the traffic')
  await sleep(2000)

  /** The selectors of `expr` that return no series: what a failure message names. */
  const missing = async (expr: string) => {
    const none: string[] = []
    for (const selector of selectors(expr)) {
      if ((await query(selector)).data?.result.length === 0) none.push(selector)
    }
    return none
  }

  await t.test('every dashboard query returns data', async (t) => {
    const queries = dashboardQueries(readDashboard())
    t.ok(queries.length >= 15, `${queries.length} queries`)
    for (const { where, expr } of queries) {
      const promql = asPromql(expr)
      const answer = await query(promql)
      t.equal(answer.status, 'success', `${where}: evaluates (${answer.error ?? 'ok'})`)
      const result = answer.data?.result ?? []
      const numbers = result.filter((s) => !Number.isNaN(Number(s.value[1])))
      const none = numbers.length === 0 ? await missing(promql) : []
      t.ok(numbers.length > 0, `${where}: ${result.length} series, ${numbers.length} not NaN` +
        (none.length > 0 ? `; no data for ${none.join(', ')}` : numbers.length === 0 ? `: ${promql}` : ''))
    }
  })

  await t.test('every series selector of every alerting rule returns data; each expression evaluates', async (t) => {
    const rules = alertRules()
    t.equal(rules.length, 10, 'ten rules (LeafSnowflakeLayoutEnding is two)')
    for (const rule of rules) {
      const answer = await query(rule.expr)
      t.equal(answer.status, 'success', `${rule.alert}: ${rule.expr} evaluates (${answer.error ?? 'ok'})`)
      const none = await missing(rule.expr)
      t.same(none, [], `${rule.alert}: every series it reads has data${none.length > 0 ? `; no data for ${none.join(', ')}` : ''}`)
    }
  })

  await t.test('Prometheus evaluates every rule without error; the two alerts the traffic provoked fire, no other', async (t) => {
    interface RuleState { name: string, health: string, lastError?: string, lastEvaluation: string }
    interface Alert { labels: Record<string, string>, state: string }
    const names = alertRules().map((r) => r.alert)
    let firing: string[] = []
    let active: Alert[] = []
    for (let i = 0; i < 50; i++) {
      active = (JSON.parse((await get(`${prom}/api/v1/alerts`)).body) as { data: { alerts: Alert[] } }).data.alerts
      firing = active.filter((a) => a.state === 'firing').map((a) => `${a.labels.alertname} ${a.labels.key ?? a.labels.code}`).sort()
      if (firing.length >= 2) break
      await sleep(200)
    }
    // Rules with a `for` cannot fire within this test; the others fire at their first evaluation.
    t.same(firing, ['LeafIdsUnavailable SEGMENTS_NOT_READY', 'LeafSegmentLoadFailing broken'], 'firing: the load failures of tag broken, and its SEGMENTS_NOT_READY')
    const healthy = ['LeafZookeeperDisconnected', 'LeafWorkerLeaseExpiring']
    t.same(active.filter((a) => healthy.includes(a.labels.alertname ?? '')), [], `${healthy.join(' and ')} not even pending: ZooKeeper is up, the lease renewed`)

    const groups = (JSON.parse((await get(`${prom}/api/v1/rules`)).body) as { data: { groups: { rules: RuleState[] }[] } }).data.groups
    const states = groups.flatMap((g) => g.rules)
    t.same(states.map((r) => r.name).sort(), [...names].sort(), 'every rule of config/alerts.yml is loaded')
    for (const rule of states) {
      t.equal(rule.health, 'ok', `${rule.name} evaluated without error${rule.lastError ? `: ${rule.lastError}` : ''}`)
      t.ok(Date.parse(rule.lastEvaluation) > 0, `${rule.name} was evaluated`)
    }
  })
})
