/*
 * internal.h — the core's private types: client, connection pool, held
 * locks, and the operation context a strategy works with.
 */
#ifndef DBLOCK_INTERNAL_H
#define DBLOCK_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "../drivers/driver.h"
#include "../strategies/strategy.h"
#include "dblock.h"
#include "../base/hash.h"
#include "../base/url.h"

/* A pooled connection and what the core learned when opening it. */
typedef struct dbl_pconn {
  dbl_conn *c;
  int ready;          /* conn_init has run */
  int64_t clock_offset_us; /* server clock - local clock when opened */
  int txn;            /* belongs to the pool of lock-transaction connections */
  int lent;           /* lent to an acquire attempt (counted in acq_out) */
  /* The call window (guarded by the client's mutex): while a thread is
   * using the connection, call_deadline_ms is when the watchdog cuts it
   * (drv->interrupt) if the call has not returned; 0 outside a call.
   * interrupted says it was cut: the connection is never reused. */
  int64_t call_deadline_ms;
  int interrupted;
  atomic_int cancel_cut; /* dblock_client_cancel shut it down (cancel.c) */
  int64_t pid;           /* the process that opened it: the only one to use it */
  struct dbl_pconn *next;
} dbl_pconn;

/* One lock held by one owner (client + thread); reentrant acquires share
 * it. Guarded by the client's mutex. */
struct dbl_held {
  struct dbl_held *next;
  char name[DBLOCK_NAME_MAX + 1];
  size_t name_len;
  int64_t thread;
  int holds;          /* reentrant depth held by this owner */
  int handles;        /* live dblock_lock handles pointing here */
  int64_t fence;
  int64_t expires_us; /* server clock, 0 = no lease */
  int64_t version;    /* optimistic: row version after our last change */
  int64_t lease_ms;
  int auto_renew;     /* renewed by the watchdog */
  int64_t renew_at_ms;    /* monotonic: next renewal */
  int64_t deadline_ms;    /* monotonic: lease surely over by then */
  int64_t lost_at_ms;     /* monotonic: deadline - margin; the watchdog
                             declares the lock lost then unless renewed
                             meanwhile (0 = no lease: for_update) */
  int busy;           /* a renewal or release is in flight */
  int queued;         /* claimed by the watchdog for a renewal worker */
  int lost;           /* DBLOCK_ELOST once known lost */
  int lost_notified;  /* LOST_UNTOLD, LOST_TELLING (the callback is
                         running), LOST_TOLD */
  dbl_pconn *pinned;  /* for_update: the connection holding the txn */
  dbl_pconn *granted_on; /* a leased grant's connection, from the attempt
                            until the grant is published (lock.c) */
};

struct dblock_lock {
  dblock_client *client;
  struct dbl_held *held;
};

/* A lost entry's notification: not yet, queued for a worker (the
 * watchdog declared it), being told (on_lost running), told. */
enum { LOST_UNTOLD = 0, LOST_QUEUED, LOST_TELLING, LOST_TOLD };
#define DBL_MAX_WORKERS 16
/* Acquires blocked in the server that one cancel can reach at once (more
 * wait in pieces of at most CANCEL_PIECE_MS: see lock.c). */
#define DBL_CANCEL_SLOTS 64

struct dblock_client {
  const dbl_driver *drv;
  const dbl_strategy *strat;
  dbl_url url;
  dblock_options opts;
  char table[48], schema[64];
  char host[256];
  int64_t pid;
  /* The process that started the client's first thread (0: none yet).
   * Only that process may take, release or renew locks with the client:
   * in a forked child the threads are not there (dbl_fork_guard). */
  atomic_llong threads_pid;
  char token[33];
  char channel[40];      /* the wait queue's notification channel for this
                            client: "dblock_" and 24 digits of the token */

  pthread_mutex_t mu;    /* take with dbl_lock (sync.c), never directly */
  atomic_llong mu_holder; /* thread id holding mu, 0 if none (for the
                             "caller holds mu" assertions) */
  pthread_cond_t cv;     /* a held entry stopped being busy (claim/unclaim) */

