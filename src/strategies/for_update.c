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
  if (o.count == 1) {
    *granted = 1;
    op->g.fence = o.v[DBL_O_FENCE];
  }
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
  dbl_out o;
  return dbl_run(op, DBL_S_FU_PING, NULL, 0, &o, 0);
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
