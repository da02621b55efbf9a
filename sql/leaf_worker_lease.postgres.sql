-- Leaf-TS's worker-id lease pool (leaf.snowflake.worker-id.source=db-lease) in PostgreSQL's
-- types; sql/leaf_worker_lease.sql explains the columns. Times are the database's
-- statement_timestamp(), to the millisecond. Leaf-TS creates the table itself when its user
-- may; otherwise run this script once.
CREATE TABLE IF NOT EXISTS leaf_worker_lease (
  pool           varchar(128)   NOT NULL,
  worker_id      int            NOT NULL,
  owner          varchar(64)    DEFAULT NULL,
  address        varchar(255)   DEFAULT NULL,
  expires_at     timestamptz(3) NOT NULL,
  issued_until   bigint         NOT NULL DEFAULT 0,
  generation     bigint         NOT NULL DEFAULT 0,
  lease_ms       int            DEFAULT NULL,
  released_until bigint         DEFAULT NULL,
  released_at    timestamptz(3) DEFAULT NULL,
  update_time    timestamptz(3) NOT NULL DEFAULT now(),
  PRIMARY KEY (pool, worker_id)
);
