/*
 * optimistic.c — the versioned compare-and-set strategy.
 *
 * Rows persist with a state and a version. Acquire is
 *   UPDATE ... SET state = held, version = version + 1, ...
 *   WHERE name = ? AND version = ? AND (free OR expired OR mine)
 * and exactly one updated row means granted. The version comes from the
 * client's hint (what its last statement on this name returned), so the
 * uncontended cycle is one statement to acquire and one to release; when
 * the hint is missing or stale the row is read first (and created, free,
 * if it does not exist).
 *
 * "Mine" (a reentrant hold: same fence, one more hold) is honoured only when
 * the core knows of a live hold (reent = 1); a row this owner left behind
 * (a release whose answer was lost, a handle declared lost) is taken over
 * as a fresh grant with a fresh fence.
 *
 * CAS parameters, in order: (token, thread, reent) per "mine" test, host,
 * pid, thread, token, lease µs, name, version, version, token, thread.
 */
#include "fence.h"
#include "lease.h"

#define MINE_PG "(l.state = 1 AND l.expires_at > statement_timestamp() " \
                "AND l.owner_token = ? AND l.owner_thread = ?::int8 AND ?::int4 = 1)"
static const char *PG_CAS =
    "UPDATE ${schema}.${table} AS l SET "
    "hold_count = CASE WHEN " MINE_PG " THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN " MINE_PG " THEN l.fence "
    "  ELSE GREATEST(l.fence + 1, " DBL_PG_NEXT_FENCE ") END, "
    "acquired_at = CASE WHEN " MINE_PG " THEN l.acquired_at ELSE statement_timestamp() END, "
    "strategy = 'optimistic', state = 1, version = l.version + 1, "
    "owner_host = ?, owner_pid = ?::int8, owner_thread = ?::int8, owner_token = ?, "
    "renewed_at = statement_timestamp(), "
    "expires_at = statement_timestamp() + ?::int8 * interval '1 microsecond' "
    "WHERE l.name = ? AND (l.version = ?::int8 OR ?::int8 = -2) AND l.strategy <> 'for_update' "
    "AND (l.state = 0 OR l.expires_at <= statement_timestamp() "
    "  OR (l.owner_token = ? AND l.owner_thread = ?::int8)) "
    "RETURNING fence, hold_count, (extract(epoch FROM expires_at) * 1000000)::int8, version";

/* MySQL: single-table UPDATE assigns left to right, so the "mine" test is
 * taken once into @dbl_m before any column it reads is assigned. The new
 * fence comes back through LAST_INSERT_ID(expr). */
static const char *MY_CAS =
    "UPDATE ${table} SET "
    "hold_count = IF((@dbl_m := (state = 1 AND expires_at > UTC_TIMESTAMP(6) "
    "  AND owner_token = ? AND owner_thread = ? AND ? = 1)), hold_count + 1, 1), "
    "fence = LAST_INSERT_ID(IF(@dbl_m, fence, "
    "  GREATEST(fence + 1, " DBL_MY_NEXT_FENCE "))), "
    "acquired_at = IF(@dbl_m, acquired_at, UTC_TIMESTAMP(6)), "
    "strategy = 'optimistic', state = 1, version = version + 1, "
    "owner_host = ?, owner_pid = ?, owner_thread = ?, owner_token = ?, "
    "renewed_at = UTC_TIMESTAMP(6), "
    "expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND "
    "WHERE name = ? AND (version = ? OR ? = -2) AND strategy <> 'for_update' "
    "AND (state = 0 OR expires_at <= UTC_TIMESTAMP(6) "
    "  OR (owner_token = ? AND owner_thread = ?))";

#define MINE_LITE "(l.state = 1 AND l.expires_at > dblock_now_us() " \
                  "AND l.owner_token = ? AND l.owner_thread = ? AND ? = 1)"
