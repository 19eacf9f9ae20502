-- Reverts 0003_fence_epoch.sql.
DROP TABLE IF EXISTS ${schema}.${table}_alive;
