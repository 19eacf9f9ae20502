/*
 * admin.c — introspection (inspect, list), force-unlock, and the reaper
 * (one pass, and the optional background thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../sql/fence.h"
#include "internal.h"

static const char *pick(const dblock_client *cl, const char *pg, const char *my,
                        const char *lite) {
  return cl->drv->dialect == DBL_PG ? pg : cl->drv->dialect == DBL_MY ? my : lite;
}

#define COLS_PG                                                                \
  "name, strategy, (state = 1 AND expires_at > statement_timestamp())::int, "  \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "(extract(epoch FROM acquired_at) * 1000000)::int8, "                        \
  "(extract(epoch FROM expires_at) * 1000000)::int8"
#define COLS_MY                                                                \
  "name, strategy, (state = 1 AND expires_at > UTC_TIMESTAMP(6)), "            \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', acquired_at), "                    \
  "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at)"
#define COLS_LITE                                                              \
  "name, strategy, (state = 1 AND expires_at > dblock_now_us()), "             \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "acquired_at, expires_at"

static const char *PG_ONE = "SELECT " COLS_PG " FROM ${schema}.${table} WHERE name = ?";
static const char *MY_ONE = "SELECT " COLS_MY " FROM ${table} WHERE name = ?";
static const char *LITE_ONE = "SELECT " COLS_LITE " FROM ${table} WHERE name = ?";
static const char *PG_ALL =
    "SELECT " COLS_PG " FROM ${schema}.${table} WHERE name <> '' ORDER BY name LIMIT ?";
static const char *MY_ALL =
    "SELECT " COLS_MY " FROM ${table} WHERE name <> '' ORDER BY name LIMIT ?";
static const char *LITE_ALL =
    "SELECT " COLS_LITE " FROM ${table} WHERE name <> '' ORDER BY name LIMIT ?";

/* for_update rows are held while their row is locked: these probes return
 * the row only if nobody holds it (a shared lock conflicts with the
 * holder's exclusive one and is released at once, autocommit). */
static const char *PG_PROBE =
    "SELECT 1 FROM ${schema}.${table} WHERE name = ? FOR SHARE SKIP LOCKED";
static const char *MY_PROBE =
    "SELECT 1 FROM ${table} WHERE name = ? LOCK IN SHARE MODE SKIP LOCKED";

/* PostgreSQL: the session holding a for_update row, found through the
 * row's locker, and the holder it published (see for_update.c). */
static const char *PG_HOLDER =
    "SELECT a.application_name, (extract(epoch FROM a.xact_start) * 1000000)::int8 "
    "FROM pg_stat_activity a JOIN ${schema}.${table} t ON a.backend_xid = t.xmax "
    "WHERE t.name = ? AND a.application_name LIKE 'dblock %'";

/* Fills the holder of a held PostgreSQL for_update lock from the session
 * that holds it; leaves o untouched if that session is not visible (a
 * role that may not see other roles' sessions, or the lock just ended). */
static int pg_holder(dblock_client *cl, dbl_conn *c, dblock_lock_info *o, dbl_err *e) {
  dbl_param p = DBL_STR(o->name);
  dbl_res r;
  long long fence, pid, thread;
  int host_at = 0, rc;
  const char *v;
  if ((rc = cl->drv->query(c, dbl_sql(cl, PG_HOLDER), &p, 1, &r, e)) != 0) return rc;
  if (r.nrows == 1 && (v = dbl_res_get(&r, 0, 0)) &&
      sscanf(v, "dblock %lld %lld %lld %n", &fence, &pid, &thread, &host_at) == 3 && host_at) {
    o->fence = fence;
    o->owner_pid = pid;
    o->owner_thread = thread;
    snprintf(o->owner_host, sizeof o->owner_host, "%s", v + host_at);
    o->acquired_at_us = dbl_res_i64(&r, 0, 1);
  }
  dbl_res_clear(&r);
  return 0;
}

/* SQLite: what the holder published through dblock_publish() (see
 * sqlite.c). An entry whose fence is not above the committed row's is an
 * earlier holder's, whose grant has since committed: ignored. */
static const char *LITE_HOLDER = "SELECT dblock_published('${table}' || char(31) || ?)";

