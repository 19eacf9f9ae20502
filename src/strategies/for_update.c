/*
 * for_update.c — the pessimistic row-lock strategy.
 *
 * The lock is an open transaction holding the name's row locked (an UPDATE
 * takes the same exclusive row lock as SELECT ... FOR UPDATE and also
 * records the holder and a new fence in the same statement). The
 * connection stays pinned to the lock until release, which is COMMIT.
 * Waiters wait in the server (lock_timeout / max_statement_time /
 * busy_timeout), so hand-over is immediate and nobody polls. If the
 * holder's process or connection dies, the server rolls the transaction
 * back and the name is free at once.
 *
 * The holder columns (and the holding session's id) are written inside the
 * transaction. Introspection finds a held lock by probing its row lock;
 * on MariaDB it reads the holder uncommitted (READ UNCOMMITTED).
 * PostgreSQL has no dirty reads, so the grant also publishes the holder
 * in its session's application_name ("dblock FENCE PID THREAD HOST", cut
 * at 63 bytes), SET LOCAL from the UPDATE's RETURNING: no extra statement,
 * visible in pg_stat_activity at once, reverted by COMMIT/ROLLBACK.
 * Introspection finds that session through the row's locker (xmax =
 * backend_xid). SQLite publishes "FENCE PID THREAD ACQUIRED HOST" the same
 * way through the driver's dblock_publish() (see sqlite.c).
 *
 * SQLite: the transaction is BEGIN IMMEDIATE, which locks the whole
 * database file for writing while held: one for_update lock at a time per
 * file, and every other writer waits.
 *
 * Parameters, in order: host, pid, thread, token, name.
 */
#include "fence.h"
#include "lease.h"

static const char *PG_TAKE =
    "UPDATE ${schema}.${table} SET "
    "fence = GREATEST(fence + 1, " DBL_PG_NEXT_FENCE "), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?::int8, "
    "owner_thread = ?::int8, owner_token = ?, acquired_at = statement_timestamp(), "
    "renewed_at = statement_timestamp(), expires_at = NULL, owner_session = pg_backend_pid() "
    "WHERE name = ? AND strategy = 'for_update' "
    "RETURNING fence, set_config('application_name', left('dblock ' || fence || ' ' || "
    "owner_pid || ' ' || owner_thread || ' ' || owner_host, 63), true)";
static const char *MY_TAKE =
    "UPDATE ${table} SET "
    "fence = LAST_INSERT_ID(GREATEST(fence + 1, " DBL_MY_NEXT_FENCE ")), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?, "
    "owner_thread = ?, owner_token = ?, acquired_at = UTC_TIMESTAMP(6), "
    "renewed_at = UTC_TIMESTAMP(6), expires_at = NULL, owner_session = CONNECTION_ID() "
    "WHERE name = ? AND strategy = 'for_update'";
static const char *LITE_TAKE =
    "UPDATE ${table} SET fence = MAX(fence + 1, " DBL_LITE_NEXT_FENCE "), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?, "
    "owner_thread = ?, owner_token = ?, acquired_at = dblock_now_us(), "
    "renewed_at = dblock_now_us(), expires_at = NULL "
    "WHERE name = ? AND strategy = 'for_update' "
    "RETURNING fence, dblock_publish('${table}' || char(31) || name, fence || ' ' || "
    "owner_pid || ' ' || owner_thread || ' ' || acquired_at || ' ' || owner_host)";

/* The row a name's lock lives on, created free and committed on first use
 * so that every session can see (and probe) it. */
static const char *PG_CREATE =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0) ON CONFLICT (name) DO NOTHING";
static const char *MY_CREATE =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0)";
static const char *LITE_CREATE =
    "INSERT INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0) ON CONFLICT (name) DO NOTHING";

#define NHOLDER 5
static void holder_params(const dbl_op *op, dbl_param *p) {
  p[0] = DBL_STR(op->host);
  p[1] = DBL_I64(op->pid);
  p[2] = DBL_I64(op->thread);
  p[3] = DBL_STR(op->token);
  p[4] = DBL_TEXT(op->name, op->name_len);
}

/* Runs a take/create statement inside the open transaction. *granted is
 * set when it locked the row (and op->g.fence is filled). */
static int take(dbl_op *op, const char *tmpl, int *granted) {
  dbl_param p[NHOLDER];
  dbl_res r;
  int rc;
  const char *sql = op->sql(op, tmpl);
  *granted = 0;
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  holder_params(op, p);
  if ((rc = op->drv->query(op->conn, sql, p, NHOLDER, &r, op->e)) != 0) return rc;
  if (op->drv->dialect == DBL_MY) {
    if (r.affected == 1) {
      *granted = 1;
      op->g.fence = r.insert_id;
    }
  } else if (r.nrows == 1) {
    *granted = 1;
    op->g.fence = dbl_res_i64(&r, 0, 0);
  }
  dbl_res_clear(&r);
  return 0;
}

