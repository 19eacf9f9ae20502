-- Reverts 0001_lock_table.sql (golang-migrate "down"): drops the lock table
-- and its fencing sequence. Every lock and fencing token is gone after it.
DROP SEQUENCE IF EXISTS ${table}_fence_seq;
DROP TABLE IF EXISTS ${table};
