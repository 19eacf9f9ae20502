-- Fencing tokens that survive crashes (DESIGN §4.5). ${table}_alive holds the
-- epoch this running server vouches for; every granting statement reads it.
-- ENGINE=MEMORY: empty after every server start (and never replicated by
-- Galera: each node vouches for itself), so the next grant first bumps the
-- durable epoch (the '' row of the lock table). Insert-strategy releases now
-- keep the row (state 0), so every name's last fence stays as a floor.
CREATE TABLE ${table}_alive (
  id    INT NOT NULL PRIMARY KEY,
  epoch BIGINT NOT NULL
) ENGINE=MEMORY;
