/*
 * lock.c — acquire, release and renew, and the reentrancy registry. An
 * acquire attempts until granted, refused or out of time; between
 * attempts the client's waiter sleeps (wait.c: one per backend ×
 * strategy).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "wait.h"

/* Sets up the scratch entry of a fresh (not reentrant) acquire of name by
 * thread: the caller's lease (0: the client's; none for for_update) and
 * whether the watchdog renews it. */
static void fresh_entry(struct dbl_held *h, dblock_client *cl, const char *name, int64_t thread,
                        int64_t lease_ms, int auto_renew) {
  snprintf(h->name, sizeof h->name, "%s", name);
  h->name_len = strlen(name);
  h->thread = thread;
  h->lease_ms = cl->strat->has_lease ? (lease_ms ? lease_ms : cl->opts.lease_ms) : 0;
  h->auto_renew = auto_renew;
}

/* Declares h lost if its loss deadline has passed by the clock, whether
 * or not the watchdog thread has run since (dbl_declare_if_due), and hands
 * its on_lost call to an idle worker at once, or to the watchdog. Every
 * call that would trust a held entry — is_lost, a reentrant acquire,
 * release, renew — looks here first: a watchdog the host has not run
 * must never leave a caller acting on a lock past its deadline (a
 * for_update reentrant grant is local, no round trip). Caller holds mu. */
static void lost_if_due(dblock_client *cl, struct dbl_held *h) {
  dbl_assert_held(cl);
  if (!dbl_declare_if_due(cl, h, dbl_mono_ms())) return;
  dbl_signal(&cl->wd.wake, 1);
  if (cl->wd.idle_workers > 0) dbl_signal(&cl->wd.work, 1);
}

/* Finds this owner's live entry for name; caller holds cl->mu. */
static struct dbl_held *find_held(dblock_client *cl, const char *name,
                                  int64_t thread) {
  dbl_assert_held(cl);
  for (struct dbl_held *h = cl->held; h; h = h->next)
    if (h->thread == thread && strcmp(h->name, name) == 0) {
      lost_if_due(cl, h);
      if (!h->lost) return h;
    }
  return NULL;
}

/* Waits until no renewal or release is in flight on h, then claims it.
 * Caller holds cl->mu. */
static void claim(dblock_client *cl, struct dbl_held *h) {
  dbl_assert_held(cl);
  while (h->busy) {
    if (h->queued) {
      /* Claimed by the watchdog for a renewal no worker has started: take
       * it over (no worker may exist at all). */
      h->queued = 0;
      cl->wd.nqueued--;
      break;
    }
    dbl_wait(cl, &cl->cv);
  }
  h->busy = 1;
}

/* Claims this thread's live entry for name, waiting while a renewal or a
 * release is in flight on it; NULL when there is none (any more). The
 * entry is looked up again after every wait: a release of its last
 * handle, on another thread, may have freed it meanwhile (an acquire
 * holds no handle that would keep it). Caller holds cl->mu. */
static struct dbl_held *claim_held(dblock_client *cl, const char *name, int64_t thread) {
  for (;;) {
    struct dbl_held *h = find_held(cl, name, thread);
    if (!h || !h->busy || h->queued) {
      if (h) claim(cl, h); /* (does not wait: free, or only queued) */
      return h;
    }
    dbl_wait(cl, &cl->cv);
  }
}

static void unclaim(dblock_client *cl, struct dbl_held *h) {
  h->busy = 0;
  dbl_signal(&cl->cv, 1);
}

/* The longest an attempt's statement may take: the server-side wait it
 * asks for plus the call limit; a leased grant must also come back before
 * its own loss deadline, or it would be born lost. */
static int64_t attempt_bound(dblock_client *cl, const struct dbl_held *h, int64_t sent,
                             int64_t server_wait) {
  int64_t bound = sent + (server_wait > 0 ? server_wait : 0) + cl->opts.call_timeout_ms;
  if (h->lease_ms > 0) {
    int64_t lease_end = sent + h->lease_ms - dbl_loss_margin(cl, h->lease_ms);
    if (lease_end < bound) bound = lease_end;
  }
  return bound;
}

/* rc for an attempt on pc sent at sent and given until bound: one cut at
 * its lease's loss deadline (before the call limit) says so — the cure is
 * a longer lease or a smaller loss_margin_ms, not the network. (Any other
 * failure keeps its own message.) */
static int say_if_cut_by_lease(dblock_client *cl, dbl_pconn *pc, const struct dbl_held *h,
                               int64_t sent, int64_t server_wait, int64_t bound, int rc,
                               dbl_err *e) {
  if (rc != DBLOCK_ECONN || h->lease_ms <= 0 || dbl_mono_ms() < bound ||
      bound >= sent + (server_wait > 0 ? server_wait : 0) + cl->opts.call_timeout_ms ||
      !dbl_call_was_cut(cl, pc))
    return rc;
  return dbl_err_set(e, DBLOCK_ECONN, "08006", 0,
                     "no answer within the %lld ms that a %lld ms lease leaves before its loss "
                     "deadline: the call was cut, as its grant would have been lost at once (a "
                     "longer lease or a smaller loss_margin_ms gives it more time)",
                     (long long)(bound - sent), (long long)h->lease_ms);
}

