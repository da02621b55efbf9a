import { ConfigError } from './config-error.js'

// The configuration keys: each one's value type (its parser), default, doc and target, the
// field of Config it fills. The table drives the file, environment and command-line sources,
// the Config type (load-config.ts) and the key table of docs/configuration.md (checked by
// test/docs/docs.test.ts).

export { ConfigError } from './config-error.js'

type Parser<T> = (raw: string, key: string) => T

const text: Parser<string> = (raw) => raw.trim()
// A password or token is kept as given, as Java's Properties keeps it (`pass\ ` ends in a
// space). Other text is trimmed: a stray space in leaf.name or an address would move the
// instance to another ZooKeeper tree, whose worker ids start again at 0.
const secret: Parser<string> = (raw) => raw
// HTTP drops the spaces around a header's value, so such a token could never match.
const token: Parser<string> = (raw, key) => {
  if (raw !== raw.trim()) throw new ConfigError(key, 'starts or ends with white space, which no Authorization header can carry')
  return raw
}

// Sent as the Leaf-Instance header of every ID answer: what a header value may hold (visible
// ASCII and inner spaces), so that a name can never make every answer fail in Node's setHeader.
const headerValue: Parser<string> = (raw, key) => {
  const v = raw.trim()
  if (!/^[\x20-\x7e]{0,200}$/.test(v)) throw new ConfigError(key, `"${raw}" is not a header value: at most 200 visible ASCII characters`)
  return v
}

// `digest:user:password`, ZooKeeper's digest scheme (the only one a client can send by itself).
const zkAuth: Parser<string> = (raw, key) => {
  if (raw === '') return raw
  if (!/^digest:[^:]+:.+$/s.test(raw)) throw new ConfigError(key, 'is not digest:user:password (ZooKeeper\'s digest scheme)')
  return raw
}

const bool: Parser<boolean> = (raw, key) => {
  const v = raw.trim().toLowerCase()
  if (v === 'true') return true
  if (v === 'false' || v === '') return false
  throw new ConfigError(key, `"${raw}" is not true or false`)
}

function int (min: number, max: number): Parser<number> {
  return (raw, key) => {
    const v = raw.trim()
    if (!/^-?\d+$/.test(v)) throw new ConfigError(key, `"${raw}" is not an integer`)
    const n = Number(v)
    if (n < min || n > max) throw new ConfigError(key, `${v} is out of range [${min}, ${max}]`)
    return n
  }
}

// An empty value means "not set" for optional integers (e.g. `leaf.snowflake.port=`).
function optionalInt (min: number, max: number): Parser<number | undefined> {
  const parse = int(min, max)
  return (raw, key) => raw.trim() === '' ? undefined : parse(raw, key)
}

const port = int(0, 65535)

/** A store identity as the max_id guard and /cache name it (database/server-identity.ts). */
const STORE_IDENTITY = /^(server_id \d+|galera cluster [0-9a-fA-F-]+)$/
const storeList: Parser<string[]> = (raw, key) => raw.split(',').map((s) => s.trim().replace(/\s+/g, ' ')).filter((s) => s !== '').map((s) => {
  if (!STORE_IDENTITY.test(s)) throw new ConfigError(key, `"${s}" is not a store identity: write "server_id N" or "galera cluster <uuid>", as /cache and the failover log name it`)
  return s
})

/** The widest worker field any layout may have leaves room for time and sequence: 2^31 - 1 ids. */
const MAX_ANY_WORKER_ID = 2 ** 31 - 1

function oneOf<T extends string> (values: readonly T[]): Parser<T | ''> {
  return (raw, key) => {
    const v = raw.trim()
    if (v !== '' && !(values as readonly string[]).includes(v)) throw new ConfigError(key, `"${raw}" is not one of ${values.join(', ')}`)
    return v as T | ''
  }
}

export const WORKER_ID_SOURCES = ['zookeeper', 'static', 'zookeeper-lease', 'db-lease', 'statefulset', 'disposable'] as const
export type WorkerIdSource = typeof WORKER_ID_SOURCES[number]

const logLevel: Parser<string> = (raw, key) => {
  const v = raw.trim()
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(v)) {
    throw new ConfigError(key, `"${raw}" is not a pino log level`)
  }
  return v
}

