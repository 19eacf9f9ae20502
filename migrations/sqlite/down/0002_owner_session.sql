-- Reverts 0002_owner_session.sql (SQLite >= 3.35 drops columns).
ALTER TABLE ${table} DROP COLUMN owner_session;
