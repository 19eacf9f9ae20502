-- dblock-bank demo: one account. No fence column: a fenced write checks
-- its lock's fence in its own transaction (dblock_check, docs/fenced-writes.md).
DROP TABLE IF EXISTS dblock_bank_account;
CREATE TABLE dblock_bank_account (
  id          INT PRIMARY KEY,
  balance     BIGINT NOT NULL
) ENGINE=InnoDB;
INSERT INTO dblock_bank_account (id, balance) VALUES (1, 200);
