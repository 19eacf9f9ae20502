/*
 * watchdog.c — the client's timekeeper and its renewal workers.
 *
 * The watchdog thread never talks to the database, so nothing the network
 * or the server does can hold it up. It
 *   - declares a leased lock lost at its loss deadline (lease end minus a
 *     margin, by the local monotonic clock, measured from before the
 *     statement that set the lease was sent) unless a renewal moved it:
 *     the holder is told before anyone else can be granted the name, even
 *     while a renewal is stuck on a stalled connection, and for explicit
 *     leases too (DESIGN §4.7);
 *   - cuts every database call that outlives its bound (drv->interrupt),
 *     so no call hangs forever;
 *   - hands due renewals (Redisson's model: a third of the lease; for
 *     for_update, a session ping) to renewal workers, starting another
 *     worker when all are busy, so one stuck renewal never delays another
 *     lock's.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

/* A renewal that failed for an unknown reason is tried again after
 * a quarter of what is left before the loss deadline, within these. */
#define RETRY_MIN_MS 50
#define RETRY_MAX_MS 1000

int64_t dbl_loss_margin(const dblock_client *cl, int64_t lease_ms) {
  int64_t m = cl->opts.loss_margin_ms;
  if (m <= 0) {
    m = lease_ms / 20;
    if (m < 100) m = 100;
  }
  return m > lease_ms / 2 ? lease_ms / 2 : m;
}

int64_t dbl_ping_ms(const dblock_client *cl) {
  int64_t p = cl->opts.lease_ms / 3;
  return p > 5000 ? 5000 : p;
}

int64_t dbl_txn_idle_limit(const dblock_client *cl) {
  int64_t l = 3 * dbl_ping_ms(cl);
  return l < 10000 ? 10000 : l;
}

void dbl_set_lease_clock(dblock_client *cl, struct dbl_held *h, int64_t sent_ms) {
  dbl_assert_held(cl);
  if (h->lease_ms > 0) {
    h->renew_at_ms = sent_ms + h->lease_ms / 3;
    h->deadline_ms = sent_ms + h->lease_ms;
    h->lost_at_ms = h->deadline_ms - dbl_loss_margin(cl, h->lease_ms);
  } else if (!cl->drv->idle_guard) {
    /* A session of an embedded database (SQLite) that no server can end:
     * nothing but this process's death takes its lock away (nobody can
     * kill it, and its pings check nothing), so it has no loss deadline.
     * With one, a process stopped past it (SIGSTOP, a debugger, a
     * suspended VM) came back told of a loss that never was, while its
     * transaction still kept every other writer out. */
    h->lost_at_ms = 0;
  } else {
    /* A session (for_update): the server may end it dbl_txn_idle_limit
     * after its last statement, so pings that stop being confirmed make
     * it lost a margin before that, whatever they are stuck on. (The ping
     * schedule is the watchdog's: renew_at_ms.) */
    int64_t limit = dbl_txn_idle_limit(cl);
    h->lost_at_ms = sent_ms + limit - dbl_loss_margin(cl, limit);
  }
  /* Due before the watchdog's planned wake-up: wake it to re-plan. */
  if ((h->lost_at_ms > 0 && cl->wd.wake_ms > h->lost_at_ms) ||
      (h->auto_renew && h->renew_at_ms && cl->wd.wake_ms > h->renew_at_ms))
    dbl_signal(&cl->wd.wake, 1);
}

/* Runs the on_lost callback for h, which the caller has marked TELLING
 * (so h cannot be freed meanwhile: every path that frees an entry first
 * waits in dbl_mark_lost), with mu let go during the call; then marks it
 * TOLD and wakes whoever waits for that. Caller holds mu. */