/* Runs the strategy's acquire once on pc, op filled from h and w (the
 * caller's place in line, written back); returns its result (a cut call
 * as ECONN). *sent is when the statement went out: the lease clock starts
 * there, not when the connection was asked for, so a slow connect (a
 * fresh CLI process on a loaded host) does not eat a short lease; the
 * server's lease starts later still, so this stays on the safe side. */
static int strategy_acquire(dblock_client *cl, dbl_pconn *pc, struct dbl_held *h, dbl_op *op,
                            dbl_waiting *w, int64_t wait_ms, int64_t *sent, dbl_err *e) {
  int rc;
  int64_t bound;
  *sent = dbl_mono_ms();
  bound = attempt_bound(cl, h, *sent, wait_ms);
  dbl_call_bound(cl, pc, bound);
  dbl_op_init(op, cl, pc, h, e);
  op->reentrant = w->reentrant;
  op->attempt = w->tries;
  op->version_hint = w->reentrant ? h->version : -1; /* (its own hold's) */
  op->place = w->place;
  rc = dbl_call_check(cl, pc, cl->strat->acquire(op, wait_ms), e);
  rc = say_if_cut_by_lease(cl, pc, h, *sent, wait_ms, bound, rc, e);
  w->place.ticket = op->place.ticket;
  return rc;
}

/* Gives back the connection of an attempt that returned rc: for_update
 * keeps a grant's connection pinned in h; a leased grant's is kept in
 * h->granted_on until the grant is published, then becomes the client's
 * reserve for its renewals and releases (dblock_lock_acquire: kept as the
 * reserve before the entry is linked, a release of another entry that
 * found the client holding nothing would hand it back to the pool); any
 * other goes back to the pool. */
static void attempt_done(dblock_client *cl, struct dbl_held *h, dbl_pconn *pc, int rc) {
  if (rc == 0 && cl->strat->pins_connection) h->pinned = pc; /* held idle between calls */
  else if (rc == 0) (void)dbl_call_end(cl, pc), h->granted_on = pc; /* (cut: closed later) */
  else dbl_pool_return(cl, pc, rc);
}

/* Borrows the connection of an attempt and sets it up: polling strategies
 * never mean to wait in the server — a row lock held by a for_update
 * transaction on the same name (mixing strategies) must not block them for
 * long; a lock transaction gets the server's idle limit. (Each sent once
 * per connection.) */
static int attempt_conn(dblock_client *cl, const dbl_waiting *w, dbl_pconn **out, dbl_err *e) {
  int pins = cl->strat->pins_connection, rc;
  dbl_pconn *pc;
  /* (a reentrant attempt holds the claim on its outer hold, which keeps
   * the watchdog off it: it must not wait for one of the acquires'
   * connections, so it borrows as the holders' calls do) */
  rc = pins || w->reentrant ? dbl_pool_get_by(cl, &pc, pins, 0, e)
                            : dbl_pool_get_acq(cl, &pc, w->deadline, e);
  /* No connection of the pool came free in time: a waiter sleeps and
   * tries again like after a busy answer (its own deadline decides); a
   * try says why it failed. */
  if (rc == DBLOCK_ETIMEOUT && w->wait_ms != 0 && !pins && !w->reentrant) return DBLOCK_EBUSY;
  if (rc != 0) return rc;
  if (!pins) rc = cl->drv->set_lock_wait(pc->c, 1000, e);
  else if (cl->drv->idle_guard) rc = cl->drv->idle_guard(pc->c, dbl_txn_idle_limit(cl), e);
  if (rc != 0) {
    rc = dbl_call_check(cl, pc, rc, e);
    dbl_pool_return(cl, pc, rc);
    return rc;
  }
  *out = pc;
  return 0;
}

/* An attempt that failed with rc because the server could not draw a
 * safe fence is repaired and asked again, once: the server may have lost
 * unflushed state since the epoch was vouched for (a crash, a promotion —
 * or, on MariaDB, this session has not looked yet: fence.h), so the epoch
 * is bumped durably; or the fence sequence is behind the name's row
 * (moved back by hand, restored apart from the table), so it is moved past
 * the row where the dialect can do that safely (MariaDB; elsewhere the
 * caller gets an error that says what to do). epoch: repair the epoch (1)
 * or the sequence (0). Returns the new result. */
