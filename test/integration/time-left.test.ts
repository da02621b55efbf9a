import { join } from 'node:path'
import t, { type Test } from 'tap'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config/load-config.js'
import { resolveConfig } from '../../src/config/resolve-config.js'
import { tempDir } from '../helpers/config.js'
import { captureLogger, silentLogger } from '../helpers/logger.js'
import { parseSamples, valueOf } from '../helpers/prometheus.js'

// How long the layout in use has left (issue 29, "Time left"): the gauge
// leaf_snowflake_time_left_seconds, the start's warning under 2 years, and
// /api/snowflake/layout's timeLeftSeconds and the /cache page's snowflake panel. The instance runs a custom layout whose 30-bit time field of
// seconds ends a known time after the injected clock's now. The start refuses a layout with
// under 10 years left, so its config is read as of the layout's epoch; the expected values are
// worked out here from the spec, not from src/layout/layout.ts.

const NOW = Date.now()
const DAY_MS = 86_400_000
const YEAR_MS = 365.25 * DAY_MS
/** 2^30 seconds: the 30-bit time field's length. */
const TIME_FIELD_MS = 2 ** 30 * 1000

/** A spec whose time field ends `leftMs` after NOW. */
function specEnding (leftMs: number): string {
  return `time=30s,worker=10,sequence=12,epoch=${NOW + leftMs - TIME_FIELD_MS}`
}

async function app (t: Test, values: Record<string, string | number | boolean>, logger = silentLogger) {
  const dir = tempDir()
  const all: Record<string, string | number | boolean> = {
    'leaf.jdbc.url': `sqlite:${join(dir, 'leaf.db')}`,
    'server.host': '127.0.0.1',
    'server.port': 0,
    'leaf.segment.enable': false,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.worker.id': 0,
    'leaf.snowflake.cache.dir': join(dir, 'cache'),
    ...values,
  }
  const layout = String(all['leaf.snowflake.layout'] ?? '')
  const epoch = /epoch=(\d+)/.exec(layout)?.[1]
  // Read as of just after the epoch: a layout with under 10 years left would be refused now.
  const { config } = loadConfig({ cwd: dir, argv: Object.entries(all).map(([k, v]) => `--${k}=${v}`) })
  const resolved = resolveConfig(config, epoch === undefined ? NOW : Number(epoch) + 1000)
  const server = await buildApp(resolved, { logger, clock: () => NOW })
  t.teardown(() => server.close())
  return server
}

const gauge = async (server: Awaited<ReturnType<typeof app>>) =>
  valueOf(parseSamples((await server.inject('/metrics')).body), 'leaf_snowflake_time_left_seconds')

t.test('leaf_snowflake_time_left_seconds: the seconds until the time field of the layout in use ends', async (t) => {
  const soon = await app(t, { 'leaf.snowflake.layout': specEnding(400 * DAY_MS) })
  t.equal(await gauge(soon), 400 * 86_400, 'a layout ending 400 days after the clock: 400 days of seconds')

  const leaf = await app(t, {})
  const twepoch = 1288834974657
  t.equal(await gauge(leaf), (twepoch + 2 ** 41 - NOW) / 1000, 'Leaf\'s layout: 2^41 ms from twepoch, less the clock')
  t.ok((await gauge(leaf) as number) > 50 * YEAR_MS / 1000, 'which is over 50 years today')

  const off = await app(t, { 'leaf.snowflake.enable': false })
  t.equal(await gauge(off), undefined, 'no series with snowflake mode off')
})

/** The warnings about the layout's end (the static worker-id source warns too). */
const ending = (lines: Record<string, unknown>[]) => lines.filter((l) => l.level === 40 && String(l.msg).includes('time field'))

t.test('the start warns when the layout has under 2 years left, and not at 2 years', async (t) => {
  const warnings = async (leftMs: number) => {
    const { logger, lines } = captureLogger()
    await app(t, { 'leaf.snowflake.layout': specEnding(leftMs) }, logger)
    return ending(lines)
  }
  const end = NOW + 2 * YEAR_MS - 1000
  const list = await warnings(2 * YEAR_MS - 1000)
  t.equal(list.length, 1, 'one warning')
  t.match(list[0], {
    layout: specEnding(2 * YEAR_MS - 1000),
    runsOutAt: new Date(end).toISOString(),
    timeLeftSeconds: 2 * 365.25 * 86_400 - 1,
    msg: `the time field of snowflake layout ${specEnding(2 * YEAR_MS - 1000)} runs out on ${new Date(end).toISOString()}, in 2.0 years: ` +
      'after that every snowflake request answers 503 ID_SPACE_EXHAUSTED; move to a layout with more time bits before then (docs/id-layouts.md)',
  }, 'a second under 2 years: the warning names the layout, the day it runs out and the time left')
  t.match((await warnings(100 * DAY_MS))[0]?.msg, /, in 0\.3 years: /, '100 days')
  t.same(await warnings(2 * YEAR_MS), [], 'exactly 2 years: no warning')
  const { logger, lines } = captureLogger()
  await app(t, {}, logger)
  t.same(ending(lines), [], 'Leaf\'s layout: none')
})

t.test('/api/snowflake/layout adds timeLeftSeconds beside runsOutAt', async (t) => {
  const spec = specEnding(400 * DAY_MS + 1500)
  const server = await app(t, { 'leaf.snowflake.layout': spec })
  const res = await server.inject('/api/snowflake/layout')
  t.equal(res.statusCode, 200)
  t.match(res.json(), { spec, runsOutAt: new Date(NOW + 400 * DAY_MS + 1500).toISOString(), timeLeftSeconds: 400 * 86_400 + 1 },
    'whole seconds until runsOutAt on the injected clock')
  const off = await app(t, { 'leaf.snowflake.enable': false, 'leaf.segment.enable': false })
  const leaf = (await off.inject('/api/snowflake/layout')).json()
  t.equal(leaf.timeLeftSeconds, Math.floor((1288834974657 + 2 ** 41 - NOW) / 1000), 'with snowflake mode off too: the configured layout')
})

t.test('/cache shows the layout in use and when it runs out', async (t) => {
  const spec = specEnding(400 * DAY_MS)
  const server = await app(t, { 'leaf.snowflake.layout': spec })
  const page = (await server.inject('/cache')).body
  const day = new Date(NOW + 400 * DAY_MS).toISOString().slice(0, 10)
  t.match(page, `<dt>layout</dt><dd>${spec}</dd>`, 'the layout\'s spec')
  t.match(page, `<dd data-time-left>runs out ${day} (1.1 years left) <span class="badge warn">under 2 years</span></dd>`, '400 days: 1.1 years, under 2')
  const leaf = (await (await app(t, {})).inject('/cache')).body
  const leafEnd = 1288834974657 + 2 ** 41
  t.match(leaf, `<dd data-time-left>runs out ${new Date(leafEnd).toISOString().slice(0, 10)} (${((leafEnd - NOW) / YEAR_MS).toFixed(1)} years left)</dd>`,
    'Leaf\'s layout: no badge')
  const off = (await (await app(t, { 'leaf.snowflake.enable': false })).inject('/cache')).body
  t.notMatch(off, 'data-time-left', 'snowflake mode off: no line')
})
