-- Leaf-TS's worker-id lease pool (leaf.snowflake.worker-id.source=db-lease), beside leaf_alloc.
-- One row per (pool = leaf.name, worker id). Times are the database's NOW(3) in UTC (every
-- Leaf-TS session sets time_zone = '+00:00'); issued_until is the last millisecond, by the
-- holders' clocks, that any holder of the id may have issued. Leaf-TS creates the table
-- itself when its user may; otherwise run this script once.
CREATE TABLE IF NOT EXISTS `leaf_worker_lease` (
  `pool` varchar(128) NOT NULL,
  `worker_id` int(11) NOT NULL,
  `owner` varchar(64) DEFAULT NULL,
  `address` varchar(255) DEFAULT NULL,
  `expires_at` datetime(3) NOT NULL,
  `issued_until` bigint(20) NOT NULL DEFAULT '0',
  `update_time` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (`pool`, `worker_id`)
) ENGINE=InnoDB;
