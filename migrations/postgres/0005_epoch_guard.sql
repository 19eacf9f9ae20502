-- The vouched fencing epoch stays put while the server runs (DESIGN §4.5).
-- A granting statement reads ${table}_alive in the snapshot it took before
-- waiting for its row; if the epoch there changed meanwhile, a waiter that
-- read the old one could be granted a token below a newcomer's that read
-- the new one. dblock's bump fills the table once per loss and never
-- changes it; this makes the server refuse what would change it anyway: a
-- client older than this migration racing a newer one after a crash (its
-- vouch raised the epoch in place), or a DELETE by hand while clients run.
-- TRUNCATE stays allowed, for use with the clients stopped (it is what a
-- crash does): it waits for every transaction that read the table — every
-- held for_update lock among them — and every grant queues behind it.
CREATE OR REPLACE FUNCTION ${schema}.${table}_alive_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.epoch IS NOT DISTINCT FROM OLD.epoch AND NEW.id = OLD.id THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'dblock: the fencing epoch in %.% may not change while the server runs (TRUNCATE it to make the next grant advance the epoch, as after a crash)',
    TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '55000';
END
$$;
DROP TRIGGER IF EXISTS ${table}_alive_kept ON ${schema}.${table}_alive;
CREATE TRIGGER ${table}_alive_kept BEFORE UPDATE OR DELETE ON ${schema}.${table}_alive
  FOR EACH ROW EXECUTE FUNCTION ${schema}.${table}_alive_kept();
