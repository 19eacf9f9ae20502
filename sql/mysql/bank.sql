-- dblock-bank demo: one account. last_fence is the newest fencing token
-- the account accepted; a write carrying an older token is refused.
DROP TABLE IF EXISTS dblock_bank_account;
CREATE TABLE dblock_bank_account (
  id          INT PRIMARY KEY,
  balance     BIGINT NOT NULL,
  last_fence  BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB;
INSERT INTO dblock_bank_account (id, balance) VALUES (1, 200);
