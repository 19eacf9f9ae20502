/*
 * strategy.h — the interface of a locking strategy.
 *
 * A strategy is written against the driver interface only: it gets a
 * connection, the owner identity and the lock's state in a dbl_op, and
 * speaks SQL (per dialect) through op->drv. It never includes a backend's
 * client header, and it never sees the client structure.
 */
#ifndef DBLOCK_STRATEGY_H
#define DBLOCK_STRATEGY_H

#include <stdint.h>

#include "../drivers/driver.h"
#include "../sql/stmt.h"

/* The state of one grant, in and out of a strategy call. */
typedef struct dbl_grant {
  int64_t fence;
  int holds;          /* this owner's hold count on the row */
  int64_t expires_us; /* server clock; 0 = no lease */
  int64_t version;    /* row version after our last change */
} dbl_grant;

/* A waiter's place in line (src/core/wait.c, queue.c). In: its ticket
 * (0: none), fair mode, and — when channel is set — run the queued
 * statement: take a ticket if this attempt fails (notified on channel),
 * with this alive window and turn length (µs); woken: a release just woke
 * this waiter, so any row version known is stale. Out: the ticket (0
 * after a grant, or when none is held), and on a busy queued answer
 * whether the row itself keeps the caller out. */
typedef struct dbl_place {
  int64_t ticket;
  int fair;
  const char *channel;
  int64_t alive_us, turn_us;
  int kept_out;
  int woken;
} dbl_place;

typedef struct dbl_op {
  const dbl_driver *drv;
  dbl_conn *conn;
  int64_t clock_offset_us; /* server clock minus local clock, at connect */
  /* The dialect's statement table and the client's expansion of it
   * (${table}, ${schema}), both indexed by dbl_sid: run them with dbl_run. */
  const dbl_sqldef *defs;
  const char *const *sqls;
  const char *table;
  const char *name;
  size_t name_len;
  const char *host, *token;
  int64_t pid, thread;
  int64_t lease_ms;
  /* The grant: in for reentrant / release / renew calls, out after a
   * successful call. */
  dbl_grant g;
  int reentrant;          /* this owner already holds the name */
  int attempt;            /* 0 for the first try of this acquire call, then 1, 2, ... */
  int64_t version_hint;   /* a reentrant call: the caller's hold's row version
                             (optimistic's CAS names it); else -1 */
  int taken;              /* out: the acquire statement answered "another owner
                             holds it" (not a lock wait or a deadlock: those
                             are DBLOCK_EBUSY too, with taken 0) */
  /* The caller's place in line, which a waiting acquire's statement
   * carries where the dialect has a wait queue (src/core/wait.c). */
  dbl_place place;
  dbl_err *e;
} dbl_op;

typedef struct dbl_strategy {
  const char *name;
  dblock_strategy id;
  int pins_connection; /* the lock lives in a transaction on one connection */
  int has_lease;
  int node_local;      /* relies on row locks one server grants alone: on a
                          multi-primary cluster (Galera) another node grants
                          the same row at once and the conflict surfaces only
                          at COMMIT, after the critical section */
  /* One attempt. 0 = granted (op->h filled), DBLOCK_EBUSY = held by
   * another owner, DBLOCK_EMISMATCH, or an error. wait_ms is only used by
   * strategies that wait in the server (polling ones get 0). */
  int (*acquire)(dbl_op *op, int64_t wait_ms);
  /* Releases one hold (final: the last one). 0, DBLOCK_ELOST, or error. */
  int (*release)(dbl_op *op, int final);
  /* Called after a final release's reply was lost and asking again found
   * the grant gone: 0 if the row shows this grant's own release,
   * DBLOCK_ELOST if anything else (a force-unlock, another grant) came
   * between. NULL for strategies that are never asked again. */
  int (*released)(dbl_op *op);
  /* Extends the lease (or checks the session). 0, DBLOCK_ELOST, or error. */
  int (*renew)(dbl_op *op);
  /* Completes what a row of this strategy says (o filled from the row:
   * held by its state and lease, the owner by its columns) where the row
   * alone cannot tell — a lock held by an open transaction. op has a
   * connection and o->name. NULL: the row says it all. */
  int (*inspect)(dbl_op *op, dblock_lock_info *o);
  /* Before a force-unlock frees a held row: ends whatever keeps the
   * holder holding it (a session with an open transaction). NULL: nothing
   * to end. */
  int (*end_holder)(dbl_op *op);
} dbl_strategy;

/* The strategy with this id (DEFAULT: insert), or with the name a row
 * records; NULL if there is none. */
const dbl_strategy *dbl_strategy_by_id(dblock_strategy id);
const dbl_strategy *dbl_strategy_named(const char *name);

extern const dbl_strategy dbl_strategy_insert;
extern const dbl_strategy dbl_strategy_for_update;
extern const dbl_strategy dbl_strategy_optimistic;

#endif
