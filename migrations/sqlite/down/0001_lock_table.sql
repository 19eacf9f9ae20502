-- Reverts 0001_lock_table.sql (golang-migrate "down"): drops the lock table.
-- Every lock and fencing token is gone after it.
DROP TABLE IF EXISTS ${table};
