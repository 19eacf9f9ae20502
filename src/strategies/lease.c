/*
 * lease.c — what the strategies share: running a statement by id on op's
 * connection (src/sql/run.c), filling a grant from a result, and what the
 * two lease-based strategies (insert, optimistic) have in common: the
 * owner-checked renewal and the owner-checked release of an inner
 * reentrant hold. Every owner-checked
 * statement names the row by (name, owner token, owner thread, fence), so
 * it can only ever touch this owner's grant.
 */
#include <string.h>
#include <time.h>

#include "lease.h"

/* The statements' view of op. */
static dbl_sqlrun runner(const dbl_op *op) {
  dbl_sqlrun x = {op->drv, op->conn, op->defs, op->sqls, op->table, op->e};
  return x;
}

int dbl_run(dbl_op *op, dbl_sid id, const dbl_param *lp, int nlp, dbl_out *o, int keep) {
  dbl_sqlrun x = runner(op);
  return dbl_sql_run(&x, id, lp, nlp, o, keep);
}

int dbl_run_locking(dbl_op *op, dbl_sid id, const dbl_param *lp, int nlp, int64_t wait_ms,
                    dbl_out *o) {
  dbl_sqlrun x = runner(op);
  return dbl_sql_run_locking(&x, id, lp, nlp, wait_ms, o);
}

int dbl_run_script(dbl_op *op, dbl_sid id) {
  dbl_sqlrun x = runner(op);
  return dbl_sql_script(&x, id);
}

void dbl_take_grant(dbl_op *op, const dbl_out *o, int64_t version) {
  int64_t fence = o->v[DBL_O_FENCE];
  /* Without the row's hold count (MySQL's UPDATE returns no row): the same
   * fence on a reentrant call is one more hold, else a fresh grant. */
  op->g.holds = o->has[DBL_O_HOLDS] ? (int)o->v[DBL_O_HOLDS]
                : op->reentrant && fence == op->g.fence ? op->g.holds + 1 : 1;
  op->g.fence = fence;
  op->g.expires_us = o->has[DBL_O_EXPIRES] ? o->v[DBL_O_EXPIRES] : dbl_estimate_expiry(op);
  op->g.version = o->has[DBL_O_VERSION] ? o->v[DBL_O_VERSION] : version;
}

void dbl_owner_params(const dbl_op *op, dbl_param *p) {
  p[0] = DBL_TEXT(op->name, op->name_len);
  p[1] = DBL_STR(op->token);
  p[2] = DBL_I64(op->thread);
  p[3] = DBL_I64(op->g.fence);
}

int64_t dbl_estimate_expiry(const dbl_op *op) {
  struct timespec ts;
  /* MySQL's UPDATE cannot return the new expiry, and asking would cost a
   * round trip: estimate it from the local clock corrected by the offset
   * to the server clock measured when the connection opened. */
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + op->clock_offset_us +
         op->lease_ms * 1000;
}

/* One owner-checked UPDATE that must touch exactly one row; 0 rows means
 * the grant is gone (DBLOCK_ELOST). Reads back the version and, for a
 * renewal, the expiry. */
static int owner_update(dbl_op *op, dbl_sid id, int with_lease) {
  dbl_param p[5];
  dbl_out o;
  int n = 0, rc;
  if (with_lease) p[n++] = DBL_I64(op->lease_ms * 1000);
  dbl_owner_params(op, p + n);
  if ((rc = dbl_run(op, id, p, n + 4, &o, 0)) != 0) return rc;
  if (o.count != 1)
    return dbl_err_set(op->e, DBLOCK_ELOST, "", 0,
                       "lock was lost (expired and taken over, or force-unlocked)");
  if (with_lease)
    op->g.expires_us = o.has[DBL_O_EXPIRES] ? o.v[DBL_O_EXPIRES] : dbl_estimate_expiry(op);
  if (o.has[DBL_O_VERSION]) op->g.version = o.v[DBL_O_VERSION];
  return 0;
}

int dbl_lease_renew(dbl_op *op) { return owner_update(op, DBL_S_LEASE_RENEW, 1); }

int dbl_lease_release_inner(dbl_op *op) { return owner_update(op, DBL_S_LEASE_DECR, 0); }

/* After a final release whose reply was lost. Our release frees the row
 * and leaves owner and fence as they were; a force-unlock clears the owner
 * and advances the fence, and any grant since writes its own owner and
 * fence. So a free row still naming this grant is the first release's
 * work, and nothing else is. */
int dbl_lease_released(dbl_op *op) {
  dbl_param p[4];
  dbl_out o;
  int rc;
  dbl_owner_params(op, p);
  if ((rc = dbl_run(op, DBL_S_LEASE_FREED, p, 4, &o, 0)) != 0) return rc;
  if (o.count != 1)
    return dbl_err_set(op->e, DBLOCK_ELOST, "", 0,
                       "lock was lost before release (force-unlocked or taken over)");
  op->g.version = o.v[DBL_O_VERSION];
  return 0;
}

int dbl_queue_params(const dbl_op *op, dbl_param *p) {
  const dbl_place *w = &op->place;
  p[0] = DBL_I64(w->ticket ? w->ticket : INT64_MAX);
  p[1] = DBL_I64(w->fair);
  if (!w->channel) return 2;
  p[2] = DBL_I64(w->ticket);
  p[3] = DBL_I64(1);
  p[4] = DBL_STR(w->channel);
  p[5] = DBL_I64(w->alive_us);
  p[6] = DBL_I64(w->turn_us);
  return 7;
}

int dbl_queue_answer(dbl_op *op, dbl_out *o, char *strategy, size_t size) {
  int64_t t = o->res.nrows == 1 ? dbl_res_i64(&o->res, 0, 4) : 0;
  int busy = t > 0 || o->count == 0;
  const char *st = t > 0 ? dbl_res_get(&o->res, 0, 5) : NULL;
  op->place.ticket = t > 0 ? t : 0;
  op->place.kept_out = t > 0 ? dbl_res_i64(&o->res, 0, 6) != 0 : 1;
  if (strategy) snprintf(strategy, size, "%s", st ? st : "");
  dbl_res_clear(&o->res);
  return busy;
}

/* Is the row for this name owned by another strategy? Used only after an
 * attempt failed, to turn "busy" into a clear mismatch error. */
int dbl_row_strategy_is(dbl_op *op, const char *strategy, int *is_other) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  dbl_out o;
  int rc;
  const char *row;
  *is_other = 0;
  if ((rc = dbl_run(op, DBL_S_ROW_STRATEGY, &p, 1, &o, 1)) != 0) return rc;
  row = o.res.nrows == 1 ? dbl_res_get(&o.res, 0, 0) : NULL;
  if (row && strcmp(row, strategy) != 0) {
    /* insert and optimistic keep the same row contract: they mix safely. */
    int lease_pair = strcmp(strategy, "for_update") != 0 && strcmp(row, "for_update") != 0;
    *is_other = !lease_pair;
    if (*is_other)
      dbl_err_set(op->e, DBLOCK_EMISMATCH, "", 0,
                  "lock '%.*s' is managed by the %s strategy; this client uses %s (once "
                  "nobody holds it, `dblock forget NAME` hands it over)",
                  (int)op->name_len, op->name, row, strategy);
  }
  dbl_res_clear(&o.res);
  return 0;
}
