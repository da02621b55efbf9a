import type { LeafAllocRow } from '../segment/store.js'
import { neverLoaded, type NextSegment, type SegmentBufferView, type ViewPage } from '../segment/segment-views.js'
import { MIN_HORIZON_RATE } from '../segment/rate-meter.js'
import type { HostFenceView } from '../segment/host-fence.js'
import type { GuardView } from '../segment/max-id-guard.js'
import type { LeaseStatus } from '../snowflake/worker-id/worker-id-source.js'
import { CRITICAL_SECONDS_LEFT, WARN_SECONDS_LEFT, YEAR_SECONDS } from '../snowflake/time-left.js'

// Leaf's /cache and /db monitors: no scripts, no external assets; every value is escaped.

export const REFRESH_SECONDS = 5
/** Tags on a page of /cache unless `?limit=` asks for another number. */
export const CACHE_PAGE_SIZE = 50

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }

export function escapeHtml (value: unknown): string {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c] as string)
}

const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:2rem;color:#1d2330;background:#f6f7f9}
h1{font-size:1.4rem;margin:0 0 1rem}h2{font-size:1.05rem;margin:0;word-break:break-all}
nav a{margin-right:1rem;color:#2457c5}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:1rem}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:1rem}
.head{display:flex;justify-content:space-between;align-items:center;gap:.5rem;margin-bottom:.6rem}
.badge{font-size:.75rem;padding:.1rem .5rem;border-radius:999px;white-space:nowrap}
.ok{background:#ddf4e4;color:#17683a}.warn{background:#fff0d4;color:#8a5a00}.bad{background:#fde2e1;color:#9b1c1c}.idle{background:#eceff3;color:#5a6372}
.seg{margin:.4rem 0}.seg .label{font-size:.8rem;color:#5a6372;display:flex;justify-content:space-between}
.bar{height:14px;background:#eceff3;border-radius:4px;overflow:hidden;border:1px solid #dde1e7}
.fill{height:100%;background:#9aa7b8}.current .fill{background:#2f7de1}.current .bar{border-color:#2f7de1}
table{border-collapse:collapse;background:#fff;width:100%}td,th{border:1px solid #dde1e7;padding:.35rem .6rem;text-align:left}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0}dt{color:#5a6372}dd{margin:0;word-break:break-all}
.stats{display:grid;grid-template-columns:repeat(2,1fr);gap:.2rem .8rem;margin:.5rem 0;font-size:.85rem}.stats b{font-variant-numeric:tabular-nums}
.spark{display:block;margin:.3rem 0}.spark polyline{fill:none;stroke:#2f7de1;stroke-width:1.5}.spark line{stroke:#dde1e7}
.pager{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;margin:0 0 1rem;color:#5a6372}.pager a{color:#2457c5}
.idle-tags{columns:16rem;margin:.4rem 0;padding-left:1.2rem}.idle-head{color:#5a6372;margin:1rem 0 0}
.instance{margin-bottom:1.2rem}.age{color:#5a6372;font-size:.8rem;margin:-.6rem 0 1rem}
`

function page (title: string, body: string, refreshSeconds?: number): string {
  const refresh = refreshSeconds === undefined ? '' : `<meta http-equiv="refresh" content="${refreshSeconds}">`
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">${refresh}
<title>${escapeHtml(title)} · Leaf-TS</title><style>${STYLE}</style></head>
<body><nav><a href="/cache">cache</a><a href="/db">db</a><a href="/metrics">metrics</a></nav><h1>${escapeHtml(title)}</h1>${body}</body></html>`
}

function segmentBar (index: number, value: bigint, max: bigint, step: number, current: boolean, loaded: boolean): string {
  const left = loaded ? Number(max - value) : 0
  const percent = step > 0 && loaded ? Math.max(0, Math.min(100, (left / step) * 100)) : 0
  const state = current ? 'current' : loaded ? (index === 1 ? 'next, ready' : 'loaded ahead') : 'next, not loaded'
  return `<div class="seg${current ? ' current' : ''}" data-segment="${index}">
<div class="label"><span>segment ${index} · ${state}</span><span>${loaded ? `${left.toLocaleString('en-US')} of ${step.toLocaleString('en-US')} left` : '—'}</span></div>
<div class="bar" role="img" aria-label="segment ${index}: ${percent.toFixed(0)}% left"><div class="fill" style="width:${percent.toFixed(1)}%"></div></div>
<div class="label"><span>value ${escapeHtml(value)}</span><span>max ${escapeHtml(max)}</span></div></div>`
}

export interface InstanceView {
  version: string
  node: string
  uptimeSeconds: number
  renderedAt: number
  /** How long before rendering the tags' rates were last sampled (ms); undefined without segment mode. */
  ratesAgeMs: number | undefined
  /** Where the segment store is (never a password); undefined without segment mode. */
  store: string | undefined
  /** Undefined for SQLite. */
  storeTls?: string
  failover?: GuardView
  /** A MySQL host list's last census (segment/host-fence.ts). */
  hosts?: HostFenceView
  readiness: { ready: boolean, reason?: string, modes: Record<string, { ready: boolean, reason?: string }> }
  errors: { mode: string, code: string, count: number }[]
}

const num = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })

/** A duration for a person: 45 s, 12 min, 3.2 h, 4.1 d. */
export function duration (seconds: number): string {
  if (!Number.isFinite(seconds)) return 'never at this rate'
  if (seconds < 120) return `${num(seconds, seconds < 10 ? 1 : 0)} s`
  if (seconds < 7200) return `${num(seconds / 60)} min`
  if (seconds < 172_800) return `${num(seconds / 3600, 1)} h`
  return `${num(seconds / 86_400, 1)} d`
}

/** The rate history as an SVG line, oldest left; scaled to its own peak. */
export function sparkline (values: readonly number[], width = 280, height = 36): string {
  const peak = Math.max(...values, 0)
  const step = values.length > 1 ? width / (values.length - 1) : width
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (peak > 0 ? (v / peak) * (height - 2) : 0)).toFixed(1)}`).join(' ')
  return `<svg class="spark" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" data-points="${values.length}" aria-label="IDs per second over the last 15 minutes, peak ${num(peak)}">` +
    `<title>IDs/s, 10 s per point, last 15 minutes; peak ${num(peak)}</title><line x1="0" y1="${height - 1}" x2="${width}" y2="${height - 1}"/><polyline points="${points}"/></svg>`
}

/** The card's one horizon: the buffered IDs over the rate the buffer horizon plans with (SegmentBufferView.bufferSeconds). */
export function horizonText (v: Pick<SegmentBufferView, 'bufferSeconds'>): string {
  return v.bufferSeconds === undefined ? `idle (under ${MIN_HORIZON_RATE} ID/s)` : duration(v.bufferSeconds)
}

function tagStats (v: SegmentBufferView): string {
  const rate = (n: number) => num(n, n < 10 ? 1 : 0)
  return `<div class="stats">
<span data-rate>rate <b>${rate(v.idsPerSecond)}</b> IDs/s now, <b>${rate(v.idsPerSecondLastMinute)}</b> over the last minute</span>
<span data-lasts>buffer lasts <b>${escapeHtml(horizonText(v))}</b>${v.bufferSeconds === undefined ? '' : ' at the rate now'}</span>
<span data-load>last load <b>${v.lastLoadSeconds > 0 ? `${num(v.lastLoadSeconds * 1000, 1)} ms` : '—'}</b></span>
<span data-failed>failed loads <b>${num(v.failedLoads)}</b></span></div>`
}

/** ok: nothing to do; warn (amber): a load is late; bad: callers wait or fail; idle: nothing asked yet. */
const NEXT_BADGES: Record<NextSegment, [string, string]> = {
  not_loaded: ['idle', 'not loaded yet'],
  ready: ['ok', 'next ready'],
  loading: ['ok', 'next loading'],
  not_due: ['ok', 'next not needed yet'],
  due: ['ok', 'next loads on the next request'],
  late: ['warn', 'next load late: retrying'],
  used_up: ['bad', 'used up: waiting for a load'],
}

/** The card's badge: how the segment after the current one stands (segment-views.ts, NextSegment). */
export function tagBadge (v: Pick<SegmentBufferView, 'ended' | 'next' | 'failedLoads'>): string {
  if (v.ended) return '<span class="badge bad" data-next="ended">ID space ended</span>'
  const [kind, text] = v.next === 'not_loaded' && v.failedLoads > 0
    ? ['warn', `not loaded: ${num(v.failedLoads)} failed load${v.failedLoads === 1 ? '' : 's'}`]
    : NEXT_BADGES[v.next]
  return `<span class="badge ${kind}" data-next="${v.next}">${escapeHtml(text)}</span>`
}

function tagCard (v: SegmentBufferView): string {
  // Every segment held (the current one first); an empty slot for the next while none is loaded.
  const held = v.segments.map((s, i) => segmentBar(i, s.value, s.max, s.step, i === 0, true))
  if (held.length === 1) held.push(segmentBar(1, 0n, 0n, 0, false, false))
  const bars = v.initOk ? held.join('') : '<p>The first segment loads on the first request for this tag.</p>'
  return `<section class="card tag" data-key="${escapeHtml(v.key)}"><div class="head"><h2>${escapeHtml(v.key)}</h2>${tagBadge(v)}</div>${tagStats(v)}${sparkline(v.history)}${bars}
<div class="label" data-buffered>buffered ${v.buffered.toLocaleString('en-US')} IDs in ${v.segments.length} segment${v.segments.length === 1 ? '' : 's'}</div>
<div class="label">step ${v.step} · min step ${v.minStep} · last adapted load ${v.updateTimestamp ? new Date(v.updateTimestamp).toISOString() : '—'}</div></section>`
}

export interface LayoutView {
  spec: string
  /** The first millisecond its time field cannot hold. */
  runsOutAt: number
  /** Seconds left until then on the generator's clock; 0 once past. */
  secondsLeft: number
}

/** When the layout runs out, for a person: runs out 2039-09-07 (12.8 years left). */
export function timeLeftLine (v: LayoutView): string {
  const day = new Date(v.runsOutAt).toISOString().slice(0, 10)
  if (v.secondsLeft <= 0) return `ran out ${day}`
  const left = v.secondsLeft >= YEAR_SECONDS
    ? `${num(v.secondsLeft / YEAR_SECONDS, 1)} years`
    : v.secondsLeft >= 172_800 ? `${num(Math.floor(v.secondsLeft / 86_400))} days` : duration(v.secondsLeft)
  return `runs out ${day} (${left} left)`
}

function layoutRows (v: LayoutView | undefined): string {
  if (v === undefined) return ''
  const badge = v.secondsLeft < CRITICAL_SECONDS_LEFT
    ? ' <span class="badge bad">under 180 days</span>'
    : v.secondsLeft < WARN_SECONDS_LEFT ? ' <span class="badge warn">under 2 years</span>' : ''
  return `\n<dt>layout</dt><dd>${escapeHtml(v.spec)}</dd>\n<dt>time field</dt><dd data-time-left>${escapeHtml(timeLeftLine(v))}${badge}</dd>`
}

function snowflakePanel (status: LeaseStatus | undefined, twepoch: number, layout?: LayoutView): string {
  if (status === undefined) return '<section class="card snowflake"><h2>Snowflake</h2><p>Snowflake mode is disabled.</p></section>'
  const zk = status.issuedUntil !== undefined
    ? status.unavailable === undefined ? '<span class="badge ok">leased</span>' : '<span class="badge bad">lease lost</span>'
    : status.source === 'static' || status.source === 'statefulset'
      ? '<span class="badge warn">no ZooKeeper</span>'
      : status.zookeeperConnected ? '<span class="badge ok">ZooKeeper connected</span>' : '<span class="badge bad">ZooKeeper disconnected</span>'
  const heartbeat = status.lastHeartbeat === undefined
    ? '—'
    : `${new Date(status.lastHeartbeat).toISOString()} (${Math.round((Date.now() - status.lastHeartbeat) / 1000)} s ago)`
  return `<section class="card snowflake"><div class="head"><h2>Snowflake · worker ${status.workerId}</h2>${zk}</div><dl>
<dt>worker id</dt><dd>${status.workerId} (from ${escapeHtml(status.source)})</dd>
<dt>last heartbeat</dt><dd>${escapeHtml(heartbeat)}</dd>
${status.issuedUntil === undefined
    ? `<dt>forever node</dt><dd>${escapeHtml(status.foreverPath ?? '—')}</dd>
<dt>ephemeral node</dt><dd>${escapeHtml(status.temporaryPath ?? '—')}</dd>`
    : `<dt>pool</dt><dd>${escapeHtml(status.pool ?? '—')} · ids ${status.range?.join('–') ?? '—'}</dd>
<dt>lease expires</dt><dd>${status.leaseExpiresAt === undefined ? 'lost' : escapeHtml(new Date(status.leaseExpiresAt).toISOString())}</dd>
<dt>issued until</dt><dd>${status.issuedUntil} (${status.issuedUntil > 0 ? new Date(status.issuedUntil).toISOString() : '—'})</dd>`}
<dt>cache file</dt><dd>${escapeHtml(status.cacheFile)}</dd>
<dt>twepoch</dt><dd>${twepoch} (${new Date(twepoch).toISOString()})</dd>${layoutRows(layout)}</dl></section>`
}

function instancePanel (i: InstanceView, snowflake: LeaseStatus | undefined): string {
  const modes = Object.entries(i.readiness.modes).map(([mode, m]) =>
    `<dt>${escapeHtml(mode)}</dt><dd>${m.ready ? '<span class="badge ok">ready</span>' : '<span class="badge bad">not ready</span>'}${m.reason === undefined ? '' : ` ${escapeHtml(m.reason)}`}</dd>`).join('')
  const zk = snowflake === undefined
    ? 'snowflake mode off'
    : snowflake.source === 'static' || snowflake.source === 'statefulset' || snowflake.source === 'db-lease' || snowflake.source === 'disposable'
      ? `not used (worker id from ${escapeHtml(snowflake.source)})`
      : snowflake.zookeeperConnected ? '<span class="badge ok">connected</span>' : '<span class="badge bad">disconnected</span>'
  const errors = i.errors.filter((e) => e.count > 0)
  const errorList = errors.length === 0
    ? 'none'
    : errors.map((e) => `<span data-error="${escapeHtml(e.code)}">${escapeHtml(e.mode)} ${escapeHtml(e.code)} <b>${num(e.count)}</b></span>`).join(' · ')
  return `<section class="card instance"><div class="head"><h2>Instance · Leaf-TS ${escapeHtml(i.version)}</h2>` +
    `${i.readiness.ready ? '<span class="badge ok">ready</span>' : '<span class="badge bad">not ready</span>'}</div><dl>
<dt>uptime</dt><dd>${escapeHtml(duration(i.uptimeSeconds))} (Node ${escapeHtml(i.node)})</dd>
<dt>database</dt><dd>${i.store === undefined ? 'segment mode off' : escapeHtml(i.store)}</dd>
${i.storeTls === undefined ? '' : `<dt>database TLS</dt><dd data-tls>${escapeHtml(i.storeTls)}</dd>\n`}${i.failover === undefined ? '' : `<dt>store failovers</dt><dd data-failovers>${failoverLine(i.failover)}</dd>`}${i.hosts === undefined ? '' : `<dt>store hosts</dt><dd data-hosts>${hostsLine(i.hosts)}</dd>`}
<dt>ZooKeeper</dt><dd>${zk}</dd>
${i.readiness.reason === undefined ? '' : `<dt>readiness</dt><dd>${escapeHtml(i.readiness.reason)}</dd>`}${modes}
<dt>errors since start</dt><dd data-errors>${errorList}</dd></dl></section>`
}

function failoverLine (v: GuardView): string {
  const seen = v.store === undefined ? '' : ` · answering: ${escapeHtml(v.store)}`
  const lapsed = unconfirmedBadge(v)
  if (v.last === undefined) return `none${seen}${lapsed}`
  const { last } = v
  const gap = last.gap === undefined ? '' : `, ${escapeHtml(last.gap.toLocaleString('en-US'))} IDs behind`
  const tags = last.tags === undefined || last.tags < 2 ? '' : ` (and ${num(last.tags - 1)} more tag(s))`
  const until = v.holdEndsAt === undefined ? '' : ` (until ${escapeHtml(new Date(v.holdEndsAt).toISOString())})`
  const hold = v.holdingMs > 0
    ? ` · <span class="badge bad" data-hold>failover hold: new allocations held ${num(Math.ceil(v.holdingMs / 1000))} s more${until}; a tag with no buffered ID answers SEGMENTS_NOT_READY</span>`
    : v.raisesOwed > 0 ? ` · <span class="badge bad" data-hold>failover hold: ${num(v.raisesOwed)} tag(s) still to be raised</span>` : ''
  return `<b>${num(v.regressions)}</b>; last ${escapeHtml(last.at.toISOString())}: ${escapeHtml(last.cause)}${last.key === undefined ? '' : ` at ${escapeHtml(last.key)}`}${tags}` +
    `${last.from === undefined ? '' : `, from ${escapeHtml(last.from)}`}${gap}${hold}${seen}${lapsed}`
}

/** Past the bound on serving without the store (docs/production.md): nothing buffered is served. */
function unconfirmedBadge (v: GuardView): string {
  const u = v.unconfirmed
  if (u === undefined || !(u.sinceMs > u.boundMs)) return ''
  const since = Number.isFinite(u.sinceMs) ? `${num(Math.round(u.sinceMs / 1000))} s` : 'ever'
  return ` · <span class="badge bad" data-unconfirmed>store not confirmed for ${since} (bound ${num(Math.round(u.boundMs / 1000))} s): STORE_UNCONFIRMED, no buffered ID served</span>`
}

function hostsLine (v: HostFenceView): string {
  const split = v.split === undefined ? '' : `<span class="badge bad">STORE_SPLIT: ${escapeHtml(v.split.hosts.join(', '))} writable, nothing allocated</span> · `
  const hosts = v.hosts.map((h) => `${escapeHtml(h.host)}${h.host === v.inUse ? ' (in use)' : ''} ${escapeHtml(h.state)}${h.store === undefined ? '' : ` ${escapeHtml(h.store)}`}`).join(', ')
  const left = v.left.length === 0 ? '' : ` · left, never written again: ${escapeHtml(v.left.join(', '))}`
  return `${split}${hosts || 'not read yet'}${left}`
}

export interface TagsView extends ViewPage {
  limit: number
  search: string
}

export function renderCachePage (instance: InstanceView, tags: TagsView | undefined, snowflake: LeaseStatus | undefined, twepoch: number,
  layout?: LayoutView): string {
  const rendered = new Date(instance.renderedAt).toISOString()
  const age = `<p class="age" data-age>rendered ${escapeHtml(rendered)}${instance.ratesAgeMs === undefined ? '' : `; rates sampled ${num(instance.ratesAgeMs)} ms before`}; reloads every ${REFRESH_SECONDS} s</p>`
  return page('Segment cache', `${age}${instancePanel(instance, snowflake)}${tagsSection(tags)}<h1 style="margin-top:2rem">Snowflake</h1>${snowflakePanel(snowflake, twepoch, layout)}`, REFRESH_SECONDS)
}

function tagsSection (tags: TagsView | undefined): string {
  if (tags === undefined) return '<p>Segment mode is disabled.</p>'
  if (tags.total === 0) return '<p>No tags in leaf_alloc.</p>'
  const loaded = tags.views.filter((v) => !neverLoaded(v))
  const idle = tags.views.filter(neverLoaded)
  const end = tags.offset + tags.views.length
  const which = tags.search === '' ? `${num(tags.total)} tags` : `${num(tags.matched)} of ${num(tags.total)} tags matching “${escapeHtml(tags.search)}”`
  const shown = tags.views.length === 0 ? 'none shown' : `${num(tags.offset + 1)}–${num(end)} shown`
  const link = (offset: number, text: string) => `<a href="${escapeHtml(cacheUrl(tags, offset))}">${text}</a>`
  const around = [
    tags.offset > 0 ? link(Math.max(0, tags.offset - tags.limit), '← busier') : '',
    end < tags.matched ? link(end, `next ${num(Math.min(tags.limit, tags.matched - end))} →`) : '',
  ].filter((a) => a !== '').join(' · ')
  const form = `<form class="search" method="get" action="/cache"><input type="search" name="search" value="${escapeHtml(tags.search)}" placeholder="tag name contains" aria-label="search tags">` +
    '<button>search</button></form>'
  const head = `<div class="pager" data-tags="${tags.matched}">${form}<span>${which} · ${shown}, the busiest first, tags never asked for last${around === '' ? '' : ` · ${around}`}</span></div>`
  const cards = loaded.length === 0 ? '' : `<div class="grid">${loaded.map(tagCard).join('')}</div>`
  const lines = idle.length === 0
    ? ''
    : `<p class="idle-head">Not loaded yet, never asked for since the start (the first segment loads on the first request):</p><ul class="idle-tags">${idle.map((v) => `<li data-key="${escapeHtml(v.key)}">${escapeHtml(v.key)}</li>`).join('')}</ul>`
  return `${head}${cards}${lines}`
}

function cacheUrl (tags: TagsView, offset: number): string {
  const query = new URLSearchParams()
  if (tags.search !== '') query.set('search', tags.search)
  if (offset > 0) query.set('cursor', String(offset))
  if (tags.limit !== CACHE_PAGE_SIZE) query.set('limit', String(tags.limit))
  const q = query.toString()
  return q === '' ? '/cache' : `/cache?${q}`
}

export function renderDbPage (rows: LeafAllocRow[]): string {
  const body = rows.map((r) => `<tr data-key="${escapeHtml(r.key)}"><td>${escapeHtml(r.key)}</td><td class="num">${escapeHtml(r.maxId)}</td>` +
    `<td class="num">${r.step}</td><td>${escapeHtml(r.description ?? '')}</td><td>${escapeHtml(r.updateTime.toISOString())}</td></tr>`).join('')
  return page('leaf_alloc', `<table><thead><tr><th>biz_tag</th><th>max_id</th><th>step</th><th>description</th><th>update_time</th></tr></thead><tbody>${body}</tbody></table>`)
}
