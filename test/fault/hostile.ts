import { connect } from 'node:net'

// Hostile HTTP requests as raw bytes (node:http refuses to send most of them), and a raw
// client that reads one answer off the socket.

/** mulberry32: a small seeded generator, so a failing run can be replayed with its seed. */
export function createRandom (seed: number): Random {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (n: number) => Math.floor(next() * n)
  return {
    next,
    int,
    between: (lo, hi) => lo + int(hi - lo + 1),
    pick: <T>(items: readonly T[]) => items[int(items.length)] as T,
    chance: (p) => next() < p,
  }
}

export interface Random {
  next (): number
  /** An integer in [0, n). */
  int (n: number): number
  /** An integer in [lo, hi]. */
  between (lo: number, hi: number): number
  pick<T> (items: readonly T[]): T
  chance (p: number): boolean
}

export interface HostileRequest {
  bytes: Buffer
  /** Where the body starts in `bytes`. */
  headLength: number
  method: string
  /** The request target as sent (for messages, cut short). */
  target: string
  /** A request the service must answer 200 with IDs: a known tag or a snowflake key, a valid count. */
  valid?: { mode: 'segment' | 'snowflake', key: string, count: number | undefined }
  /** Set when the target names an ID route: where the IDs of a 200 belong. */
  idRoute?: IdRoute
  /**
   * The answers documented for this request, and only those: `200`, `201`, `<status> <CODE>`
   * for an error body, `503 not ready` for /readyz's own body.
   */
  allowed: Set<string>
  /** What makes it hostile, for messages. */
  kind: string
}

export interface IdRoute {
  mode: 'segment' | 'snowflake'
  /** The key as the server reads it (percent-decoded), or the raw key if it does not decode. */
  key: string
  /** The IDs a 200 carries: 1 without `count`, the count when it is valid; undefined when no 200 fits. */
  count: number | undefined
}

const HEX = '0123456789ABCDEF'
const pct = (byte: number) => `%${HEX[byte >> 4]}${HEX[byte & 15]}`

/** One piece of a key, from a byte class. Raw bytes go out as latin1: any byte value. */
function keyPiece (r: Random, cls: number): string {
  switch (cls) {
    case 0: return r.pick(['a', 'Z', '0', '9', 'k', 'x'])
    case 1: return r.pick(['-', '.', '_', '~'])
    case 2: return r.pick(['!', '$', '&', "'", '(', ')', '*', '+', ',', ';', '=', ':', '@', '/', '?', '#', '[', ']', '|', '{', '}', '^', '`', '"', '<', '>', '\\'])
    case 3: return pct(r.int(256)) // any byte, percent-encoded
    case 4: return r.chance(0.5) ? pct(r.int(256)).toLowerCase() : encodeURIComponent(String.fromCodePoint(r.pick([0xe9, 0x4e2d, 0x1f600, 0xfeff, 0x202e, 0x10ffff])))
    case 5: return r.pick(['%', '%G', '%zz', '%4', '%e0%a4', '%c0%af', '%ed%a0%80', '%ff%fe', '%%', '%u0041', '%00'])
    case 6: return String.fromCharCode(r.pick([0, 1, 8, 9, 10, 13, 27, 31, 127])) // raw control bytes
    case 7: return String.fromCharCode(r.between(0x80, 0xff)) // raw high bytes
    case 8: return Buffer.from(String.fromCodePoint(r.pick([0xe9, 0x4e2d, 0x1f600])), 'utf8').toString('latin1') // raw UTF-8
    case 9: return r.pick(['..', '.', '/..', '../', '%2e%2e', '%2E%2E%2F', '..%2f', '%2F', '//', '.%2e'])
    default: return r.pick([' ', '\t', '+', '%20'])
  }
}

// Pieces that may stand raw in a request line (half the keys use only these, so that most
// requests reach the router and validation rather than Node's parser).
const LINE_SAFE = [0, 1, 2, 3, 4, 5, 9]

