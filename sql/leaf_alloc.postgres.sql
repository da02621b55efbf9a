-- Java Leaf's table in PostgreSQL's types (leaf.jdbc.url=jdbc:postgresql://... or postgres://...).
-- PostgreSQL has no ON UPDATE: Leaf-TS's statements set update_time themselves. update_time
-- is in UTC: every Leaf-TS session sets TimeZone to UTC.
CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag     varchar(128) NOT NULL DEFAULT '' PRIMARY KEY,
  max_id      bigint       NOT NULL DEFAULT 1,
  step        int          NOT NULL,
  description varchar(256)          DEFAULT NULL,
  update_time timestamp    NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

-- Seed rows; re-running this script leaves existing rows alone.
INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES
  ('order', 1, 2000, 'Orders'),
  ('leaf-segment-test', 1, 1000, 'Test leaf Segment Mode Get Id')
ON CONFLICT (biz_tag) DO NOTHING;
