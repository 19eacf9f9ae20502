-- Reverts 0003_fence_epoch.sql.
DROP TABLE IF EXISTS ${table}_alive;
