-- dblock lock table (DESIGN §3) for MariaDB >= 10.6. ${table} is a
-- placeholder (Flyway syntax); dblock substitutes it, default dblock_locks.
-- Names are VARBINARY so 'a', 'A' and 'a ' are distinct keys. Times are
-- DATETIME(6) in UTC. The row whose name is '' holds the server epoch.
CREATE TABLE ${table} (
  name          VARBINARY(255) NOT NULL PRIMARY KEY,
  strategy      VARCHAR(16) NOT NULL,
  state         TINYINT NOT NULL DEFAULT 0,
  version       BIGINT NOT NULL DEFAULT 0,
  owner_host    VARCHAR(255) NOT NULL DEFAULT '',
  owner_pid     BIGINT NOT NULL DEFAULT 0,
  owner_thread  BIGINT NOT NULL DEFAULT 0,
  owner_token   VARCHAR(32) NOT NULL DEFAULT '',
  hold_count    INT NOT NULL DEFAULT 0,
  fence         BIGINT NOT NULL DEFAULT 0,
  acquired_at   DATETIME(6) NULL,
  renewed_at    DATETIME(6) NULL,
  expires_at    DATETIME(6) NULL,
  KEY ${table}_expires_idx (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE SEQUENCE ${table}_fence_seq;
INSERT INTO ${table} (name, strategy, fence) VALUES ('', 'epoch', 0);
