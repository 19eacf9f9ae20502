-- dblock lock table (DESIGN §3) for SQLite >= 3.35. ${table} is a
-- placeholder (Flyway syntax); dblock substitutes it, default dblock_locks.
-- Times are integer microseconds since the Unix epoch (this host's clock).
CREATE TABLE ${table} (
  name          TEXT NOT NULL PRIMARY KEY,
  strategy      TEXT NOT NULL,
  state         INTEGER NOT NULL DEFAULT 0,
  version       INTEGER NOT NULL DEFAULT 0,
  owner_host    TEXT NOT NULL DEFAULT '',
  owner_pid     INTEGER NOT NULL DEFAULT 0,
  owner_thread  INTEGER NOT NULL DEFAULT 0,
  owner_token   TEXT NOT NULL DEFAULT '',
  hold_count    INTEGER NOT NULL DEFAULT 0,
  fence         INTEGER NOT NULL DEFAULT 0,
  acquired_at   INTEGER,
  renewed_at    INTEGER,
  expires_at    INTEGER
);
CREATE INDEX ${table}_expires_idx ON ${table} (expires_at);
INSERT INTO ${table} (name, strategy, fence) VALUES ('', 'epoch', 0);
