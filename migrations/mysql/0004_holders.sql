-- Who holds a for_update lock, published without a row write. A for_update
-- grant used to record its holder and fence in the lock row inside its
-- transaction, so every COMMIT had redo to flush; the grant now only locks
-- the row (SELECT ... FOR UPDATE writes no redo) and writes its holder here
-- right after. ENGINE=MEMORY: no redo, empty after a restart (when no lock
-- is held anyway). The release deletes the entry right after its COMMIT, so an
-- entry is there only while its holder holds the name (or, after a holder's
-- session died, until the next holder replaces it): at most one row per
-- held name.
CREATE TABLE ${table}_holders (
  name        VARBINARY(255) NOT NULL PRIMARY KEY,
  holder      VARBINARY(320) NOT NULL,
  session     BIGINT NOT NULL,
  acquired_at DATETIME(6) NOT NULL
) ENGINE=MEMORY;