void dbl_tell_locked(dblock_client *cl, struct dbl_held *h) {
  dbl_assert_held(cl);
  char name[DBLOCK_NAME_MAX + 1];
  int64_t fence = h->fence;
  memcpy(name, h->name, sizeof name);
  dbl_unlock(cl);
  DBL_COUNT(cl, losses);
  dbl_warn(cl, "lock '%s' (fence %lld) lost: its lease ran out unconfirmed, it was taken over or "
           "force-unlocked, or its session ended",
           name, (long long)fence);
  if (cl->opts.on_lost) {
    /* (dblock calls on this client from the callback are refused:
     * dbl_callback_guard) */
    const dblock_client *outer = dbl_tls_callback;
    dbl_tls_callback = cl;
    cl->opts.on_lost(name, fence, DBLOCK_ELOST, cl->opts.on_lost_arg);
    dbl_tls_callback = outer;
  }
  dbl_lock(cl);
  h->lost_notified = LOST_TOLD;
  dbl_signal(&cl->cv, 1);
}

void dbl_mark_lost(dblock_client *cl, struct dbl_held *h) {
  dbl_lock(cl);
  h->lost = DBLOCK_ELOST;
  if (h->lost_notified == LOST_QUEUED) cl->wd.ntell--; /* told here, not by a worker */
  if (h->lost_notified == LOST_UNTOLD || h->lost_notified == LOST_QUEUED) {
    h->lost_notified = LOST_TELLING;
    dbl_tell_locked(cl, h);
  } else {
    /* Being told by another thread right now: whoever returns ELOST
     * returns it after the callback has run. */
    while (h->lost_notified == LOST_TELLING) dbl_wait(cl, &cl->cv);
    h->lost_notified = LOST_TOLD;
  }
  dbl_unlock(cl);
}

/* Sleeps until at_ms (monotonic) or a kick; records the plan so that a
 * lock or a call due later than that need not wake it. Caller holds mu. */
static void wait_until(dblock_client *cl, int64_t at_ms) {
  dbl_assert_held(cl);
  struct timespec ts = {.tv_sec = at_ms / 1000, .tv_nsec = (at_ms % 1000) * 1000000};
  cl->wd.wake_ms = at_ms;
  dbl_timedwait(cl, &cl->wd.wake, &ts);
  cl->wd.wake_ms = 0; /* awake: it will look at everything anyway */
}

/* Declares every lock whose loss deadline has passed lost (is_lost says
 * so from now on) and queues its notification for a renewal worker: the
 * watchdog never runs user code, so a slow on_lost cannot hold up anything
 * it keeps (deadlines, call bounds, renewals). *next is lowered to the
 * next deadline. Caller holds mu. */
static void declare_losses(dblock_client *cl, int64_t now, int64_t *next) {
  dbl_assert_held(cl);
  for (struct dbl_held *h = cl->held; h; h = h->next) {
    if (dbl_declare_if_due(cl, h, now) || h->lost || h->lost_at_ms <= 0 || h->handles <= 0)
      continue;
    if (h->lost_at_ms < *next) *next = h->lost_at_ms; /* (not due yet) */
  }
}

void dbl_name_thread(pthread_t t, const char *name) {
  (void)pthread_setname_np(t, name); /* (cosmetic: an error changes nothing) */
}

int dbl_declare_if_due(dblock_client *cl, struct dbl_held *h, int64_t now) {
  dbl_assert_held(cl);
  if (h->lost || h->lost_at_ms <= 0 || h->handles <= 0 || now < h->lost_at_ms) return 0;
  h->lost = DBLOCK_ELOST;
  if (h->lost_notified == LOST_UNTOLD) {
    h->lost_notified = LOST_QUEUED;
    cl->wd.ntell++;
  }
  return 1;
}

/* Claims every entry due for renewal and queues it for a worker. Caller
 * holds mu. */
