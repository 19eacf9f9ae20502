/*
 * lease.c — what the two lease-based strategies (insert, optimistic) share:
 * the owner-checked renewal and the owner-checked release of an inner
 * reentrant hold. Every statement names the row by (name, owner token,
 * owner thread, fence), so it can only ever touch this owner's grant.
 */
#include <string.h>
#include <time.h>

#include "lease.h"

/* ---- renew: extend expires_at from the server's now ---- */
static const char *PG_RENEW =
    "UPDATE ${schema}.${table} SET version = version + 1, "
    "renewed_at = statement_timestamp(), "
    "expires_at = statement_timestamp() + ?::int8 * interval '1 microsecond' "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 "
    "RETURNING (extract(epoch FROM expires_at) * 1000000)::int8, version";
static const char *MY_RENEW =
    "UPDATE ${table} SET version = LAST_INSERT_ID(version + 1), "
    "renewed_at = UTC_TIMESTAMP(6), "
    "expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1";
static const char *LITE_RENEW =
    "UPDATE ${table} SET version = version + 1, renewed_at = dblock_now_us(), "
    "expires_at = dblock_now_us() + ? "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 RETURNING expires_at, version";

/* ---- release of an inner reentrant hold ---- */
static const char *PG_DECR =
    "UPDATE ${schema}.${table} SET hold_count = hold_count - 1, "
    "version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 AND hold_count > 1 RETURNING version";
static const char *MY_DECR =
    "UPDATE ${table} SET hold_count = hold_count - 1, "
    "version = LAST_INSERT_ID(version + 1) "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND hold_count > 1";
static const char *LITE_DECR =
    "UPDATE ${table} SET hold_count = hold_count - 1, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND hold_count > 1 RETURNING version";

const char *dbl_pick(const dbl_op *op, const char *pg, const char *my,
                     const char *lite) {
  switch (op->drv->dialect) {
  case DBL_PG: return pg;
  case DBL_MY: return my;
  default: return lite;
  }
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
 * the grant is gone (DBLOCK_ELOST). Row values: expiry (optional), version. */
static int owner_update(dbl_op *op, const char *tmpl, int with_lease) {
  dbl_param p[5];
  dbl_res r;
  int n = 0, rc, pg_or_lite = op->drv->dialect != DBL_MY;
  const char *sql = op->sql(op, tmpl);
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  if (with_lease) p[n++] = DBL_I64(op->lease_ms * 1000);
  dbl_owner_params(op, p + n);
  n += 4;
  if ((rc = op->drv->query(op->conn, sql, p, n, &r, op->e)) != 0) return rc;
  if (pg_or_lite ? r.nrows != 1 : r.affected != 1) {
    dbl_res_clear(&r);
    return dbl_err_set(op->e, DBLOCK_ELOST, "", 0,
                       "lock was lost (expired and taken over, or force-unlocked)");
  }
  if (pg_or_lite) {
    if (with_lease) {
      op->g.expires_us = dbl_res_i64(&r, 0, 0);
      op->g.version = dbl_res_i64(&r, 0, 1);
    } else {
      op->g.version = dbl_res_i64(&r, 0, 0);
    }
  } else {
    op->g.version = r.insert_id;
  }
  dbl_res_clear(&r);
  return 0;
}

int dbl_lease_renew(dbl_op *op) {
  int rc = owner_update(op, dbl_pick(op, PG_RENEW, MY_RENEW, LITE_RENEW), 1);
  if (rc == 0 && op->drv->dialect == DBL_MY) op->g.expires_us = dbl_estimate_expiry(op);
  return rc;
}

int dbl_lease_release_inner(dbl_op *op) {
  return owner_update(op, dbl_pick(op, PG_DECR, MY_DECR, LITE_DECR), 0);
}

/* ---- after a final release whose reply was lost ---- */
/* Our release frees the row and leaves owner and fence as they were; a
 * force-unlock clears the owner and advances the fence, and any grant
 * since writes its own owner and fence. So a free row still naming this
 * grant is the first release's work, and nothing else is. */
static const char *PG_FREED =
    "SELECT version FROM ${schema}.${table} WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ?::int8 AND fence = ?::int8 AND state = 0";
static const char *MY_FREED =
    "SELECT version FROM ${table} WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ? AND fence = ? AND state = 0";

int dbl_lease_released(dbl_op *op) {
  dbl_param p[4];
  dbl_res r;
  int rc;
  const char *sql = op->sql(op, dbl_pick(op, PG_FREED, MY_FREED, MY_FREED));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  dbl_owner_params(op, p);
  if ((rc = op->drv->query(op->conn, sql, p, 4, &r, op->e)) != 0) return rc;
  if (r.nrows == 1) op->g.version = dbl_res_i64(&r, 0, 0);
  else rc = dbl_err_set(op->e, DBLOCK_ELOST, "", 0,
                        "lock was lost before release (force-unlocked or taken over)");
  dbl_res_clear(&r);
  return rc;
}

/* Is the row for this name owned by another strategy? Used only after an
 * attempt failed, to turn "busy" into a clear mismatch error. */
static const char *PG_KIND = "SELECT strategy FROM ${schema}.${table} WHERE name = ?";
static const char *MY_KIND = "SELECT strategy FROM ${table} WHERE name = ?";

int dbl_row_strategy_is(dbl_op *op, const char *strategy, int *is_other) {
  dbl_param p = DBL_TEXT(op->name, op->name_len);
  dbl_res r;
  int rc;
  const char *sql = op->sql(op, dbl_pick(op, PG_KIND, MY_KIND, MY_KIND));
  *is_other = 0;
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  if ((rc = op->drv->query(op->conn, sql, &p, 1, &r, op->e)) != 0) return rc;
  if (r.nrows == 1 && dbl_res_get(&r, 0, 0) && strcmp(dbl_res_get(&r, 0, 0), strategy) != 0) {
    /* insert and optimistic keep the same row contract: they mix safely. */
    int lease_pair = strcmp(strategy, "for_update") != 0 &&
                     strcmp(dbl_res_get(&r, 0, 0), "for_update") != 0;
    *is_other = !lease_pair;
    if (*is_other)
      dbl_err_set(op->e, DBLOCK_EMISMATCH, "", 0,
                  "lock '%.*s' is managed by the %s strategy; this client uses %s (once "
                  "nobody holds it, `dblock forget NAME` hands it over)",
                  (int)op->name_len, op->name, dbl_res_get(&r, 0, 0), strategy);
  }
  dbl_res_clear(&r);
  return 0;
}
