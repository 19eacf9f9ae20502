/*
 * driver.h — the one interface every database backend implements.
 *
 * A driver is a constant table of function pointers (designated
 * initializers), picked by the URL scheme. The core and the strategies speak
 * only this interface; a driver never knows about strategies.
 *
 * SQL given to a driver uses `?` placeholders for every value (never a value
 * pasted into the text); the PostgreSQL driver rewrites them to $1..$n.
 * Every backend error is classified here into a DBLOCK_E... code, keeping
 * the SQLSTATE / native number and message.
 *
 * New members are only ever appended (see DBL_DRIVER_VERSION).
 */
#ifndef DBLOCK_DRIVER_H
#define DBLOCK_DRIVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/url.h"
#include "dblock.h"

#define DBL_DRIVER_VERSION 7

typedef enum dbl_dialect { DBL_PG = 1, DBL_MY = 2, DBL_LITE = 3 } dbl_dialect;

/* A classified error. code is a DBLOCK_E... value. */
typedef struct dbl_err {
  int code;
  char sqlstate[6];
  int native;
  char msg[512];
  int stmt; /* a pipeline's error: which of its statements (0-based) failed;
               dbl_err_set makes it 0 */
} dbl_err;

typedef enum dbl_ptype { DBL_P_NULL = 0, DBL_P_I64, DBL_P_TEXT } dbl_ptype;

/* One bound parameter. TEXT values are bytes of length len (need not be
 * NUL-terminated). */
typedef struct dbl_param {
  dbl_ptype type;
  int64_t i;
  const char *s;
  size_t len;
} dbl_param;

#define DBL_I64(v) ((dbl_param){.type = DBL_P_I64, .i = (v)})
#define DBL_TEXT(p, n) ((dbl_param){.type = DBL_P_TEXT, .s = (p), .len = (n)})
#define DBL_STR(p) DBL_TEXT((p), strlen(p))

/* A query result: nrows x ncols values, each a NUL-terminated copy (NULL for
 * SQL NULL), owned by the result; free with dbl_res_clear. affected is the
 * number of rows changed by a write (matched rows are not counted). */
typedef struct dbl_res {
  int nrows, ncols;
  char **vals;
  size_t *lens;
  int64_t affected;
  int64_t insert_id; /* MySQL LAST_INSERT_ID(expr) value, else 0 */
} dbl_res;

/* One statement of a pipeline (see dbl_driver.pipeline). */
typedef struct dbl_stmt {
  const char *sql;
  const dbl_param *params;
  int nparams;
} dbl_stmt;

typedef struct dbl_conn dbl_conn; /* private to each driver */

/* What a connection learns about its server (the topology guard, DESIGN
 * §10). The first four fields are filled by every probe; the rest only by
 * a full one. */
typedef struct dbl_topology {
  int read_only;     /* writes would be refused: a standby in recovery, a
                        read-only session, MariaDB read_only (whatever the
                        user's privileges) */
  int galera;        /* a Galera cluster node (wsrep_on) */
  int galera_ready;  /* Galera: synced, in the primary component */
  int cluster_size;  /* Galera: nodes in the component; else 0 */
  /* ---- full probe ---- */
  char server[96];   /* product and version */
  int standbys;      /* PostgreSQL primary: streaming standbys; -1 unknown */
  int sync_standbys; /* of which synchronous (sync/quorum); -1 unknown */
  int replica_of;    /* MariaDB: 1 if this server replicates from another */
  int nsettings;     /* settings that bear on dblock's promises, by name */
  struct { char name[48]; char value[80]; } settings[20];
} dbl_topology;

