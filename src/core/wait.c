/*
 * wait.c — the four waiters (see wait.h) and the one table of waiting's
 * tuning constants.
 *
 * Every constant of waiting, with what it buys (docs/waiting.md has the
 * benchmark figures):
 *
 *   backoff_min_ms  2 ms    (option) first poll cap; doubles per busy poll
 *   backoff_max_ms  250 ms  (option) the cap a long wait polls at
 *   FAST_PHASE_MS   2000    for the first 2 s of a wait the cap stops at
 *                           8 × backoff_min: a waiter that slept 250 ms
 *                           while the holder released and took the name
 *                           again at once would starve (MariaDB W2:
 *                           fairness, the grants per client min–max)
 *   ALIVE_MS        1000    a ticket lives this long after its waiter's
 *                           last attempt (at least 4 × backoff_max, at
 *                           most the lease); a queued waiter polls four
 *                           times per window: a lost notification or a
 *                           lease that ran out costs ≤ 250 ms
 *   TURN_MS         100     a turn handed to a waiter by a release keeps
 *                           newcomers off the name that long (fair mode:
 *                           the alive window): no barging (W2 fairness)
 *   queue first     on      a client that has waited before queues with
 *                           its first attempt (PostgreSQL W4: 3 statements
 *                           per grant, not 5; queue_before)
 *   LISTEN_WAIT_MS  1000    the first waiter of a client waits this long
 *                           for its listener's LISTEN, so that a process
 *                           that waits once (`dblock run`) is woken too
 *   BOARD_MISSES    3       a board sleeper woken this many times in a row
 *                           and busy each time (a hash shared by two
 *                           names) backs off once: never a busy loop
 *   (board.c HOLD_MS 100: after a release woke a sleeper, others that no
 *   release woke stay behind it that long: no barging on SQLite)
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "wait.h"

#define FAST_PHASE_MS 2000
#define ALIVE_MS 1000
#define TURN_MS 100
#define LISTEN_WAIT_MS 1000
#define BOARD_MISSES 3

void dbl_wait_init(dbl_waiting *w, dblock_client *cl, const char *name, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->cl = cl;
  w->name = name;
  w->wait_ms = wait_ms;
  w->started = dbl_mono_ms();
  w->deadline = wait_ms > 0 ? w->started + wait_ms : 0;
  w->cap_ms = cl->opts.backoff_min_ms;
}

int dbl_wait_over(const dbl_waiting *w) { return w->wait_ms > 0 && dbl_mono_ms() >= w->deadline; }

/* The time left before the deadline, capped at ms (no deadline: ms). */
static int64_t left_or(const dbl_waiting *w, int64_t ms) {
  int64_t left;
  if (w->wait_ms <= 0) return ms;
  left = w->deadline - dbl_mono_ms();
  return left < ms ? (left > 0 ? left : 0) : ms;
}

int64_t dbl_wait_poll_ms(const dblock_client *cl, int64_t lease_ms) {
  int64_t a = 4 * cl->opts.backoff_max_ms > ALIVE_MS ? 4 * cl->opts.backoff_max_ms : ALIVE_MS;
  return (lease_ms > 0 && lease_ms < a ? lease_ms : a) / 4;
}

/* ---- poll: backoff with full jitter ------------------------------------ */

/* Per-thread xorshift generator for the jitter: no shared state, no
 * locking, seeded from the thread id and the clock. */
