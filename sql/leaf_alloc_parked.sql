-- Leaf-TS's hand-over table, beside leaf_alloc: the IDs a stopping instance reserved and never
-- handed out, when it could not give them back to max_id (another instance reserved since),
-- kept for the next start with the same identity (its warm-start file's), which takes them
-- before it reserves anything. Optional: without it those IDs are lost, as in Java Leaf.
-- Leaf-TS creates the table itself when its user may; otherwise run this script once.
CREATE TABLE IF NOT EXISTS `leaf_alloc_parked` (
  `biz_tag` varchar(128) NOT NULL,
  `first_id` bigint(20) NOT NULL,
  `end_id` bigint(20) NOT NULL,
  `owner` varchar(64) NOT NULL,
  `parked_at` timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (`biz_tag`, `first_id`),
  KEY `owner_tag` (`owner`, `biz_tag`)
) ENGINE=InnoDB;