interface KeySpec<T, Target extends string, Resolved extends boolean> {
  /** A path into Config (`segment.poolSize`). */
  target: Target
  /** true: toConfig (load-config.ts) fills the target from this key and others; false: the value lands as parsed. */
  resolved: Resolved
  default: string
  parse: Parser<T>
  doc: string
}

/** A key whose parsed value lands as it is on its target. */
function key<T, const Target extends string> (target: Target, defaultValue: string, parse: Parser<T>, doc: string): KeySpec<T, Target, false> {
  return { target, resolved: false, default: defaultValue, parse, doc }
}

/** A key that toConfig (load-config.ts) reads, with others, to fill its target. */
function resolvedKey<T, const Target extends string> (target: Target, defaultValue: string, parse: Parser<T>, doc: string): KeySpec<T, Target, true> {
  return { target, resolved: true, default: defaultValue, parse, doc }
}

export const KEYS = {
  'leaf.name': key('name', 'leaf', text, 'Service name; part of the ZooKeeper paths and of the worker-id cache path.'),
  'server.host': key('server.host', '0.0.0.0', text, 'Address the HTTP server listens on.'),
  'server.port': key('server.port', '8080', port, 'HTTP port.'),
  'server.headers-timeout-ms': key('server.headersTimeoutMs', '10000', int(0, 3_600_000), 'How long a connection may take to send a request\'s line and headers, from its first byte (or from its start): then it is answered 408 `REQUEST_TIMEOUT` and closed, so that a client sending them a byte at a time cannot hold it. Node\'s default is 60 s, for slow links; an ID request\'s headers come in one packet. 0: none.'),
  'server.request-timeout-ms': key('server.requestTimeoutMs', '30000', int(0, 3_600_000), 'How long receiving a whole request (headers and body) may take; then 408 `REQUEST_TIMEOUT` and closed. At least `server.headers-timeout-ms` (Node\'s rule); 0: none.'),
  'server.keep-alive-timeout-ms': key('server.keepAliveTimeoutMs', '72000', int(1, 3_600_000), 'How long an idle keep-alive connection is kept between requests. Fastify\'s default, longer than the idle timeouts of load balancers (AWS ALB and nginx 60 s), so that they close first: a server closing a connection the balancer is sending on is a 502.'),
  'server.idle-timeout-ms': key('server.idleTimeoutMs', '0', int(0, 3_600_000), 'How long an answer may sit unsent because the client stopped reading it (no byte taken) before the connection is closed, freeing what the answer holds (60000 is nginx\'s `send_timeout`). A request still arriving is bounded by the headers and request timeouts, an idle connection by `server.keep-alive-timeout-ms`. 0 (the default): never, since finding such answers means holding every connection until it closes, which left about 25 MB more garbage awaiting a full GC after 20,000 connections (see Connections).'),
  'server.max-connections': key('server.maxConnections', '8192', int(0, 10_000_000), 'Most connections open at once; a connection past it is closed as soon as it is accepted (a warning is logged). Tomcat\'s default, so Java Leaf\'s; keep it below the open-file limit, which the store and ZooKeeper need too. 0: no bound.'),
  'server.tls.cert': resolvedKey('server.tls', '', text, 'PEM file of the HTTP server\'s certificate (chain): with `server.tls.key`, the server speaks HTTPS; a relative path is read from the config file\'s folder.'),
  'server.tls.key': resolvedKey('server.tls', '', text, 'PEM file of the private key of `server.tls.cert` (unencrypted).'),
  'leaf.instance.name': key('instanceName', '', headerValue, 'The name this instance gives in the `Leaf-Instance` header of every ID answer, by which clients keep IDs from going back (docs/operations.md); unique per running instance and the same across its restarts; empty: `<host name>:<listening port>`.'),
  'log.level': key('logLevel', 'info', logLevel, 'pino log level (also `LOG_LEVEL`).'),

  'leaf.segment.enable': key('segment.enabled', 'true', bool, 'Serve segment IDs. Unset: on, as Java Leaf reads a leaf.properties without it.'),
  'leaf.jdbc.url': resolvedKey('segment.store', '', text, '`jdbc:mysql://host:3306/db?...`, `mysql://user:pass@host:3306/db`, `jdbc:postgresql://host:5432/db`, `postgres://user:pass@host:5432/db` (or `postgresql://`) or `sqlite:PATH`; several MySQL hosts (`jdbc:mysql://h1:3306,h2:3306/db`) fail over in order (docs/production.md); empty: the embedded SQLite store, `data/leaf.db` in the install folder; a relative `sqlite:` path is read from the config file\'s folder (docs/configuration.md#paths).'),
  'leaf.jdbc.username': resolvedKey('segment.store', '', secret, 'Database user (when the URL carries none).'),
  'leaf.jdbc.password': resolvedKey('segment.store', '', secret, 'Database password (when the URL carries none); never logged.'),
  'leaf.jdbc.password-file': resolvedKey('segment.store', '', text, 'A file holding the database password (a Kubernetes or Docker secret): its content without the final newline; instead of `leaf.jdbc.password`.'),
  'leaf.jdbc.ssl.ca': resolvedKey('segment.store', '', text, 'PEM file of the CA (or CAs) the database server\'s certificate must chain to, e.g. the RDS or Cloud SQL bundle; with no TLS mode in the URL it makes the mode `VERIFY_IDENTITY` (see TLS); a relative path is read from the config file\'s folder.'),
  'leaf.jdbc.ssl.cert': resolvedKey('segment.store', '', text, 'PEM file of a client certificate, for servers that ask for one (`REQUIRE X509`, `clientcert=verify-full`); with `leaf.jdbc.ssl.key`.'),
  'leaf.jdbc.ssl.key': resolvedKey('segment.store', '', text, 'PEM file of the client certificate\'s private key (unencrypted, or opened by the URL\'s `sslpassword`).'),
  'leaf.jdbc.connect-timeout-ms': resolvedKey('segment.connectTimeoutMs', '2000', int(100, 60_000), 'How long opening one MySQL or PostgreSQL connection may take.'),
  'leaf.jdbc.pool-size': key('segment.poolSize', '10', int(1, 1000), 'MySQL or PostgreSQL connection pool size.'),
  'leaf.jdbc.query-timeout-ms': resolvedKey('segment.queryTimeoutMs', '2000', int(100, 60_000), 'How long one MySQL or PostgreSQL query may go unanswered before its connection is taken for dead and closed.'),
  'leaf.segment.wait-timeout-ms': key('segment.waitTimeoutMs', '3000', int(1, 600_000), 'How long a request waits for a segment load before `SEGMENTS_NOT_READY`.'),
  'leaf.segment.refresh-interval-ms': key('segment.refreshIntervalMs', '60000', int(10, 86_400_000), 'How often the tag list is re-read from the table.'),
  'leaf.segment.failover-hold-ms': resolvedKey('segment.failoverHoldMs', '', optionalInt(0, 86_400_000), 'After a store failover that may have lost allocations (its identity changed, or a range came back below one served), how long new allocations are held while the buffer serves on, for every peer to raise `max_id` above what it served; empty: two `refresh-interval-ms`, since every peer reads the store at least that often, plus for each host of the URL the connect timeout and three query timeouts a refresh may take (docs/production.md). On asynchronous replication it also bounds serving without the store: no buffered ID is served once this long has passed since the last refresh that reached it (`STORE_UNCONFIRMED`, docs/production.md).'),
  'leaf.segment.trusted-stores': key('segment.trustedStores', '', storeList, 'Store identities (`server_id 1`, `galera cluster <uuid>`, comma-separated) this instance may write through again although an earlier life failed over from them (a failover of this life away from one is remembered again): the warm-start file keeps every store it left, and nothing is allocated on one of those (docs/production.md, Host lists).'),
  'leaf.segment.buffer-seconds': key('segment.bufferSeconds', '60', int(0, 86_400), 'Seconds of each tag\'s recent issue rate kept buffered, counting every loaded segment: further segments are loaded ahead (one at a time, by Leaf\'s step rule) to keep it; 0: Leaf\'s double buffer alone.'),
  'leaf.segment.max-buffered-segments': key('segment.maxBufferedSegments', '8', int(2, 64), 'Most segments a tag holds, the current one included; 2 is Leaf\'s double buffer.'),
  'leaf.segment.state-file': resolvedKey('segment.stateFile', '', text, 'The warm-start file: the tags that served in the last minute before a graceful stop, loaded first at the next start; empty: `segment-state-<server.port>.json` beside the SQLite file, or in the install folder\'s `data/` with MySQL and PostgreSQL (none with `server.port=0`); `off`: no warm start; a relative path is read from the config file\'s folder (docs/configuration.md#paths).'),
  'leaf.batch.max': key('batchMax', '10000', int(1, 1_000_000), 'Largest `count` a batch request may ask for.'),

  'leaf.snowflake.enable': key('snowflake.enabled', 'true', bool, 'Serve snowflake IDs. Unset: on, as Java Leaf reads a leaf.properties without it; on, it needs a worker-id source (`leaf.snowflake.zk.address`, `leaf.snowflake.worker-id.source` or `leaf.snowflake.worker.id`), or the start is refused.'),
  'leaf.snowflake.zk.address': key('snowflake.zkAddress', '', text, 'ZooKeeper connect string (`host:port,host:port`); empty: no ZooKeeper, the worker id comes from `leaf.snowflake.worker-id.source` or `leaf.snowflake.worker.id`; with neither, snowflake mode refuses to start (Java Leaf refuses without it).'),
  'leaf.snowflake.port': resolvedKey('snowflake.port', '', optionalInt(1, 65535), 'Port this instance registers under in ZooKeeper; empty: `server.port`.'),
  'leaf.snowflake.ip': key('snowflake.ip', '', text, 'IP this instance registers under; empty: the first non-loopback IPv4 address.'),
  'leaf.snowflake.worker.id': key('snowflake.workerId', '0', int(0, MAX_ANY_WORKER_ID), 'Worker id of the `static` source; must be unique per instance.'),
  'leaf.snowflake.worker-id.source': resolvedKey('snowflake.workerIdSource', '', oneOf(WORKER_ID_SOURCES), 'Where the worker id comes from: `zookeeper`, `static`, `zookeeper-lease`, `db-lease`, `statefulset` or `disposable` (see Worker ids in containers); empty: `zookeeper` when `leaf.snowflake.zk.address` is set, else `static`.'),
  'leaf.snowflake.worker-id.min': key('snowflake.workerIdMin', '0', int(0, MAX_ANY_WORKER_ID), 'Lowest worker id this instance may use, from any source.'),
  'leaf.snowflake.worker-id.max': key('snowflake.workerIdMax', '', optionalInt(0, MAX_ANY_WORKER_ID), 'Highest worker id this instance may use, from any source; the lease pools hand out `min`..`max`; empty: the layout\'s largest (1023 for `leaf`).'),
  'leaf.snowflake.worker-id.hostname': key('snowflake.hostname', '', text, 'Host name whose trailing ordinal (`leaf-3` -> 3) is the `statefulset` source\'s worker id; empty: `HOSTNAME`.'),
  'leaf.snowflake.lease.ttl-ms': key('snowflake.leaseTtlMs', '30000', int(300, 600_000), 'Lease time of the `*-lease` sources (for `zookeeper-lease`, the session timeout asked for); at least 3 heartbeat intervals.'),
  'leaf.snowflake.layout': key('snowflake.layoutSpec', 'leaf', text, 'ID layout: `leaf`, `js-safe`, `uid-generator`, `vesta-max-peak`, `vesta-min-granularity`, a preset with overrides (`uid-generator,time=31s,worker=22,sequence=10,epoch=2022-01-01T00:00:00+08:00`) or a custom spec (`time=41ms,worker=10,sequence=12,epoch=1288834974657`); see ID layouts.'),
  'leaf.snowflake.vesta.version': key('snowflake.vesta.version', '0', int(0, 1), 'Version field of the Vesta layouts (1 makes every ID negative as a signed 64-bit value, as in Vesta).'),
  'leaf.snowflake.vesta.gen-method': key('snowflake.vesta.genMethod', '2', int(0, 3), 'Generation-method field of the Vesta layouts (Vesta: 0 embedded, 1 central server, 2 REST).'),
  'leaf.snowflake.borrow-ahead-ms': key('snowflake.borrowAheadMs', '0', int(0, 60_000), 'How far ahead of the clock a generator may move its time instead of waiting, when a time unit\'s sequence is used up or the clock steps back; 0: never (Leaf).'),
  'leaf.snowflake.twepoch': key('snowflake.twepoch', '1288834974657', int(0, Number.MAX_SAFE_INTEGER), 'Epoch of the `leaf` layout\'s time bits (and of a custom layout without one), in ms.'),
  'leaf.snowflake.cache.dir': key('snowflake.cacheDir', '', text, 'Folder of the worker-id cache file; empty: `<tmpdir>/<leaf.name>/leafconf/<port>`, as Java Leaf.'),
  'leaf.snowflake.max-clock-drift-ms': key('snowflake.maxClockDriftMs', '5000', int(0, 3_600_000), 'A new instance refuses to start when its clock differs from its live peers\' average by more than this; a lease claimant waits at most this long for the previous holder\'s last millisecond.'),
  'leaf.snowflake.heartbeat-interval-ms': key('snowflake.heartbeatIntervalMs', '3000', int(100, 600_000), 'How often the worker node\'s timestamp is refreshed in ZooKeeper, or the worker-id lease renewed.'),
  'leaf.snowflake.zk.connect-timeout-ms': key('snowflake.zkConnectTimeoutMs', '5000', int(100, 600_000), 'How long the start waits for ZooKeeper before using the cached worker id.'),
  'leaf.snowflake.zk.auth': key('snowflake.zkAuth', '', zkAuth, 'ZooKeeper authentication, `digest:user:password`: sent on every session, and the nodes Leaf-TS creates get an ACL that only this identity may read and write (Java Leaf instances cannot read them: leave it off in a mixed fleet); empty: none, open ACLs as Java Leaf. Never logged.'),
  'leaf.snowflake.zk.auth-file': resolvedKey('snowflake.zkAuth', '', text, 'A file holding `leaf.snowflake.zk.auth`\'s value, without its final newline.'),
  'leaf.snowflake.zk.session-timeout-ms': key('snowflake.zkSessionTimeoutMs', '10000', int(1000, 600_000), 'ZooKeeper session timeout.'),

  'leaf.metrics.max-tag-series': key('metrics.maxTagSeries', '100', int(0, 1_000_000), 'Most segment tags with series of their own in `/metrics`; past it, idle tags are summed under `key="_other"` (see Monitoring); 0: every tag under `_other`.'),

  'leaf.admin.token': key('adminToken', '', token, 'The admin token (sent as Bearer, or as the password of Basic): it opens the admin views and enables tag management; empty: no management, and the views are open unless leaf.admin.view-token is set.'),
  'leaf.admin.token-file': resolvedKey('adminToken', '', text, 'A file holding `leaf.admin.token`, without its final newline.'),
  'leaf.admin.view-token': key('adminViewToken', '', token, 'A read-only token: opens the views (`/cache`, `/db`, their JSON) but not tag management; set alone, it guards the views and management stays off. Must differ from leaf.admin.token.'),
  'leaf.admin.view-token-file': resolvedKey('adminViewToken', '', text, 'A file holding `leaf.admin.view-token`, without its final newline.'),
} as const

