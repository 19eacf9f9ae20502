-- Reverts 0002_owner_session.sql.
ALTER TABLE ${table} DROP COLUMN IF EXISTS owner_session;
