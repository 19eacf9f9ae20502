-- The database session that holds a for_update lock (pg_backend_pid()), so
-- an operator's force-unlock can end that session.
ALTER TABLE ${schema}.${table} ADD COLUMN owner_session bigint NOT NULL DEFAULT 0;
