-- The wait queue (push wake-up and fair mode, DESIGN §6). A blocking waiter
-- takes a ticket here in the same statement as its failed attempt; a release
-- gives the turn to the oldest live ticket of the name and wakes its client
-- with NOTIFY on the client's channel. A ticket past alive_until is dead (its
-- waiter refreshes it on every poll); a turn past turn_until is forfeit.
-- UNLOGGED: the queue only decides who tries first, never who holds a lock;
-- a crash empties it and the waiters go on polling and re-queue.
CREATE UNLOGGED TABLE ${schema}.${table}_queue (
  ticket      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name        text COLLATE "C" NOT NULL,
  channel     text NOT NULL,
  turn_len    interval NOT NULL,
  alive_until timestamptz NOT NULL,
  turn_until  timestamptz
);
CREATE INDEX ${table}_queue_name_idx ON ${schema}.${table}_queue (name, ticket);
-- A release calls this when the name has tickets: the oldest live ticket
-- that has not had a turn, or whose turn still runs, gets the turn and its
-- client a NOTIFY. The release then commits without waiting for its flush
-- (the waiter's grant, flushed, carries it to disk). Returns the tickets
-- told (0 or 1).
CREATE OR REPLACE FUNCTION ${schema}.${table}_hand_off(lock_name text) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  WITH n AS (
    UPDATE ${schema}.${table}_queue q
       SET turn_until = statement_timestamp() + q.turn_len,
           alive_until = GREATEST(q.alive_until, statement_timestamp() + q.turn_len)
     WHERE q.ticket = (SELECT w.ticket FROM ${schema}.${table}_queue w
                        WHERE w.name = lock_name
                          AND (w.turn_until IS NULL OR w.turn_until > statement_timestamp())
                          AND w.alive_until > statement_timestamp()
                        ORDER BY w.ticket LIMIT 1)
    RETURNING CASE WHEN q.channel <> '' THEN pg_notify(q.channel, q.ticket::text) END,
              set_config('synchronous_commit', 'off', true))
  SELECT count(*) FROM n
$$;
