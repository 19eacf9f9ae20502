/*
 * admin.c — introspection (inspect, list), force-unlock, and the reaper
 * (one pass, and the optional background thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* Copies column c of row i into dst (size n) without trailing spaces:
 * MariaDB pads a for_update row's holder columns with them (FU_TAKE in
 * src/sql/mysql.c). Only for for_update rows (the caller's test): a token
 * never ends in a space, and a configured owner_host that does loses them
 * there only. */
static void copy_str(char *dst, size_t n, const dbl_res *r, int i, int c, int trim) {
  const char *v = dbl_res_get(r, i, c);
  size_t len = v ? strlen(v) : 0;
  while (trim && len > 0 && v[len - 1] == ' ') len--;
  snprintf(dst, n, "%.*s", (int)len, v ? v : "");
}

static void fill_info(dblock_lock_info *o, const dbl_res *r, int i) {
  const char *v;
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", (v = dbl_res_get(r, i, 0)) ? v : "");
  snprintf(o->strategy, sizeof o->strategy, "%s", (v = dbl_res_get(r, i, 1)) ? v : "");
  int padded = strcmp(o->strategy, "for_update") == 0;
  o->held = dbl_res_i64(r, i, 2) != 0;
  copy_str(o->owner_host, sizeof o->owner_host, r, i, 3, padded);
  o->owner_pid = dbl_res_i64(r, i, 4);
  o->owner_thread = dbl_res_i64(r, i, 5);
  copy_str(o->owner_token, sizeof o->owner_token, r, i, 6, padded);
  o->hold_count = (int)dbl_res_i64(r, i, 7);
  o->fence = dbl_res_i64(r, i, 8);
  o->acquired_at_us = dbl_res_i64(r, i, 9);
  o->expires_at_us = dbl_res_i64(r, i, 10);
}

/* Lets the row's strategy complete o where the row alone cannot tell
 * (see dbl_strategy.inspect). */
static int refine(dblock_client *cl, dbl_pconn *pc, dblock_lock_info *o, dbl_err *e) {
  const dbl_strategy *st = dbl_strategy_named(o->strategy);
  dbl_op op;
  if (!st || !st->inspect) return 0;
  dbl_op_init(&op, cl, pc, NULL, e);
  op.name = o->name;
  op.name_len = strlen(o->name);
  return st->inspect(&op, o);
}

int dblock_lock_inspect(dblock_lock_info *out, dblock_client *cl, const char *name) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_sqlrun x;
  dbl_out o;
  dbl_param p;
  int rc;
  if (!out || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  if ((rc = dbl_check_name(cl, name)) != 0) return rc;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_STR(name);
  x = dbl_runner(cl, pc->c, &e);
  memset(&o, 0, sizeof o);
  /* (uncommitted rows where the dialect has them: a lock held by an open
   * transaction shows its holder) */
  if ((rc = dbl_sql_script(&x, DBL_S_DIRTY_READ)) == 0)
    rc = dbl_sql_run(&x, DBL_S_INFO_ONE, &p, 1, &o, 1);
  if (rc == 0 && o.res.nrows == 0) {
    rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0, "no lock named '%s'", name);
  } else if (rc == 0) {
    fill_info(out, &o.res, 0);
    rc = refine(cl, pc, out, &e);
  }
  dbl_res_clear(&o.res);
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