static uint64_t jitter_rand(void) {
  static _Thread_local uint64_t s;
  if (!s) s = ((uint64_t)dbl_thread_id() << 32) ^ (uint64_t)dbl_mono_ms() ^ 0x9e3779b97f4a7c15ull;
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

/* Sleeps uniformly in [0.5 ms, cap] (never past the deadline; a cancel
 * cuts it short), then doubles the cap up to its limit: backoff_max, or 8
 * × backoff_min for the first FAST_PHASE_MS of the wait. */
static void backoff(dbl_waiting *w) {
  dblock_client *cl = w->cl;
  int64_t us = 500 + (int64_t)(jitter_rand() % (uint64_t)(w->cap_ms * 1000));
  int64_t limit = cl->opts.backoff_max_ms;
  if (dbl_mono_ms() - w->started < FAST_PHASE_MS && limit > 8 * cl->opts.backoff_min_ms)
    limit = 8 * cl->opts.backoff_min_ms;
  if (w->wait_ms > 0 && us > (w->deadline - dbl_mono_ms()) * 1000)
    us = (w->deadline - dbl_mono_ms()) * 1000;
  if (us > 0) dbl_cancel_sleep(cl, us);
  w->cap_ms = w->cap_ms * 2 > limit ? limit : w->cap_ms * 2;
}

static void nothing(dbl_waiting *w) { (void)w; }
static int no_before(dbl_waiting *w) {
  (void)w;
  return 0;
}
static void no_after(dbl_waiting *w, int rc) { (void)w, (void)rc; }
static void no_end(dbl_waiting *w, int rc) { (void)w, (void)rc; }

static const dbl_waiter waiter_poll = {
    .name = "poll",
    .begin = nothing,
    .before = no_before,
    .after = no_after,
    .sleep = backoff,
    .end = no_end,
};

/* ---- server: the attempt waits on the row lock ------------------------- */

/* The server-side wait of the next attempt: the time left (a timed wait),
 * none for a try, and in pieces of at most the call limit (waiting
 * forever too), so that each piece's call is bounded. */
static int64_t server_ms(const dbl_waiting *w) {
  int64_t limit = w->cl->opts.call_timeout_ms, ms;
  if (w->wait_ms == 0) return 0;
  if (w->wait_ms < 0) return limit;
  ms = w->deadline - dbl_mono_ms();
  if (ms < 1) ms = 1;
  return ms > limit ? limit : ms;
}

static const dbl_waiter waiter_server = {
    .name = "server",
    .begin = nothing,
    .before = no_before,
    .after = no_after,
    .sleep = nothing, /* (the attempt waited) */
    .end = no_end,
    .server_ms = server_ms,
    .cancel = dbl_cancel_server_waits, /* (the connections waiting in it) */
};

/* ---- queue: a ticket and a notification (PostgreSQL) ------------------- */

/* A blocking attempt queues (takes or keeps a ticket) once its client can
 * be notified, and always in fair mode (a newcomer's ticket is what keeps
 * it behind older ones); a try never does. A client that listens already
 * (it has waited before) queues with its first attempt; one that never
 * waited runs the plain statement first. */
static int queue_before(dbl_waiting *w) {
  dblock_client *cl = w->cl;
  int64_t alive = dbl_wait_poll_ms(cl, w->lease_ms) * 4;
  w->place.fair = cl->opts.fair;
  w->queued = w->wait_ms != 0 && !w->reentrant &&
              (w->place.ticket || cl->opts.fair ||
               (w->tries > 0 ? dbl_queue_ready(cl, 0) : dbl_queue_listening(cl)));
  w->place.channel = w->queued ? dbl_queue_channel(cl) : NULL;
  w->place.alive_us = alive * 1000;
  w->place.turn_us = (cl->opts.fair || alive < TURN_MS ? alive : TURN_MS) * 1000;
  return 0;
}

/* Queued: a release that hands this waiter the name wakes it; it polls
 * every poll window all the same. Not queued yet: once its listener
 * listens, it attempts again at once, queued. No listener (a pooler, a
 * thread that could not start): backoff. */
static void queue_sleep(dbl_waiting *w) {
  dblock_client *cl = w->cl;
  if (!w->place.ticket && !w->queued && !w->reentrant &&
      dbl_queue_ready(cl, left_or(w, LISTEN_WAIT_MS)))
    return;
  if (w->place.ticket && dbl_queue_ready(cl, 0))
    dbl_queue_sleep(cl, w->place.ticket, left_or(w, dbl_wait_poll_ms(cl, w->lease_ms)));
  else
    backoff(w);
}

/* (a grant took its ticket out of the queue in the same statement) */
static void queue_end(dbl_waiting *w, int rc) {
  if (w->place.ticket) dbl_queue_leave(w->cl, w->place.ticket);
  w->place.ticket = 0;
  (void)rc;
}

static const dbl_waiter waiter_queue = {
    .name = "queue",
    .begin = nothing,
    .before = queue_before,
    .after = no_after,
    .sleep = queue_sleep,
    .end = queue_end,
};

/* ---- board: a futex word per name hash (SQLite) ------------------------ */

static void board_begin(dbl_waiting *w) {
  if (w->wait_ms != 0 && (w->board = dbl_board_possible(w->cl)) != 0)
    w->bhash = dbl_board_hash(w->cl, w->name);
}

/* Sleeps on the board until a release of the name after the last attempt
 * wakes this waiter, or until `until` (monotonic ms), never past the
 * deadline: the sleep that runs out is the poll. Where futexes fail this
 * wait polls with backoff from now on. */
static void board_sleep_until(dbl_waiting *w, int64_t until) {
  int64_t now = dbl_mono_ms();
  int rc = 0;
  if (w->wait_ms > 0 && until > w->deadline) until = w->deadline;
  if (until > now && (rc = dbl_board_wait(w->cl, w->bhash, w->bseq, until - now)) < 0)
    w->board = 0;
  w->woken = rc == 1;
  w->moved = rc > 0;
  if (rc <= 0) w->misses = 0;
}

/* No barging: a blocking attempt that no release woke, coming just after
 * a release woke a sleeper or while that sleeper holds the name, sleeps
 * behind the sleepers untried (board.c) — behind a holder never past a
 * poll window from this waiter's last try, behind a release never past
 * two: a record that lies only delays. Returns 1 when it slept. */
static int board_before(dbl_waiting *w) {
  int64_t win, until, cap;
  int taken;
  if (!w->board || w->reentrant) return 0;
  w->bseq = dbl_board_seq(w->cl, w->bhash);
  if (!w->woken) {
    win = dbl_wait_poll_ms(w->cl, w->lease_ms);
    until = dbl_board_handed_until(w->cl, w->bhash, win, &taken);
    cap = (w->tries > 0 ? w->tried_ms : w->started) + (taken ? win : 2 * win);
    if (until > cap) until = cap;
    if (w->wait_ms > 0 && until > w->deadline) until = w->deadline;
    if (until > dbl_mono_ms()) {
      board_sleep_until(w, until);
      w->place.woken = 1; /* (the name went round meanwhile, most likely) */
      return 1;
    }
  }
  w->place.woken = w->place.woken || w->moved;
  return 0;
}

/* A sleeper a release woke: granted, the others stay behind it; failed
 * otherwise than busy, the wake-up goes on to the next one. */
static void board_after(dbl_waiting *w, int rc) {
  if (rc == DBLOCK_EBUSY && w->place.woken) w->misses++;
  if (w->woken && rc == 0) dbl_board_taken(w->cl, w->bhash);
  else if (w->woken && rc != DBLOCK_EBUSY) dbl_board_post(w->cl, w->bhash);
  w->place.woken = w->woken = w->moved = 0;
}

/* Woken BOARD_MISSES times in a row and busy each time: the word is moved
 * by another name's releases too; one backoff, so that this never becomes
 * a busy loop. */
static void board_sleep(dbl_waiting *w) {
  if (!w->board || w->reentrant || w->misses >= BOARD_MISSES) {
    backoff(w);
    w->misses = 0;
    return;
  }
  board_sleep_until(w, dbl_mono_ms() + dbl_wait_poll_ms(w->cl, w->lease_ms));
}

/* A waiter a release woke that leaves without trying (cancelled, out of
 * time) passes the wake-up on to the next sleeper, as a release would. */
static void board_end(dbl_waiting *w, int rc) {
  if (w->board && w->woken) dbl_board_post(w->cl, w->bhash);
  w->woken = 0;
  (void)rc;
}

static const dbl_waiter waiter_board = {
    .name = "board",
    .begin = board_begin,
    .before = board_before,
    .after = board_after,
    .sleep = board_sleep,
    .end = board_end,
    .cancel = dbl_board_cancel, /* (the futex words its sleepers wait on) */
};

const dbl_waiter *dbl_waiter_for(const dblock_client *cl) {
  if (cl->strat->pins_connection) return &waiter_server;
  if (dbl_queue_possible(cl)) return &waiter_queue;
  if (cl->drv->board_path) return &waiter_board;
  return &waiter_poll;
}
