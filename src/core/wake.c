/*
 * wake.c — waking polling waiters through named session locks, for insert
 * and optimistic: MariaDB's GET_LOCK, and PostgreSQL's advisory locks
 * except in fair mode (whose tickets and notifications, queue.c, order
 * the waiters instead).
 *
 * Each name has a wake key (a user lock). A waiter whose attempt found the
 * name busy waits in the server for the key, on a connection it keeps for
 * the rest of its acquire. Whoever holds the key goes next: the grant it
 * takes while holding the key keeps the key, on that connection, until
 * its release — whose statement gives the key up as it frees the row, so
 * the oldest waiter gets it at once and tries. For a moment after a
 * release the freed row is refused to every session but the key's holder
 * (the dialect's acquire statements: WAKE_REFUSED in src/sql/mysql.c), so
 * a holder that releases and asks again queues behind the waiters.
 *
 * A waiter that gets the key while the name is still held (its holder
 * came without waiting, so held no key) polls at its backoff as the head
 * waiter; the others stay asleep in the server behind it. Every wait for
 * the key is bounded (the queued waiter's poll window): a lease that ran
 * out without a release, or a key holder that stalled, is noticed at the
 * next poll. Nothing here decides who holds a lock: exclusion and fences
 * stay with the row, and every failure here falls back to polling.
 *
 * On PostgreSQL a waiter does not wait here: its wait for the key goes
 * out with its attempt, in one round trip (DBL_S_WAKE_TAKE, lock.c's
 * fused waits), so a waiter handed the key is granted without a round
 * trip of its own. This file then only names keys and gives them up.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int dbl_wake_possible(const dblock_client *cl) {
  return !cl->strat->pins_connection &&
         (cl->defs[DBL_S_WAKE_WAIT].sql != NULL || cl->defs[DBL_S_WAKE_TAKE].sql != NULL) &&
         !dbl_url_param(&cl->url, "pooler") && !(cl->opts.fair && dbl_queue_possible(cl));
}

uint64_t dbl_parts_hash(const char *const *parts, int n) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < n; i++) {
    for (const unsigned char *s = (const unsigned char *)parts[i]; *s; s++)
      h = (h ^ *s) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL; /* (0xff never occurs in UTF-8) */
  }
  return h;
}

/* The hash of the database, the table and the name: the key must fit a
 * user lock's 64 characters, and two names that share a key only share
 * their waiters' wake-ups, never a lock. */
void dbl_wake_key(const dblock_client *cl, const char *name, char out[DBL_WAKE_KEY_MAX]) {
  const char *parts[3] = {cl->url.dbname ? cl->url.dbname : "", cl->table, name};
  snprintf(out, DBL_WAKE_KEY_MAX, "dblock-%016llx", (unsigned long long)dbl_parts_hash(parts, 3));
}

int dbl_wake_wait(dblock_client *cl, dbl_pconn **kc, const char *key, int64_t ms, int *got,
                  dbl_err *e) {
  dbl_sqlrun x;
  dbl_param p[2];
  dbl_out o;
  int rc, slot;
  *got = 0;
  if (ms < 1) ms = 1;
  if (!*kc && (rc = dbl_pool_get(cl, kc, 0, e)) != 0) return rc;
  dbl_call_bound(cl, *kc, dbl_mono_ms() + ms + cl->opts.call_timeout_ms);
  slot = dbl_cancel_watch(cl, *kc);
  if (slot < 0 && ms > DBL_CANCEL_PIECE_MS) ms = DBL_CANCEL_PIECE_MS;
  if (slot >= 0 && dbl_cancelled(cl)) {
    rc = DBLOCK_ECANCELED;
  } else {
    x = dbl_runner(cl, (*kc)->c, e);
    p[0] = DBL_STR(key);
    p[1] = DBL_I64(ms * 1000);
    rc = dbl_call_check(cl, *kc, dbl_sql_run(&x, DBL_S_WAKE_WAIT, p, 2, &o, 1), e);
    if (rc == 0) {
      *got = o.res.nrows == 1 && dbl_res_i64(&o.res, 0, 0) == 1;
      dbl_res_clear(&o.res);
    }
  }
  if (dbl_cancel_unwatch(cl, slot, *kc)) {
    dbl_pool_discard_cancelled(cl, *kc);
    *kc = NULL;
    *got = 0;
    return DBLOCK_ECANCELED;
  }
  if (rc != 0) {
    dbl_pool_discard(cl, *kc); /* (a held key ends with the session) */
    *kc = NULL;
    *got = 0;
    return rc;
  }
  if (*got) DBL_COUNT(cl, wakeups);
  return 0;
}

void dbl_wake_drop(dblock_client *cl, dbl_pconn *kc, const char *key, int held) {
  dbl_sqlrun x;
  dbl_param p;
  dbl_out o;
  dbl_err scratch;
  if (!kc) return;
  memset(&scratch, 0, sizeof scratch);
  if (held) {
    dbl_call_bound(cl, kc, 0);
    x = dbl_runner(cl, kc->c, &scratch);
    p = DBL_STR(key);
    if (dbl_call_check(cl, kc, dbl_sql_run(&x, DBL_S_WAKE_DROP, &p, 1, &o, 0), &scratch) != 0) {
      dbl_pool_discard(cl, kc); /* (closing ends the session, and the key) */
      return;
    }
  }
  dbl_pool_put(cl, kc);
}
