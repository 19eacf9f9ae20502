-- Reverts 0003_fence_epoch.sql.
DROP TRIGGER IF EXISTS ${table}_fence_hw_ins;
DROP TRIGGER IF EXISTS ${table}_fence_hw_upd;