typedef struct dbl_driver {
  int version;
  const char *name; /* "postgres", "mysql", "sqlite" */
  dbl_dialect dialect;

  /* Connects. timeout_ms bounds the connect. On failure *out is NULL and e
   * says why (ECONN, EAUTH, EINVAL, ...). Never enables auto-reconnect. */
  int (*connect)(dbl_conn **out, const dbl_url *url, int64_t timeout_ms,
                 dbl_err *e);
  void (*close)(dbl_conn *c);

  /* Runs one parameterized statement. res may be NULL when rows are not
   * wanted. On failure res is left empty. */
  int (*query)(dbl_conn *c, const char *sql, const dbl_param *p, int np,
               dbl_res *res, dbl_err *e);

  /* Runs several statements; the result of the last one goes to res. A
   * driver that can pipeline sends them in one round trip; others run them
   * one by one. Stops at the first error (a statement after it does not
   * run), and says in e->stmt which one it was. */
  int (*pipeline)(dbl_conn *c, const dbl_stmt *stmts, int n, dbl_res *res,
                  dbl_err *e);

  /* Runs a script of several ;-separated statements without parameters
   * (migrations). */
  int (*script)(dbl_conn *c, const char *sql, dbl_err *e);

  int (*begin)(dbl_conn *c, dbl_err *e);
  int (*commit)(dbl_conn *c, dbl_err *e);
  int (*rollback)(dbl_conn *c, dbl_err *e);

  /* Server clock now, µs since the Unix epoch, UTC. */
  int (*now_us)(dbl_conn *c, int64_t *out, dbl_err *e);

  /* 1 if the connection is known to be broken (no round trip). */
  int (*broken)(dbl_conn *c);

  /* Called before an idle pooled connection is reused: 0 if the server
   * has closed it meanwhile (restart, idle timeout, killed session), seen
   * without a round trip because the socket became readable while no
   * request was out; the connection is then marked broken. NULL for an
   * embedded backend. */
  int (*idle_alive)(dbl_conn *c);

  /* Round trips sent on this connection so far. */
  uint64_t (*round_trips)(dbl_conn *c);

  /* How long the next statements may wait for a row / database lock held
   * by another session: ms < 0 forever, 0 as short as the backend allows,
   * > 0 that long. The driver remembers the current setting and only
   * talks to the server when it changes. A wait that runs out is reported
   * as DBLOCK_EBUSY (PostgreSQL 55P03, MySQL 1205/1969, SQLITE_BUSY). */
  int (*set_lock_wait)(dbl_conn *c, int64_t ms, dbl_err *e);

  /* Turns autocommit off (on = 0) or on for this connection, so that the
   * next statement opens a transaction without a BEGIN round trip.
   * Remembered; only talks to the server on a change. Drivers that begin
   * transactions otherwise (pipelining, in-process) return 0 and do
   * nothing. */
  int (*set_autocommit)(dbl_conn *c, int on, dbl_err *e);

  /* ---- version 2 ---- */
  /* Cuts the connection from another thread: a call blocked on it returns
   * at once with DBLOCK_ECONN, and the connection is broken from then on.
   * Safe to call while another thread is inside a call on c (it only shuts
   * the socket down; it never frees anything). NULL for an embedded
   * backend, whose calls are bounded by its busy timeout. */
  void (*interrupt)(dbl_conn *c);

  /* This connection is about to keep a transaction open while idle (a
   * for_update lock) and is used at least every limit_ms / 3: sets the
   * server's idle-in-transaction / idle-session limits for this session to
   * limit_ms, so that a server setting can neither end the lock before the
   * holder's own checks notice nor keep a dead holder's lock for hours.
   * Remembered; only talks to the server on a change. NULL: no such limits. */
  int (*idle_guard)(dbl_conn *c, int64_t limit_ms, dbl_err *e);
  /* ---- version 3 ---- */
  /* Asks the server what it is (one or two round trips; full = 0: only
   * the fields every new connection needs). NULL for an embedded backend
   * (stand-alone, writable by definition). */
  int (*probe)(dbl_conn *c, dbl_topology *t, int full, dbl_err *e);
  /* ---- version 4 ---- */
  /* Wakes a call on c blocked in a server-side lock wait, from another
   * thread or from a signal handler (async-signal-safe: it only shuts the
   * socket down or sets a flag). The call then fails (ECONN or busy) and
   * the connection must not be reused. */
  void (*cancel)(dbl_conn *c);
  /* ---- version 5 ---- */
  /* Opens a lock transaction (the for_update strategy's) whose row-lock
   * waits last wait_ms (< 0 forever, 0 a try) and runs s in it, in as few
   * round trips as the backend allows (PostgreSQL: BEGIN, the wait, an
   * unflushed commit and s in one pipeline; MariaDB: autocommit off, so s
   * opens the transaction; SQLite: BEGIN IMMEDIATE). s's result goes to
   * res. */
  int (*lock_begin)(dbl_conn *c, int64_t wait_ms, const dbl_stmt *s, dbl_res *res,
                    dbl_err *e);
  /* 1: a connection keeps autocommit off after lock_begin, so a statement
   * run on it outside a lock transaction must be committed. */
  int lock_manual_commit;
  /* ---- version 6 ---- */
  /* Subscribes this connection to notifications on channel ([a-z0-9_],
   * at most 63 bytes), for the wait queue's wake-ups. NULL: the backend
   * has no notifications (the waiters only poll). */
  int (*listen)(dbl_conn *c, const char *channel, dbl_err *e);
  /* Waits up to timeout_ms for notifications on a listening connection
   * and calls got(payload, arg) for each one received; returns 0 (also
   * when none came) or DBLOCK_ECONN when the connection broke. */
  int (*await_notify)(dbl_conn *c, int64_t timeout_ms,
                      void (*got)(const char *payload, void *arg), void *arg, dbl_err *e);
  /* ---- version 7 ---- */
  /* Writes to out the path of a file that every process using this
   * database maps (the wake board, src/core/board.c): only for a database
   * that is a file on this host. 0, or -1 (no board: the waiters poll).
   * NULL for a server. */
  int (*board_path)(const dbl_url *u, char *out, size_t n);
} dbl_driver;

