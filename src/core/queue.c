/*
 * queue.c — the wait queue's client side: push wake-ups for the polling
 * strategies (insert, optimistic) where the database can notify
 * (PostgreSQL), and the tickets of fair mode.
 *
 * A blocking waiter takes a ticket in the server's queue table with its
 * failed attempt (DBL_S_INSERT_QUEUED / DBL_S_OPT_QUEUED). The release that
 * frees the name gives the oldest live ticket the turn and notifies that
 * ticket's client on the client's own channel. One listener connection per
 * client, on a thread of its own, receives the notifications for all of the
 * client's waiting threads and wakes the one whose ticket came.
 *
 * Everything here only decides who tries when. A lost notification, a dead
 * or stalled listener, or a queue emptied by a crash leaves a waiter polling
 * at its backoff cap; exclusion and fencing are the row's business alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Recent wake-ups kept for waiters that were not asleep yet when theirs
 * came (the turn can be given between a waiter's attempt and its sleep). */
#define RECENT 32

static struct timespec mono_ts(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  return ts;
}

struct dbl_listener {
  pthread_t thread;
  pthread_cond_t woke; /* a wake-up came, or closing (CLOCK_MONOTONIC) */
  dbl_conn *conn;      /* listening, or NULL; set and cleared under mu */
  uint64_t trips;      /* LISTENs sent (the listener's only statements) */
  int started;         /* the thread runs */
  int tried;           /* its first LISTEN has been answered or failed */
  int ready;           /* conn has answered its LISTEN */
  int stop;
  int64_t recent[RECENT];
  unsigned next;
};

/* 1 if this client can queue at all: the dialect has a queue and the
 * strategy polls (a strategy that waits in the server queues there). */
int dbl_queue_possible(const dblock_client *cl) {
  return !cl->strat->pins_connection && cl->defs[DBL_S_INSERT_QUEUED].sql != NULL;
}

/* 1 if wake-ups can reach this client: the driver can listen and no
 * transaction pooler sits in between (it would hand the LISTEN to a
 * server session that is someone else's a moment later). */
static int can_listen(const dblock_client *cl) {
  return cl->drv->listen && cl->drv->await_notify && !dbl_url_param(&cl->url, "pooler");
}

static void got(const char *payload, void *arg) {
  dblock_client *cl = arg;
  char *end;
  long long t = strtoll(payload, &end, 10);
  if (*end || t <= 0) return; /* not ours */
  dbl_lock(cl);
  cl->lsn->recent[cl->lsn->next++ % RECENT] = t;
  dbl_signal(&cl->lsn->woke, 1);
  dbl_unlock(cl);
  DBL_COUNT(cl, wakeups);
  DBL_COUNT(cl, notified);
}

static void cut(void *arg) {
  dblock_client *cl = arg;
  dbl_lock(cl);
  if (cl->lsn->conn) cl->drv->interrupt(cl->lsn->conn);
  dbl_unlock(cl);
}

/* Connects and LISTENs, the LISTEN bounded by the call limit. Returns the
 * connection (published in lsn->conn) or NULL. */
static dbl_conn *listen_conn(dblock_client *cl) {
  struct dbl_listener *L = cl->lsn;
  dbl_conn *c = NULL;
  dbl_timer t;
  dbl_err e;
  int rc, armed;
  memset(&e, 0, sizeof e);
  /* (at most 1 s: closing the client waits for a connect in progress) */
  if (cl->drv->connect(&c, &cl->url,
                       cl->opts.connect_timeout_ms < 1000 ? cl->opts.connect_timeout_ms : 1000,
                       &e) != 0) {
    dbl_lock(cl);
    L->tried = 1;
    dbl_signal(&L->woke, 1);
    dbl_unlock(cl);
    return NULL;
  }
  dbl_lock(cl);
  L->conn = c; /* (so that closing, or the timer, can cut it) */
  rc = L->stop;
  dbl_unlock(cl);
  if (rc) return c;
  armed = dbl_timer_start(&t, cl->opts.call_timeout_ms, cut, cl) == 0;
  rc = cl->drv->listen(c, cl->channel, &e);
  if (armed && dbl_timer_stop(&t)) rc = DBLOCK_ECONN;
  dbl_lock(cl);
  L->trips++;
  L->tried = 1;
  L->ready = rc == 0 && !L->stop;
  dbl_signal(&L->woke, 1); /* (dbl_queue_ready's caller may be waiting) */
  dbl_unlock(cl);
  if (rc != 0) dbl_log(cl, DBLOCK_LOG_INFO, "wait queue: LISTEN failed: %s", e.msg);
  return c;
}

/* Closes the listener's connection (unpublished first, so that nobody
 * cuts it while it is being freed). */
static void drop_conn(dblock_client *cl, dbl_conn *c) {
  dbl_lock(cl);
  cl->lsn->conn = NULL;
  cl->lsn->ready = 0;
  dbl_unlock(cl);
  cl->drv->close(c);
}

/* Sleeps ms unless closing; returns 1 if closing. */
static int pause_unless_stopped(dblock_client *cl, int64_t ms) {
  struct timespec at = mono_ts(dbl_mono_ms() + ms);
  int stop;
  dbl_lock(cl);
  if (!cl->lsn->stop) dbl_timedwait(cl, &cl->lsn->woke, &at);
  stop = cl->lsn->stop;
  dbl_unlock(cl);
  return stop;
}

