/*
 * testutil.h — shared helpers for the cmocka suites: which backends to run
 * against (real servers started by tests/with-servers.sh, a temp SQLite
 * file), opening clients, timing.
 */
#ifndef DBLOCK_TESTUTIL_H
#define DBLOCK_TESTUTIL_H

#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "dblock.h"

typedef struct tu_backend {
  const char *name; /* "sqlite", "postgres", "mysql" */
  const char *url;  /* NULL when the server URL is not in the environment */
} tu_backend;

/* The three backends: SQLite on a temp file of this process, PostgreSQL
 * from DBLOCK_TEST_PG_URL, MariaDB from DBLOCK_TEST_MY_URL. A missing server
 * URL makes tu_backends() fail the run (never a silent skip). */
const tu_backend *tu_backends(int *count);

/* Whether this run covers backend `be` ("sqlite", "postgres", "mysql"; NULL
 * for a test on no backend). DBLOCK_TEST_BACKEND=LIST, a comma-separated
 * list of backend names and "none" (the backend-less tests), cuts a suite
 * into shards that tests/run-suites.sh runs side by side: most tests wait
 * on leases and clocks, not on the CPU. Unset, everything is covered. */
int tu_backend_wanted(const char *be);
/* Compacts t[0..n) to the tests tu_backend_wanted() keeps, judging each by
 * the backend its name carries ("_sqlite", "_postgres", "_mysql"; none
 * otherwise), in order; returns how many are left. */
size_t tu_shard_tests(struct CMUnitTest *t, size_t n);

/* Opens a client on url with strategy and table (NULL = default), lease in
 * ms (0 = default); fails the test on error. */
dblock_client *tu_open(const char *url, dblock_strategy s, const char *table,
                       int64_t lease_ms);
/* Same with full options. */
dblock_client *tu_open_opts(const char *url, const dblock_options *o);
/* Migrates, failing the test on error. */
void tu_migrate(dblock_client *c);

int64_t tu_now_ms(void);
void tu_sleep_ms(int64_t ms);
/* A name unique to this process and call, with a prefix; the last 16 per
 * thread stay valid. */
const char *tu_name(const char *prefix);

/* The URL of a backend by name ("sqlite", "postgres", "mysql"). */
const char *tu_url(const char *backend);

/* A connection of the test's own through the driver interface (drivers/
 * driver.h), or NULL with the reason on stderr; *drv receives its driver.
 * Close it with (*drv)->close. Safe in a forked child (fails nothing). */
struct dbl_conn;
struct dbl_driver;
struct dbl_conn *tu_conn(const char *url, const struct dbl_driver **drv);

/* The test's own access to a database, through the driver interface: runs
 * sql as a script, or, with count, as a query whose first value goes to
 * *count. Fails the test on error. */
void tu_sql(const char *url, const char *sql, int64_t *count);

/* Runs sql as the server's superuser, for what the test user may not do,
 * through the admin client with-servers.sh exports for backend
 * ("postgres": psql -c; "mysql": mariadb -e). Fails the test on error. */
void tu_admin_sql(const char *backend, const char *sql);
/* Stops process pid (SIGSTOP) and returns once every thread of it is
 * stopped. On SQLite (url) also between its writes: a process stopped
 * inside one of its short write transactions (a waiter's try, a renewal)
 * keeps the file's one write lock, and every other process's lock calls
 * wait for it (docs/limits.md). A test that means to stall a client,
 * not the database, gets one stopped while the file is free: it is let go
 * on (SIGCONT) and stopped again until then. On failure pid is killed and
 * reaped (a stopped process holding the file would stall every later test
 * on it) and the test fails. */
void tu_stop_between_writes(int pid, const char *url);

/* Empties table's ${table}_alive on the server of url (PostgreSQL or
 * MariaDB), as a crash does: the next grant advances the fencing epoch.
 * TRUNCATE, which waits for every transaction that read the table, so it
 * gives up (failing the test) after 5 s rather than hang behind a lock a
 * failed test left held. */
void tu_lose_epoch(const char *url, const char *table);

/* Acquires name on c (wait and lease as in dblock_lock_acquire), or fails
 * the test with the reason. */
dblock_lock *tu_acquire(dblock_client *c, const char *name, int64_t wait_ms,
                        int64_t lease_ms);
/* Tries name once with the client's lease and releases it at once if
 * granted: returns what the acquire returned. */
int tu_try(dblock_client *c, const char *name);

/* An on_lost callback that counts its calls in tu_lost_calls. */
extern atomic_int tu_lost_calls;
void tu_on_lost(const char *name, int64_t fence, int reason, void *arg);
/* tu_lost_calls once it reaches want, or when ms have passed. A handle
 * says lost (dblock_lock_is_lost) before its callback has run (a worker
 * runs it soon after): a test that saw the flag waits for the call. */