static void queue_renewals(dblock_client *cl, int64_t now, int64_t *next) {
  dbl_assert_held(cl);
  int64_t period = dbl_ping_ms(cl);
  for (struct dbl_held *h = cl->held; h; h = h->next) {
    if (h->lost || !h->auto_renew || h->handles <= 0 || h->queued) continue;
    if (h->renew_at_ms == 0) h->renew_at_ms = now + period; /* no lease: ping */
    if (h->renew_at_ms <= now && !h->busy) {
      h->busy = 1;
      h->queued = 1;
      cl->wd.nqueued++;
      continue;
    }
    {
      /* Due but claimed by a caller's renew or release: look again in
       * 10 ms rather than spin. */
      int64_t at = h->renew_at_ms > now ? h->renew_at_ms : now + 10;
      if (at < *next) *next = at;
    }
  }
}

/* Cuts every call that has outlived its bound. Caller holds mu. */
static void cut_late_calls(dblock_client *cl, int64_t now, int64_t *next) {
  dbl_assert_held(cl);
  if (!cl->drv->interrupt) return;
  for (int i = 0; i < cl->pool.nall; i++) {
    dbl_pconn *pc = cl->pool.all[i];
    if (!pc->call_deadline_ms || pc->interrupted) continue;
    if (now >= pc->call_deadline_ms) dbl_cut_locked(cl, pc);
    else if (pc->call_deadline_ms < *next) {
      *next = pc->call_deadline_ms;
    }
  }
}

static void *worker_main(void *arg);
static struct dbl_held *take_tell(dblock_client *cl);

/* Makes sure a worker will pick up each queued renewal. Caller holds mu. */
static void dispatch(dblock_client *cl) {
  dbl_assert_held(cl);
  if (!cl->wd.nqueued && !cl->wd.ntell) return;
  if (cl->wd.nqueued + cl->wd.ntell > cl->wd.idle_workers) dbl_threads_here(cl); /* (before: a fork) */
  while (cl->wd.nqueued + cl->wd.ntell > cl->wd.idle_workers && cl->wd.nworkers < DBL_MAX_WORKERS &&
         pthread_create(&cl->wd.workers[cl->wd.nworkers], NULL, worker_main, cl) == 0) {
    dbl_name_thread(cl->wd.workers[cl->wd.nworkers], "dblock-renew");
    cl->wd.nworkers++;
    cl->wd.idle_workers++; /* counted free from its start, so no second spawn */
  }
  /* (when no thread can be started, the ones there are take the queue in
   * turn; loss deadlines are kept by this thread regardless) */
  dbl_signal(&cl->wd.work, 1);
}

static void *watchdog_main(void *arg) {
  dblock_client *cl = arg;
  dbl_lock(cl);
  while (!cl->closing) {
    int64_t now = dbl_mono_ms(), next = now + 1000;
    declare_losses(cl, now, &next);
    queue_renewals(cl, now, &next);
    cut_late_calls(cl, now, &next);
    dispatch(cl);
    if (cl->wd.ntell && cl->wd.nworkers == 0) {
      /* No worker could be started: tell the losses here rather than
       * never (the callback then delays this thread). */
      struct dbl_held *h = take_tell(cl);
      if (h) dbl_tell_locked(cl, h);
      continue;
    }
    if (next > now) wait_until(cl, next);
  }
  dbl_unlock(cl);
  return NULL;
}

/* Takes the first entry whose loss is to be told, marked TELLING. Caller
 * holds mu. */
static struct dbl_held *take_tell(dblock_client *cl) {
  dbl_assert_held(cl);
  if (!cl->wd.ntell || cl->wd.ntelling >= DBL_MAX_WORKERS / 2) return NULL;
  for (struct dbl_held *h = cl->held; h; h = h->next)
    if (h->lost_notified == LOST_QUEUED) {
      h->lost_notified = LOST_TELLING;
      cl->wd.ntell--;
      return h;
    }
  return NULL;
}

/* Takes the first queued entry (already claimed for us). Caller holds mu. */
static struct dbl_held *take_queued(dblock_client *cl) {
  dbl_assert_held(cl);
  for (struct dbl_held *h = cl->held; h; h = h->next)
    if (h->queued) {
      h->queued = 0;
      cl->wd.nqueued--;
      return h;
    }
  return NULL;
}