static int lite_holder(dblock_client *cl, dbl_conn *c, dblock_lock_info *o,
                       int64_t committed_fence, dbl_err *e) {
  dbl_param p = DBL_STR(o->name);
  dbl_res r;
  long long fence, pid, thread, acquired;
  int host_at = 0, rc;
  const char *v;
  if ((rc = cl->drv->query(c, dbl_sql(cl, LITE_HOLDER), &p, 1, &r, e)) != 0) return rc;
  if (r.nrows == 1 && (v = dbl_res_get(&r, 0, 0)) &&
      sscanf(v, "%lld %lld %lld %lld %n", &fence, &pid, &thread, &acquired, &host_at) == 4 &&
      host_at && fence > committed_fence) {
    o->fence = fence;
    o->owner_pid = pid;
    o->owner_thread = thread;
    o->acquired_at_us = acquired;
    snprintf(o->owner_host, sizeof o->owner_host, "%s", v + host_at);
  }
  dbl_res_clear(&r);
  return 0;
}

static void fill_info(dblock_lock_info *o, const dbl_res *r, int i) {
  const char *v;
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", (v = dbl_res_get(r, i, 0)) ? v : "");
  snprintf(o->strategy, sizeof o->strategy, "%s", (v = dbl_res_get(r, i, 1)) ? v : "");
  o->held = dbl_res_i64(r, i, 2) != 0;
  snprintf(o->owner_host, sizeof o->owner_host, "%s", (v = dbl_res_get(r, i, 3)) ? v : "");
  o->owner_pid = dbl_res_i64(r, i, 4);
  o->owner_thread = dbl_res_i64(r, i, 5);
  snprintf(o->owner_token, sizeof o->owner_token, "%s", (v = dbl_res_get(r, i, 6)) ? v : "");
  o->hold_count = (int)dbl_res_i64(r, i, 7);
  o->fence = dbl_res_i64(r, i, 8);
  o->acquired_at_us = dbl_res_i64(r, i, 9);
  o->expires_at_us = dbl_res_i64(r, i, 10);
}

/* Decides held / not held for a for_update row by probing its row lock.
 * The holder's identity is written inside its open transaction, which
 * other sessions cannot read: the owner fields then describe the last
 * holder that committed, so they are cleared rather than shown wrongly. */
static int probe_for_update(dblock_client *cl, dbl_conn *c, dblock_lock_info *o,
                            dbl_err *e) {
  dbl_param p = DBL_STR(o->name);
  dbl_res r;
  int rc;
  if (strcmp(o->strategy, "for_update") != 0) return 0;
  if (cl->drv->dialect == DBL_LITE) {
    /* SQLite: the holder owns the file's write lock. */
    cl->drv->set_lock_wait(c, 0, e);
    rc = cl->drv->begin(c, e);
    cl->drv->set_lock_wait(c, 5000, e);
    if (rc == 0) {
      o->held = 0;
      if ((rc = cl->drv->rollback(c, e)) != 0) return rc;
    } else if (rc != DBLOCK_EBUSY) {
      return rc;
    } else {
      o->held = 1;
    }
  } else {
    if ((rc = cl->drv->query(c, dbl_sql(cl, pick(cl, PG_PROBE, MY_PROBE, NULL)), &p, 1,
                             &r, e)) != 0)
      return rc;
    o->held = r.nrows == 0;
    dbl_res_clear(&r);
  }
  if (o->held && cl->drv->dialect != DBL_MY) {
    int64_t committed_fence = o->fence;
    /* MariaDB read the holder's uncommitted columns (see dirty_read). The
     * committed ones describe an earlier holder: clear them, then fill in
     * what the holding session published (PostgreSQL, SQLite). */
    o->owner_host[0] = 0;
    o->owner_pid = o->owner_thread = 0;
    o->owner_token[0] = 0;
    o->fence = 0;
    o->acquired_at_us = 0;
    rc = cl->drv->dialect == DBL_PG ? pg_holder(cl, c, o, e)
                                    : lite_holder(cl, c, o, committed_fence, e);
    if (rc != 0) return rc;
  }
  if (!o->held) o->hold_count = 0;
  else if (cl->drv->dialect != DBL_MY) o->hold_count = 1;
  o->expires_at_us = 0;
  return 0;
}

/* MariaDB: makes the next statement on c read uncommitted rows, so that a
 * for_update holder's columns (written inside its open transaction) show.
 * SET TRANSACTION without SESSION applies to the next transaction only. */
static int dirty_read(dblock_client *cl, dbl_conn *c, dbl_err *e) {
  if (cl->drv->dialect != DBL_MY) return 0;
  return cl->drv->script(c, "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", e);
}