function hostileKey (r: Random): string {
  const length = r.chance(0.08)
    ? 0
    : r.chance(0.4) ? r.between(1, 16) : r.chance(0.5) ? r.between(17, 140) : r.between(141, 4096)
  const classes = r.chance(0.5) ? LINE_SAFE : [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  const main = r.pick(classes)
  let key = ''
  for (let i = 0; i < length; i++) key += keyPiece(r, r.chance(0.7) ? main : r.pick(classes))
  return key
}

const COUNTS = ['', '0', '-1', '1', '10000', '10001', '99999999999999999999', 'abc', '1e3', '0x10', '+5', ' 5', '%35', '5%00', '1.0',
  '\u0661\u0662', '1,2', 'NaN', 'Infinity', '-0', '00001', '4294967297', '%ZZ', '[]', '{}']
const METHODS = ['GET', 'GET', 'GET', 'GET', 'GET', 'GET', 'GET', 'GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH',
  'TRACE', 'CONNECT', 'get', 'FOO', 'PROPFIND', 'M-SEARCH', 'GET\u0000', 'G ET', '']
const PATHS = ['/api/segment/get/', '/api/snowflake/get/', '/api/snowflake/decode/', '/decodeSnowflakeId?snowflakeId=',
  '/api/segment/tags/', '/api/segment/tags', '/api/cache', '/api/db', '/api/snowflake/status', '/cache', '/db',
  '/healthz', '/readyz', '/metrics', '/', '', '*', 'http://127.0.0.1/api/snowflake/get/', '/api/segment/get', '/API/SEGMENT/GET/']
export const CONTENT_TYPES = ['application/json', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
  'application/octet-stream', 'application/json; charset=utf-16', '', 'image/png', '*/*', 'application/json\u0000']
export const BODIES = ['{}', '{"key":"k","step":1}', '{"key":"', 'null', '[]', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{}}}',
  'key=k&step=1', '\u0000\u0001', '{"key":"' + 'k'.repeat(200) + '","step":-1}', '{"step":1e308}', '"' + 'x'.repeat(30_000) + '"']

/**
 * A random request: `tag` is a segment tag that exists, `token` the admin token (some
 * requests carry it). About one request in seven is valid and must get its IDs.
 */
