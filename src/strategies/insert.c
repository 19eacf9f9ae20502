/*
 * insert.c — the unique-key INSERT strategy.
 *
 * A lock is held while its row says state = 1 and its lease has not
 * expired. Acquire is ONE statement: insert the row, or — on a key
 * conflict — take it over if it is free or expired, or add a hold if this
 * owner (token + thread) already has it. A conflict with a live holder
 * changes nothing and returns no row: busy is an answer, not an error in
 * the server log. Release frees the row (state 0), checked by owner and
 * fence; the row stays, with its fence, until the reaper collects it after
 * its lease (and grace) ended. Deleting it at release let a grant whose
 * statement drew its fence before another owner's whole acquire and
 * release — and then found no row — insert a lower fence; now that grant
 * finds the row and takes GREATEST(row fence + 1, its own).
 *
 * "This owner holds it" (a reentrant hold: same fence, one more hold) is
 * honoured only when the core knows of a live hold (reent = 1); a row this
 * owner left behind (a release whose answer was lost, a handle declared
 * lost) is taken over as a fresh grant with a fresh fence.
 *
 * Parameters, in order: name, host, pid, thread, token, lease µs, then
 * the reentrant flag (three times; once on MySQL).
 */
#include "fence.h"
#include "lease.h"

static const char *PG_ACQUIRE =
    "INSERT INTO ${schema}.${table} AS l (name, strategy, state, version, "
    "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "
    "acquired_at, renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?::int8, ?::int8, ?, 1, "
    DBL_PG_NEXT_FENCE ", statement_timestamp(), "
    "statement_timestamp(), statement_timestamp() + ?::int8 * interval '1 microsecond') "
    "ON CONFLICT (name) DO UPDATE SET "
    "hold_count = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.fence ELSE GREATEST(l.fence + 1, excluded.fence) END, "
    "acquired_at = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.acquired_at ELSE excluded.acquired_at END, "
    "strategy = 'insert', state = 1, version = l.version + 1, "
    "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "
    "owner_thread = excluded.owner_thread, owner_token = excluded.owner_token, "
    "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at "
    "WHERE l.strategy <> 'for_update' AND (l.state = 0 "
    "  OR l.expires_at <= statement_timestamp() "
    "  OR (l.owner_token = excluded.owner_token AND l.owner_thread = excluded.owner_thread)) "
    "RETURNING fence, hold_count, (extract(epoch FROM expires_at) * 1000000)::int8, version";

/* MySQL evaluates ON DUPLICATE KEY assignments left to right, each seeing
 * the columns already assigned; so the two conditions are computed once,
 * first, into session variables (@dbl_m: this owner holds it, @dbl_g: it
 * is free or expired), and every later assignment uses them. The fence is
 * passed back through LAST_INSERT_ID(expr), which the OK packet carries:
 * no extra round trip. Affected rows: 1 inserted, 2 updated, 0 busy. */
static const char *MY_ACQUIRE =
    "INSERT INTO ${table} (name, strategy, state, version, owner_host, "
    "owner_pid, owner_thread, owner_token, hold_count, fence, acquired_at, "
    "renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?, ?, ?, 1, "
    "LAST_INSERT_ID(" DBL_MY_NEXT_FENCE "), UTC_TIMESTAMP(6), "
    "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) "
    "ON DUPLICATE KEY UPDATE "
    "version = IF((@dbl_m := (state = 1 AND expires_at > UTC_TIMESTAMP(6) "
    "    AND owner_token = VALUES(owner_token) AND owner_thread = VALUES(owner_thread) "
    "    AND ? = 1)) "
    "  + (@dbl_g := (strategy <> 'for_update' AND (state = 0 "
    "    OR expires_at <= UTC_TIMESTAMP(6) OR (owner_token = VALUES(owner_token) "
    "    AND owner_thread = VALUES(owner_thread) AND ? = 0)))) > 0, version + 1, version), "
    "hold_count = IF(@dbl_m, hold_count + 1, IF(@dbl_g, 1, hold_count)), "
    "fence = LAST_INSERT_ID(IF(@dbl_g, GREATEST(fence + 1, VALUES(fence)), fence)), "
    "acquired_at = IF(@dbl_g, VALUES(acquired_at), acquired_at), "
    "renewed_at = IF(@dbl_m OR @dbl_g, VALUES(renewed_at), renewed_at), "
    "owner_host = IF(@dbl_g, VALUES(owner_host), owner_host), "
    "owner_pid = IF(@dbl_g, VALUES(owner_pid), owner_pid), "
    "strategy = IF(@dbl_g, 'insert', strategy), "
    "state = IF(@dbl_g, 1, state), "
    "owner_token = IF(@dbl_g, VALUES(owner_token), owner_token), "
    "owner_thread = IF(@dbl_g, VALUES(owner_thread), owner_thread), "
    "expires_at = IF(@dbl_m OR @dbl_g, VALUES(expires_at), expires_at)";

