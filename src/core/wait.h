/*
 * wait.h — one way to wait per backend × strategy, behind one interface.
 *
 * An acquire is a loop (lock.c, acquire_wait): attempt; if busy, the
 * client's waiter sleeps. The waiter is chosen once, at open
 * (dbl_waiter_for), and the loop never asks which one it has:
 *
 *   server  for_update, every backend: the attempt itself waits on the
 *           row lock in the server; sleep does nothing.
 *   queue   PostgreSQL insert / optimistic: a ticket in the queue table,
 *           taken with the attempt; the release that frees the name
 *           NOTIFYs the oldest ticket's client, whose listener wakes it.
 *   board   SQLite insert / optimistic: a futex word per name hash in a
 *           file beside the database; a release wakes one sleeper.
 *   poll    MariaDB insert / optimistic (and behind a transaction
 *           pooler): exponential backoff with full jitter.
 *
 * Each waiter polls all the same (the safety net under a lost wake-up and
 * under a lease that ran out without a release), and none holds a
 * connection while it sleeps. Nothing here decides who holds a lock:
 * exclusion and fences are the row's business alone.
 */
#ifndef DBLOCK_WAIT_H
#define DBLOCK_WAIT_H

#include <stdint.h>

#include "../strategies/strategy.h"
#include "dblock.h"

/* One acquire's wait: what its waiter keeps between attempts. */
typedef struct dbl_waiting {
  dblock_client *cl;
  const char *name;
  int64_t wait_ms;  /* the caller's: 0 try once, > 0 timed, < 0 forever */
  int64_t deadline; /* monotonic ms (timed waits only; else 0) */
  int64_t started;  /* monotonic ms */
  int64_t lease_ms; /* the hold's lease (0: none): bounds the poll window */
  int reentrant;    /* the attempt adds a hold to the caller's own: it
                       takes no place in line */
  int tries;        /* attempts made so far */
  int64_t tried_ms; /* when the last attempt ran (monotonic ms) */
  int64_t cap_ms;   /* the backoff's current cap */
  dbl_place place;  /* what the next attempt carries (queue: the ticket) */
  /* queue */
  int queued;       /* the last attempt ran the queued statement */
  /* board */
  int board;        /* this wait sleeps on the board (mapped, usable) */
  uint64_t bhash;   /* the name's board hash */
  uint32_t bseq;    /* its counter, read before each attempt */
  int woken;        /* the last sleep ended by a release waking this one */
  int moved;        /* the counter moved during it (woken or not) */
  int misses;       /* wake-ups in a row whose attempt found it busy */
} dbl_waiting;

typedef struct dbl_waiter {
  const char *name;
  /* Called once, before the first attempt. */
  void (*begin)(dbl_waiting *w);
  /* Before each attempt: fills w->place; returns 1 when, instead of
   * attempting, it slept (the loop then looks at the clock and the cancel
   * flag and comes back). */
  int (*before)(dbl_waiting *w);
  /* After each attempt, with its result. */
  void (*after)(dbl_waiting *w, int rc);
  /* The attempt found the name busy and the caller still waits: sleeps
   * until woken, the next poll, or the deadline, whichever comes first.
   * Returns at once on a cancel. */
  void (*sleep)(dbl_waiting *w);
  /* The acquire is over (rc: granted 0, or the failure): gives back its
   * place in line. */
  void (*end)(dbl_waiting *w, int rc);
  /* How long the next attempt may wait in the server (server waiter
   * only; NULL: not at all). */
  int64_t (*server_ms)(const dbl_waiting *w);
  /* dblock_client_cancel's way into this waiter's sleeps, after it set
   * the flag and made the cancel pipe readable (which reach every sleep
   * that polls them: NULL when that is all it takes). Async-signal-safe:
   * no lock, no allocation. */
  void (*cancel)(dblock_client *cl);
} dbl_waiter;

/* The waiter of cl's backend × strategy (and URL: a transaction pooler
 * polls). */
const dbl_waiter *dbl_waiter_for(const dblock_client *cl);

/* Sets up w for an acquire of name by cl with the caller's wait. */
void dbl_wait_init(dbl_waiting *w, dblock_client *cl, const char *name, int64_t wait_ms);
/* 1 if a timed wait has reached its deadline. */
int dbl_wait_over(const dbl_waiting *w);

/* The queue's poll window: how long a queued waiter that hears nothing
 * sleeps before it tries again, and a quarter of how long its ticket
 * stays alive without an attempt (queue.c). Never longer than the lease. */
int64_t dbl_wait_poll_ms(const dblock_client *cl, int64_t lease_ms);

#endif
