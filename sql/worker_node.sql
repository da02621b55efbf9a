-- Baidu UidGenerator's table, unchanged (leaf.snowflake.worker-id.source=disposable): an existing
-- UidGenerator database keeps working. Every start inserts one row; its auto-increment ID is
-- that process's worker id, never handed out again. Leaf-TS creates the table itself when its
-- user may; otherwise run this script once.
CREATE TABLE IF NOT EXISTS WORKER_NODE (
  ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',
  HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',
  PORT VARCHAR(64) NOT NULL COMMENT 'port',
  TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',
  LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',
  MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',
  CREATED TIMESTAMP NOT NULL COMMENT 'created time',
  PRIMARY KEY(ID)
) COMMENT='DB WorkerID Assigner for UID Generator', ENGINE = INNODB;
