/*
 * optimistic.c — the versioned compare-and-set strategy.
 *
 * Rows persist with a state and a version. Acquire is
 *   UPDATE ... SET state = held, version = version + 1, ...
 *   WHERE name = ? AND version = ? AND (free OR expired OR mine)
 * and exactly one updated row means granted. A fresh acquire names any
 * version (the state test keeps exclusion), so the uncontended cycle is
 * one statement to acquire and one to release; when that finds nothing
 * the row is read (and created, free, if it does not exist) and the CAS
 * names the version read.
 *
 * "Mine" (a reentrant hold: same fence, one more hold) is honoured only when
 * the core knows of a live hold (reent = 1); a row this owner left behind
 * (a release whose answer was lost, a handle declared lost) is taken over
 * as a fresh grant with a fresh fence.
 *
 * The statements are DBL_S_OPT_* in src/sql/ (one per dialect). Release
 * frees the row and leaves expires_at alone: no indexed column changes,
 * so PostgreSQL can update the row in place (a HOT update, no index
 * writes). A free row's old expiry only tells the reaper when it may
 * delete it.
 */
#include "lease.h"

/* One compare-and-set at version v. Returns 0 (granted), DBLOCK_EBUSY (no
 * row matched), or an error. A queued CAS (op->place.channel) also names the
 * row's strategy in row ("" when there is no row). */
static int cas(dbl_op *op, int64_t v, char *row, size_t size) {
  dbl_param p[8 + DBL_QUEUE_PARAMS];
  dbl_out o;
  int rc, n, queued = op->place.channel != NULL;
  p[0] = DBL_STR(op->token);
  p[1] = DBL_I64(op->thread);
  p[2] = DBL_I64(op->reentrant ? 1 : 0);
  p[3] = DBL_STR(op->host);
  p[4] = DBL_I64(op->pid);
  p[5] = DBL_I64(op->lease_ms * 1000);
  p[6] = DBL_TEXT(op->name, op->name_len);
  p[7] = DBL_I64(v);
  n = 8 + dbl_queue_params(op, p + 8);
  row[0] = 0;
  if ((rc = dbl_run(op, queued ? DBL_S_OPT_QUEUED : DBL_S_OPT_CAS, p, n, &o, queued)) != 0)
    return rc;
  if (queued ? dbl_queue_answer(op, &o, row, size) : o.count != 1) return DBLOCK_EBUSY;
  /* (a dialect that cannot return the version: the CAS moved it by one) */
  dbl_take_grant(op, &o, v + 1);
  return 0;
}

/* Reads the row's version and whether another owner holds it, creating
 * the row if missing. */
static int read_row(dbl_op *op, int64_t *version, int *held_by_other) {
  dbl_param p[5];
  dbl_out o;
  int rc;
  const char *strategy;
  p[0] = DBL_STR(op->token);
  p[1] = DBL_I64(op->thread);
  p[2] = DBL_TEXT(op->name, op->name_len);
  {
    dbl_param qp[DBL_QUEUE_PARAMS];
    dbl_queue_params(op, qp); /* (the first two: who is ahead of us) */
    p[3] = qp[0];
    p[4] = qp[1];
  }
  if ((rc = dbl_run(op, DBL_S_OPT_READ, p, 5, &o, 1)) != 0) return rc;
  if (o.res.nrows == 0) {
    dbl_res_clear(&o.res);
    if ((rc = dbl_run(op, DBL_S_OPT_CREATE, p + 2, 1, &o, 0)) != 0) return rc;
    *version = 0;
    *held_by_other = 0;
    return 0;
  }
  strategy = dbl_res_get(&o.res, 0, 2);
  if (strategy && strcmp(strategy, "for_update") == 0) {
    dbl_res_clear(&o.res);
    return dbl_err_set(op->e, DBLOCK_EMISMATCH, "", 0,
                       "lock '%.*s' is managed by the for_update strategy; "
                       "this client uses optimistic (once nobody holds it, `dblock forget "
                       "NAME` hands it over)",
                       (int)op->name_len, op->name);
  }
  *version = dbl_res_i64(&o.res, 0, 0);
  *held_by_other = dbl_res_i64(&o.res, 0, 1) != 0;
  dbl_res_clear(&o.res);
  return 0;
}

/* The version a CAS names: VERSION_ANY (-2) takes the row at whatever
 * version as long as it is free or expired — the state test in the same
 * UPDATE is what keeps exclusion — so an uncontended acquire is one
 * statement without knowing the row; a reentrant CAS names its own hold's
 * version (op->version_hint). (A per-client cache of versions served the
 * same purpose, a statement less than reading first, until the A/B in
 * docs/waiting.md showed this does as well: no cache.) */
#define VERSION_ANY (-2)

static int optimistic_acquire(dbl_op *op, int64_t wait_ms) {
  int64_t v = op->reentrant && op->version_hint >= 0 ? op->version_hint : VERSION_ANY;
  char row[16];
  int rc, other;
  /* Woken by a release: the name went round since (a look at the row
   * below is worth it: it may have been deleted meanwhile). */
  int woken = op->place.woken && !op->reentrant;
  (void)wait_ms;
  if ((rc = cas(op, v, row, sizeof row)) != DBLOCK_EBUSY) return rc;
  /* A queued CAS says why it missed. Kept out (held, or someone ahead in
   * the queue): wait. Not kept out: only the version was stale — take
   * the free row at whatever version, at once. */
  if (op->place.channel && row[0] && strcmp(row, "for_update") != 0) {
    if (!op->place.kept_out && (rc = cas(op, VERSION_ANY, row, sizeof row)) != DBLOCK_EBUSY)
      return rc;
    op->taken = 1;
    return DBLOCK_EBUSY;
  }
  /* The first attempt of a call, every 8th poll and a try that a wake-up
   * sent also read the row: it may be missing (never created, reaped,
   * deleted by an insert-strategy release) and need creating, or belong
   * to another strategy. Reading on every poll would give back the
   * holder's edge: a holder that releases and takes the name again at
   * once needs one statement, a waiter that reads first two. */
  if (op->attempt % 8 != 0 && !woken) return DBLOCK_EBUSY;
  /* Read (creating a missing row), and CAS again while the row keeps
   * moving but stays free. */
  for (int round = 0; round < 3; round++) {
    if ((rc = read_row(op, &v, &other)) != 0) return rc;
    if (other) {
      op->taken = 1;
      return DBLOCK_EBUSY;
    }
    if ((rc = cas(op, v, row, sizeof row)) != DBLOCK_EBUSY) return rc;
  }
  return DBLOCK_EBUSY;
}

static int optimistic_release(dbl_op *op, int final) {
  dbl_param p[5];
  dbl_out o;
  int rc;
  if (!final) return dbl_lease_release_inner(op);
  dbl_owner_params(op, p);
  if ((rc = dbl_run(op, DBL_S_OPT_FREE, p, 4, &o, 0)) != 0) return rc;
  if (o.count != 1) return DBLOCK_ELOST;
  op->g.version = o.v[DBL_O_VERSION];
  return 0;
}

const dbl_strategy dbl_strategy_optimistic = {
    .name = "optimistic",
    .id = DBLOCK_STRATEGY_OPTIMISTIC,
    .pins_connection = 0,
    .has_lease = 1,
    .acquire = optimistic_acquire,
    .release = optimistic_release,
    .renew = dbl_lease_renew,
    .released = dbl_lease_released,
};