int dblock_lock_inspect(dblock_lock_info *out, dblock_client *cl, const char *name) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p;
  int rc;
  if (!out || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  if ((rc = dbl_check_name(cl, name)) != 0) return rc;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_STR(name);
  memset(&r, 0, sizeof r);
  if ((rc = dirty_read(cl, pc->c, &e)) == 0)
    rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_ONE, MY_ONE, LITE_ONE)), &p, 1, &r, &e);
  if (rc == 0 && r.nrows == 0) {
    rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0, "no lock named '%s'", name);
  } else if (rc == 0) {
    fill_info(out, &r, 0);
    rc = probe_for_update(cl, pc->c, out, &e);
  }
  dbl_res_clear(&r);
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

int dblock_lock_list(dblock_lock_info **out, size_t *count, dblock_client *cl,
                     int limit) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p;
  int rc;
  dblock_lock_info *info = NULL;
  if (!out || !count || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  *out = NULL;
  *count = 0;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_I64(limit > 0 ? limit : INT64_MAX);
  memset(&r, 0, sizeof r);
  if ((rc = dirty_read(cl, pc->c, &e)) == 0)
    rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_ALL, MY_ALL, LITE_ALL)), &p, 1, &r, &e);
  if (rc == 0 && !(info = calloc(r.nrows ? (size_t)r.nrows : 1, sizeof *info)))
    rc = dbl_err_set(&e, DBLOCK_ENOMEM, "", 0, "out of memory");
  for (int i = 0; rc == 0 && i < r.nrows; i++) {
    fill_info(&info[i], &r, i);
    rc = probe_for_update(cl, pc->c, &info[i], &e);
  }
  if (rc == 0) {
    *out = info;
    *count = (size_t)r.nrows;
  } else {
    free(info);
  }
  dbl_res_clear(&r);
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- force-unlock ---------------------------------------------------- */

/* Frees a leased row and advances its fence past anything issued, so the
 * old holder's renewals and releases (checked by owner and fence) fail
 * with DBLOCK_ELOST and fenced resources refuse its token. */
static const char *PG_FORCE =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = GREATEST(fence + 1, " DBL_PG_NEXT_FENCE "), "
    "owner_token = '', owner_thread = 0, expires_at = statement_timestamp() "
    "WHERE name = ? RETURNING fence";
static const char *MY_FORCE =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = LAST_INSERT_ID(GREATEST(fence + 1, " DBL_MY_NEXT_FENCE ")), "
    "owner_token = '', owner_thread = 0, expires_at = UTC_TIMESTAMP(6) WHERE name = ?";
static const char *LITE_FORCE =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = MAX(fence + 1, " DBL_LITE_NEXT_FENCE "), owner_token = '', owner_thread = 0, "
    "expires_at = dblock_now_us() WHERE name = ? RETURNING fence";
/* A held for_update lock is a transaction: end it by ending its session. */
static const char *PG_KILL =
    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a "
    "JOIN ${schema}.${table} t ON a.backend_xid = t.xmax WHERE t.name = ?";

static const char *MY_SESSION = "SELECT owner_session FROM ${table} WHERE name = ?";

/* Ends the session holding a for_update lock on name: PostgreSQL finds it
 * through the row's locker (xmax) and terminates it; MariaDB reads the
 * session id the holder wrote (uncommitted) and kills that connection.
 * Either needs the right to end the holder's session (same user, or
 * pg_signal_backend / CONNECTION ADMIN). */
static int end_holder_session(dblock_client *cl, dbl_conn *c, const char *name, dbl_err *e) {
  dbl_param p = DBL_STR(name);
  dbl_res r;
  int rc;
  if (cl->drv->dialect == DBL_PG) return cl->drv->query(c, dbl_sql(cl, PG_KILL), &p, 1, NULL, e);
  if ((rc = dirty_read(cl, c, e)) != 0) return rc;
  if ((rc = cl->drv->query(c, dbl_sql(cl, MY_SESSION), &p, 1, &r, e)) != 0) return rc;
  p = DBL_I64(dbl_res_i64(&r, 0, 0));
  dbl_res_clear(&r);
  if (p.i <= 0) return 0;
  rc = cl->drv->query(c, "KILL CONNECTION ?", &p, 1, NULL, e);
  /* 1094: the session ended by itself meanwhile. */
  return rc && e->native == 1094 ? 0 : rc;
}

