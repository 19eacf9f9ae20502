-- Reverts 0005_epoch_guard.sql.
DROP TRIGGER IF EXISTS ${table}_alive_kept ON ${schema}.${table}_alive;
DROP FUNCTION IF EXISTS ${schema}.${table}_alive_kept();