static const char *LITE_CAS =
    "UPDATE ${table} AS l SET "
    "hold_count = CASE WHEN " MINE_LITE " THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN " MINE_LITE " THEN l.fence "
    "  ELSE MAX(l.fence + 1, " DBL_LITE_NEXT_FENCE ") END, "
    "acquired_at = CASE WHEN " MINE_LITE " THEN l.acquired_at ELSE dblock_now_us() END, "
    "strategy = 'optimistic', state = 1, version = l.version + 1, "
    "owner_host = ?, owner_pid = ?, owner_thread = ?, owner_token = ?, "
    "renewed_at = dblock_now_us(), expires_at = dblock_now_us() + ? "
    "WHERE l.name = ? AND (l.version = ? OR ? = -2) AND l.strategy <> 'for_update' "
    "AND (l.state = 0 OR l.expires_at <= dblock_now_us() "
    "  OR (l.owner_token = ? AND l.owner_thread = ?)) "
    "RETURNING fence, hold_count, expires_at, version";

/* Reading the row: version, whether someone else holds it now, strategy. */
static const char *PG_READ =
    "SELECT version, (state = 1 AND expires_at > statement_timestamp() AND NOT "
    "(owner_token = ? AND owner_thread = ?::int8))::int, strategy "
    "FROM ${schema}.${table} WHERE name = ?";
static const char *MY_READ =
    "SELECT version, (state = 1 AND expires_at > UTC_TIMESTAMP(6) AND NOT "
    "(owner_token = ? AND owner_thread = ?)), strategy FROM ${table} WHERE name = ?";
static const char *LITE_READ =
    "SELECT version, (state = 1 AND expires_at > dblock_now_us() AND NOT "
    "(owner_token = ? AND owner_thread = ?)), strategy FROM ${table} WHERE name = ?";

/* Creating a missing row, free, at version 0. */
static const char *PG_CREATE =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0) ON CONFLICT (name) DO NOTHING";
static const char *MY_CREATE =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0)";
static const char *LITE_CREATE =
    "INSERT INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0) ON CONFLICT (name) DO NOTHING";

/* Release: back to free, expired now so the reaper may collect the row. */
/* Release frees the row and leaves expires_at alone: no indexed column
 * changes, so PostgreSQL can update the row in place (a HOT update, no
 * index writes). A free row's old expiry only tells the reaper when it may
 * delete it. */
static const char *PG_FREE =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 RETURNING version";
static const char *MY_FREE =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = LAST_INSERT_ID(version + 1) "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1";
static const char *LITE_FREE =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ? AND fence = ? AND state = 1 RETURNING version";

/* One compare-and-set at version v. Returns 0 (granted), DBLOCK_EBUSY (no
 * row matched), or an error. */
static int cas(dbl_op *op, int64_t v) {
  dbl_param p[20];
  dbl_res r;
  int n = 0, rc, my = op->drv->dialect == DBL_MY;
  const char *sql = op->sql(op, dbl_pick(op, PG_CAS, MY_CAS, LITE_CAS));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  /* "mine" appears three times in the PG / SQLite CASEs, once for MySQL. */
  for (int i = 0; i < (my ? 1 : 3); i++) {
    p[n++] = DBL_STR(op->token);
    p[n++] = DBL_I64(op->thread);
    p[n++] = DBL_I64(op->reentrant ? 1 : 0);
  }
  p[n++] = DBL_STR(op->host);
  p[n++] = DBL_I64(op->pid);
  p[n++] = DBL_I64(op->thread);
  p[n++] = DBL_STR(op->token);
  p[n++] = DBL_I64(op->lease_ms * 1000);
  p[n++] = DBL_TEXT(op->name, op->name_len);
  p[n++] = DBL_I64(v);
  p[n++] = DBL_I64(v);
  p[n++] = DBL_STR(op->token);
  p[n++] = DBL_I64(op->thread);
  if ((rc = op->drv->query(op->conn, sql, p, n, &r, op->e)) != 0) return rc;
  if (my ? r.affected != 1 : r.nrows != 1) {
    dbl_res_clear(&r);
    return DBLOCK_EBUSY;
  }
  if (my) {
    int64_t fence = r.insert_id;
    op->g.holds = op->reentrant && fence == op->g.fence ? op->g.holds + 1 : 1;
    op->g.fence = fence;
    op->g.version = v + 1;
    op->g.expires_us = dbl_estimate_expiry(op);
  } else {
    op->g.fence = dbl_res_i64(&r, 0, 0);
    op->g.holds = (int)dbl_res_i64(&r, 0, 1);
    op->g.expires_us = dbl_res_i64(&r, 0, 2);
    op->g.version = dbl_res_i64(&r, 0, 3);
  }
  dbl_res_clear(&r);
  return 0;
}

/* Reads the row's version and whether another owner holds it, creating
 * the row if missing. */