extern const dbl_driver dbl_driver_pg;
extern const dbl_driver dbl_driver_mysql;
extern const dbl_driver dbl_driver_sqlite;

/* Picks the driver for a parsed URL; NULL if the backend is not built in. */
const dbl_driver *dbl_driver_for(const dbl_url *url);

void dbl_res_clear(dbl_res *r);
/* Appends the (name, value) rows of r to t->settings (as many as fit). */
void dbl_topology_settings(dbl_topology *t, const dbl_res *r);
/* The value of setting name in t, or NULL. */
const char *dbl_topology_setting(const dbl_topology *t, const char *name);
/* Writes one line (at most max) per way the server as probed (full) can
 * lose a granted lock — asynchronous standbys, commits acknowledged before
 * they are durable — and returns how many. */
int dbl_topology_risks(const dbl_topology *t, char (*out)[320], int max);
/* Appends to f[*n] (at most max in all) the doctor's findings about the
 * server as probed (full): server, topology, durability, timeouts. */
void dbl_topology_findings(const dbl_topology *t, dblock_finding *f, int *n, int max);
/* Value at (row, col) or NULL; out-of-range is NULL too. */
const char *dbl_res_get(const dbl_res *r, int row, int col);
/* Value parsed as int64 (0 for NULL / out of range). */
int64_t dbl_res_i64(const dbl_res *r, int row, int col);
/* Allocates a result of nrows x ncols empty values; returns 0 or ENOMEM. */
int dbl_res_alloc(dbl_res *r, int nrows, int ncols);
/* Stores a copy of len bytes at (row, col); NULL p stores SQL NULL. */
int dbl_res_set(dbl_res *r, int row, int col, const char *p, size_t len);

/* Fills e (printf-style message; never give it a password). Returns code. */
int dbl_err_set(dbl_err *e, int code, const char *sqlstate, int native,
                const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* A connection's cache of prepared statements, keyed by SQL text; the
 * least recently used one is evicted when it is full. stmt is the
 * driver's handle (MYSQL_STMT *, sqlite3_stmt *, a PostgreSQL name). */
typedef struct dbl_stmt_cache {
  struct { char *sql; void *stmt; uint64_t used; } slot[48];
  uint64_t tick;
} dbl_stmt_cache;

/* The cached handle for sql, or NULL. */
void *dbl_cache_get(dbl_stmt_cache *k, const char *sql);
/* Stores (a copy of) sql with stmt. If the cache was full, *evicted
 * receives the handle the caller must free (else NULL). ENOMEM leaves
 * the cache unchanged and stmt not stored. */
int dbl_cache_put(dbl_stmt_cache *k, const char *sql, void *stmt, void **evicted);
/* Calls drop on every cached handle and empties the cache. */
void dbl_cache_clear(dbl_stmt_cache *k, void (*drop)(void *stmt));

/* Replaces every occurrence of secret (a password) in e->msg by "***".
 * Drivers call it on every message built from backend text. */
void dbl_err_scrub(dbl_err *e, const char *secret);

/* 1 if socket fd has something to read (data, EOF or an error) right now.
 * On an idle database connection that means the server spoke unasked —
 * in practice, that it is closing the connection. */
int dbl_fd_readable(int fd);

/* A close-on-exec duplicate of a client library's socket, for interrupt:
 * the library closes its own descriptor when it finds the connection dead,
 * and the number could be reused by another socket before an interrupt
 * would shut it down; the duplicate stays ours until the driver's close.
 * -1 on failure (then calls on that connection cannot be cut). Both
 * descriptors are listed until dbl_fd_close: in a forked child they are
 * /dev/null (driver.c, "sockets across fork"). */
int dbl_fd_dup(int fd);
/* Closes a duplicate from dbl_fd_dup and takes it off the list. -1: no-op. */
void dbl_fd_close(int dup);
/* Shuts the socket behind fd down (no close): a call blocked on it in poll
 * or recv wakes with end-of-file. No-op for -1. */
void dbl_fd_cut(int fd);

/* A time limit for calls made where no call window exists yet (a probe
 * while connecting, the check in dblock_client_open): a short-lived thread
 * that runs cut(arg) if dbl_timer_stop has not been called within ms. The
 * thread is gone when dbl_timer_stop returns, so a process that forks
 * afterwards has no extra thread. If no thread can be started the call
 * simply runs unbounded (returns nonzero then). */
typedef struct dbl_timer {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, stopped, fired;
  int64_t ms;
  void (*cut)(void *arg);
  void *arg;
} dbl_timer;
int dbl_timer_start(dbl_timer *t, int64_t ms, void (*cut)(void *arg), void *arg);
/* Stops and joins the timer; returns 1 if it fired (the call was cut). */
int dbl_timer_stop(dbl_timer *t);

#endif
