-- Reverts 0005_fenced_check.sql.
DROP FUNCTION IF EXISTS ${check};
