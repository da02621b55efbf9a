-- Leaf-TS's hand-over table in PostgreSQL's types (sql/leaf_alloc_parked.sql says what it is
-- for). Optional; Leaf-TS creates it itself when its user may, otherwise run this script once.
CREATE TABLE IF NOT EXISTS leaf_alloc_parked (
  biz_tag   varchar(128)   NOT NULL,
  first_id  bigint         NOT NULL,
  end_id    bigint         NOT NULL,
  owner     varchar(64)    NOT NULL,
  parked_at timestamptz(3) NOT NULL DEFAULT now(),
  PRIMARY KEY (biz_tag, first_id)
);
CREATE INDEX IF NOT EXISTS leaf_alloc_parked_owner_tag ON leaf_alloc_parked (owner, biz_tag);