int tu_await_lost_calls(int want, int64_t ms);
/* 1 once every thread of pid is stopped (state T, or t under a tracer),
 * within 2 s; 0 if not (or pid is gone). A SIGSTOP is not yet a stop. */
int tu_all_threads_stopped(int pid);
/* 1 once thread tid of this process sleeps as the wake board's waiters
 * do — in a FUTEX_WAIT_BITSET on a shared (not process-private) word, as
 * /proc shows its system call — at three looks 5 ms apart, within 5 s; 0
 * if not; -1 if /proc cannot tell here. (A sanitizer's own locks and the
 * pthread ones wait on private futexes.) */
int tu_thread_in_board_sleep(int tid);
/* The build tree under test: $DBLOCK_TEST_TREE, default "build". */
const char *tu_tree(void);
/* Every limit on elapsed time the suites assert, in one table
 * (testutil.c): each has the normal tree's value and the sanitizer
 * trees' (a tree other than "build", where every step takes several
 * times longer), and the run that set it. */
typedef enum {
  TB_TIMED_WAIT,     /* a 300 ms timed wait returns within this */
  TB_WAKE,           /* a sleeping waiter is granted within this of a release */
  TB_HOLD_WAIT,      /* a 100 ms wait behind the board's hold returns within this */
  TB_LOSS_TOLD,      /* a stalled holder is told within this of the stall */
  TB_REAPER_CALL,    /* a call waits at most this beside a reaper batch (server) */
  TB_CLI_HOLD,       /* a hold long enough for two CLI programs to run meanwhile */
  TB_COUNT
} tu_bound_id;
int64_t tu_bound(tu_bound_id b);

/* Starts a lock holder in a process of its own: tests/lockhelper from
 * the tree in DBLOCK_TEST_TREE (default "build"), exec'd — not a forked
 * copy of the test, in which ThreadSanitizer lets no thread start. It
 * opens a client on url with o's strategy, table, lease_ms, fair and
 * backoff (backoff_min_ms must equal backoff_max_ms; other fields are not
 * passed on), and returns once that client is open (the test fails when
 * it is not within 10 s). It then acquires name waiting wait_ms (-1:
 * forever), writes the fence on a line to the pipe whose read end goes to
 * *out (when out is not NULL) and sleeps until killed; whatever of it
 * still runs when the test process exits is killed then. Returns its pid. */
int tu_spawn_holder(const char *url, const dblock_options *o, const char *name, int64_t wait_ms,
                    int *out);
/* Reads the fence a holder from tu_spawn_holder wrote on fd, waiting up to
 * 10 s; when it wrote none, kills it and fails the test with its exit
 * status. */
int64_t tu_holder_fence(int fd, int pid);
/* Whether process pid (a child of this one) has not exited yet. */
int tu_alive(int pid);

/* The kernel ids of this process's threads named comm (dblock names its
 * threads: "dblock-watchdog", "dblock-renew", ...), up to max of them in
 * tids; returns how many there are. */
int tu_threads_named(const char *comm, int *tids, int max);
/* The kernel id of the one thread named comm that is not in old[0..nold)
 * (taken by tu_threads_named before the client that starts it was
 * opened); fails the test when there is not exactly one such for 2 s. */
int tu_new_thread_named(const char *comm, const int *old, int nold);
/* Stops thread tid of this process (lockhelper --freeze: a tracer in a
 * process of its own) while the others run on, for max_ms at most;
 * returns once it is stopped, with the freezer's pid, and its control
 * pipe in *ctl. */
int tu_freeze_thread(int tid, int64_t max_ms, int *ctl);
/* Lets the thread stopped by tu_freeze_thread go again. */
void tu_thaw_thread(int pid, int ctl);

/* The message of the last error on c (or of the thread when c is NULL). */
const char *tu_errmsg(dblock_client *c);

/* The application's own connection to a lock database (not a dblock
 * client's), for fenced writes in its own transactions: a plain driver
 * connection on PostgreSQL and MariaDB, and on SQLite a sqlite3 handle
 * (busy timeout 5 s) with dblock_sqlite_check_register done for table
 * (NULL: the default). */
typedef struct tu_app tu_app;
tu_app *tu_app_open(const char *url, const char *table);
void tu_app_close(tu_app *a);
/* Runs sql: 0, or -1 with the error's SQLSTATE in code (on SQLite, the
 * one dblock_check's message names: "dblock_check (DBL01): ..."; else
 * "") and its message in msg (either may be NULL). */
int tu_app_exec(tu_app *a, const char *sql, char code[6], char msg[512]);
/* The first value of a one-row query (fails the test on an error). */
int64_t tu_app_i64(tu_app *a, const char *sql);
/* The same without failing the test (for a forked child): 0, or -1. */
int tu_app_try_i64(tu_app *a, const char *sql, int64_t *out);

#endif
