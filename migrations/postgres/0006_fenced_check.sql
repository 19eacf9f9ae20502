-- Fenced writes in the application's own transaction (docs/fencing.md).
-- ${check}(name, fence) — dblock_check with the default table, else
-- <table>_check — returns the fence when the lock name is held, at this
-- moment by the server's clock (clock_timestamp(), not the transaction's
-- start), by the grant with that fence; else it raises SQLSTATE DBL01
-- with a message naming the lock. It also takes the lock row FOR SHARE,
-- held until the caller's transaction ends: no later grant of the name
-- (a takeover, a force-unlock, the reaper's delete) can commit before the
-- caller's writes do, and the holder's own renewal waits for them too.
-- A for_update lock (or any strategy but insert and optimistic) is
-- refused (DBL02): its holder's session holds the row, so the shared lock
-- would wait for the holder itself. NULL arguments: 22004. Call it inside
-- the transaction that writes, and roll that transaction back on any
-- error it raises (a savepoint around it undoes the row lock too). SECURITY DEFINER with a fixed search_path: a caller
-- needs EXECUTE only, which PUBLIC does not have (GRANT it to the
-- application's role). The name is a bound value: no dynamic SQL.
CREATE OR REPLACE FUNCTION ${schema}.${check}(lock_name text, lock_fence bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  s text;
  st smallint;
  f bigint;
  ends timestamptz;
BEGIN
  IF lock_name IS NULL OR lock_fence IS NULL THEN
    RAISE EXCEPTION 'dblock_check: the lock name and the fence must not be NULL'
      USING ERRCODE = '22004';
  END IF;
  -- (a plain read first: a shared lock on a held for_update row would
  -- wait for its holder)
  SELECT l.strategy INTO s FROM ${schema}.${table} l WHERE l.name = lock_name AND l.name <> '';
  IF s NOT IN ('insert', 'optimistic') THEN
    RAISE EXCEPTION 'dblock_check: lock "%" is a for_update lock, whose holder''s own session holds its row: take it with the insert or optimistic strategy for fenced writes', lock_name
      USING ERRCODE = 'DBL02';
  END IF;
  SELECT l.strategy, l.state, l.fence, l.expires_at INTO s, st, f, ends
    FROM ${schema}.${table} l WHERE l.name = lock_name AND l.name <> '' FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'dblock_check: lock "%" does not exist: fence % holds nothing', lock_name, lock_fence
      USING ERRCODE = 'DBL01';
  ELSIF s NOT IN ('insert', 'optimistic') THEN
    RAISE EXCEPTION 'dblock_check: lock "%" is a % lock: take it with the insert or optimistic strategy for fenced writes', lock_name, s
      USING ERRCODE = 'DBL02';
  ELSIF st <> 1 THEN
    RAISE EXCEPTION 'dblock_check: lock "%" is not held (released, force-unlocked or reaped): fence % is stale', lock_name, lock_fence
      USING ERRCODE = 'DBL01';
  ELSIF f <> lock_fence THEN
    RAISE EXCEPTION 'dblock_check: lock "%" is held by another grant, not by fence %', lock_name, lock_fence
      USING ERRCODE = 'DBL01';
  ELSIF ends IS NULL OR ends <= clock_timestamp() THEN
    RAISE EXCEPTION 'dblock_check: the lease of lock "%" (fence %) ended at %', lock_name, f, ends
      USING ERRCODE = 'DBL01';
  END IF;
  RETURN f;
END
$$;
REVOKE ALL ON FUNCTION ${schema}.${check}(text, bigint) FROM PUBLIC;