export function hostileRequest (r: Random, port: number, tag: string, token: string): HostileRequest {
  if (r.chance(0.14)) {
    const mode = r.chance(0.5) ? 'segment' : 'snowflake'
    const key = mode === 'segment' ? tag : `k${r.int(1000)}`
    const count = r.chance(0.5) ? undefined : r.between(1, 100)
    const target = `/api/${mode}/get/${key}${count === undefined ? '' : `?count=${count}`}`
    const bytes = Buffer.from(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`, 'latin1')
    const idRoute = { mode, key, count: count ?? 1 } as const
    const allowed = new Set(['200', ...(mode === 'segment' ? SEGMENT_503 : SNOWFLAKE_503)])
    return { bytes, headLength: bytes.length, method: 'GET', target, valid: { mode, key, count }, idRoute, allowed, kind: 'valid' }
  }
  const kinds: string[] = []
  // Anything in the request a parser may refuse with 400 BAD_REQUEST, besides the target.
  let oddHeaders = false
  const method = r.pick(METHODS)
  let target = r.pick(PATHS)
  if (target.endsWith('/') || target.endsWith('=')) target += hostileKey(r)
  if (r.chance(0.6)) {
    const count = r.chance(0.5) ? String(r.between(-5, 20_000)) : r.chance(0.8) ? r.pick(COUNTS) : hostileKey(r).slice(0, 64)
    target += `${target.includes('?') ? '&' : '?'}count=${count}`
    if (r.chance(0.1)) target += `&count=${r.between(1, 5)}`
    if (r.chance(0.1)) target += `&${hostileKey(r).slice(0, 40)}=${hostileKey(r).slice(0, 40)}`
    kinds.push('count')
  }
  const version = r.chance(0.93) ? 'HTTP/1.1' : r.pick(['HTTP/1.0', 'HTTP/2.0', 'HTTP/0.9', 'http/1.1', 'HTTP/1.1 ', 'HTTP/9.9', ''])
  const headers: string[] = []
  if (r.chance(0.97)) headers.push(`Host: 127.0.0.1:${port}`)
  if (r.chance(0.2)) {
    const accept = r.pick(['application/json', '*/*', 'text/plain', 'application/json;q=0', 'application/vnd.leaf-ts+json', hostileKey(r).slice(0, 80)])
    headers.push(`Accept: ${accept}`)
    oddHeaders ||= !PRINTABLE.test(accept)
  }
  let authorization: string | undefined
  if (r.chance(0.15)) {
    authorization = r.pick([`Bearer ${token}`, 'Bearer wrong', 'Bearer ', 'Basic Zm9vOmJhcg==', `bearer ${token}`, hostileKey(r).slice(0, 200)])
    headers.push(`Authorization: ${authorization}`)
    oddHeaders ||= !PRINTABLE.test(authorization)
  }
  if (r.chance(0.05)) {
    headers.push(`X-${hostileKey(r).slice(0, 20)}: ${hostileKey(r).slice(0, 200)}`)
    oddHeaders = true
  }
  if (r.chance(0.05)) {
    const extra = r.pick(['Connection: close', 'Connection: upgrade\r\nUpgrade: websocket', 'Expect: 100-continue', 'Transfer-Encoding: gzip, chunked',
      'Content-Length: 5\r\nContent-Length: 6', 'Content-Length: -1', 'Range: bytes=0-1', 'If-None-Match: *', 'Cookie: ' + 'a=b; '.repeat(500)])
    headers.push(extra)
    oddHeaders ||= FRAMING.test(extra)
  }
  if (r.chance(0.04)) {
    // Oversized: a header block past Node's 16 KiB limit (431), from one header or many.
    if (r.chance(0.5)) headers.push(`X-Big: ${'a'.repeat(r.between(16 * 1024, 64 * 1024))}`)
    else for (let i = 0, n = r.between(1500, 4000); i < n; i++) headers.push(`X-H${i}: v`)
    kinds.push('oversized headers')
  }
  let body = ''
  let contentType: string | undefined
  let badKey = false
  if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(method) && r.chance(0.7)) {
    body = r.chance(0.03) ? 'x'.repeat(r.between(1024 * 1024, 1200 * 1024)) : r.pick(BODIES)
    const type = r.pick(CONTENT_TYPES)
    if (type !== '') headers.push(`Content-Type: ${type}`)
    contentType = type
    badKey = badKeyField(body)
    if (r.chance(0.9)) {
      headers.push(`Content-Length: ${Buffer.byteLength(body, 'latin1')}`)
    } else {
      headers.push('Transfer-Encoding: chunked')
      body = `${Buffer.byteLength(body, 'latin1').toString(16)}\r\n${body}\r\n0\r\n\r\n`
    }
    kinds.push('body')
  }
  kinds.push(`method ${JSON.stringify(method)}`)
  const head = `${method} ${target} ${version}`.replace(/ $/, '')
  const headBytes = Buffer.from(`${head}\r\n${headers.join('\r\n')}${headers.length > 0 ? '\r\n' : ''}\r\n`, 'latin1')
  const { allowed, idRoute } = documentedAnswers({
    method,
    target,
    version: version.trim(),
    oddHeaders,
    headLength: headBytes.length,
    body: body === '' ? undefined : { bytes: Buffer.byteLength(body, 'latin1'), contentType, badKey },
    authorized: authorization !== undefined && /^bearer +(.*)$/is.exec(authorization.trim())?.[1] === token,
    tag,
  })
  return { bytes: Buffer.concat([headBytes, Buffer.from(body, 'latin1')]), headLength: headBytes.length, method, target, idRoute, allowed, kind: kinds.join(', ') }
}

const NEW_TAG_FIELDS = ['key', 'step', 'maxId', 'description']

/**
 * Whether `body` is what `POST /api/segment/tags` reads as a new tag (a JSON object of its
 * fields only) with a `key` that is not a string of 1 to 128 code points: 400 INVALID_KEY.
 */
export function badKeyField (body: string): boolean {
  let parsed: unknown
  try { parsed = JSON.parse(body) } catch { return false }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return false
  if (Object.keys(parsed).some((k) => !NEW_TAG_FIELDS.includes(k))) return false
  const key = (parsed as { key?: unknown }).key
  return typeof key !== 'string' || key.length === 0 || Array.from(key).length > MAX_KEY_LENGTH
}

/** Header values a parser takes as they are: visible ASCII and spaces. */
export const PRINTABLE = /^[\x20-\x7e]*$/
/** Extra headers that frame the body in ways a parser refuses. */
const FRAMING = /Content-Length: -1|Content-Length: 5\r\nContent-Length: 6|Transfer-Encoding: gzip/
/** Methods Node's parser knows (the rest, and lower case, are 400 before any route). */
const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'TRACE', 'CONNECT', 'PROPFIND', 'M-SEARCH'])
/** Node's limit on the request line and header block (`--max-http-header-size`). */
const MAX_HEADER_BYTES = 16 * 1024
/** The admin routes' body limit: the smallest a body can be refused at with 413. */
const SMALLEST_BODY_LIMIT = 16 * 1024
const MAX_KEY_LENGTH = 128
const BATCH_MAX = 10_000
const INT64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n }
const SEGMENT_503 = ['503 SEGMENTS_NOT_READY', '503 NOT_READY']
const SNOWFLAKE_503 = ['503 CLOCK_BACKWARDS', '503 WORKER_ID_UNAVAILABLE']
/** No token, one that cannot be read, or one that matches neither. */
const UNAUTHORIZED = ['401 UNAUTHORIZED', '401 INVALID_TOKEN']
/** GET routes that are the admin views (behind the token in this scenario). */
const VIEWS = new Set(['/api/cache', '/api/db', '/api/snowflake/status', '/cache', '/db'])
const VIEWS_ON_DB = new Set(['/api/db', '/db'])
const PAGED_VIEWS = new Set(['/api/cache', '/cache'])

export interface RequestFacts {
  method: string
  target: string
  version: string
  /** A header a parser may refuse (control or high bytes, a bad name, conflicting framing). */
  oddHeaders: boolean
  headLength: number
  /** `badKey`: the body is a JSON object of a new tag's fields whose `key` is missing, empty or too long. */
  body: { bytes: number, contentType: string | undefined, badKey: boolean } | undefined
  /** `Authorization: Bearer <the token>` (the scheme in any case, RFC 7235). */
  authorized: boolean
  /** The segment tag that exists. */
  tag: string
}

/**
 * The answers the errors table (docs/operations.md) documents for this very request, worked
 * out from what the server is told to do with it: the route its path names, its method,
 * count, key, token and body. A code counts only where it fits: 400 INVALID_COUNT only for a
 * count that is not an integer from 1 to 10,000, 503 on a snowflake route only a snowflake
 * code, 401 only on an admin route without the token, 431 only past 16 KiB of head, 413 and
 * 415 only with a body. The rules are spelled out in docs/reliability.md.
 */
export function documentedAnswers (f: RequestFacts): { allowed: Set<string>, idRoute: IdRoute | undefined } {
  const allowed = new Set<string>()
  // What a parser may refuse before any route.
  if (!KNOWN_METHODS.has(f.method) || !['HTTP/1.1', 'HTTP/1.0'].includes(f.version) || /[^\x21-\x7e]/.test(f.target) ||
    f.oddHeaders || f.method === 'CONNECT') allowed.add('400 BAD_REQUEST')
  if (f.headLength > MAX_HEADER_BYTES) allowed.add('431 HEADERS_TOO_LARGE')
  if (f.body !== undefined) {
    allowed.add('400 BAD_REQUEST')
    if (f.body.bytes > SMALLEST_BODY_LIMIT) allowed.add('413 PAYLOAD_TOO_LARGE')
    if (f.body.contentType !== 'application/json') allowed.add('415 UNSUPPORTED_MEDIA_TYPE')
  }
  // Node's parser ends the target at a raw space, tab, line end or control byte: the route
  // may see only what comes before it.
  const targets = [f.target]
  const end = [...f.target].findIndex((c) => c <= ' ' || c === '\x7f')
  if (end >= 0) targets.push(f.target.slice(0, end))
  let idRoute: IdRoute | undefined
  for (const target of targets) {
    const route = routeAnswers(f, target)
    for (const a of route.allowed) allowed.add(a)
    idRoute ??= route.idRoute
  }
  return { allowed, idRoute }
}

/**
 * The answers of the route `target` names. Fastify's router (find-my-way) reads an absolute
 * target's path (a `#` anywhere in it is malformed), takes `*` as a path with no route and
 * refuses any other target that does not start with `/`.
 */
function routeAnswers (f: RequestFacts, target: string): { allowed: Set<string>, idRoute: IdRoute | undefined } {
  const allowed = new Set<string>()
  const add = (...answers: string[]) => { for (const a of answers) allowed.add(a) }
  if (f.method === 'CONNECT' || target === '*') return { allowed: new Set(['404 NOT_FOUND']), idRoute: undefined }
  let origin = target
  const absolute = /^https?:\/\/[^/?#]+/i.exec(target)
  if (absolute !== null && !target.includes('#')) origin = target.slice(absolute[0].length).replace(/^(?!\/)/, '/')
  if (!origin.startsWith('/')) return { allowed: new Set(['400 BAD_REQUEST']), idRoute: undefined }
  const cut = origin.search(/[?#]/)
  const path = cut < 0 ? origin : origin.slice(0, cut)
  // (URLSearchParams drops one leading `?`, which the router keeps as part of a name.)
  const query = new URLSearchParams(cut < 0 ? '' : `&${origin.slice(cut + 1)}`)
  if (decode(path) === undefined) add('400 BAD_REQUEST')

  const get = f.method === 'GET' || f.method === 'HEAD'
  const param = (prefix: string) => path.startsWith(prefix) && !path.slice(prefix.length).includes('/') ? path.slice(prefix.length) : undefined
  const idMode = param('/api/segment/get/') !== undefined ? 'segment' : param('/api/snowflake/get/') !== undefined ? 'snowflake' : undefined
  let idRoute: IdRoute | undefined

  if (idMode !== undefined && f.method === 'HEAD') {
    // HEAD issues no ID: refused before the key or count is read.
    if (param(`/api/${idMode}/get/`) === '') add('404 NOT_FOUND')
    add('405 METHOD_NOT_ALLOWED')
  } else if (idMode !== undefined && (get || f.method === 'POST')) {
    // POST is served as GET is (leaf-server's mapping takes any method), its body unread.
    const raw = param(`/api/${idMode}/get/`) as string
    const key = decode(raw) ?? raw
    const counts = query.getAll('count')
    const count = counts.length === 0 ? 1 : counts.length === 1 ? validCount(counts[0] as string) : undefined
    const keyOk = key.length > 0 && Array.from(key).length <= MAX_KEY_LENGTH && !key.includes('\u0000')
    if (key === '') add('404 NOT_FOUND')
    if (!keyOk) add('400 INVALID_KEY')
    if (count === undefined) add('400 INVALID_COUNT')
    idRoute = { mode: idMode, key, count: keyOk ? count : undefined }
    if (keyOk && count !== undefined) {
      add('200')
      if (idMode === 'segment') add(...SEGMENT_503, ...(key === f.tag ? [] : ['404 KEY_NOT_FOUND']))
      else add(...SNOWFLAKE_503)
    }
  } else if (param('/api/snowflake/decode/') !== undefined && get) {
    const id = param('/api/snowflake/decode/') as string
    if (id === '') add('404 NOT_FOUND')
    add(isInt64(decode(id)) ? '200' : '400 INVALID_ID')
    // A layout to read it in: the parser may refuse the spec.
    if (query.getAll('layout').some((spec) => spec !== '')) add('400 INVALID_LAYOUT')
  } else if (path === '/api/snowflake/decode' && get) {
    add('400 INVALID_ID') // the ID missing: its message names the path's :id
  } else if (path === '/decodeSnowflakeId' && get) {
    // Read as Java's Long.parseLong reads it: a + too, leading zeros, any script's digits
    // (those beyond ASCII may be in range or not); two values are one, "1,2", refused.
    const ids = query.getAll('snowflakeId')
    const id = ids.length === 1 ? ids[0] as string : ''
    if (/^[+-]?[0-9]+$/.test(id)) add(isInt64(String(BigInt(id.replace(/^\+/, '')))) ? '200' : '400 INVALID_ID')
    else if (/^[+-]?\p{Nd}+$/u.test(id) && !/[\uD800-\uDFFF]/.test(id)) add('200', '400 INVALID_ID')
    else add('400 INVALID_ID')
  } else if (VIEWS.has(path) && get) {
    add(...(f.authorized ? ['200'] : UNAUTHORIZED))
    if (f.authorized && VIEWS_ON_DB.has(path)) add('503 STORE_UNAVAILABLE')
    // The cache views page the tags: a limit, cursor or search they cannot read is refused.
    if (f.authorized && PAGED_VIEWS.has(path) && ['limit', 'cursor', 'search'].some((name) => query.has(name))) add('400 BAD_REQUEST')
  } else if (path === '/api/segment/tags' && f.method === 'POST') {
    if (f.authorized) add('201', '400 INVALID_BODY', '409 KEY_EXISTS', '503 STORE_UNAVAILABLE', ...(f.body?.badKey === true ? ['400 INVALID_KEY'] : []))
    else add(...UNAUTHORIZED)
  } else if (param('/api/segment/tags/') !== undefined && f.method === 'PATCH') {
    const key = decode(param('/api/segment/tags/') as string)
    if (key === '') add('404 NOT_FOUND')
    if (f.authorized) add('200', '400 INVALID_BODY', '400 INVALID_KEY', '404 KEY_NOT_FOUND', '503 STORE_UNAVAILABLE')
    else add(...UNAUTHORIZED)
  } else if ((path === '/healthz' || path === '/metrics') && get) {
    add('200')
  } else if (path === '/readyz' && get) {
    add('200', '503 not ready')
  } else {
    add('404 NOT_FOUND')
  }
  return { allowed, idRoute }
}

/** Percent-decoding as the router does it; undefined when it fails (400 BAD_REQUEST). */
function decode (s: string): string | undefined {
  try {
    return decodeURIComponent(s)
  } catch {
    return undefined
  }
}

function validCount (raw: string): number | undefined {
  if (!/^[0-9]{1,9}$/.test(raw)) return undefined
  const n = Number(raw)
  return n >= 1 && n <= BATCH_MAX ? n : undefined
}

function isInt64 (raw: string | undefined): boolean {
  if (raw === undefined || !/^-?[0-9]{1,19}$/.test(raw)) return false
  const n = BigInt(raw)
  return n >= INT64.min && n <= INT64.max
}

export interface RawAnswer {
  /** undefined: the connection ended with no complete status line and headers. */
  status: number | undefined
  headers: Record<string, string>
  body: string
  timedOut: boolean
  /** The socket error, if any (after or instead of an answer). */
  error: string | undefined
}

export interface RawOptions {
  /** The answer to a HEAD request has no body. */
  head?: boolean
  timeoutMs?: number
  /** Sends bytes[0, split) first and the rest `pauseMs` later (if the connection is still open). */
  split?: number
  pauseMs?: number
}

/**
 * Sends `bytes` on a new connection to 127.0.0.1:port and reads one answer (skipping 1xx),
 * framed by Content-Length, chunked encoding or the end of the connection.
 */
export function rawRequest (port: number, bytes: Buffer, { head = false, timeoutMs = 10_000, split, pauseMs = 0 }: RawOptions = {}): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let data = Buffer.alloc(0)
    let error: string | undefined
    let done = false
    const finish = (answer: Omit<RawAnswer, 'error' | 'timedOut'>, timedOut = false) => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ ...answer, timedOut, error })
    }
    const timer = setTimeout(() => finish({ status: undefined, headers: {}, body: '' }, true), timeoutMs)

    // Returns the answer once complete; `ended` says the connection is over.
    const parse = (ended: boolean): Omit<RawAnswer, 'error' | 'timedOut'> | undefined => {
      while (true) {
        const end = data.indexOf('\r\n\r\n')
        if (end < 0) return ended ? { status: undefined, headers: {}, body: '' } : undefined
        const lines = data.subarray(0, end).toString('latin1').split('\r\n')
        const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')
        if (m === null) return { status: undefined, headers: {}, body: data.toString('latin1') }
        const status = Number(m[1])
        const headers: Record<string, string> = {}
        for (const line of lines.slice(1)) {
          const i = line.indexOf(':')
          if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
        }
        const rest = data.subarray(end + 4)
        if (status >= 100 && status < 200) {
          data = rest
          continue
        }
        if (head || status === 204 || status === 304) return { status, headers, body: '' }
        if (headers['content-length'] !== undefined) {
          const length = Number(headers['content-length'])
          if (rest.length >= length) return { status, headers, body: rest.subarray(0, length).toString('utf8') }
          return ended ? { status, headers, body: `(cut short: ${rest.length} of ${length} bytes)` } : undefined
        }
        if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
          const body = dechunk(rest)
          if (body !== undefined) return { status, headers, body }
          return ended ? { status, headers, body: '(cut short: incomplete chunked body)' } : undefined
        }
        return ended ? { status, headers, body: rest.toString('utf8') } : undefined
      }
    }

    socket.on('connect', () => {
      if (split === undefined || split >= bytes.length) {
        socket.write(bytes, () => {})
        return
      }
      socket.write(bytes.subarray(0, split), () => {})
      setTimeout(() => { if (!socket.destroyed && !done) socket.write(bytes.subarray(split), () => {}) }, pauseMs)
    })
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk])
      const answer = parse(false)
      if (answer !== undefined) finish(answer)
    })
    socket.on('error', (err: NodeJS.ErrnoException) => { error = err.code ?? err.message })
    socket.on('close', () => finish(parse(true) ?? { status: undefined, headers: {}, body: '' }))
  })
}

function dechunk (buf: Buffer): string | undefined {
  const parts: Buffer[] = []
  let at = 0
  while (true) {
    const eol = buf.indexOf('\r\n', at)
    if (eol < 0) return undefined
    const size = parseInt(buf.subarray(at, eol).toString('latin1'), 16)
    if (Number.isNaN(size)) return undefined
    if (size === 0) return Buffer.concat(parts).toString('utf8')
    if (buf.length < eol + 2 + size + 2) return undefined
    parts.push(buf.subarray(eol + 2, eol + 2 + size))
    at = eol + 2 + size + 2
  }
}
