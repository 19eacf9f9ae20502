-- Kept in step with the other backends; SQLite has no sessions to end.
ALTER TABLE ${table} ADD COLUMN owner_session INTEGER NOT NULL DEFAULT 0;
