import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { chromium, type Browser, type Page } from 'playwright-core'
import { buildApp } from '../../src/app.js'
import { tempDir, testConfig } from '../helpers/config.js'
import { silentLogger } from '../helpers/logger.js'
import { startServer } from '../helpers/server-process.js'
import { seedSqlite } from '../helpers/sqlite.js'

const OUTPUT = fileURLToPath(new URL('../../test-output/', import.meta.url))
const TOKEN = 'browser-token'

/** Headless Chromium, closed at the end of the test (root needs --no-sandbox). */
async function launch (t: Test): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  })
  t.teardown(() => browser.close())
  return browser
}

t.test('/cache in a real headless Chromium: the instance panel, a card per tag asked for with its rate and sparkline, a line per tag never asked for, a snowflake panel, a screenshot at 1280x900', async (t) => {
  const server = await buildApp(testConfig({
    'leaf.segment.enable': true,
    'leaf.snowflake.enable': true,
    'leaf.snowflake.cache.dir': tempDir(),
    'leaf.admin.token': TOKEN,
  }), { logger: silentLogger })
  t.teardown(() => server.close())
  const url = await server.listen({ host: '127.0.0.1', port: 0 })
  await server.inject({ method: 'POST', url: '/api/segment/tags', headers: { authorization: `Bearer ${TOKEN}` }, payload: { key: 'a <b> & "c"', step: 100 } })
  await server.inject('/api/segment/get/order?count=700') // past 10%: both segments loaded
  await server.inject('/api/segment/get/a%20%3Cb%3E%20%26%20%22c%22?count=95')

  const browser = await launch(t)
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } })
  await page.setExtraHTTPHeaders({ authorization: `Bearer ${TOKEN}` })
  const response = await page.goto(`${url}/cache`)
  t.equal(response?.status(), 200)

  const keys = await page.locator('section.tag').evaluateAll((cards) => cards.map((c) => c.getAttribute('data-key')))
  t.same(keys.sort(), ['a <b> & "c"', 'order'], 'a card per tag asked for, the odd one shown as text')
  t.same(await page.locator('ul.idle-tags li').allTextContents(), ['leaf-segment-test'], 'the tag never asked for: a line')
  t.match(await page.locator('.pager').textContent(), /^search3 tags · 1–3 shown, the busiest first/)
  t.equal(await page.locator('section.tag[data-key="order"] .badge').textContent(), 'next ready')
  t.equal(await page.locator('section.tag[data-key="order"] .seg.current').count(), 1, 'one current segment')
  const width = await page.locator('section.tag[data-key="order"] .seg.current .fill').getAttribute('style')
  t.equal(width, 'width:65.0%', '1,300 of 2,000 left in the current segment')
  t.match(await page.locator('section.snowflake').textContent(), /worker 0/)
  t.match(await page.locator('section.instance h2').textContent(), /^Instance · Leaf-TS \d+\.\d+\.\d+$/)
  t.match(await page.locator('section.instance').textContent(), /uptime.*database.*sqlite:.*ZooKeeper.*segment.*ready.*errors since start/s)
  t.match(await page.locator('section.tag[data-key="order"] [data-rate]').textContent(), /^rate [\d,.]+ IDs\/s now, [\d,.]+ over the last minute$/, 'the rate')
  t.match(await page.locator('section.tag[data-key="order"] [data-lasts]').textContent(), /^buffer lasts (idle \(under 1 ID\/s\)|[\d,.]+ (s|min|h|d) at the rate now)$/, 'one horizon')
  const spark = page.locator('section.tag[data-key="order"] svg.spark')
  t.equal(await spark.getAttribute('data-points'), '90', 'a sparkline of 15 minutes')
  t.ok(((await spark.boundingBox())?.width ?? 0) > 200, 'drawn')
  t.match(await page.locator('[data-age]').textContent(), /rendered .*Z; rates sampled \d+ ms before; reloads every 5 s/)
  t.equal(await page.locator('meta[http-equiv="refresh"]').getAttribute('content'), '5')
  t.equal(await page.locator('script').count(), 0, 'no script, no injected markup')

  mkdirSync(OUTPUT, { recursive: true })
  const shot = await page.screenshot({ path: `${OUTPUT}cache.png`, fullPage: true })
  t.ok(shot.length > 10_000, `screenshot kept at test-output/cache.png (${shot.length} bytes)`)
})