/* Renews one claimed entry and plans its next renewal. Called without mu. */
static void renew_one(dblock_client *cl, struct dbl_held *h) {
  dbl_err e;
  int rc;
  int64_t retry = 0;
  memset(&e, 0, sizeof e);
  rc = dbl_renew_held(cl, h, &e);
  if (rc == DBLOCK_ELOST) dbl_mark_lost(cl, h);
  if (rc != 0 && rc != DBLOCK_ELOST) {
    /* Outcome unknown (connection trouble, a call cut): try again soon on
     * a fresh connection; the owner-checked renewal re-reads the row. The
     * watchdog declares the loss if the deadline comes first. (h is ours:
     * claimed, so its fields hold still.) */
    retry = h->lease_ms > 0 ? (h->lost_at_ms - dbl_mono_ms()) / 4 : RETRY_MAX_MS;
    retry = retry < RETRY_MIN_MS ? RETRY_MIN_MS : retry > RETRY_MAX_MS ? RETRY_MAX_MS : retry;
    DBL_COUNT(cl, renewal_failures);
    dbl_warn(cl, "renewal of lock '%s' failed (%s); trying again in %lld ms", h->name,
             e.msg[0] ? e.msg : dblock_strerror(rc), (long long)retry);
  }
  dbl_lock(cl);
  if (rc != 0 && rc != DBLOCK_ELOST) {
    h->renew_at_ms = dbl_mono_ms() + retry;
  } else if (rc == 0 && h->lease_ms <= 0) {
    h->renew_at_ms = dbl_mono_ms() + dbl_ping_ms(cl);
  }
  h->busy = 0;
  dbl_signal(&cl->cv, 1);
  if (cl->wd.wake_ms > h->renew_at_ms) dbl_signal(&cl->wd.wake, 1);
  dbl_unlock(cl);
}

/* A renewal worker; counted in idle_workers whenever it is not renewing. */
static void *worker_main(void *arg) {
  dblock_client *cl = arg;
  dbl_lock(cl);
  while (!cl->closing) {
    struct dbl_held *h = take_tell(cl);
    if (h) {
      cl->wd.idle_workers--;
      cl->wd.ntelling++;
      dbl_tell_locked(cl, h); /* (lets mu go during the callback) */
      cl->wd.ntelling--;
      cl->wd.idle_workers++;
      continue;
    }
    h = take_queued(cl);
    if (!h) {
      dbl_wait(cl, &cl->wd.work);
      continue;
    }
    cl->wd.idle_workers--;
    dbl_unlock(cl);
    renew_one(cl, h);
    dbl_lock(cl);
    cl->wd.idle_workers++;
  }
  dbl_unlock(cl);
  return NULL;
}

int dbl_watchdog_start_locked(dblock_client *cl) {
  dbl_assert_held(cl);
  if (cl->wd.started || cl->closing) return 0;
  dbl_threads_here(cl); /* (before the thread: a fork in between must not adopt) */
  if (pthread_create(&cl->wd.thread, NULL, watchdog_main, cl) != 0) return DBLOCK_ENOMEM;
  dbl_name_thread(cl->wd.thread, "dblock-watchdog");
  cl->wd.started = 1;
  return 0;
}

int dbl_watchdog_start(dblock_client *cl) {
  int rc;
  dbl_lock(cl);
  rc = dbl_watchdog_start_locked(cl);
  dbl_unlock(cl);
  return rc;
}

void dbl_watchdog_kick(dblock_client *cl, int64_t due_ms) {
  dbl_lock(cl);
  /* Asleep until after this lock is due: wake it to re-plan. Asleep until
   * before (its idle tick, or an earlier lock): it will see this one then;
   * awake: it scans every entry before sleeping again. */
  if (cl->wd.wake_ms > due_ms) dbl_signal(&cl->wd.wake, 1);
  dbl_unlock(cl);
}
