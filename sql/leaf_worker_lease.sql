-- Leaf-TS's worker-id lease pool (leaf.snowflake.worker-id.source=db-lease), beside leaf_alloc.
-- One row per (pool = leaf.name, worker id). Times are the database's NOW(3) in UTC (every
-- Leaf-TS session sets time_zone = '+00:00').
-- - owner: the token of one claim (NULL: released); generation counts claims and renewals, and
--   lease_ms is the TTL its holder asked for: a claimant takes over a holder that stopped only
--   after seeing its row unchanged that long, whatever NOW(3) says (docs/worker-ids.md).
-- - issued_until: the last millisecond, by the holders' clocks, that any holder of the id may
--   have issued; it only rises.
-- - released_until: the millisecond the last holder actually reached, written by its release,
--   and read only while that release is the row's last write (released_at = expires_at).
-- Leaf-TS creates the table itself when its user may, and adds the columns a table of an
-- earlier version lacks (generation, lease_ms, released_until, released_at); otherwise run this
-- script once, or those ALTER TABLE ... ADD COLUMN statements.
CREATE TABLE IF NOT EXISTS `leaf_worker_lease` (
  `pool` varchar(128) NOT NULL,
  `worker_id` int(11) NOT NULL,
  `owner` varchar(64) DEFAULT NULL,
  `address` varchar(255) DEFAULT NULL,
  `expires_at` datetime(3) NOT NULL,
  `issued_until` bigint(20) NOT NULL DEFAULT '0',
  `generation` bigint(20) NOT NULL DEFAULT '0',
  `lease_ms` int(11) DEFAULT NULL,
  `released_until` bigint(20) DEFAULT NULL,
  `released_at` datetime(3) DEFAULT NULL,
  `update_time` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (`pool`, `worker_id`)
) ENGINE=InnoDB;