t.test('the built server with a token: /cache opens through the browser\'s own login prompt (HTTP Basic), the view token too; without it, the 401', async (t) => {
  const VIEW = 'browser-view-token'
  const server = await startServer({
    args: ['--server.port=0', '--leaf.segment.enable=true', `--leaf.jdbc.url=sqlite:${seedSqlite(join(tempDir(), 'leaf.db'))}`, `--leaf.admin.token=${TOKEN}`, `--leaf.admin.view-token=${VIEW}`],
  })
  t.teardown(() => server.stop())
  t.ok(server.output.some((l) => l.includes('leaf.admin.token and leaf.admin.view-token are set')), 'the start line says both guards are on')
  const browser = await launch(t)
  const url = `${server.url}/cache`
  // httpCredentials answer the login prompt a 401's Basic challenge brings up: Chromium sends
  // them only after that challenge, as a person typing them would.
  const pageWith = async (credentials?: { username: string, password: string }) => {
    const context = await browser.newContext(credentials === undefined ? {} : { httpCredentials: credentials })
    t.teardown(() => context.close())
    return context.newPage()
  }

  const loggedIn = new Map<string, Page>()
  for (const [who, credentials] of [['admin token', { username: 'admin', password: TOKEN }], ['view token', { username: 'viewer', password: VIEW }]] as const) {
    const page = await pageWith(credentials)
    const response = await page.goto(url)
    t.equal(response?.status(), 200, `${who}: 200`)
    t.match(await page.locator('section.instance h2').textContent(), /^Instance · Leaf-TS \d+\.\d+\.\d+$/, `${who}: the page rendered`)
    t.same((await page.locator('ul.idle-tags li').allTextContents()).sort(), ['leaf-segment-test', 'order'], `${who}: the tags listed`)
    loggedIn.set(who, page)
  }

  // Tag management from a script in the page: the browser sends the credentials of its login
  // with the page's own fetch, and only the admin token's may manage.
  const addTag = (page: Page) => page.evaluate(async () => {
    const response = await fetch('/api/segment/tags', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: 'x', step: 10 }) })
    return { status: response.status, body: await response.json() as unknown }
  })
  const byViewer = await addTag(loggedIn.get('view token') as Page)
  t.equal(byViewer.status, 403, 'view token: a tag added from the page is refused')
  t.match(byViewer.body, { error: 'FORBIDDEN' }, 'view token: FORBIDDEN')
  const byAdmin = await addTag(loggedIn.get('admin token') as Page)
  t.equal(byAdmin.status, 201, 'admin token: the tag added from the page', { body: byAdmin.body })

  // No credentials: Chromium takes the Basic challenge to its login prompt, which a headless
  // browser has nobody to answer, so the navigation ends there (with a Bearer challenge alone it
  // would show the 401 as a page, never asking).
  const page = await pageWith()
  const answered = page.waitForResponse(url)
  await t.rejects(page.goto(url), /ERR_INVALID_AUTH_CREDENTIALS/, 'no credentials: the browser asks for them')
  const challenge = await answered
  t.equal(challenge.status(), 401, 'no credentials: 401')
  t.same(await challenge.headerValues('www-authenticate'), ['Basic realm="leaf-ts", charset="UTF-8"', 'Bearer realm="leaf-ts"'], 'both challenges, one header line each')

  const wrong = await pageWith({ username: 'admin', password: `${TOKEN}x` })
  const refused = await wrong.goto(url)
  t.equal(refused?.status(), 401, 'a wrong password: 401')
  t.match(await wrong.locator('body').textContent(), /"error":"INVALID_TOKEN"/, 'shown as the error (a wrong token, not none), no page')
  t.equal(await wrong.locator('section.instance').count(), 0)
})