  /* The connection pool (pool.c). */
  struct {
    dbl_pconn *idle;     /* idle connections */
    int nidle;
    dbl_pconn *txn_idle; /* idle connections reserved for lock transactions
                            (for_update), which may keep autocommit off */
    int ntxn_idle;
    /* Connections lent to acquire attempts (at most pool_size: waiters
     * never cost connections beyond the pool), and cv, signalled when one
     * comes back. reserve: one kept for the holders' renewals and
     * releases while this client holds a leased lock (the connection its
     * grant came on), which acquires never take: a server that refuses
     * new connections never costs a held lock while that one lives. */
    int acq_out;
    pthread_cond_t cv;
    dbl_pconn *reserve;
    uint64_t trips_closed; /* round trips of connections already closed */
    dbl_pconn **all;       /* every open connection: round-trip counts and
                              the watchdog's call windows */
    int nall, capall;
  } pool;

  struct dbl_held *held;
  struct dbl_listener *lsn; /* the wait queue's listener (queue.c), once a
                               waiter needed it */
  const struct dbl_waiter *waiter; /* how its acquires wait (wait.h) */
  int closing;

  /* The watchdog (watchdog.c). It never talks to the database: it hands
   * due renewals to the workers, and starts another when all are busy, so
   * one renewal stuck on a stalled connection delays no other lock. */
  struct {
    int started;
    pthread_t thread;
    pthread_cond_t wake; /* its wake-ups: closing, a lock or a call due
                            sooner than it planned */
    int64_t wake_ms;     /* monotonic: when it plans to wake next */
    pthread_cond_t work; /* a renewal was queued, or closing */
    pthread_t workers[DBL_MAX_WORKERS];
    int nworkers, idle_workers, nqueued;
    int ntell;           /* entries LOST_QUEUED: on_lost due on a worker */
    int ntelling;        /* workers running an on_lost now (at most half of
                            DBL_MAX_WORKERS: slow callbacks never take
                            every worker from the renewals) */
  } wd;
  /* The reaper thread (admin.c); wake: closing. */
  struct {
    int started;
    pthread_t thread;
    pthread_cond_t wake;
  } reaper;

  /* The dialect (src/sql/) and its statements, expanded once at open. */
  const dbl_sqldialect *dl;
  const dbl_sqldef *defs;
  char *sqls[DBL_S_COUNT];

  dblock_error_info last;

  /* dblock_client_stats (stats.c): relaxed atomic counters, bumped where
   * the events happen (DBL_COUNT). reconnect_note: a connection broke, so
   * the next one opened is a reconnect worth logging. */
  struct {
    atomic_ullong grants, busy, timeouts, cancelled, failures, waited, renewals,
        renewal_failures, losses, connects, disconnects, wait_ms_sum, wakeups, notified;
    atomic_ullong wait_ms[DBLOCK_STATS_WAIT_BUCKETS];
  } stats;
  atomic_int reconnect_note;

  /* dblock_client_cancel (cancel.c): the flag, a pipe that is readable
   * while it is set, and the connections of acquires blocked in the
   * server. Lock-free: a signal handler writes them. */
  struct {
    atomic_int flag;
    int fd[2];
    _Atomic uintptr_t slot[DBL_CANCEL_SLOTS];
  } cancel;
  /* The wake board (board.c): mapped at a waiter's first need (state 0
   * untried, 1 mapped, -1 cannot be: polling), and the futex words this
   * client's waiters sleep on, for dblock_client_cancel to wake. */
  struct {
    struct dbl_board *map;
    atomic_int state; /* (set under mu; read without it on every release) */
    _Atomic uintptr_t wait[DBL_CANCEL_SLOTS];
  } board;
};

/* The client whose on_lost or log callback this thread is running (NULL
 * outside one). A dblock call on that client from inside its callback
 * could wait for the very thread that runs it: the entry points refuse
 * it with DBLOCK_EDEADLK (dbl_callback_guard: 0, or the refusal). */