int dblock_lock_list(dblock_lock_info **out, size_t *count, dblock_client *cl,
                     int limit) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_sqlrun x;
  dbl_out o;
  dbl_param p;
  int rc;
  dblock_lock_info *info = NULL;
  if (!out || !count || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  *out = NULL;
  *count = 0;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_I64(limit > 0 ? limit : INT64_MAX);
  x = dbl_runner(cl, pc->c, &e);
  memset(&o, 0, sizeof o);
  if ((rc = dbl_sql_script(&x, DBL_S_DIRTY_READ)) == 0)
    rc = dbl_sql_run(&x, DBL_S_INFO_ALL, &p, 1, &o, 1);
  if (rc == 0 && !(info = calloc(o.res.nrows ? (size_t)o.res.nrows : 1, sizeof *info)))
    rc = dbl_err_set(&e, DBLOCK_ENOMEM, "", 0, "out of memory");
  for (int i = 0; rc == 0 && i < o.res.nrows; i++) {
    fill_info(&info[i], &o.res, i);
    rc = refine(cl, pc, &info[i], &e);
  }
  if (rc == 0) {
    *out = info;
    *count = (size_t)o.res.nrows;
  } else {
    free(info);
  }
  dbl_res_clear(&o.res);
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- force-unlock ---------------------------------------------------- */

/* Frees the row and advances its fence past anything issued (DBL_S_FORCE),
 * after the row's strategy has ended whatever keeps a live holder holding
 * it (dbl_strategy.end_holder: a for_update session). */
int dblock_force_unlock(dblock_client *cl, const char *name, int64_t *new_fence) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_sqlrun x;
  dbl_out o;
  dbl_param p;
  dblock_lock_info info;
  const dbl_strategy *st;
  int rc = 0;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if ((rc = dblock_lock_inspect(&info, cl, name)) != 0) return rc;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  x = dbl_runner(cl, pc->c, &e);
  st = dbl_strategy_named(info.strategy);
  if (info.held && st && st->end_holder) {
    dbl_op op;
    dbl_op_init(&op, cl, pc, NULL, &e);
    op.name = name;
    op.name_len = strlen(name);
    if ((rc = st->end_holder(&op)) != 0) goto out;
    /* The holder's transaction is rolling back; the UPDATE below waits for
     * its row lock to go. */
    if ((rc = cl->drv->set_lock_wait(pc->c, 5000, &e)) != 0) goto out;
  }
  p = DBL_STR(name);
  rc = dbl_sql_run(&x, DBL_S_FORCE, &p, 1, &o, 0);
  if (rc != 0 && dbl_no_epoch(&e) && (rc = dbl_epoch_bump(cl, pc, NULL, &e)) == 0)
    rc = dbl_sql_run(&x, DBL_S_FORCE, &p, 1, &o, 0);
  if (rc == 0) {
    if (o.count != 1)
      rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0, "no lock named '%s'", name);
    else if (new_fence)
      *new_fence = o.v[DBL_O_FENCE];
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

int dblock_forget(dblock_client *cl, const char *name) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_sqlrun x;
  dbl_out o;
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
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  p = DBL_STR(name);
  x = dbl_runner(cl, pc->c, &e);
  if ((rc = cl->drv->set_lock_wait(pc->c, FORGET_WAIT_MS, &e)) == 0)
    rc = dbl_sql_run(&x, DBL_S_FORGET, &p, 1, &o, 0);
  if (rc == DBLOCK_ETIMEOUT) rc = DBLOCK_EBUSY; /* a lock wait that ran out */
  if (rc == 0) {
    if (o.count < 1)
      rc = dbl_err_set(&e, DBLOCK_EBUSY, "", 0,
                       "lock '%s' is free but its last lease has not ended yet (or it was "
                       "taken again): not forgotten; try again after the lease",
                       name);
  } else if (rc == DBLOCK_EBUSY && !e.msg[0]) {
    dbl_err_set(&e, DBLOCK_EBUSY, "", 0, "lock '%s' is held: not forgotten", name);
  }
  dbl_pool_return(cl, pc, rc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- release of another process's grant ------------------------------ */

/* (DBL_S_DROP_GRANT: like a release, the row is freed and keeps its fence
 * as the floor for the next grant; the reaper collects it after its
 * lease.) */
int dblock_release_grant(dblock_client *cl, const char *name, const char *owner_token,
                         int64_t owner_thread, int64_t fence) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_sqlrun x;
  dbl_out o;
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
  x = dbl_runner(cl, pc->c, &e);
  rc = dbl_sql_run(&x, DBL_S_DROP_GRANT, p, 4, &o, 0);
  if (rc == 0 && o.count != 1)
    rc = dbl_err_set(&e, DBLOCK_ENOTHELD, "", 0,
                     "lock '%s' is not held by that grant (it expired and was reaped or "
                     "taken over, was force-unlocked, or was already released)",
                     name);
  dbl_pool_put(cl, pc);
  return rc ? dbl_fail(cl, &e) : 0;
}

/* ---- reaper ---------------------------------------------------------- */

/* One bounded batch: DBL_S_REAP (the expiry re-checked in the DELETE
 * itself, so a row renewed after it was picked is kept; rows without a
 * lease — for_update, the epoch row — are never picked), or the dialect's
 * own procedure. */
static int reap_batch(dblock_client *cl, dbl_pconn *pc, int64_t grace_ms, int batch,
                      int64_t *got, dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, pc->c, e);
  dbl_param p[2] = {DBL_I64(grace_ms * 1000), DBL_I64(batch)};
  dbl_out o;
  int rc;
  if (cl->dl->reap_batch) return cl->dl->reap_batch(&x, grace_ms, batch, got);
  if ((rc = dbl_sql_run(&x, DBL_S_REAP, p, 2, &o, 0)) == 0) *got = o.count;
  return rc;
}