int dblock_force_unlock(dblock_client *cl, const char *name, int64_t *new_fence) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p;
  dblock_lock_info info;
  int rc;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if ((rc = dblock_lock_inspect(&info, cl, name)) != 0) return rc;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  if (strcmp(info.strategy, "for_update") == 0 && info.held) {
    if (cl->drv->dialect == DBL_LITE) {
      dbl_pool_put(cl, pc);
      return dbl_failf(cl, DBLOCK_EUNSUPPORTED,
                       "force-unlock of a held for_update lock is not possible on SQLite "
                       "(the holder is another process's open transaction)");
    }
    if ((rc = end_holder_session(cl, pc->c, name, &e)) != 0) goto out;
    /* The holder's transaction is rolling back; the UPDATE below waits for
     * its row lock to go. */
    if ((rc = cl->drv->set_lock_wait(pc->c, 5000, &e)) != 0) goto out;
  }
  p = DBL_STR(name);
  rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_FORCE, MY_FORCE, LITE_FORCE)), &p, 1,
                      &r, &e);
  if (rc != 0 && dbl_no_epoch(&e) && (rc = dbl_epoch_bump(cl, pc, &e)) == 0)
    rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_FORCE, MY_FORCE, LITE_FORCE)), &p, 1,
                        &r, &e);
  if (rc == 0) {
    if (cl->drv->dialect == DBL_MY ? r.affected != 1 : r.nrows != 1)
      rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0, "no lock named '%s'", name);
    else if (new_fence)
      *new_fence = cl->drv->dialect == DBL_MY ? r.insert_id : dbl_res_i64(&r, 0, 0);
    dbl_res_clear(&r);
  }
out:
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- forgetting a free name -------------------------------------------- */

/* Deletes a name's row only while nobody holds it and no grant can still
 * be in flight against it: a leased row whose last lease has ended (the
 * reaper's rule: a released insert row is the fence floor for a grant
 * whose statement drew its token before the release, so it stays until
 * the lease is over), a for_update row whose row lock nobody has (the
 * DELETE waits for it at most FORGET_WAIT_MS, then counts as held). The
 * fences stay increasing: they come from the table's sequence /
 * high-water mark. */
#define FORGET_WAIT_MS 1000
static const char *PG_FORGET =
    "DELETE FROM ${schema}.${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < statement_timestamp())";
static const char *MY_FORGET =
    "DELETE FROM ${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < UTC_TIMESTAMP(6))";
static const char *LITE_FORGET =
    "DELETE FROM ${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < dblock_now_us())";

int dblock_forget(dblock_client *cl, const char *name) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p;
  dblock_lock_info info;
  int rc;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if ((rc = dblock_lock_inspect(&info, cl, name)) != 0) return rc;
  if (info.held)
    return dbl_failf(cl, DBLOCK_EBUSY,
                     "lock '%s' is held (%s): it can be forgotten only once free — wait for "
                     "its holder, or force-unlock it first",
                     name, info.strategy);
  memset(&e, 0, sizeof e);
  memset(&r, 0, sizeof r);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_STR(name);
  if ((rc = cl->drv->set_lock_wait(pc->c, FORGET_WAIT_MS, &e)) == 0)
    rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_FORGET, MY_FORGET, LITE_FORGET)), &p, 1,
                        &r, &e);
  if (rc == DBLOCK_ETIMEOUT) rc = DBLOCK_EBUSY; /* a lock wait that ran out */
  if (rc == 0) {
    if (r.affected < 1)
      rc = dbl_err_set(&e, DBLOCK_EBUSY, "", 0,
                       "lock '%s' is free but its last lease has not ended yet (or it was "
                       "taken again): not forgotten; try again after the lease",
                       name);
    dbl_res_clear(&r);
  } else if (rc == DBLOCK_EBUSY && !e.msg[0]) {
    dbl_err_set(&e, DBLOCK_EBUSY, "", 0, "lock '%s' is held: not forgotten", name);
  }
  dbl_pool_return(cl, pc, rc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- release of another process's grant ------------------------------ */

/* (Like a release: the row is freed and keeps its fence as the floor for
 * the next grant; the reaper collects it after its lease.) */
static const char *PG_DROP_GRANT =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ?::int8 AND fence = ?::int8 AND state = 1 "
    "AND strategy <> 'for_update'";
static const char *MY_DROP_GRANT =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND strategy <> 'for_update'";

int dblock_release_grant(dblock_client *cl, const char *name, const char *owner_token,
                         int64_t owner_thread, int64_t fence) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p[4];
  int rc;
  if (!cl || !owner_token) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if ((rc = dbl_check_name(cl, name)) != 0) return rc;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p[0] = DBL_STR(name);
  p[1] = DBL_STR(owner_token);
  p[2] = DBL_I64(owner_thread);
  p[3] = DBL_I64(fence);
  rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_DROP_GRANT, MY_DROP_GRANT, MY_DROP_GRANT)),
                      p, 4, &r, &e);
  if (rc == 0) {
    if (r.affected != 1)
      rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0,
                       "lock '%s' is not held by that grant (it expired and was reaped or "
                       "taken over, was force-unlocked, or was already released)",
                       name);
    dbl_res_clear(&r);
  }
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- reaper ---------------------------------------------------------- */