static int repair_and_retry(dblock_client *cl, dbl_pconn *pc, struct dbl_held *h, dbl_op *op,
                            dbl_waiting *w, int64_t wait_ms, int64_t *sent, int rc, int epoch,
                            dbl_err *e) {
  int moved = 0;
  if (rc == 0 || rc == DBLOCK_ECANCELED || dbl_cancelled(cl)) return rc;
  if (epoch ? !dbl_no_epoch(e) : !dbl_fence_behind(e)) return rc;
  dbl_call_bound(cl, pc, 0); /* not the lease's window: nothing is granted */
  rc = epoch ? dbl_epoch_bump(cl, pc, &moved, e)
             : dbl_fence_catch_up(cl, pc, h->name, h->name_len, e);
  if ((rc = dbl_call_check(cl, pc, rc, e)) != 0) return rc;
  if (epoch && moved)
    dbl_log(cl, DBLOCK_LOG_INFO,
            "the server may have lost unflushed state (crash-restart or promotion): "
            "fencing epoch advanced");
  if (!epoch)
    dbl_log(cl, DBLOCK_LOG_WARNING,
            "lock '%s': the fence sequence was behind the name's last token (moved back, or "
            "restored apart from the lock table): moved forward past it",
            h->name);
  return strategy_acquire(cl, pc, h, op, w, wait_ms, sent, e);
}

/* Records a grant's state in h, its lease clock from sent. */
static void attempt_record(dblock_client *cl, struct dbl_held *h, const dbl_op *op,
                           int64_t sent) {
  dbl_lock(cl);
  h->fence = op->g.fence;
  h->holds = op->g.holds;
  h->expires_us = op->g.expires_us;
  h->version = op->g.version;
  dbl_set_lease_clock(cl, h, sent);
  dbl_unlock(cl);
}

/* One attempt on a borrowed connection; wait_ms: how long it may wait in
 * the server (the server waiter only). *taken: busy because another
 * owner holds the name (not a lock wait or a deadlock). */
static int attempt(dblock_client *cl, struct dbl_held *h, dbl_waiting *w, int64_t wait_ms,
                   int *taken, dbl_err *e) {
  dbl_pconn *pc = NULL;
  dbl_op op;
  int rc, slot = -1;
  int64_t sent = 0;
  memset(&op, 0, sizeof op);
  if ((rc = attempt_conn(cl, w, &pc, e)) != 0) return rc;
  /* A wait in the server is where a cancel must reach in: register the
   * connection with dblock_client_cancel (or, with no slot free, wait in
   * short pieces and let the loop look at the flag between them). */
  if (wait_ms != 0 && (slot = dbl_cancel_watch(cl, pc)) < 0 && wait_ms > DBL_CANCEL_PIECE_MS)
    wait_ms = DBL_CANCEL_PIECE_MS;
  /* (A cancel that came before the registration found no slot: look at
   * the flag after it — one side always sees the other.) */
  if (slot >= 0 && dbl_cancelled(cl)) rc = DBLOCK_ECANCELED;
  else rc = strategy_acquire(cl, pc, h, &op, w, wait_ms, &sent, e);
  rc = repair_and_retry(cl, pc, h, &op, w, wait_ms, &sent, rc, 1, e);
  rc = repair_and_retry(cl, pc, h, &op, w, wait_ms, &sent, rc, 0, e);
  if (dbl_cancel_unwatch(cl, slot, pc)) {
    /* The cancel may have cut this connection, even after a grant came
     * back: closing it ends the session, and with it any row lock it took
     * (only the strategies that wait in the server are watched, and they
     * hold their lock through the session). */
    dbl_pool_discard_cancelled(cl, pc);
    return DBLOCK_ECANCELED;
  }
  /* A server-side lock wait that ran out (PostgreSQL lock_timeout, MySQL
   * max_statement_time) means the row was locked by someone else, and a
   * deadlock victim (InnoDB 1213, PostgreSQL 40P01) changed nothing: both
   * are "busy", and the caller's wait policy decides what happens next. */
  if (rc == DBLOCK_ETIMEOUT || rc == DBLOCK_ERETRY) rc = DBLOCK_EBUSY;
  *taken = rc == DBLOCK_EBUSY && op.taken;
  if (rc == 0) attempt_record(cl, h, &op, sent);
  if (rc == 0 && cl->strat->pins_connection && dbl_call_end(cl, pc)) {
    /* Cut just after its answer came: the session (and the row lock it
     * just took) is going away with the socket. Not a grant. */
    rc = dbl_err_set(e, DBLOCK_ECONN, "08006", 0,
                     "no answer from the server in time; the call was cut");
  }
  attempt_done(cl, h, pc, rc);
  return rc;
}

/* One acquire call's state, passed between its phases. */
typedef struct acq {
  dblock_client *cl;
  const char *name;
  int64_t thread, wait_ms, lease_ms;
  int auto_renew;
  struct dbl_held *h;    /* the scratch entry the attempts fill */
  struct dbl_held *mine; /* this owner's live entry (a reentrant acquire) */
  dbl_waiting w;            /* its wait (w.reentrant: a reentrant attempt) */
  dbl_err e;
} acq;

/* Acquire, phase 1: everything that can be refused without touching the
 * database. 0 or the error (reported). */
