-- The database session that holds a for_update lock (CONNECTION_ID()), so
-- an operator's force-unlock can end that session with KILL CONNECTION.
ALTER TABLE ${table} ADD COLUMN owner_session BIGINT NOT NULL DEFAULT 0;
