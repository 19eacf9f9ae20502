-- dblock lock table (DESIGN §3). ${schema} and ${table} are placeholders
-- (Flyway syntax); dblock substitutes them, default public / dblock_locks.
-- One row per lock name. The row whose name is '' is not a lock: its fence
-- column holds the server epoch used in fencing tokens.
CREATE TABLE ${schema}.${table} (
  name          text COLLATE "C" NOT NULL PRIMARY KEY,
  strategy      text NOT NULL,
  state         smallint NOT NULL DEFAULT 0,      -- 0 free, 1 held
  version       bigint NOT NULL DEFAULT 0,        -- bumped on every change
  owner_host    text NOT NULL DEFAULT '',
  owner_pid     bigint NOT NULL DEFAULT 0,
  owner_thread  bigint NOT NULL DEFAULT 0,
  owner_token   text NOT NULL DEFAULT '',
  hold_count    integer NOT NULL DEFAULT 0,
  fence         bigint NOT NULL DEFAULT 0,
  acquired_at   timestamptz,
  renewed_at    timestamptz,
  expires_at    timestamptz
);
CREATE INDEX ${table}_expires_idx ON ${schema}.${table} (expires_at);
CREATE SEQUENCE ${schema}.${table}_fence_seq;
INSERT INTO ${schema}.${table} (name, strategy, fence) VALUES ('', 'epoch', 0);