extern _Thread_local const dblock_client *dbl_tls_callback;
int dbl_callback_guard(dblock_client *cl);
/* 1 in a process that must not use cl: a forked child of a client whose
 * threads run in another process (no watchdog would watch what it took,
 * and the holds are the parent's), or of an embedded (SQLite) client —
 * SQLite's lock bookkeeping is per process and was copied at the fork, so
 * a connection the child opened could believe it holds a file lock it
 * does not. Reads no mutex: the one copied at the fork may be held. */
int dbl_foreign(const dblock_client *cl);
/* Refuses (DBLOCK_EINVAL) a lock call where dbl_foreign; a forked child
 * of a server client that had started no thread adopts it (its own pid,
 * owner token and channel). */
int dbl_fork_guard(dblock_client *cl);
/* Records that this process started one of the client's threads. */
void dbl_threads_here(dblock_client *cl);

/* The refusal of a write by a read_only client (DBLOCK_EPERM). */
int dbl_read_only(dblock_client *cl);

/* Tells the client's log hook (default: stderr) one message of level
 * DBLOCK_LOG_..., if the client logs that level. Never call it with mu
 * held: the hook is the user's code. dbl_warn: at DBLOCK_LOG_WARNING. */
void dbl_log(dblock_client *cl, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define dbl_warn(cl, ...) dbl_log((cl), DBLOCK_LOG_WARNING, __VA_ARGS__)

/* Counts one event in cl->stats.field; and a grant's wait time. */
#define DBL_COUNT(cl, field) atomic_fetch_add_explicit(&(cl)->stats.field, 1, memory_order_relaxed)
void dbl_count_wait(dblock_client *cl, int64_t ms);

/* Records err as the client's and the thread's last error; returns code. */
int dbl_fail(dblock_client *cl, const dbl_err *e);
/* Same, from a code and a message. */
int dbl_failf(dblock_client *cl, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- connections (pool.c) ---- */
/* Opens a connection whose connect may take until deadline_ms (0: the
 * client's connect timeout), and enters it in cl->all. */
int dbl_pool_open(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e);
/* Refuses what a topology cannot do safely for this client (a replica
 * for writes, for_update on Galera): 0 or the refusal in e. */
int dbl_topology_guard(const dblock_client *cl, const dbl_topology *t, dbl_err *e);
/* The refusal of a call on a client dbl_foreign says this process may not
 * use (DBLOCK_EINVAL), into e. */
int dbl_fork_refusal(const dblock_client *cl, dbl_err *e);
/* Borrows a connection (opening and setting up one if none is idle);
 * txn = 1 takes one from the pool reserved for lock transactions. */
int dbl_pool_get(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e);
/* Borrows a connection without setting it up: for migrations, which run
 * before the lock table exists. */
int dbl_pool_take(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e);
/* Returns a connection; a broken or interrupted one is closed instead of
 * kept. Ends its call window. */
void dbl_pool_put(dblock_client *cl, dbl_pconn *pc);

/* Call windows. A connection borrowed from the pool is in a window
 * bounded by the client's call_timeout_ms; dbl_call_bound moves the bound
 * (an absolute monotonic time; 0 = now + call_timeout_ms) and
 * dbl_call_end closes the window of a connection kept outside the pool (a
 * pinned for_update connection between calls). dbl_call_check turns the
 * failure of a call the watchdog cut into a clear ECONN message. */
void dbl_call_bound(dblock_client *cl, dbl_pconn *pc, int64_t deadline_ms);
/* Closes the window; returns 1 if the watchdog cut the call (checked in
 * the same critical section, so a cut can never slip in unseen). */
int dbl_call_end(dblock_client *cl, dbl_pconn *pc);
/* Whether a call on pc was cut (its bound passed, or the client closing). */
int dbl_call_was_cut(dblock_client *cl, dbl_pconn *pc);
int dbl_call_check(dblock_client *cl, dbl_pconn *pc, int rc, dbl_err *e);
/* Borrows a connection for an acquire attempt: at most pool_size are
 * lent at once, so waits until one is back (until deadline_ms: then
 * DBLOCK_ETIMEOUT; a cancel: DBLOCK_ECANCELED). */
int dbl_pool_get_acq(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e);
/* Borrows a connection for a holder's renewal or release: the reserve if
 * there is one (else as dbl_pool_get_by). */
int dbl_pool_get_owner(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e);
/* After a grant on pc (a leased strategy): pc becomes the reserve if the
 * client has none, else goes back to the pool. */
void dbl_pool_keep_reserve(dblock_client *cl, dbl_pconn *pc);
/* The client holds nothing any more: its reserve goes back to the pool. */
void dbl_pool_free_reserve(dblock_client *cl);
/* Borrows a connection whose call is bounded by deadline_ms (also its
 * connect, when one must be opened). */
int dbl_pool_get_by(dblock_client *cl, dbl_pconn **out, int txn,
                    int64_t deadline_ms, dbl_err *e);
/* Closes a connection that must not be reused (state unknown). */
void dbl_pool_discard(dblock_client *cl, dbl_pconn *pc);
/* Closes a connection a cancel may have cut: not a sign that the server
 * or the network failed (no log, not counted, idle siblings kept). */
void dbl_pool_discard_cancelled(dblock_client *cl, dbl_pconn *pc);
/* Puts pc back after a call that returned rc, or closes it when that call
 * lost the connection (DBLOCK_ECONN) or it is broken. */
void dbl_pool_return(dblock_client *cl, dbl_pconn *pc, int rc);

/* tmpl with ${table} and ${schema} replaced (malloc'd; NULL: out of
 * memory). Statements are expanded once, at open; this is for scripts. */
char *dbl_expand(const dblock_client *cl, const char *tmpl);
/* Statements by id (src/sql/stmt.h) on connection c of cl. */
dbl_sqlrun dbl_runner(const dblock_client *cl, dbl_conn *c, dbl_err *e);

/* 1 if a granting statement failed because the server no longer vouches
 * for the fencing epoch (src/sql/fence.h). */
int dbl_no_epoch(const dbl_err *e);
/* Bumps the durable fencing epoch (flushed) and has the server vouch for
 * the new one; the caller then asks again. *moved (may be NULL): whether
 * the epoch moved (see dbl_sqldialect.epoch_bump). */
int dbl_epoch_bump(dblock_client *cl, dbl_pconn *pc, int *moved, dbl_err *e);
/* 1 if a grant refused to draw a token because the fence sequence is
 * behind the name's row (a token could repeat: fence.h); the caller moves
 * the sequence past the row (dbl_fence_catch_up) and asks again. Where the
 * dialect has no safe way to (PostgreSQL), dbl_fence_catch_up fails with
 * an error that tells the operator what to do. */
int dbl_fence_behind(const dbl_err *e);
int dbl_fence_catch_up(dblock_client *cl, dbl_pconn *pc, const char *name, size_t name_len,
                       dbl_err *e);

/* Fills an operation context for a strategy call. */
void dbl_op_init(dbl_op *op, dblock_client *cl, dbl_pconn *pc,
                 struct dbl_held *h, dbl_err *e);

/* Monotonic milliseconds. */
int64_t dbl_mono_ms(void);
/* The calling thread's id, as stored in owner_thread. */
int64_t dbl_thread_id(void);

/* The client mutex (sync.c): checked calls; in the sanitizer builds
 * (DBL_CHECK_LOCKS) error-checking, with "caller holds mu" asserted by
 * dbl_assert_held. */
void dbl_mutex_init(dblock_client *cl);
void dbl_lock(dblock_client *cl);
void dbl_unlock(dblock_client *cl);
void dbl_wait(dblock_client *cl, pthread_cond_t *cv);
void dbl_timedwait(dblock_client *cl, pthread_cond_t *cv, const struct timespec *at);
void dbl_signal(pthread_cond_t *cv, int all);
#ifdef DBL_CHECK_LOCKS
void dbl_assert_held(const dblock_client *cl);
#else
#define dbl_assert_held(cl) ((void)(cl))
#endif
/* Checks a lock name (1..255 bytes of valid UTF-8). */
int dbl_check_name(dblock_client *cl, const char *name);

/* Watchdog: started by the client's first call; it declares leases lost
 * on time, cuts calls past their bound and queues renewals for the
 * workers. 0 or DBLOCK_ENOMEM; _locked: the caller holds mu. */
int dbl_watchdog_start(dblock_client *cl);
int dbl_watchdog_start_locked(dblock_client *cl);
/* Sets h's lease clock after a grant or renewal (a ping, for a lock
 * without a lease) whose statement was sent at sent_ms (monotonic): when
 * to renew, and when the watchdog declares it lost. Caller holds mu. */
void dbl_set_lease_clock(dblock_client *cl, struct dbl_held *h, int64_t sent_ms);
/* The margin before a lease's end at which it is declared lost. */
int64_t dbl_loss_margin(const dblock_client *cl, int64_t lease_ms);
/* How often a lock without a lease (for_update) has its session pinged. */
int64_t dbl_ping_ms(const dblock_client *cl);
/* The server's idle-in-transaction limit asked for a lock session: 3 pings,
 * never under 10 s. The holder pings every dbl_ping_ms and gives a ping as
 * long to answer, so it finds a cut session at most 2 pings after the last
 * answer: before the server can end the transaction and let another owner
 * in. */
int64_t dbl_txn_idle_limit(const dblock_client *cl);
/* Cuts pc's call (drv->interrupt) once; the connection is never reused.
 * Caller holds mu. */
void dbl_cut_locked(dblock_client *cl, dbl_pconn *pc);
/* Cuts every call in flight (closing the client). Caller holds mu. */
void dbl_interrupt_all(dblock_client *cl);
/* Tells the watchdog that a lock is due for renewal at due_ms (monotonic);
 * wakes it only if it sleeps past that. */
void dbl_watchdog_kick(dblock_client *cl, int64_t due_ms);
/* Runs on_lost (and the loss log line) for h, which the caller has marked
 * LOST_TELLING, letting mu go during the call; marks it LOST_TOLD. Caller
 * holds mu. */
void dbl_tell_locked(dblock_client *cl, struct dbl_held *h);
/* Marks h lost (if not already) and calls the user's callback once; if
 * another thread is calling it right now, waits until it has returned.
 * Called without the mutex held. */
void dbl_mark_lost(dblock_client *cl, struct dbl_held *h);

/* Names a thread the library started (for top -H, ps -L, gdb and the
 * tests; 15 characters at most), right after pthread_create. Until then
 * it carries its creator's name (a renewal worker, started by the
 * watchdog, is briefly "dblock-watchdog"): readers look more than once. */
void dbl_name_thread(pthread_t t, const char *name);

/* Declares h lost if its loss deadline has passed by now (monotonic ms)
 * and it is not yet: sets the flag and queues the on_lost call for a
 * renewal worker (the caller wakes the watchdog to hand it out). Returns 1
 * if it declared the loss. The watchdog does this at each deadline; the
 * accessors do it too, so that a watchdog thread the host has not run yet
 * never leaves a caller believing in a lock past its deadline. Caller
 * holds mu. */
int dbl_declare_if_due(dblock_client *cl, struct dbl_held *h, int64_t now);

/* Renews a claimed entry once: 0, DBLOCK_ELOST, or an unknown outcome. */
int dbl_renew_held(dblock_client *cl, struct dbl_held *h, dbl_err *e);

/* Cancellation (cancel.c). init makes the pipe (DBLOCK_ENOMEM when it
 * cannot); dbl_cancelled says whether acquires are being cancelled;
 * dbl_cancel_watch registers pc, about to wait in the server, so a cancel
 * can wake it (the slot, or -1 when none is free or the driver cannot be
 * woken: the caller then waits in short pieces), and unwatch takes it back
 * and returns 1 if a cancel cut pc meanwhile (or acquires are cancelled):
 * the caller must then discard pc (dbl_pool_discard_cancelled).
 * dbl_cancel_sleep sleeps us microseconds or until a cancel. */
/* The longest piece of a server-side wait that a cancel cannot reach
 * directly (no cancel slot free): the waiting loop looks between pieces. */
#define DBL_CANCEL_PIECE_MS 100
int dbl_cancel_init(dblock_client *cl);
void dbl_cancel_close(dblock_client *cl);
int dbl_cancelled(dblock_client *cl);
int dbl_cancel_watch(dblock_client *cl, dbl_pconn *pc);
int dbl_cancel_unwatch(dblock_client *cl, int slot, dbl_pconn *pc);
/* The server waiter's cancel hook: wakes the connections registered by
 * dbl_cancel_watch through the driver's cancel (async-signal-safe). */
void dbl_cancel_server_waits(dblock_client *cl);
void dbl_cancel_sleep(dblock_client *cl, int64_t us);

/* Reaper thread. */
int dbl_reaper_start(dblock_client *cl);

/* ---- the wait queue (queue.c) ---- */
/* 1 if this client's strategy and dialect have a wait queue. */
int dbl_queue_possible(const dblock_client *cl);
/* 1 if wake-ups reach this client (its listener is listening), waiting up
 * to wait_ms for that; the first call starts the listener. */
int dbl_queue_ready(dblock_client *cl, int64_t wait_ms);
/* 1 if this client's listener listens now (never starts it). */
int dbl_queue_listening(dblock_client *cl);
/* The client's notification channel (whether or not it listens yet). */
const char *dbl_queue_channel(const dblock_client *cl);
/* Sleeps up to ms or until ticket's turn is announced (returns 1), or a
 * cancel or closing (0). */
int dbl_queue_sleep(dblock_client *cl, int64_t ticket, int64_t ms);
/* Drops a ticket of a waiter that gave up (best effort: a ticket nobody
 * refreshes dies by itself). */
void dbl_queue_leave(dblock_client *cl, int64_t ticket);
/* Stops the listener (dblock_client_free). */
void dbl_queue_stop(dblock_client *cl);
/* Statements the listener sent; caller holds mu. */
uint64_t dbl_queue_trips(const dblock_client *cl);


/* ---- the wake board (board.c) ---- */
/* 1 if this client's waiters sleep on the wake board: the driver names
 * one (a database on this host), the strategy polls, and it could be
 * mapped (mapped here at the first call). */
int dbl_board_possible(dblock_client *cl);
/* The board hash of name in this client's table. */
uint64_t dbl_board_hash(const dblock_client *cl, const char *name);
/* The name's counter: read before an attempt, waited on after. */
uint32_t dbl_board_seq(const dblock_client *cl, uint64_t h);
/* Until when (monotonic ms) an acquire that no release woke sleeps
 * instead of trying: 100 ms after a release of the name woke a sleeper, or
 * window_ms after that sleeper was granted (*taken: 1); 0: not lately. */
int64_t dbl_board_handed_until(const dblock_client *cl, uint64_t h, int64_t window_ms,
                               int *taken);
/* A sleeper woken by a release of the name was granted it (board.c). */
void dbl_board_taken(dblock_client *cl, uint64_t h);
/* Sleeps until the counter moves from seen (counted as a wake-up: 1 if a
 * release or a cancel woke this sleeper, 2 if it moved while this one was
 * not woken — not asleep yet, or its time ran out: another sleeper may
 * have been woken instead), ms pass, or the client is cancelled (0); -1:
 * no futexes here (poll). */
int dbl_board_wait(dblock_client *cl, uint64_t h, uint32_t seen, int64_t ms);
/* A release freed the name: moves the counter and wakes its oldest sleeper. */
void dbl_board_post(dblock_client *cl, uint64_t h);
/* Wakes this client's sleepers (dblock_client_cancel: async-signal-safe,
 * no lock, no allocation). */
void dbl_board_cancel(dblock_client *cl);
/* Unmaps the board (dblock_client_free). */
void dbl_board_close(dblock_client *cl);

#endif
