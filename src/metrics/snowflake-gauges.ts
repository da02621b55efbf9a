import { Gauge } from 'prom-client'
import type { SnowflakeMode } from '../modes/snowflake-mode.js'
import type { LeaseSource } from '../snowflake/worker-id/worker-id-source.js'
import { timeLeftSeconds } from '../snowflake/time-left.js'
import { valuesMetric } from './values-metric.js'

/** The worker-id sources that hold a ZooKeeper session (`cache`: the zookeeper source started from its cache file). */
const ZOOKEEPER_SOURCES: ReadonlySet<LeaseSource> = new Set(['zookeeper', 'cache', 'zookeeper-lease'])

/** Snowflake mode's scrape-time gauges (the lease, ZooKeeper, borrowed and remaining time), read off the mode `snowflake()` returns at each scrape. */
export function createSnowflakeGauges (snowflake: () => SnowflakeMode | undefined) {
  const leaseGauge = (name: string, help: string, read: (s: ReturnType<SnowflakeMode['lease']['status']>) => number | undefined) =>
    new Gauge({
      name,
      help,
      registers: [],
      collect () {
        this.reset()
        const status = snowflake()?.lease.status()
        const value = status === undefined ? undefined : read(status)
        if (value !== undefined) this.set(value)
      },
    })
  return [
    leaseGauge('leaf_snowflake_worker_id', 'This instance\'s snowflake worker id.', (s) => s.workerId),
    leaseGauge('leaf_zookeeper_connected', '1 while the ZooKeeper session is connected.', (s) => s.zookeeperConnected ? 1 : 0),
    // leaf_zookeeper_connected is 0 on an instance without ZooKeeper too: alerts need this to tell the two apart.
    leaseGauge('leaf_zookeeper_in_use', '1 when this instance\'s worker-id source uses ZooKeeper (zookeeper, zookeeper-lease), else 0.',
      (s) => ZOOKEEPER_SOURCES.has(s.source) ? 1 : 0),
    leaseGauge('leaf_snowflake_last_heartbeat_timestamp_seconds', 'When the worker lease was last written.',
      (s) => s.lastHeartbeat === undefined ? undefined : s.lastHeartbeat / 1000),
    leaseGauge('leaf_snowflake_lease_expiry_seconds', 'Time left until the store may free the worker-id lease (recyclable sources; the holder fences TTL/10 earlier); 0 once lost.',
      (s) => s.issuedUntil === undefined ? undefined : Math.max(0, ((s.leaseExpiresAt ?? 0) - Date.now()) / 1000)),
    new Gauge({
      // The leaf_snowflake_borrowed_ms in Prometheus's base unit: promtool refuses "_ms".
      name: 'leaf_snowflake_borrowed_seconds',
      help: 'How far ahead of the clock the generator\'s time is now, in seconds (borrowed time, leaf.snowflake.borrow-ahead-ms).',
      registers: [],
      collect () {
        this.reset()
        const mode = snowflake()
        if (mode !== undefined) this.set(mode.generator.borrowedMs() / 1000)
      },
    }),
    // No series at all with snowflake mode off: an unlabelled Gauge would read 0 there, and 0
    // fires LeafSnowflakeLayoutEnding.
    valuesMetric('leaf_snowflake_time_left_seconds', 'Seconds until the time field of the layout in use runs out (no snowflake ID after it); 0 once it has.',
      'gauge', () => {
        const mode = snowflake()
        return mode === undefined ? [] : [{ labels: {}, value: timeLeftSeconds(mode.generator.layout, mode.clock()) }]
      }),
  ]
}