static int read_row(dbl_op *op, int64_t *version, int *held_by_other) {
  dbl_param p[3];
  dbl_res r;
  int rc;
  const char *sql = op->sql(op, dbl_pick(op, PG_READ, MY_READ, LITE_READ));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  p[0] = DBL_STR(op->token);
  p[1] = DBL_I64(op->thread);
  p[2] = DBL_TEXT(op->name, op->name_len);
  if ((rc = op->drv->query(op->conn, sql, p, 3, &r, op->e)) != 0) return rc;
  if (r.nrows == 0) {
    dbl_res_clear(&r);
    sql = op->sql(op, dbl_pick(op, PG_CREATE, MY_CREATE, LITE_CREATE));
    if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
    if ((rc = op->drv->query(op->conn, sql, p + 2, 1, NULL, op->e)) != 0) return rc;
    *version = 0;
    *held_by_other = 0;
    return 0;
  }
  if (dbl_res_get(&r, 0, 2) && strcmp(dbl_res_get(&r, 0, 2), "for_update") == 0) {
    dbl_res_clear(&r);
    return dbl_err_set(op->e, DBLOCK_EMISMATCH, "", 0,
                       "lock '%.*s' is managed by the for_update strategy; "
                       "this client uses optimistic (once nobody holds it, `dblock forget "
                       "NAME` hands it over)",
                       (int)op->name_len, op->name);
  }
  *version = dbl_res_i64(&r, 0, 0);
  *held_by_other = dbl_res_i64(&r, 0, 1) != 0;
  dbl_res_clear(&r);
  return 0;
}

/* The version hint (op->version_hint, kept per client and name): >= 0 the
 * version this client last saw; VERSION_ANY (-2) the row exists but its
 * version is unknown — the client is waiting for another holder, and its
 * CAS takes the row at whatever version as long as it is free or expired
 * (the state test in the same UPDATE is what keeps exclusion; the version
 * only spares a stale client the write); -1 nothing known. */
#define VERSION_ANY (-2)

static int optimistic_acquire(dbl_op *op, int64_t wait_ms) {
  int64_t v = op->version_hint;
  int rc, other;
  (void)wait_ms;
  /* With a hint, try the CAS straight away. A waiter (VERSION_ANY) polls
   * with that one statement: reading first would cost it a second round
   * trip per poll, during which a holder that releases and re-acquires at
   * once always wins (it knows its version) — that starved waiters. */
  if (v >= 0 || v == VERSION_ANY) {
    if ((rc = cas(op, v)) != DBLOCK_EBUSY) return rc;
    /* Every 8th poll (and the first of a call) also reads the row: it may
     * have been deleted meanwhile (reaper, an insert-strategy release) and
     * need creating again, or have passed to another strategy. Reading
     * on every poll would give back the holder's edge. */
    if (v == VERSION_ANY && op->attempt % 8 != 0) return DBLOCK_EBUSY;
  }
  /* A miss, or nothing known: read (creating a missing row), and CAS
   * again while the row keeps moving but stays free. */
  for (int round = 0; round < 3; round++) {
    if ((rc = read_row(op, &v, &other)) != 0) return rc;
    op->version_hint = v;
    if (other) {
      op->version_hint = VERSION_ANY;
      op->taken = 1;
      return DBLOCK_EBUSY;
    }
    if ((rc = cas(op, v)) != DBLOCK_EBUSY) {
      if (rc == 0) op->version_hint = op->g.version;
      return rc;
    }
  }
  op->version_hint = VERSION_ANY;
  return DBLOCK_EBUSY;
}

static int optimistic_release(dbl_op *op, int final) {
  dbl_param p[4];
  dbl_res r;
  int rc, my = op->drv->dialect == DBL_MY;
  const char *sql;
  if (!final) return dbl_lease_release_inner(op);
  sql = op->sql(op, dbl_pick(op, PG_FREE, MY_FREE, LITE_FREE));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  dbl_owner_params(op, p);
  if ((rc = op->drv->query(op->conn, sql, p, 4, &r, op->e)) != 0) return rc;
  if (my ? r.affected != 1 : r.nrows != 1) rc = DBLOCK_ELOST;
  else op->g.version = my ? r.insert_id : dbl_res_i64(&r, 0, 0);
  dbl_res_clear(&r);
  return rc;
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