/* One bounded batch. The expiry test sits in the DELETE itself, so a row
 * renewed after it was picked is re-checked and kept; PostgreSQL's SKIP
 * LOCKED lets several reapers share the work. Rows without a lease
 * (for_update, the epoch row) have expires_at NULL and are never picked. */
static const char *PG_REAP =
    "DELETE FROM ${schema}.${table} WHERE name IN (SELECT name FROM ${schema}.${table} "
    "WHERE expires_at < statement_timestamp() - ?::int8 * interval '1 microsecond' "
    "LIMIT ?::int8 FOR UPDATE SKIP LOCKED) "
    "AND expires_at < statement_timestamp() - ?::int8 * interval '1 microsecond'";
/* MariaDB: a single-table DELETE ... LIMIT may choose a full scan and then
 * wait on any row another session has locked (a held for_update lock).
 * So the candidates come from a non-locking read through the expiry index,
 * and the DELETE locks only those rows, by key, re-checking the expiry. */
static const char *LITE_REAP =
    "DELETE FROM ${table} WHERE name IN (SELECT name FROM ${table} "
    "WHERE expires_at < dblock_now_us() - ? LIMIT ?)";

/* MariaDB: a multi-table DELETE waits for every row lock it meets, and a
 * held for_update row can carry an old expires_at (set by a force-unlock,
 * then taken again): every pass used to wait for it and fail. So a batch
 * is picked with SKIP LOCKED in a transaction — rows locked by a lock
 * session are passed over, and two reapers split the work instead of
 * deadlocking — and deleted by name. */
static const char *MY_REAP_PICK =
    "SELECT name FROM ${table} FORCE INDEX (${table}_expires_idx) "
    "WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND "
    "LIMIT ? FOR UPDATE SKIP LOCKED";

/* One MariaDB batch (see above): *got receives how many rows went. The
 * DELETEs name the picked rows as hex literals (binary-safe: nothing of a
 * name is ever SQL), run through the driver's script path in one round
 * trip: a batch has up to `batch` names, more than a prepared statement's
 * parameters. */
static int my_reap_batch(dblock_client *cl, dbl_conn *c, int64_t grace_ms, int batch,
                         int64_t *got, dbl_err *e) {
  static const char hex[] = "0123456789abcdef";
  dbl_res r;
  dbl_param q[2] = {DBL_I64(grace_ms * 1000), DBL_I64(batch)};
  char *sql = NULL;
  size_t size, n;
  int rc;
  *got = 0;
  if ((rc = cl->drv->begin(c, e)) != 0) return rc;
  if ((rc = cl->drv->query(c, dbl_sql(cl, MY_REAP_PICK), q, 2, &r, e)) != 0) goto fail;
  if (r.nrows > 0) {
    size = 16 + (size_t)r.nrows * (strlen(cl->table) + 2 * DBLOCK_NAME_MAX + 40);
    if (!(sql = malloc(size))) {
      dbl_res_clear(&r);
      rc = dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
      goto fail;
    }
    /* One primary-key DELETE per picked row, all in one round trip: an IN
     * list let the optimizer scan the table (on a small one), waiting for
     * the very rows SKIP LOCKED passed over. */
    n = 0;
    for (int i = 0; i < r.nrows; i++) {
      const unsigned char *name = (const unsigned char *)dbl_res_get(&r, i, 0);
      n += (size_t)snprintf(sql + n, size - n, "%sDELETE FROM %s WHERE name = X'", i ? ";" : "",
                            cl->table);
      for (; name && *name && n + 4 < size; name++) {
        sql[n++] = hex[*name >> 4];
        sql[n++] = hex[*name & 15];
      }
      sql[n++] = '\'';
      sql[n] = 0;
    }
    /* Every picked row is locked by us and still expired: all of them go. */
    if ((rc = cl->drv->script(c, sql, e)) == 0) *got = r.nrows;
    free(sql);
  }
  dbl_res_clear(&r);
  if (rc != 0) goto fail;
  return cl->drv->commit(c, e);
fail: {
  dbl_err scratch;
  memset(&scratch, 0, sizeof scratch);
  cl->drv->rollback(c, &scratch);
  return rc;
}
}

