/*
 * for_update.c — the pessimistic row-lock strategy.
 *
 * The lock is an open transaction holding the name's row locked. The
 * connection stays pinned to the lock until release, which ends the
 * transaction (COMMIT; on MariaDB ROLLBACK, see below).
 * Waiters wait in the server (lock_timeout / max_statement_time /
 * busy_timeout), so hand-over is immediate and nobody polls. If the
 * holder's process or connection dies, the server rolls the transaction
 * back and the name is free at once.
 *
 * The grant takes the row lock, draws a fence and publishes the holder,
 * in one statement. PostgreSQL: a SELECT … FOR UPDATE of the row that
 * writes nothing into it (no new row version for the waiters to chase),
 * draws the fence after the lock is granted, and sets its session's
 * application_name ("dblock FENCE PID THREAD HOST", cut at 63 bytes), SET
 * LOCAL: visible in pg_stat_activity at once, reverted by COMMIT/ROLLBACK,
 * found through the row's locker (xmax = backend_xid); the lock
 * transaction commits without a flush. MariaDB: an UPDATE of the row
 * (holder columns, fence, session id) that others read uncommitted; the
 * release is ROLLBACK (DBL_S_FU_RELEASE), which InnoDB never flushes. SQLite
 * publishes "ACQUIRED FENCE PID THREAD HOST" through the driver's
 * dblock_publish() (src/sql/sqlite.c FU_TAKE). Introspection finds a held
 * lock by probing its row lock and reads what its holder published.
 *
 * SQLite: the transaction is BEGIN IMMEDIATE, which locks the whole
 * database file for writing while held: one for_update lock at a time per
 * file, and every other writer waits.
 *
 * The statements are DBL_S_FU_* in src/sql/ (one per dialect); the
 * transaction is opened by the driver (dbl_driver.lock_begin).
 */
#include "lease.h"

#define NHOLDER 5
static void holder_params(const dbl_op *op, dbl_param *p) {
  p[0] = DBL_STR(op->host);
  p[1] = DBL_I64(op->pid);
  p[2] = DBL_I64(op->thread);
  p[3] = DBL_STR(op->token);
  p[4] = DBL_TEXT(op->name, op->name_len);
}

/* Opens the lock transaction and takes the name's row in it (the driver
 * sends as few round trips as its backend allows). *granted is set when
 * it locked the row (and op->g.fence is filled). */
static int open_and_take(dbl_op *op, int64_t wait_ms, int *granted) {
  dbl_param p[NHOLDER];
  dbl_out o;
  int rc;
  *granted = 0;
  holder_params(op, p);
  if ((rc = dbl_run_locking(op, DBL_S_FU_TAKE, p, NHOLDER, wait_ms, &o)) != 0) return rc;
  if (o.count != 1) return 0;
  op->g.fence = o.v[DBL_O_FENCE];
  *granted = 1;
  return 0;
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
  dbl_out o;
  int rc, other;
  if ((rc = dbl_row_strategy_is(op, "for_update", &other)) != 0) return rc;
  if (other) return DBLOCK_EMISMATCH;
  if ((rc = dbl_run(op, DBL_S_FU_CREATE, &p, 1, &o, 0)) != 0) return rc;
  if (op->drv->lock_manual_commit) return op->drv->commit(op->conn, op->e);
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
  /* (MariaDB: ROLLBACK — the grant's row write was only ever read
   * uncommitted, and a rollback costs no redo flush. A ROLLBACK cannot
   * tell, as a COMMIT can, that the server already aborted the
   * transaction while its session lived on; MariaDB does that to an idle
   * transaction only on Galera (a brute-force abort), where for_update is
   * refused, and otherwise ends the session, which the ROLLBACK sees.) */
  rc = op->defs[DBL_S_FU_RELEASE].sql ? dbl_run_script(op, DBL_S_FU_RELEASE)
                                      : op->drv->commit(op->conn, op->e);
  /* An end that fails on a dead session, or a COMMIT refused as a
   * deadlock / certification conflict (a multi-primary cluster: the
   * transaction is already rolled back, and a second COMMIT would
   * "succeed" on nothing): the lock was lost while held. Never retried as
   * a release. */
  return rc == DBLOCK_ECONN || rc == DBLOCK_ERETRY ? DBLOCK_ELOST : rc;
}

/* No lease to extend: check that the session holding the row lock is
 * still there. */
static int for_update_renew(dbl_op *op) {
  dbl_out o;
  return dbl_run(op, DBL_S_FU_PING, NULL, 0, &o, 0);
}

/* ---- introspection and force-unlock ---- */

/* Is the row's lock held? Probed without waiting: the probe returns the
 * row only if nobody holds it. Where a lock transaction locks the whole
 * database (no probe statement: SQLite) by trying to open one. */