int dblock_reap(dblock_client *cl, int64_t grace_ms, int batch, int64_t *deleted) {
  dbl_pconn *pc;
  dbl_err e;
  int rc = 0, retries = 0;
  unsigned seed = (unsigned)dbl_mono_ms() ^ (unsigned)dbl_thread_id();
  int64_t total = 0;
  if (deleted) *deleted = 0;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (grace_ms < 0 || batch < 0)
    return dbl_failf(cl, DBLOCK_EINVAL, "grace and batch must not be negative");
  if (cl->opts.read_only) return dbl_read_only(cl);
  if (batch == 0) batch = 1000;
  if (cl->dl->reap_batch_max && batch > cl->dl->reap_batch_max) batch = cl->dl->reap_batch_max;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  /* A batch may wait briefly for a row that a holder is renewing. */
  if ((rc = cl->drv->set_lock_wait(pc->c, 5000, &e)) != 0) {
    dbl_pool_put(cl, pc);
    return dbl_fail(cl, &e);
  }
  for (;;) {
    int64_t got = 0;
    dbl_call_bound(cl, pc, 0); /* each batch gets the call limit */
    rc = reap_batch(cl, pc, grace_ms, batch, &got, &e);
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
    total += got;
    if (got < batch) break;
    /* One writer at a time for the whole database (SQLite): leave a gap
     * between batches so that lock operations waiting for the write lock
     * get their turn. */
    if (cl->dl->one_writer) {
      struct timespec gap = {0, 2000000};
      nanosleep(&gap, NULL);
    }
  }
  if (rc == 0) {
    /* The wait queue's dead tickets (waiters that stopped refreshing
     * them), where the dialect has a queue. Not counted as lock rows. */
    dbl_sqlrun x = dbl_runner(cl, pc->c, &e);
    dbl_param p = DBL_I64(grace_ms * 1000);
    dbl_out o;
    dbl_call_bound(cl, pc, 0);
    rc = dbl_sql_run(&x, DBL_S_QUEUE_REAP, &p, 1, &o, 0);
  }
  dbl_pool_return(cl, pc, rc);
  if (deleted) *deleted = total;
  return rc ? dbl_fail(cl, &e) : 0;
}

static void *reaper_main(void *arg) {
  dblock_client *cl = arg;
  dbl_lock(cl);
  while (!cl->closing) {
    int64_t at = dbl_mono_ms() + cl->opts.reaper_interval_ms;
    struct timespec ts = {.tv_sec = at / 1000, .tv_nsec = (at % 1000) * 1000000};
    while (!cl->closing && dbl_mono_ms() < at) dbl_timedwait(cl, &cl->reaper.wake, &ts);
    if (cl->closing) break;
    dbl_unlock(cl);
    dblock_reap(cl, cl->opts.reaper_grace_ms, 1000, NULL);
    dbl_lock(cl);
  }
  dbl_unlock(cl);
  return NULL;
}

int dbl_reaper_start(dblock_client *cl) {
  dbl_threads_here(cl); /* (before the thread: a fork in between must not adopt) */
  if (pthread_create(&cl->reaper.thread, NULL, reaper_main, cl) != 0)
    return dbl_failf(cl, DBLOCK_ENOMEM, "cannot start the reaper thread");
  dbl_name_thread(cl->reaper.thread, "dblock-reaper");
  cl->reaper.started = 1;
  return 0;
}
