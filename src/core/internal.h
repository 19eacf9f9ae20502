/*
 * internal.h — the core's private types: client, connection pool, held
 * locks, and the operation context a strategy works with.
 */
#ifndef DBLOCK_INTERNAL_H
#define DBLOCK_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "../drivers/driver.h"
#include "../strategies/strategy.h"
#include "dblock.h"
#include "url.h"

/* A pooled connection and what the core learned when opening it. */
typedef struct dbl_pconn {
  dbl_conn *c;
  int64_t fence_base; /* server epoch << 40 (0 on SQLite), -1 = not loaded */
  int64_t clock_offset_us; /* server clock - local clock when opened */
  int txn;            /* belongs to the pool of lock-transaction connections */
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
  int busy;           /* a renewal or release is in flight */
  int lost;           /* DBLOCK_ELOST once known lost */
  int lost_notified;  /* the user's callback has run */
  dbl_pconn *pinned;  /* for_update: the connection holding the txn */
};

struct dblock_lock {
  dblock_client *client;
  struct dbl_held *held;
};

typedef struct dbl_sql_entry {
  const char *tmpl;
  char *sql;
} dbl_sql_entry;

#define DBL_SQL_CACHE 64

struct dblock_client {
  const dbl_driver *drv;
  const dbl_strategy *strat;
  dbl_url url;
  dblock_options opts;
  char table[48], schema[64];
  char host[256];
  int64_t pid;
  char token[33];

  pthread_mutex_t mu;
  pthread_cond_t cv;     /* a held entry stopped being busy (claim/unclaim) */
  pthread_cond_t wake;   /* watchdog / reaper wake-ups: closing, new lock due */
  int64_t wd_wake_ms;    /* monotonic: when the watchdog plans to wake next */
  dbl_pconn *idle;       /* idle connections */
  int nidle;
  dbl_pconn *txn_idle;   /* idle connections reserved for lock transactions
                            (for_update), which may keep autocommit off */
  int ntxn_idle;
  uint64_t trips_closed; /* round trips of connections already closed */
  dbl_pconn *all[256];   /* every open connection, for round-trip counts */
  int nall;

  struct dbl_held *held;
  struct { uint64_t hash; int64_t version; } vcache[1024]; /* optimistic hints */
  int closing;
  int watchdog_started, reaper_started;
  pthread_t watchdog, reaper;

  dbl_sql_entry sql[DBL_SQL_CACHE];
  int nsql;

  dblock_error_info last;
};

/* Records err as the client's and the thread's last error; returns code. */
int dbl_fail(dblock_client *cl, const dbl_err *e);
/* Same, from a code and a message. */
int dbl_failf(dblock_client *cl, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Borrows a connection (opening one if none is idle) whose server epoch
 * is loaded, which needs the lock table; txn = 1 takes one from the pool
 * reserved for lock transactions. */
int dbl_pool_get(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e);
/* Borrows a connection without loading the epoch: for migrations, which
 * run before the lock table exists. */
int dbl_pool_take(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e);
/* Returns a connection; a broken one is closed instead of kept. */
void dbl_pool_put(dblock_client *cl, dbl_pconn *pc);
/* Closes a connection that must not be reused (state unknown). */
void dbl_pool_discard(dblock_client *cl, dbl_pconn *pc);

/* The template with ${table} / ${schema} substituted, cached per client. */
const char *dbl_sql(dblock_client *cl, const char *tmpl);

/* Fills an operation context for a strategy call. */
void dbl_op_init(dbl_op *op, dblock_client *cl, dbl_pconn *pc,
                 struct dbl_held *h, dbl_err *e);

/* Monotonic milliseconds. */
int64_t dbl_mono_ms(void);
/* The calling thread's id, as stored in owner_thread. */
int64_t dbl_thread_id(void);
/* Checks a lock name (1..255 bytes of valid UTF-8). */
int dbl_check_name(dblock_client *cl, const char *name);

/* Watchdog: start on first leased lock; wake it after a change. */
int dbl_watchdog_start(dblock_client *cl);
/* Tells the watchdog that a lock is due for renewal at due_ms (monotonic);
 * wakes it only if it sleeps past that. */
void dbl_watchdog_kick(dblock_client *cl, int64_t due_ms);
/* Marks h lost (if not already) and calls the user's callback. Called
 * without the mutex held. */
void dbl_mark_lost(dblock_client *cl, struct dbl_held *h);

/* Renews a claimed entry once: 0, DBLOCK_ELOST, or an unknown outcome. */
int dbl_renew_held(dblock_client *cl, struct dbl_held *h, dbl_err *e);

/* Reaper thread. */
int dbl_reaper_start(dblock_client *cl);

#endif