static int probe_held(dbl_op *op, int *held) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  dbl_out o;
  int rc;
  if (op->defs[DBL_S_FU_PROBE].sql) {
    if ((rc = dbl_run(op, DBL_S_FU_PROBE, &p, 1, &o, 0)) != 0) return rc;
    *held = o.count == 0;
    return 0;
  }
  op->drv->set_lock_wait(op->conn, 0, op->e);
  rc = op->drv->begin(op->conn, op->e);
  op->drv->set_lock_wait(op->conn, 5000, op->e);
  if (rc == 0) {
    *held = 0;
    return op->drv->rollback(op->conn, op->e);
  }
  if (rc != DBLOCK_EBUSY) return rc;
  *held = 1;
  return 0;
}

/* Fills o's holder from what the holding session published
 * (DBL_S_FU_HOLDER, DBL_HOLDER_FORMAT); leaves it empty if that session
 * is not visible (a role that may not see other roles' sessions, or the
 * lock just ended). An entry whose fence is not above the committed row's
 * is an earlier holder's, whose grant has since committed: ignored. */
static int read_holder(dbl_op *op, dblock_lock_info *o, int64_t committed_fence) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  dbl_out r;
  long long fence, pid, thread;
  int host_at = 0, rc;
  const char *v;
  if ((rc = dbl_run(op, DBL_S_FU_HOLDER, &p, 1, &r, 1)) != 0) return rc;
  if (r.res.nrows == 1 && (v = dbl_res_get(&r.res, 0, 0)) &&
      sscanf(v, DBL_HOLDER_FORMAT, &fence, &pid, &thread, &host_at) == 3 && host_at &&
      fence > committed_fence) {
    o->fence = fence;
    o->owner_pid = pid;
    o->owner_thread = thread;
    snprintf(o->owner_host, sizeof o->owner_host, "%s", v + host_at);
    o->acquired_at_us = dbl_res_i64(&r.res, 0, 1);
  }
  dbl_res_clear(&r.res);
  return 0;
}

/* A for_update row is held while its row is locked, whatever its columns
 * say. Where the dialect reads what the holder published (PostgreSQL,
 * SQLite) the row's columns describe the last holder that committed
 * (SQLite) or nobody (PostgreSQL's grant writes nothing there), so they
 * are cleared rather than shown wrongly, and the publication fills them
 * in. MariaDB: the columns were read uncommitted, and are the holder's own (the read and the probe are two statements: a grant or a
 * release between them can make the columns those of the moment before). */
static int for_update_inspect(dbl_op *op, dblock_lock_info *o) {
  int rc, held;
  if ((rc = probe_held(op, &held)) != 0) return rc;
  o->held = held;
  if (held && op->defs[DBL_S_FU_HOLDER].sql) {
    int64_t committed_fence = o->fence;
    o->owner_host[0] = 0;
    o->owner_pid = o->owner_thread = 0;
    o->owner_token[0] = 0;
    o->fence = 0;
    o->acquired_at_us = 0;
    if ((rc = read_holder(op, o, committed_fence)) != 0) return rc;
    o->hold_count = 1;
  }
  if (!held) o->hold_count = 0;
  o->expires_at_us = 0;
  return 0;
}

/* A held for_update lock is a transaction: end it by ending its session.
 * PostgreSQL finds the session through the row's locker; MariaDB reads the
 * session id the holder published and kills that connection.
 * Either needs the right to end the holder's session (same user, or
 * pg_signal_backend / CONNECTION ADMIN). */
static int for_update_end_holder(dbl_op *op) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  dbl_out o;
  int64_t session;
  int rc;
  if (op->defs[DBL_S_FU_KILL_BY_NAME].sql)
    return dbl_run(op, DBL_S_FU_KILL_BY_NAME, &p, 1, &o, 0);
  if (!op->defs[DBL_S_FU_SESSION].sql)
    return dbl_err_set(op->e, DBLOCK_EUNSUPPORTED, "", 0,
                       "force-unlock of a held for_update lock is not possible on %s (the "
                       "holder is another process's open transaction)",
                       op->drv->name);
  if ((rc = dbl_run_script(op, DBL_S_DIRTY_READ)) != 0) return rc;
  if ((rc = dbl_run(op, DBL_S_FU_SESSION, &p, 1, &o, 1)) != 0) return rc;
  session = dbl_res_i64(&o.res, 0, 0);
  dbl_res_clear(&o.res);
  if (session <= 0) return 0;
  p = DBL_I64(session);
  rc = dbl_run(op, DBL_S_KILL_SESSION, &p, 1, &o, 0);
  /* (MariaDB 1094, unknown thread: the session ended by itself meanwhile) */
  return rc && op->e->native == 1094 ? 0 : rc;
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
    .inspect = for_update_inspect,
    .end_holder = for_update_end_holder,
};
