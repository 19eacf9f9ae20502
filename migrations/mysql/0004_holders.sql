-- Who holds a for_update lock, published without a row write. A for_update
-- grant used to record its holder and fence in the lock row inside its
-- transaction, so every COMMIT had redo to flush; the grant now only locks
-- the row (SELECT ... FOR UPDATE writes no redo) and writes its holder here
-- in the same statement. ENGINE=MEMORY: no redo, empty after a restart (when
-- no lock is held anyway). A row here is trusted only while the name's row
-- is locked: the holder that locked it wrote it in the same statement.
CREATE TABLE ${table}_holders (
  name        VARBINARY(255) NOT NULL PRIMARY KEY,
  holder      VARCHAR(320) NOT NULL,
  session     BIGINT NOT NULL,
  acquired_at DATETIME(6) NOT NULL
) ENGINE=MEMORY;