static int acquire_check(dblock_client *cl, const char *name, int64_t lease_ms) {
  int rc;
  if ((rc = dbl_callback_guard(cl)) != 0) return rc;
  if ((rc = dbl_fork_guard(cl)) != 0) return rc;
  if (cl->opts.read_only) return dbl_read_only(cl);
  if (dbl_cancelled(cl)) {
    DBL_COUNT(cl, cancelled);
    return dbl_failf(cl, DBLOCK_ECANCELED, "acquire of '%s' cancelled (dblock_client_cancel)",
                     name ? name : "(null)");
  }
  if ((rc = dbl_check_name(cl, name)) != 0) return rc;
  if (lease_ms < 0) return dbl_failf(cl, DBLOCK_EINVAL, "lease_ms is negative");
  if (lease_ms > 0 && lease_ms < 100)
    return dbl_failf(cl, DBLOCK_EINVAL, "lease_ms must be at least 100");
  return 0;
}

/* Acquire, phase 2: the reentrancy registry. Returns 0 to go to the
 * database (a->mine claimed if this owner holds the name), 1 when the
 * grant is local (for_update: the transaction already holds the row;
 * *local gets the entry), or an error (reported). */
static int acquire_enter(acq *a, struct dbl_held **local) {
  dblock_client *cl = a->cl;
  dbl_lock(cl);
  a->mine = find_held(cl, a->name, a->thread);
  if (a->mine && cl->opts.non_reentrant) {
    dbl_unlock(cl);
    return dbl_failf(cl, DBLOCK_EDEADLK,
                     "this thread already holds '%s' and the client is non-reentrant", a->name);
  }
  if (a->mine && cl->strat->pins_connection) {
    a->mine->holds++;
    a->mine->handles++;
    dbl_unlock(cl);
    DBL_COUNT(cl, grants);
    dbl_count_wait(cl, 0);
    *local = a->mine;
    return 1;
  }
  if (a->mine && (a->mine = claim_held(cl, a->name, a->thread)) != NULL) {
    *a->h = *a->mine; /* the attempt fills this scratch copy */
    /* ...which owns none of the entry's resources: a fresh grant (the
     * outer hold turned out lost) is linked as an entry of its own. */
    a->h->pinned = NULL;
    a->h->next = NULL;
  }
  dbl_unlock(cl);
  /* A reentrant acquire keeps the outer hold's entry (a copy: name,
   * thread, lease and renewal) — its own lease_ms is ignored: an inner call
   * must not turn an explicit 10-minute lease into an unrenewed 30 s one,
   * or the reverse. */
  if (!a->mine) fresh_entry(a->h, cl, a->name, a->thread, a->lease_ms, a->auto_renew);
  return 0;
}

/* The reentrant statement found another owner: our outer hold is gone
 * (expired and taken over, or force-unlocked). Tell it lost now (before
 * letting go of the claim, so no release can free the entry meanwhile)
 * and go on as a fresh acquire — never wait with the outer entry claimed,
 * which would keep the watchdog off it. */
static void acquire_outer_lost(acq *a) {
  dblock_client *cl = a->cl;
  dbl_mark_lost(cl, a->mine);
  dbl_lock(cl);
  unclaim(cl, a->mine);
  dbl_unlock(cl);
  a->mine = NULL;
  a->w.reentrant = 0;
  a->w.tries = 0; /* (a fresh acquire: its first attempt says "another strategy") */
  memset(a->h, 0, sizeof *a->h);
  fresh_entry(a->h, cl, a->name, a->thread, a->lease_ms, a->auto_renew);
  a->w.lease_ms = a->h->lease_ms; /* (the poll window follows the fresh lease) */
}

/* Acquire, phase 3: attempts until granted, refused or out of time; the
 * client's waiter sleeps between attempts (wait.h). A timed wait makes no
 * attempt past its deadline: each would be time over what was asked. */
static int acquire_wait(acq *a) {
  dblock_client *cl = a->cl;
  const dbl_waiter *waiter = cl->waiter;
  dbl_waiting *w = &a->w;
  int rc, taken = 0;
  for (;;) {
    if (dbl_cancelled(cl)) return DBLOCK_ECANCELED;
    if (w->tries > 0 && dbl_wait_over(w)) return DBLOCK_ETIMEOUT;
    if (waiter->before(w)) continue; /* (slept behind others instead) */
    rc = attempt(cl, a->h, w, waiter->server_ms ? waiter->server_ms(w) : 0, &taken, &a->e);
    w->tried_ms = dbl_mono_ms();
    w->tries++;
    waiter->after(w, rc);
    if (rc != DBLOCK_EBUSY) return rc;
    if (w->reentrant && taken) {
      acquire_outer_lost(a);
      continue;
    }
    if (a->wait_ms == 0) return rc;
    if (dbl_wait_over(w)) return DBLOCK_ETIMEOUT;
    waiter->sleep(w);
  }
}

/* Acquire, phase 4 on failure: counts it and reports it. Caller holds mu
 * (released here). */
