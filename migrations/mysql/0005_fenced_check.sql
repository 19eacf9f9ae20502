-- Fenced writes in the application's own transaction (docs/fencing.md).
-- ${check}(name, fence) — dblock_check with the default table, else
-- <table>_check — returns the fence when the lock name is held, at this
-- moment by the server's clock (SYSDATE: not the statement's start), by
-- the grant with that fence; else it raises SQLSTATE DBL01 with a message
-- naming the lock. Its read is a locking one (LOCK IN SHARE MODE), held
-- until the caller's transaction ends: no later grant of the name (a
-- takeover, a force-unlock, the reaper's delete) can commit before the
-- caller's writes do, and the holder's own renewal waits for them too.
-- Refused: outside a transaction (DBL04: the lock would end with the
-- statement), a for_update lock or any strategy but insert and
-- optimistic (DBL02: its holder's transaction holds the row), on a
-- Galera cluster (DBL03: a shared lock is local to its node and a read
-- does not certify, so a takeover on another node would not wait) and on
-- a read-only server (DBL03: a replica's lock is not seen by the
-- primary). NULL arguments: 22004. Roll the caller's transaction back on
-- any error it raises: MariaDB undoes only the failed statement. SQL SECURITY DEFINER: a caller needs
-- EXECUTE only. The name is a bound value: no dynamic SQL.
DROP FUNCTION IF EXISTS ${check};
CREATE FUNCTION ${check}(lock_name VARBINARY(255), lock_fence BIGINT) RETURNS BIGINT
  NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE s VARCHAR(16) DEFAULT NULL;
  DECLARE st INT DEFAULT NULL;
  DECLARE f BIGINT DEFAULT NULL;
  DECLARE ends DATETIME(6) DEFAULT NULL;
  DECLARE shown VARCHAR(300) DEFAULT CONVERT(lock_name USING utf8mb4);
  DECLARE msg VARCHAR(512);
  IF lock_name IS NULL OR lock_fence IS NULL THEN
    SIGNAL SQLSTATE '22004'
      SET MESSAGE_TEXT = 'dblock_check: the lock name and the fence must not be NULL';
  END IF;
  IF @@autocommit AND NOT @@in_transaction THEN
    SET msg = CONCAT('dblock_check: call it inside the transaction that writes (START TRANSACTION ... COMMIT): outside one, nothing holds lock "', shown, '" until the write');
    SIGNAL SQLSTATE 'DBL04' SET MESSAGE_TEXT = msg;
  END IF;
  IF @@global.wsrep_on THEN
    SET msg = CONCAT('dblock_check: refused on a Galera cluster (lock "', shown,
      '"): a shared lock is local to its node, so a takeover on another node would not wait for it');
    SIGNAL SQLSTATE 'DBL03' SET MESSAGE_TEXT = msg;
  END IF;
  IF @@global.read_only THEN
    SET msg = CONCAT('dblock_check: refused on a read-only server (lock "', shown,
      '"): a replica''s row lock is not seen by the primary, where the lock is granted');
    SIGNAL SQLSTATE 'DBL03' SET MESSAGE_TEXT = msg;
  END IF;
  -- (a plain read first: a shared lock on a held for_update row would
  -- wait for its holder)
  SELECT l.strategy INTO s FROM ${table} l WHERE l.name = lock_name AND l.name <> '';
  IF s NOT IN ('insert', 'optimistic') THEN
    SET msg = CONCAT('dblock_check: lock "', shown, '" is a ', s, ' lock, whose holder''s own transaction holds its row: take it with the insert or optimistic strategy for fenced writes');
    SIGNAL SQLSTATE 'DBL02' SET MESSAGE_TEXT = msg;
  END IF;
  SET s = NULL;
  SELECT l.strategy, l.state, l.fence, l.expires_at INTO s, st, f, ends
    FROM ${table} l WHERE l.name = lock_name AND l.name <> '' LOCK IN SHARE MODE;
  IF s IS NULL THEN
    SET msg = CONCAT('dblock_check: lock "', shown, '" does not exist: fence ', lock_fence, ' holds nothing');
    SIGNAL SQLSTATE 'DBL01' SET MESSAGE_TEXT = msg;
  ELSEIF s NOT IN ('insert', 'optimistic') THEN
    SET msg = CONCAT('dblock_check: lock "', shown, '" is a ', s, ' lock: take it with the insert or optimistic strategy for fenced writes');
    SIGNAL SQLSTATE 'DBL02' SET MESSAGE_TEXT = msg;
  ELSEIF st <> 1 THEN
    SET msg = CONCAT('dblock_check: lock "', shown, '" is not held (released, force-unlocked or reaped): fence ', lock_fence, ' is stale');
    SIGNAL SQLSTATE 'DBL01' SET MESSAGE_TEXT = msg;
  ELSEIF f <> lock_fence THEN
    SET msg = CONCAT('dblock_check: lock "', shown, '" is held by another grant, not by fence ', lock_fence);
    SIGNAL SQLSTATE 'DBL01' SET MESSAGE_TEXT = msg;
  ELSEIF ends IS NULL OR ends <= UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND THEN
    SET msg = CONCAT('dblock_check: the lease of lock "', shown, '" (fence ', f, ') ended at ', ends, ' UTC');
    SIGNAL SQLSTATE 'DBL01' SET MESSAGE_TEXT = msg;
  END IF;
  RETURN f;
END;
