-- Reverts 0006_fenced_check.sql.
DROP FUNCTION IF EXISTS ${schema}.${check}(text, bigint);