/* Opens the transaction and runs the first take. PostgreSQL sends BEGIN,
 * the lock wait and the UPDATE in one pipelined round trip; MySQL keeps
 * autocommit off on its lock connections so the UPDATE itself opens the
 * transaction; SQLite takes the file's write lock with BEGIN IMMEDIATE. */
static int open_and_take(dbl_op *op, int64_t wait_ms, int *granted) {
  int rc;
  *granted = 0;
  if (op->drv->dialect == DBL_PG) {
    char tmo[32];
    dbl_param wp, p[NHOLDER];
    dbl_res r;
    dbl_stmt s[4];
    const char *sql = op->sql(op, PG_TAKE);
    if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
    /* lock_timeout 0 would mean "forever", so a try waits 1 ms. */
    snprintf(tmo, sizeof tmo, "%lldms",
             (long long)(wait_ms < 0 ? 0 : wait_ms == 0 ? 1 : wait_ms));
    wp = DBL_STR(tmo);
    holder_params(op, p);
    s[0] = (dbl_stmt){"BEGIN", NULL, 0};
    s[1] = (dbl_stmt){"SELECT set_config('lock_timeout', ?, true)", &wp, 1};
    /* Only a row lock and values that die with a crash anyway (the epoch
     * protects fences) are written: the commit need not wait for a flush. */
    s[2] = (dbl_stmt){"SET LOCAL synchronous_commit = off", NULL, 0};
    s[3] = (dbl_stmt){sql, p, NHOLDER};
    if ((rc = op->drv->pipeline(op->conn, s, 4, &r, op->e)) != 0) return rc;
    if (r.nrows == 1) {
      *granted = 1;
      op->g.fence = dbl_res_i64(&r, 0, 0);
    }
    dbl_res_clear(&r);
    return 0;
  }
  if ((rc = op->drv->set_lock_wait(op->conn, wait_ms, op->e)) != 0) return rc;
  if (op->drv->dialect == DBL_MY) {
    if ((rc = op->drv->set_autocommit(op->conn, 0, op->e)) != 0) return rc;
    return take(op, MY_TAKE, granted);
  }
  if ((rc = op->drv->begin(op->conn, op->e)) != 0) return rc;
  return take(op, LITE_TAKE, granted);
}

/* Ends the transaction opened by a failed attempt, if the session is
 * still there to end it. */
static void end_txn(dbl_op *op) {
  dbl_err scratch;
  memset(&scratch, 0, sizeof scratch);
  if (!op->drv->broken(op->conn)) op->drv->rollback(op->conn, &scratch);
}

/* Creates the name's row (committed), or reports that it belongs to
 * another strategy. */
static int create_row(dbl_op *op) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  int rc, other;
  const char *sql = op->sql(op, dbl_pick(op, PG_CREATE, MY_CREATE, LITE_CREATE));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  if ((rc = dbl_row_strategy_is(op, "for_update", &other)) != 0) return rc;
  if (other) return DBLOCK_EMISMATCH;
  if ((rc = op->drv->query(op->conn, sql, &p, 1, NULL, op->e)) != 0) return rc;
  /* MySQL lock connections run with autocommit off. */
  if (op->drv->dialect == DBL_MY) return op->drv->commit(op->conn, op->e);
  return 0;
}

static int for_update_acquire(dbl_op *op, int64_t wait_ms) {
  int rc = 0, granted = 0;
  for (int round = 0; round < 3; round++) {
    if ((rc = open_and_take(op, wait_ms, &granted)) != 0 || granted) break;
    /* No row to lock: the name is new, or managed by another strategy. */
    end_txn(op);
    if ((rc = create_row(op)) != 0) break;
  }
  if (rc == 0 && !granted) rc = DBLOCK_EBUSY;
  if (rc == 0) {
    op->g.holds = 1;
    op->g.expires_us = 0;
    return 0;
  }
  /* Busy, a lock wait that ran out, or an error: the transaction may still
   * be open (or aborted), so end it. The core reads a timeout as busy. */
  end_txn(op);
  return rc;
}

static int for_update_release(dbl_op *op, int final) {
  int rc;
  if (!final) return 0;
  rc = op->drv->commit(op->conn, op->e);
  /* A commit that fails on a dead session, or is refused as a deadlock /
   * certification conflict (a multi-primary cluster: the transaction is
   * already rolled back, and a second COMMIT would "succeed" on nothing):
   * the lock was lost while held. Never retried as a release. */
  return rc == DBLOCK_ECONN || rc == DBLOCK_ERETRY ? DBLOCK_ELOST : rc;
}

/* No lease to extend: check that the session holding the row lock is
 * still there. */
static int for_update_renew(dbl_op *op) {
  if (op->drv->dialect == DBL_LITE) return 0;
  return op->drv->query(op->conn, "SELECT 1", NULL, 0, NULL, op->e);
}

const dbl_strategy dbl_strategy_for_update = {
    .name = "for_update",
    .id = DBLOCK_STRATEGY_FOR_UPDATE,
    .pins_connection = 1,
    .node_local = 1,
    .has_lease = 0,
    .acquire = for_update_acquire,
    .release = for_update_release,
    .renew = for_update_renew,
};
