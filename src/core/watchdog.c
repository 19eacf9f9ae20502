/*
 * watchdog.c — the client's background thread that keeps held locks alive
 * (Redisson's model): a lock acquired without an explicit lease is renewed
 * at a third of its lease. A renewal that finds the lock gone, or that
 * cannot be confirmed before the lease would end by the local monotonic
 * clock, marks the lock lost and calls the user's callback.
 * for_update locks have no lease; their session is checked at the same
 * pace so a dead connection is reported as a lost lock.
 */
#include <string.h>
#include <time.h>

#include "internal.h"

void dbl_mark_lost(dblock_client *cl, struct dbl_held *h) {
  char name[DBLOCK_NAME_MAX + 1];
  int64_t fence;
  int notify;
  pthread_mutex_lock(&cl->mu);
  h->lost = DBLOCK_ELOST;
  notify = !h->lost_notified && cl->opts.on_lost;
  h->lost_notified = 1;
  memcpy(name, h->name, sizeof name);
  fence = h->fence;
  pthread_mutex_unlock(&cl->mu);
  if (notify) cl->opts.on_lost(name, fence, DBLOCK_ELOST, cl->opts.on_lost_arg);
}

/* Sleeps until at_ms (monotonic) or a kick; records the plan so that a
 * new lock due later than that need not wake it. Caller holds mu. */
static void wait_until(dblock_client *cl, int64_t at_ms) {
  struct timespec ts = {.tv_sec = at_ms / 1000, .tv_nsec = (at_ms % 1000) * 1000000};
  cl->wd_wake_ms = at_ms;
  pthread_cond_timedwait(&cl->wake, &cl->mu, &ts);
  cl->wd_wake_ms = 0; /* awake: it will look at every entry anyway */
}

/* Picks the next entry due for renewal (claiming it), or returns NULL and
 * the time of the next one in *next. Caller holds mu. */
static struct dbl_held *next_due(dblock_client *cl, int64_t now, int64_t *next) {
  int64_t period = cl->opts.lease_ms / 3;
  *next = now + 1000;
  for (struct dbl_held *h = cl->held; h; h = h->next) {
    if (h->lost || !h->auto_renew || h->handles <= 0) continue;
    if (h->renew_at_ms == 0) h->renew_at_ms = now + period; /* no lease: ping */
    if (h->renew_at_ms <= now && !h->busy) {
      h->busy = 1;
      return h;
    }
    {
      /* Due but claimed by a caller's renew or release (which may take a
       * reconnect): look again in 10 ms rather than spin. */
      int64_t at = h->renew_at_ms > now ? h->renew_at_ms : now + 10;
      if (at < *next) *next = at;
    }
  }
  return NULL;
}

static void *watchdog_main(void *arg) {
  dblock_client *cl = arg;
  pthread_mutex_lock(&cl->mu);
  while (!cl->closing) {
    int64_t now = dbl_mono_ms(), next;
    struct dbl_held *h = next_due(cl, now, &next);
    dbl_err e;
    int rc;
    if (!h) {
      wait_until(cl, next);
      continue;
    }
    pthread_mutex_unlock(&cl->mu);
    memset(&e, 0, sizeof e);
    rc = dbl_renew_held(cl, h, &e);
    if (rc == DBLOCK_ELOST) dbl_mark_lost(cl, h);
    pthread_mutex_lock(&cl->mu);
    if (rc != 0 && rc != DBLOCK_ELOST) {
      /* Outcome unknown (connection trouble): try again soon with a fresh
       * connection; the owner-checked renewal re-reads the row. Give up
       * when the lease has surely ended. */
      now = dbl_mono_ms();
      if (h->lease_ms > 0 && now >= h->deadline_ms) {
        pthread_mutex_unlock(&cl->mu);
        dbl_mark_lost(cl, h);
        pthread_mutex_lock(&cl->mu);
      } else {
        int64_t retry = h->lease_ms > 0 ? (h->deadline_ms - now) / 4 : 1000;
        h->renew_at_ms = now + (retry < 50 ? 50 : retry > 1000 ? 1000 : retry);
      }
    } else if (rc == 0 && h->lease_ms <= 0) {
      h->renew_at_ms = dbl_mono_ms() + cl->opts.lease_ms / 3;
    }
    h->busy = 0;
    pthread_cond_broadcast(&cl->cv);
  }
  pthread_mutex_unlock(&cl->mu);
  return NULL;
}

int dbl_watchdog_start(dblock_client *cl) {
  int rc = 0;
  pthread_mutex_lock(&cl->mu);
  if (!cl->watchdog_started) {
    if (pthread_create(&cl->watchdog, NULL, watchdog_main, cl) == 0)
      cl->watchdog_started = 1;
    else
      rc = DBLOCK_ENOMEM;
  }
  pthread_mutex_unlock(&cl->mu);
  return rc;
}

void dbl_watchdog_kick(dblock_client *cl, int64_t due_ms) {
  pthread_mutex_lock(&cl->mu);
  /* Asleep until after this lock is due: wake it to re-plan. Asleep until
   * before (its idle tick, or an earlier lock): it will see this one then;
   * awake: it scans every entry before sleeping again. */
  if (cl->wd_wake_ms > due_ms) pthread_cond_broadcast(&cl->wake); /* (the reaper
                                      thread waits on it too: signal could pick it) */
  pthread_mutex_unlock(&cl->mu);
}
