-- Java Leaf's table, unchanged: an existing leaf_alloc works as it is.
CREATE TABLE IF NOT EXISTS `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

-- Seed rows; re-running this script leaves existing rows alone.
INSERT IGNORE INTO leaf_alloc (biz_tag, max_id, step, description) VALUES
  ('order', 1, 2000, 'Orders'),
  ('leaf-segment-test', 1, 1000, 'Test leaf Segment Mode Get Id');
