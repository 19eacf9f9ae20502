-- Fencing tokens that survive crashes (DESIGN §4.5). ${table}_alive holds the
-- epoch this running server vouches for; every granting statement reads it.
-- UNLOGGED: crash recovery empties it — also when one backend crashed and the
-- postmaster reinitialized without restarting — and a promoted standby has it
-- empty, so the next grant first bumps the durable epoch (the '' row of the
-- lock table) with a flushed commit. A clean shutdown keeps it (nothing was
-- lost). Insert-strategy releases now keep the row (state 0), so every name's
-- last fence stays as a floor for the next grant.
CREATE UNLOGGED TABLE ${schema}.${table}_alive (
  id    integer NOT NULL PRIMARY KEY,
  epoch bigint NOT NULL
);