/* The listener thread: listen, hand wake-ups out, reconnect (after a
 * pause) when the connection breaks, until the client closes. */
static void *listener_main(void *arg) {
  dblock_client *cl = arg;
  for (;;) {
    dbl_conn *c = listen_conn(cl);
    dbl_err e;
    int stop, ready;
    dbl_lock(cl);
    stop = cl->lsn->stop;
    ready = cl->lsn->ready;
    dbl_unlock(cl);
    while (ready && !stop && cl->drv->await_notify(c, 1000, got, cl, &e) == 0) {
      dbl_lock(cl);
      stop = cl->lsn->stop;
      dbl_unlock(cl);
    }
    if (c) drop_conn(cl, c);
    if (stop || pause_unless_stopped(cl, 1000)) return NULL;
    dbl_log(cl, DBLOCK_LOG_INFO, "wait queue: listener reconnecting");
  }
}

int dbl_queue_ready(dblock_client *cl, int64_t wait_ms) {
  struct dbl_listener *L;
  int64_t end = dbl_mono_ms() + wait_ms;
  int ready, no_thread = 0;
  if (!dbl_queue_possible(cl) || !can_listen(cl)) return 0;
  dbl_lock(cl);
  if (!cl->lsn && !cl->closing && (L = calloc(1, sizeof *L)) != NULL) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&L->woke, &ca);
    pthread_condattr_destroy(&ca);
    cl->lsn = L;
    dbl_threads_here(cl); /* (before the thread: a fork in between must not adopt) */
    L->started = pthread_create(&L->thread, NULL, listener_main, cl) == 0;
    if (L->started) dbl_name_thread(L->thread, "dblock-listen");
    L->stop = !L->started; /* no thread: this client polls */
    no_thread = !L->started;
  }
  /* (the first waiter of a client waits for the LISTEN: a process that
   * waits once — `dblock run` on a busy name — is woken too) */
  while (cl->lsn && !cl->lsn->tried && !cl->lsn->stop && !cl->closing && dbl_mono_ms() < end &&
         !dbl_cancelled(cl)) {
    struct timespec at = mono_ts(end - dbl_mono_ms() > 20 ? dbl_mono_ms() + 20 : end);
    dbl_timedwait(cl, &cl->lsn->woke, &at);
  }
  ready = cl->lsn && cl->lsn->ready && !cl->lsn->stop;
  dbl_unlock(cl);
  if (no_thread) dbl_log(cl, DBLOCK_LOG_WARNING, "wait queue: no listener thread; waiters poll");
  return ready;
}

int dbl_queue_listening(dblock_client *cl) {
  int yes;
  dbl_lock(cl);
  yes = cl->lsn && cl->lsn->ready && !cl->lsn->stop;
  dbl_unlock(cl);
  return yes;
}

const char *dbl_queue_channel(const dblock_client *cl) { return cl->channel; }

int dbl_queue_sleep(dblock_client *cl, int64_t ticket, int64_t ms) {
  struct dbl_listener *L = cl->lsn;
  int64_t end = dbl_mono_ms() + ms, now;
  int woke = 0;
  if (!L) {
    dbl_cancel_sleep(cl, ms * 1000);
    return 0;
  }
  dbl_lock(cl);
  for (;;) {
    struct timespec at;
    for (int i = 0; i < RECENT; i++)
      if (L->recent[i] == ticket) {
        L->recent[i] = 0;
        woke = 1;
      }
    if (woke || cl->closing || (now = dbl_mono_ms()) >= end || dbl_cancelled(cl)) break;
    /* (slices: a cancel, which may come from a signal handler, cannot
     * signal a condition variable; it is seen within 20 ms) */
    at = mono_ts(now + (end - now < 20 ? end - now : 20));
    dbl_timedwait(cl, &L->woke, &at);
  }
  dbl_unlock(cl);
  return woke;
}

void dbl_queue_leave(dblock_client *cl, int64_t ticket) {
  dbl_pconn *pc;
  dbl_err e;
  dbl_out o;
  dbl_param p[2] = {DBL_I64(ticket), DBL_STR(cl->channel)};
  int rc;
  memset(&e, 0, sizeof e);
  if (dbl_pool_get(cl, &pc, 0, &e) != 0) return; /* the ticket dies by itself */
  dbl_call_bound(cl, pc, 0);
  {
    dbl_sqlrun x = dbl_runner(cl, pc->c, &e);
    rc = dbl_call_check(cl, pc, dbl_sql_run(&x, DBL_S_QUEUE_LEAVE, p, 2, &o, 0), &e);
  }
  dbl_pool_return(cl, pc, rc);
}

void dbl_queue_stop(dblock_client *cl) {
  struct dbl_listener *L;
  dbl_lock(cl);
  L = cl->lsn;
  if (L) {
    L->stop = 1;
    if (L->conn) cl->drv->interrupt(L->conn);
    dbl_signal(&L->woke, 1);
  }
  dbl_unlock(cl);
  if (!L) return;
  if (L->started) pthread_join(L->thread, NULL);
  dbl_lock(cl);
  cl->pool.trips_closed += L->trips;
  cl->lsn = NULL;
  dbl_unlock(cl);
  pthread_cond_destroy(&L->woke);
  free(L);
}

uint64_t dbl_queue_trips(const dblock_client *cl) {
  dbl_assert_held(cl);
  return cl->lsn ? cl->lsn->trips : 0;
}