static int acquire_fail(acq *a, int rc) {
  dblock_client *cl = a->cl;
  if (a->mine) unclaim(cl, a->mine);
  dbl_unlock(cl);
  if (rc == DBLOCK_EBUSY) DBL_COUNT(cl, busy);
  else if (rc == DBLOCK_ETIMEOUT) DBL_COUNT(cl, timeouts);
  else if (rc == DBLOCK_ECANCELED) DBL_COUNT(cl, cancelled);
  else DBL_COUNT(cl, failures);
  if (rc == DBLOCK_EBUSY) return dbl_failf(cl, rc, "lock '%s' is held by another owner", a->name);
  if (rc == DBLOCK_ETIMEOUT && a->wait_ms > 0)
    return dbl_failf(cl, rc, "timed out after %lld ms waiting for lock '%s'",
                     (long long)a->wait_ms, a->name);
  if (rc == DBLOCK_ECANCELED)
    return dbl_failf(cl, rc, "acquire of '%s' cancelled (dblock_client_cancel)", a->name);
  if (rc == DBLOCK_EMISMATCH && !a->e.msg[0])
    return dbl_failf(cl, rc,
                     "lock '%s' is managed by another strategy than '%s' (once nobody "
                     "holds it, `dblock forget NAME` / dblock_forget() hands it over)",
                     a->name, cl->strat->name);
  /* (never 0: a failed acquire hands out no handle) */
  if (!a->e.code) dbl_err_set(&a->e, rc, "", 0, "acquire of '%s' failed", a->name);
  return dbl_fail(cl, &a->e);
}

/* Acquire, phase 4 on a grant: publishes it — a reentrant grant folds
 * into the outer entry, a fresh one is linked (an outer entry this owner
 * had lost is marked so) — and tells the watchdog when to look next.
 * Caller holds mu (released here). Returns the entry for the handle. */
static struct dbl_held *acquire_publish(acq *a) {
  dblock_client *cl = a->cl;
  struct dbl_held *h = a->h, *mine = a->mine;
  int64_t due;
  if (mine && h->fence == mine->fence) {
    /* Reentrant grant: the row counted one more hold. */
    mine->holds = h->holds;
    mine->expires_us = h->expires_us;
    mine->version = h->version;
    mine->renew_at_ms = h->renew_at_ms;
    mine->deadline_ms = h->deadline_ms;
    mine->lost_at_ms = h->lost_at_ms;
    mine->handles++;
    unclaim(cl, mine);
    free(h);
    h = mine;
  } else {
    if (mine) {
      /* Our earlier holds had expired and the row was granted afresh: the
       * old handles are lost; this is a new grant. */
      mine->lost = DBLOCK_ELOST;
      unclaim(cl, mine);
    }
    h->busy = 0;
    h->lost = 0;
    h->handles = 1;
    h->next = cl->held;
    cl->held = h;
  }
  /* The watchdog's next look at this entry: its renewal (no lease: a
   * session ping every dbl_ping_ms), or its loss deadline when that is
   * earlier or the lease is explicit. (The kick in dbl_set_lease_clock came
   * before the entry was linked, so the watchdog may have missed it.) */
  due = h->renew_at_ms ? h->renew_at_ms : dbl_mono_ms() + dbl_ping_ms(cl);
  if (!h->auto_renew) due = h->lost_at_ms;
  else if (h->lost_at_ms && h->lost_at_ms < due) due = h->lost_at_ms;
  dbl_unlock(cl);
  DBL_COUNT(cl, grants);
  if (a->w.tries > 1) DBL_COUNT(cl, waited);
  dbl_count_wait(cl, dbl_mono_ms() - a->w.started);
  if (mine && h != mine) dbl_mark_lost(cl, mine);
  if (due) dbl_watchdog_kick(cl, due);
  return h;
}