/* SQLite: the same upsert as PostgreSQL; the fence is drawn by
 * DBL_LITE_NEXT_FENCE (above the file's high-water mark and the clock). */
static const char *LITE_ACQUIRE =
    "INSERT INTO ${table} AS l (name, strategy, state, version, owner_host, "
    "owner_pid, owner_thread, owner_token, hold_count, fence, acquired_at, "
    "renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?, ?, ?, 1, " DBL_LITE_NEXT_FENCE ", "
    "dblock_now_us(), dblock_now_us(), dblock_now_us() + ?) "
    "ON CONFLICT (name) DO UPDATE SET "
    "hold_count = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.fence ELSE MAX(l.fence + 1, excluded.fence) END, "
    "acquired_at = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.acquired_at ELSE excluded.acquired_at END, "
    "strategy = 'insert', state = 1, version = l.version + 1, "
    "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "
    "owner_thread = excluded.owner_thread, owner_token = excluded.owner_token, "
    "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at "
    "WHERE l.strategy <> 'for_update' AND (l.state = 0 "
    "  OR l.expires_at <= excluded.acquired_at "
    "  OR (l.owner_token = excluded.owner_token AND l.owner_thread = excluded.owner_thread)) "
    "RETURNING fence, hold_count, expires_at, version";

/* Release: the row goes back to free and keeps its fence (see above) and
 * its expiry (which tells the reaper when it may collect it). */
static const char *PG_FREE =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 AND fence = ?::int8 "
    "AND state = 1";
static const char *MY_FREE =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? AND fence = ? AND state = 1";

static int insert_acquire(dbl_op *op, int64_t wait_ms) {
  dbl_param p[9];
  dbl_res r;
  int rc, other, n = 6;
  int my = op->drv->dialect == DBL_MY;
  const char *sql = op->sql(op, dbl_pick(op, PG_ACQUIRE, MY_ACQUIRE, LITE_ACQUIRE));
  (void)wait_ms;
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  p[0] = DBL_TEXT(op->name, op->name_len);
  p[1] = DBL_STR(op->host);
  p[2] = DBL_I64(op->pid);
  p[3] = DBL_I64(op->thread);
  p[4] = DBL_STR(op->token);
  p[5] = DBL_I64(op->lease_ms * 1000);
  /* the reentrant flag: three CASEs (PG, SQLite); MySQL tests "mine" and
   * "mine, left behind" once each */
  for (int i = 0; i < 3 - my; i++) p[n++] = DBL_I64(op->reentrant ? 1 : 0);
  if ((rc = op->drv->query(op->conn, sql, p, n, &r, op->e)) != 0) return rc;
  if (my ? r.affected == 0 : r.nrows == 0) {
    dbl_res_clear(&r);
    /* Say "another strategy" rather than "busy" when that is the reason;
     * checked once per acquire call, not on every poll. */
    if (op->attempt == 0 && (rc = dbl_row_strategy_is(op, "insert", &other)) == 0 && other)
      return DBLOCK_EMISMATCH;
    op->taken = 1;
    return DBLOCK_EBUSY;
  }
  if (my) {
    int64_t fence = r.insert_id;
    int same = op->reentrant && fence == op->g.fence;
    op->g.holds = same ? op->g.holds + 1 : 1;
    op->g.fence = fence;
    op->g.version = -1;
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

static int insert_release(dbl_op *op, int final) {
  dbl_param p[4];
  dbl_res r;
  int rc;
  const char *sql;
  if (!final) return dbl_lease_release_inner(op);
  sql = op->sql(op, dbl_pick(op, PG_FREE, MY_FREE, MY_FREE));
  if (!sql) return dbl_err_set(op->e, DBLOCK_ENOMEM, "", 0, "out of memory");
  dbl_owner_params(op, p);
  if ((rc = op->drv->query(op->conn, sql, p, 4, &r, op->e)) != 0) return rc;
  rc = r.affected == 1 ? 0 : DBLOCK_ELOST;
  dbl_res_clear(&r);
  return rc;
}

const dbl_strategy dbl_strategy_insert = {
    .name = "insert",
    .id = DBLOCK_STRATEGY_INSERT,
    .pins_connection = 0,
    .has_lease = 1,
    .acquire = insert_acquire,
    .release = insert_release,
    .renew = dbl_lease_renew,
    .released = dbl_lease_released,
};
