-- Reverts 0004_holders.sql.
DROP TABLE IF EXISTS ${table}_holders;