export type ConfigKey = keyof typeof KEYS
export type RawConfig = Record<ConfigKey, string>
export type ParsedConfig = { [K in ConfigKey]: ReturnType<(typeof KEYS)[K]['parse']> }

/** The keys whose value lands as parsed on their target. */
type LandingKey = { [K in ConfigKey]: (typeof KEYS)[K]['resolved'] extends false ? K : never }[ConfigKey]

type Nest<Path extends string, Value> = Path extends `${infer Head}.${infer Rest}`
  ? { [P in Head]: Nest<Rest, Value> }
  : { [P in Path]: Value }
type UnionToIntersection<U> = (U extends unknown ? (u: U) => void : never) extends (i: infer I) => void ? I : never
type Flatten<T> = T extends readonly unknown[] ? T : T extends object ? { [K in keyof T]: Flatten<T[K]> } : T

/** The part of Config the landing keys fill, derived from their targets and parsers. */
export type LandedConfig = Flatten<UnionToIntersection<{ [K in LandingKey]: Nest<(typeof KEYS)[K]['target'], ParsedConfig[K]> }[LandingKey]>>

/** Spring Boot's relaxed binding: `leaf.jdbc.url` -> `LEAF_JDBC_URL`. */
export function envName (key: string): string {
  return key.toUpperCase().replace(/[.-]/g, '_')
}

export const CONFIG_KEYS = Object.keys(KEYS) as ConfigKey[]

export function isConfigKey (key: string): key is ConfigKey {
  return Object.hasOwn(KEYS, key)
}
