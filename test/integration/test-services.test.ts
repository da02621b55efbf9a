import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import t from 'tap'
import { TEST_MYSQL } from '../helpers/mysql.js'
import { TEST_PG } from '../helpers/postgres.js'
import { TEST_ZK } from '../helpers/zookeeper.js'
import { ROOT } from '../helpers/server-process.js'

// scripts/test-services.sh with services of one's own: nothing installed or started for
// them, only checked. (The tools it still needs are on PATH once `npm test` has run it.)

function services (env: Record<string, string>) {
  const run = spawnSync('bash', [join(ROOT, 'scripts/test-services.sh')], {
    env: { PATH: process.env.PATH, LEAF_TEST_STATE_DIR: join(ROOT, '.test-services'), ...env }, encoding: 'utf8', timeout: 60_000,
  })
  return { status: run.status, lines: `${run.stdout}${run.stderr}`.split('\n').filter((l) => l !== '') }
}

t.test('LEAF_TEST_MYSQL_URL, LEAF_TEST_ZK_ADDRESS and LEAF_TEST_PG_URL: the services given are checked, nothing is installed or started', async (t) => {
  const mysql = new URL(TEST_MYSQL)
  const pg = new URL(TEST_PG)
  const { status, lines } = services({ LEAF_TEST_MYSQL_URL: TEST_MYSQL, LEAF_TEST_ZK_ADDRESS: TEST_ZK, LEAF_TEST_PG_URL: TEST_PG })
  t.equal(status, 0, lines.join('\n'))
  t.same(lines, [
    `[services] MySQL: LEAF_TEST_MYSQL_URL given, using ${mysql.hostname}:${mysql.port || 3306} (nothing installed or started)`,
    `[services] ZooKeeper: LEAF_TEST_ZK_ADDRESS given, using ${TEST_ZK} (nothing installed or started)`,
    `[services] PostgreSQL: LEAF_TEST_PG_URL given, using ${pg.hostname}:${pg.port || 5432} (nothing installed or started)`,
  ], 'no installing, no starting, no database set up')
})

t.test('a PostgreSQL given that does not answer stops the script, naming the variable', async (t) => {
  const { status, lines } = services({ LEAF_TEST_MYSQL_URL: TEST_MYSQL, LEAF_TEST_ZK_ADDRESS: TEST_ZK, LEAF_TEST_PG_URL: 'postgres://leaf:leaf@127.0.0.1:1' })
  t.equal(status, 1)
  t.match(lines.at(-1), /PostgreSQL: nothing answers at 127\.0\.0\.1:1 \(LEAF_TEST_PG_URL\)/)
})

t.test('a service given that does not answer stops the script, naming the variable', async (t) => {
  const { status, lines } = services({ LEAF_TEST_MYSQL_URL: 'mysql://leaf:leaf@127.0.0.1:1', LEAF_TEST_ZK_ADDRESS: TEST_ZK })
  t.equal(status, 1)
  t.match(lines.at(-1), /MySQL: nothing answers at 127\.0\.0\.1:1 \(LEAF_TEST_MYSQL_URL\)/)
  t.notOk(lines.some((l) => /ZooKeeper/.test(l) && /using/.test(l)), 'stopped there')
})