int dblock_reap(dblock_client *cl, int64_t grace_ms, int batch, int64_t *deleted) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_res r;
  dbl_param p[3];
  int rc = 0, retries = 0;
  unsigned seed = (unsigned)dbl_mono_ms() ^ (unsigned)dbl_thread_id();
  int64_t total = 0;
  if (deleted) *deleted = 0;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (grace_ms < 0 || batch < 0)
    return dbl_failf(cl, DBLOCK_EINVAL, "grace and batch must not be negative");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if (batch == 0) batch = 1000;
  if (cl->drv->dialect == DBL_MY && batch > 10000) batch = 10000; /* (one DELETE's list) */
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  /* A batch may wait briefly for a row that a holder is renewing. */
  if ((rc = cl->drv->set_lock_wait(pc->c, 5000, &e)) != 0) {
    dbl_pool_put(cl, pc);
    return dbl_fail(cl, &e);
  }
  for (;;) {
    int n = 0;
    p[n++] = DBL_I64(grace_ms * 1000);
    p[n++] = DBL_I64(batch);
    if (cl->drv->dialect != DBL_LITE) p[n++] = DBL_I64(grace_ms * 1000);
    int64_t got;
    dbl_call_bound(cl, pc, 0); /* each batch gets the call limit */
    if (cl->drv->dialect == DBL_MY) {
      rc = my_reap_batch(cl, pc->c, grace_ms, batch, &got, &e);
      r.affected = got;
    } else {
      rc = cl->drv->query(pc->c, dbl_sql(cl, pick(cl, PG_REAP, NULL, LITE_REAP)), p, n, &r, &e);
    }
    /* Two reapers (or a reaper and a renewal) can deadlock in InnoDB; the
     * victim's batch was rolled back whole, so it is run again — after a
     * random pause, or two reapers working the same rows would keep
     * colliding in lockstep. */
    if (rc == DBLOCK_ERETRY && ++retries < 50) {
      struct timespec pause = {0, (long)(1 + rand_r(&seed) % 20) * 1000000L};
      dbl_log(cl, DBLOCK_LOG_INFO, "reap: batch rolled back as a deadlock victim; retry %d of 49",
              retries);
      nanosleep(&pause, NULL);
      continue;
    }
    if (rc) break;
    got = r.affected;
    if (cl->drv->dialect != DBL_MY) dbl_res_clear(&r);
    total += got;
    if (got < batch) break;
    /* SQLite has one writer at a time: leave a gap between batches so that
     * lock operations waiting for the write lock get their turn. */
    if (cl->drv->dialect == DBL_LITE) {
      struct timespec gap = {0, 2000000};
      nanosleep(&gap, NULL);
    }
  }
  dbl_pool_return(cl, pc, rc);
  if (deleted) *deleted = total;
  return rc ? dbl_fail(cl, &e) : 0;
}

static void *reaper_main(void *arg) {
  dblock_client *cl = arg;
  pthread_mutex_lock(&cl->mu);
  while (!cl->closing) {
    int64_t at = dbl_mono_ms() + cl->opts.reaper_interval_ms;
    struct timespec ts = {.tv_sec = at / 1000, .tv_nsec = (at % 1000) * 1000000};
    while (!cl->closing && dbl_mono_ms() < at) pthread_cond_timedwait(&cl->wake, &cl->mu, &ts);
    if (cl->closing) break;
    pthread_mutex_unlock(&cl->mu);
    dblock_reap(cl, cl->opts.reaper_grace_ms, 1000, NULL);
    pthread_mutex_lock(&cl->mu);
  }
  pthread_mutex_unlock(&cl->mu);
  return NULL;
}

int dbl_reaper_start(dblock_client *cl) {
  if (pthread_create(&cl->reaper, NULL, reaper_main, cl) != 0)
    return dbl_failf(cl, DBLOCK_ENOMEM, "cannot start the reaper thread");
  cl->reaper_started = 1;
  return 0;
}
