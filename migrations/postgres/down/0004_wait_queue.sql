-- Reverts 0004_wait_queue.sql.
DROP FUNCTION IF EXISTS ${schema}.${table}_hand_off(text);
DROP TABLE IF EXISTS ${schema}.${table}_queue;