int dblock_lock_acquire(dblock_lock **out, dblock_client *cl, const char *name,
                        int64_t wait_ms, int64_t lease_ms) {
  acq a;
  struct dbl_held *local = NULL;
  dblock_lock *l;
  int rc;
  if (!out || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  *out = NULL;
  if ((rc = acquire_check(cl, name, lease_ms)) != 0) return rc;
  memset(&a, 0, sizeof a);
  a.cl = cl;
  a.name = name;
  a.thread = dbl_thread_id();
  a.wait_ms = wait_ms;
  a.lease_ms = lease_ms;
  a.auto_renew = !cl->strat->has_lease || lease_ms == 0;
  /* Everything that can fail without touching the database comes first,
   * so that a grant never has to be undone: the handle and the scratch
   * entry, and the watchdog (without it a lease could run out unnoticed
   * and a call could hang: no grant without it). */
  if (!(l = calloc(1, sizeof *l)) || !(a.h = calloc(1, sizeof *a.h))) {
    free(l);
    return dbl_failf(cl, DBLOCK_ENOMEM, "out of memory");
  }
  l->client = cl;
  if ((rc = dbl_watchdog_start(cl)) != 0) {
    rc = dbl_failf(cl, rc, "cannot start the watchdog thread");
  } else if ((rc = acquire_enter(&a, &local)) == 0) {
    dbl_wait_init(&a.w, cl, name, wait_ms);
    a.w.reentrant = a.mine != NULL;
    a.w.lease_ms = a.h->lease_ms;
    cl->waiter->begin(&a.w);
    rc = acquire_wait(&a);
    cl->waiter->end(&a.w, rc);
    dbl_lock(cl);
    if (rc != 0) {
      rc = acquire_fail(&a, rc);
    } else {
      dbl_pconn *granted_on = a.h->granted_on;
      a.h->granted_on = NULL;
      local = acquire_publish(&a), a.h = NULL;
      if (granted_on) dbl_pool_keep_reserve(cl, granted_on);
    }
  } else if (rc == 1) {
    rc = 0;
  }
  /* (one cleanup path: the scratch entry unless published, the handle
   * unless handed out) */
  free(a.h);
  if (rc != 0) {
    free(l);
    return rc;
  }
  l->held = local;
  *out = l;
  return 0;
}

/* Unlinks and frees h once no handle points at it. Caller holds mu. */
static void drop_held(dblock_client *cl, struct dbl_held *h) {
  dbl_assert_held(cl);
  for (struct dbl_held **p = &cl->held; *p; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      break;
    }
  free(h);
}

/* One owner-checked release statement; a deadlock victim changed nothing,
 * so it runs again. So did a lock wait that ran out (the database or the
 * row locked by another session: a SQLite writer, a for_update
 * transaction on the name): it is asked again until the call limit, then
 * reported as DBLOCK_ETIMEOUT — not released, the lock ends with its
 * lease (busy is no answer to a release). */
#define RELEASE_LOCK_WAIT_MS 1000
static int release_once(dblock_client *cl, dbl_op *op, int final, int pinned) {
  int rc, tries = 0;
  /* Each try waits RELEASE_LOCK_WAIT_MS for the lock, and the last must end
   * before the call window (call_timeout_ms from when the connection was
   * taken) is cut by the watchdog. */
  int64_t start = dbl_mono_ms();
  int64_t until = start + cl->opts.call_timeout_ms - 2 * RELEASE_LOCK_WAIT_MS;
  if (!pinned && (rc = cl->drv->set_lock_wait(op->conn, RELEASE_LOCK_WAIT_MS, op->e)) != 0)
    return rc;
  for (;;) {
    rc = cl->strat->release(op, final);
    if (rc == DBLOCK_ERETRY && tries++ < 5) continue;
    if (pinned || (rc != DBLOCK_EBUSY && rc != DBLOCK_ETIMEOUT)) return rc;
    if (dbl_mono_ms() >= until)
      return dbl_err_set(op->e, DBLOCK_ETIMEOUT, "", 0,
                         "release of '%.*s': the database stayed locked by another session "
                         "for %lld ms; not released (the lock ends with its lease)",
                         (int)op->name_len, op->name, (long long)(dbl_mono_ms() - start));
    {
      struct timespec pause = {0, 5000000}; /* (the lock wait itself took longer) */
      nanosleep(&pause, NULL);
    }
  }
}

/* One owner-checked renewal; a deadlock victim (racing a reaper) was
 * rolled back whole, so it runs again. (final, pinned: unused; the shape
 * of an owner_call.) */
static int renew_once(dblock_client *cl, dbl_op *op, int final, int pinned) {
  int rc, tries = 0;
  (void)final, (void)pinned;
  while ((rc = cl->strat->renew(op)) == DBLOCK_ERETRY && tries++ < 5) {
  }
  return rc;
}

/* An owner-keyed statement run on op (release_once, renew_once). */
/* Gives back the connection of a holder's call that returned rc: kept as
 * the client's reserve (dbl_pool_keep_reserve), or closed when the call
 * lost it. */
static void owner_done(dblock_client *cl, dbl_pconn *pc, int rc) {
  if (rc == DBLOCK_ECONN || cl->drv->broken(pc->c)) dbl_pool_discard(cl, pc);
  else dbl_pool_keep_reserve(cl, pc);
}

typedef int (*owner_call)(dblock_client *cl, dbl_op *op, int final, int pinned);

/* Runs call on *pc for h; when its reply is lost (ECONN) on a pooled
 * connection and `again` allows, asks once more on a fresh connection
 * bounded by `by` (0: the call limit): keyed by owner and fence, the
 * second run reports the true state. *asked tells whether it did. *pc is
 * the connection to give back afterwards (NULL: none could be had for the
 * second look, whose error is then the answer). */
static int ask_again_if_unanswered(dblock_client *cl, struct dbl_held *h, dbl_pconn **pc,
                                   dbl_op *op, owner_call call, int final, int again,
                                   int64_t by, const char *what, int *asked, dbl_err *e) {
  int rc = dbl_call_check(cl, *pc, call(cl, op, final, h->pinned != NULL), e);
  *asked = 0;
  if (rc != DBLOCK_ECONN || h->pinned || !again) return rc;
  dbl_pool_discard(cl, *pc);
  *pc = NULL;
  dbl_log(cl, DBLOCK_LOG_INFO, "%s of lock '%s': no reply; asking again on a fresh connection",
          what, h->name);
  if ((rc = dbl_pool_get_by(cl, pc, 0, by, e)) != 0) {
    *pc = NULL;
    return rc;
  }
  *asked = 1;
  dbl_op_init(op, cl, *pc, h, e);
  op->reentrant = !final;
  return dbl_call_check(cl, *pc, call(cl, op, final, 0), e);
}

/* Release, phase 2: the statement on the server (or the COMMIT of a
 * for_update transaction), asked again when a final release's reply is
 * lost — still ours means it did not run (the second run frees it); gone,
 * the strategy reads the row (dbl_strategy.released): free and still
 * naming this grant means the first release ran, anything else (a
 * force-unlock, a takeover after the lease) is lost. An inner reentrant
 * release is not asked again: a second decrement could count one hold
 * twice. (for_update reports a dead session at COMMIT as lost: nobody can
 * tell whether it died before the COMMIT or after it.) */
static int release_on_server(dblock_client *cl, struct dbl_held *h, int final, dbl_err *e) {
  dbl_pconn *pc = h->pinned;
  dbl_op op;
  int rc, asked;
  if (pc) dbl_call_bound(cl, pc, 0);
  else if ((rc = dbl_pool_get_owner(cl, &pc, 0, e)) != 0) return rc;
  dbl_op_init(&op, cl, pc, h, e);
  op.reentrant = !final;
  rc = ask_again_if_unanswered(cl, h, &pc, &op, release_once, final, final, 0, "release",
                               &asked, e);
  if (rc == DBLOCK_ELOST && asked && cl->strat->released)
    rc = dbl_call_check(cl, pc, cl->strat->released(&op), e);
  if (rc == 0) h->version = op.g.version;
  /* (freed and committed: the name's oldest sleeper on the board tries) */
  if (rc == 0 && final && dbl_board_possible(cl)) dbl_board_post(cl, dbl_board_hash(cl, h->name));
  if (h->pinned) {
    if (final) {
      h->pinned = NULL;
      if (rc == 0) dbl_pool_put(cl, pc);
      else dbl_pool_discard(cl, pc); /* transaction state unknown */
    }
  } else if (pc) {
    owner_done(cl, pc, rc); /* (the reserve until the entry goes: release_finish) */
  }
  return rc;
}

/* Release, phase 3: the bookkeeping. One handle and (if released) one
 * hold fewer; the entry goes with its last handle or hold, after any
 * loss notification still owed for it. */
static void release_finish(dblock_client *cl, struct dbl_held *h, int rc) {
  dbl_pconn *pc = NULL;
  /* DBLOCK_ELOST is only ever returned after on_lost has fired (once). */
  if (rc == DBLOCK_ELOST) dbl_mark_lost(cl, h);
  dbl_lock(cl);
  h->handles--;
  if (!h->lost && rc == 0) h->holds--;
  unclaim(cl, h);
  if (h->handles <= 0 || (!h->lost && h->holds <= 0)) {
    /* A lost for_update lock still pins its (dead) connection: close it,
     * outside the mutex (closing takes it). */
    pc = h->pinned;
    h->pinned = NULL;
    if (h->handles <= 0) {
      /* Declared lost by the watchdog while this release ran: if the
       * release still won (rc 0) the notification is moot; otherwise it is
       * told here, before the entry goes. One running on a worker still
       * uses h: wait for it before freeing. */
      if (h->lost_notified == LOST_QUEUED) {
        cl->wd.ntell--;
        h->lost_notified = rc == 0 ? LOST_TOLD : LOST_TELLING;
        if (rc != 0) dbl_tell_locked(cl, h);
      }
      while (h->lost_notified == LOST_TELLING) dbl_wait(cl, &cl->cv);
      drop_held(cl, h);
    }
  }
  dbl_unlock(cl);
  if (pc) dbl_pool_discard(cl, pc);
  dbl_pool_free_reserve(cl); /* (if it holds nothing now) */
}

int dblock_lock_release(dblock_lock *l) {
  dblock_client *cl;
  struct dbl_held *h;
  dbl_err e;
  int rc, final, lost;
  if (!l) return dbl_failf(NULL, DBLOCK_EINVAL, "lock handle is NULL");
  cl = l->client;
  h = l->held;
  if ((rc = dbl_callback_guard(cl)) != 0) return rc; /* (handle kept) */
  if ((rc = dbl_fork_guard(cl)) != 0) return rc;
  memset(&e, 0, sizeof e);
  /* Phase 1: claim the entry (no renewal runs meanwhile) and read it. */
  dbl_lock(cl);
  claim(cl, h);
  lost_if_due(cl, h);
  lost = h->lost;
  final = h->holds <= 1;
  dbl_unlock(cl);
  if (lost) {
    /* (no round trip: a lost handle's release answers at once, even with
     * the server unreachable; a row still ours — a renewal confirmed just
     * after the deadline — ends with its lease, like a crashed holder's) */
    rc = DBLOCK_ELOST;
  } else if (cl->strat->pins_connection && !final) {
    rc = 0; /* inner reentrant hold: the transaction stays */
  } else {
    rc = release_on_server(cl, h, final, &e);
  }
  release_finish(cl, h, rc);
  free(l);
  if (rc == DBLOCK_ELOST)
    return dbl_failf(cl, rc, "lock was lost before release (expired and taken over, "
                             "force-unlocked, or its session ended)");
  if (rc) return dbl_fail(cl, &e);
  return 0;
}

/* Renews h now (used by dblock_lock_renew and by the renewal workers).
 * Caller has claimed h. Returns 0, DBLOCK_ELOST, or an error whose outcome
 * is unknown (the watchdog keeps the loss deadline meanwhile).
 * A leased renewal gets half the time left before the loss deadline on
 * its first connection, so that one stalled connection still leaves time
 * to ask again on a fresh one before the deadline; a ping (no lease) gets
 * max(1 s, one ping interval). */
int dbl_renew_held(dblock_client *cl, struct dbl_held *h, dbl_err *e) {
  dbl_pconn *pc = h->pinned;
  dbl_op op;
  int rc, asked;
  int64_t sent = dbl_mono_ms(), first, last;
  if (h->lease_ms > 0) {
    if (sent >= h->lost_at_ms)
      return dbl_err_set(e, DBLOCK_ELOST, "", 0,
                         "lock '%s' was not renewed before its loss deadline", h->name);
    last = h->lost_at_ms;
    first = sent + (last - sent) / 2;
    if (first - sent < 50) first = last;
  } else {
    int64_t p = dbl_ping_ms(cl);
    first = last = sent + (p < 1000 ? 1000 : p);
  }
  if (!pc && (rc = dbl_pool_get_owner(cl, &pc, first, e)) != 0) return rc;
  if (h->pinned) dbl_call_bound(cl, pc, first);
  dbl_op_init(&op, cl, pc, h, e);
  /* (The reply was lost, the call was cut, or the pooled connection had
   * died: asked again, a renewal reports the true state — renewed, or
   * lost.) */
  rc = ask_again_if_unanswered(cl, h, &pc, &op, renew_once, 1, 1, last, "renewal", &asked, e);
  if (!h->pinned) {
    if (!pc) return rc; /* (no connection for the second look) */
    owner_done(cl, pc, rc);
  } else {
    /* A ping cut after its answer came still took the session down. */
    if (dbl_call_end(cl, pc) || rc == DBLOCK_ECONN) rc = DBLOCK_ELOST;
  }
  if (rc == 0) {
    DBL_COUNT(cl, renewals);
    dbl_lock(cl);
    h->expires_us = op.g.expires_us;
    h->version = op.g.version;
    dbl_set_lease_clock(cl, h, sent);
    dbl_unlock(cl);
  }
  return rc;
}

int dblock_lock_renew(dblock_lock *l) {
  dblock_client *cl;
  struct dbl_held *h;
  dbl_err e;
  int rc;
  if (!l) return dbl_failf(NULL, DBLOCK_EINVAL, "lock handle is NULL");
  cl = l->client;
  h = l->held;
  if ((rc = dbl_callback_guard(cl)) != 0) return rc;
  if ((rc = dbl_fork_guard(cl)) != 0) return rc;
  memset(&e, 0, sizeof e);
  dbl_lock(cl);
  claim(cl, h);
  lost_if_due(cl, h);
  rc = h->lost;
  dbl_unlock(cl);
  if (rc == 0) rc = dbl_renew_held(cl, h, &e);
  dbl_lock(cl);
  unclaim(cl, h);
  dbl_unlock(cl);
  if (rc == DBLOCK_ELOST) {
    dbl_mark_lost(cl, h);
    return dbl_failf(cl, rc, "lock '%s' was lost", h->name);
  }
  return rc ? dbl_fail(cl, &e) : 0;
}

/* Fields of a held entry that renewals and other handles on it change
 * (expiry on every renewal, holds on reentrant acquires and releases):
 * read under the client mutex. */
static int64_t held_field(const dblock_lock *l, int which) {
  int64_t v;
  if (!l) return 0;
  dbl_lock(l->client);
  v = which == 0 ? l->held->fence : which == 1 ? l->held->holds : l->held->expires_us;
  dbl_unlock(l->client);
  return v;
}

int64_t dblock_lock_fence(const dblock_lock *l) { return held_field(l, 0); }
const char *dblock_lock_name(const dblock_lock *l) { return l ? l->held->name : NULL; }
int dblock_lock_hold_count(const dblock_lock *l) { return (int)held_field(l, 1); }
int64_t dblock_lock_expires_at(const dblock_lock *l) { return held_field(l, 2); }

int dblock_lock_is_lost(const dblock_lock *l) {
  dblock_client *cl;
  int lost;
  if (!l) return 0;
  cl = l->client;
  dbl_lock(cl);
  lost_if_due(cl, l->held);
  lost = l->held->lost != 0;
  dbl_unlock(cl);
  return lost;
}
