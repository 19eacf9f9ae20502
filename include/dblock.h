/*
 * dblock.h — distributed locks kept in the relational database you already run.
 *
 * This is the only public header of dblock and its reference documentation.
 *
 * Conventions (libgit2 / SQLite style):
 *   - Every function that can fail returns an int: 0 (DBLOCK_OK) or a negative
 *     DBLOCK_E... code. Out-parameters come first.
 *   - Handles are opaque. Every *_free function accepts NULL and does nothing.
 *   - After a failure, dblock_last_error() (per thread) and
 *     dblock_client_last_error() (per client) describe it: the dblock code, the
 *     backend's SQLSTATE or native error number, and a message. A password is
 *     never part of any message.
 *   - Strings passed in are copied; the caller keeps ownership. Strings
 *     returned by accessors belong to the handle and live as long as it does.
 *   - Times are microseconds since the Unix epoch, UTC, by the database
 *     server's clock (SQLite: the local clock, which is the server's).
 *
 * Thread rules: a dblock_client may be used from any number of threads at
 * once. A dblock_lock handle belongs to the thread that acquired it: release it
 * from that thread (its owner identity includes the thread).
 */
#ifndef DBLOCK_H
#define DBLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DBLOCK_VERSION_MAJOR 0
#define DBLOCK_VERSION_MINOR 1
#define DBLOCK_VERSION_PATCH 0
#define DBLOCK_VERSION_STRING "0.1.0"

/* Longest lock name, in bytes. Names are 1..DBLOCK_NAME_MAX bytes of valid
 * UTF-8 and are compared as exact bytes: "a", "A" and "a " are three names.
 * A name is a C string: an embedded NUL ends it. */
#define DBLOCK_NAME_MAX 255

/* ---- Status codes ------------------------------------------------------ */

#define DBLOCK_OK 0
#define DBLOCK_EBUSY (-1)      /* another owner holds the lock (try once)     */
#define DBLOCK_ETIMEOUT (-2)   /* the wait ran out before the lock was free    */
#define DBLOCK_ELOST (-3)      /* the lock was lost: expired and taken over,
                                  force-unlocked, or its session died          */
#define DBLOCK_ENOTHELD (-4)   /* released a lock this owner does not hold     */
#define DBLOCK_EDEADLK (-5)    /* reentrancy is off and this thread already
                                  holds the name                               */
#define DBLOCK_ECONN (-6)      /* cannot connect, or the connection was lost   */
#define DBLOCK_EAUTH (-7)      /* authentication failed                        */
#define DBLOCK_ESCHEMA (-8)    /* lock table missing: run `dblock migrate`     */
#define DBLOCK_EPERM (-9)      /* the database refused: permission / read-only */
#define DBLOCK_EINVAL (-10)    /* bad argument: name, URL, option              */
#define DBLOCK_ERETRY (-11)    /* deadlock / serialization failure: retry      */
#define DBLOCK_ENOMEM (-12)    /* out of memory                                */
#define DBLOCK_EMIGRATE (-13)  /* an applied migration was changed on disk /
                                  the schema is newer than this library        */
#define DBLOCK_EMISMATCH (-14) /* the name is managed by another strategy      */
#define DBLOCK_EUNSUPPORTED (-15) /* backend or strategy not available here    */
#define DBLOCK_EDB (-16)       /* any other database error                     */
#define DBLOCK_EREPLICA (-17)  /* connected to a read-only replica             */
#define DBLOCK_ECANCELED (-18) /* the acquire was cancelled
                                  (dblock_client_cancel)                       */

/* Returns a static, human-readable description of a DBLOCK_E... code
 * (never NULL; unknown codes give "unknown error"). Thread-safe. */
const char *dblock_strerror(int code);

/* What the last failure was. Filled by dblock_last_error() and
 * dblock_client_last_error(). sqlstate is "" and native is 0 when the
 * failure did not come from the database. */
typedef struct dblock_error_info {
  int code;          /* DBLOCK_E... (0 when there was no error) */
  char sqlstate[6];  /* PostgreSQL SQLSTATE or MySQL SQLSTATE, NUL-terminated */
  int native;        /* MySQL errno, SQLite extended result code, 0 for PG */
  char message[512]; /* one line, never contains a password */
} dblock_error_info;

/* Copies the calling thread's last error into *out. Useful when
 * dblock_client_open() fails and there is no client. Returns 0, or
 * DBLOCK_EINVAL when out is NULL. */
int dblock_last_error(dblock_error_info *out);

/* ---- Options ----------------------------------------------------------- */

typedef enum dblock_strategy {
  DBLOCK_STRATEGY_DEFAULT = 0, /* = DBLOCK_STRATEGY_INSERT */
  DBLOCK_STRATEGY_INSERT = 1,     /* unique-key insert, lease, one statement */
  DBLOCK_STRATEGY_FOR_UPDATE = 2, /* open transaction holding SELECT FOR UPDATE */
  DBLOCK_STRATEGY_OPTIMISTIC = 3  /* versioned compare-and-set UPDATE        */
} dblock_strategy;

typedef struct dblock_lock dblock_lock;
typedef struct dblock_client dblock_client;

/* Called once per lost grant, when a held lock is found lost or can no
 * longer be known held: from one of the client's renewal workers soon
 * after the lease's loss deadline (dblock_lock_is_lost says 1 from the
 * deadline itself; see dblock_lock_acquire), from the thread whose call
 * found it gone, or from dblock_client_free (on its caller's thread, one
 * after another: do not hold there a mutex the callback takes) for a loss
 * not yet told. Every call that returns DBLOCK_ELOST for a handle has
 * called it first. name is the lock's name, fence its token; both valid
 * only during the call. It runs on a worker, so a slow callback delays no
 * other lock's renewal or loss deadline (it occupies one worker) — unless
 * no worker thread can be started: then the watchdog runs it.
 * From inside it (and inside the log hook), dblock functions that talk to
 * the database or wait — acquire, release, renew, inspect, list, ... and
 * dblock_client_free — return DBLOCK_EDEADLK at once (release keeps the
 * handle; client_free does nothing) instead of waiting on the thread that
 * runs the callback; the accessors (dblock_lock_is_lost, _fence, _name,
 * dblock_client_stats, dblock_client_cancel) work. Note the loss (an
 * atomic flag) and act on it from the owning thread. */
typedef void (*dblock_lost_fn)(const char *name, int64_t fence, int reason,
                               void *arg);

/* The log hook (dblock_options.log): level is one of the DBLOCK_LOG_...
 * below, msg one line without a newline, valid during the call. Called
 * from any of the client's threads (the caller's, the watchdog's, a
 * renewal worker's), never while dblock holds a lock of its own, and only
 * for levels up to dblock_options.log_level. Keep it short and
 * thread-safe; do not call dblock on the same client from it.
 *   WARNING: a topology that can lose granted locks (at open), a lock
 *            lost, a renewal whose outcome is unknown (retried);
 *   INFO:    a connection lost and a reconnect, a renewal or release
 *            asked again after its reply was lost, a retried deadlock, a
 *            fencing-epoch bump after a server crash or promotion. */
#define DBLOCK_LOG_WARNING 1
#define DBLOCK_LOG_INFO 2
typedef void (*dblock_log_fn)(int level, const char *msg, void *arg);

#define DBLOCK_OPTIONS_VERSION 5

/* Client options. Zero means "default" for every field, so
 * `dblock_options o = DBLOCK_OPTIONS_INIT;` and setting what you need is the
 * intended use. Fields are only ever appended; version says which exist. */
typedef struct dblock_options {
  unsigned int version;     /* DBLOCK_OPTIONS_VERSION */
  dblock_strategy strategy; /* default INSERT */
  int64_t lease_ms;         /* default lease: 30000 */
  int64_t backoff_min_ms;   /* polling backoff floor: 2 */
  int64_t backoff_max_ms;   /* polling backoff ceiling: 250 (reached only
                               after 2 s of waiting; until then the cap is
                               8 x backoff_min) */
  int64_t connect_timeout_ms; /* default 5000 */
  int64_t reaper_interval_ms; /* 0 = no reaper thread (default) */
  int64_t reaper_grace_ms;    /* a row is reaped after expiry + grace: 0 */
  int pool_size;              /* connections kept open: 4 */
  int non_reentrant;          /* 1: a second acquire by the same thread fails
                                 at once with DBLOCK_EDEADLK */
  const char *owner_host;     /* default: gethostname() */
  const char *table;          /* lock table: "dblock_locks"; lowercase
                                 [a-z_][a-z0-9_]*, at most 40 bytes */
  dblock_lost_fn on_lost;     /* lost-lock callback, may be NULL */
  void *on_lost_arg;
  /* ---- version 2 ---- */
  int64_t call_timeout_ms;    /* longest wait for the server's answer to any
                                 one call (besides a lock wait the caller
                                 asked for): 10000. A call that runs out is
                                 cut (its connection closed, never reused)
                                 and reports DBLOCK_ECONN. */
  int64_t loss_margin_ms;     /* how long before its lease's end a lock not
                                 renewed by then is declared lost; 0 = the
                                 default, min(lease/2, max(100, lease/20))
                                 (capped at lease/2 when set) */
  /* ---- version 3 ---- */
  int read_only;              /* 1: this client only reads (inspect, list,
                                 status, migration status). It opens on a
                                 read-only replica and on a Galera node
                                 whatever the strategy; acquire, force-unlock,
                                 reap and migrate fail with DBLOCK_EPERM
                                 without touching the database. */
  dblock_log_fn log;          /* log messages (see dblock_log_fn); NULL:
                                 printed to stderr as "dblock: warning: ..."
                                 ("dblock: info: ...") */
  void *log_arg;
  /* ---- version 4 ---- */
  int log_level;              /* the most detailed level logged:
                                 DBLOCK_LOG_WARNING (default) or
                                 DBLOCK_LOG_INFO */
  /* ---- version 5 ---- */
  int fair;                   /* 1: grants of a name in the order its
                                 blocking waiters arrived, across processes
                                 and hosts (a ticket per waiter; clients
                                 without it may still take a free name no
                                 waiter was handed). A waiter that dies holds
                                 the line for about its alive window,
                                 max(1 s, 4 x backoff_max_ms) but never more
                                 than the lease (twice that at worst).
                                 PostgreSQL with insert or optimistic only:
                                 elsewhere (and with for_update)
                                 DBLOCK_EUNSUPPORTED at open. */
} dblock_options;

#define DBLOCK_OPTIONS_INIT {.version = DBLOCK_OPTIONS_VERSION}

/* ---- Client ------------------------------------------------------------ */

/* Opens a client for url (NULL: the DBLOCK_URL environment variable).
 * URL forms:
 *   postgres://user:pass@host:port/db?sslmode=...   (also postgresql://, or
 *                                                     a libpq "key=value" string)
 *   mysql://user:pass@host:port/db?socket=/path      (also mariadb://)
 *   sqlite:///absolute/path.db   sqlite://relative.db
 * opts may be NULL (all defaults); it is copied. Connects once to check the
 * URL and credentials; does not require the lock table (dblock_migrate creates
 * it). On success *out owns a client to free with dblock_client_free.
 * Errors: DBLOCK_EINVAL (bad URL/option), DBLOCK_ECONN, DBLOCK_EAUTH,
 * DBLOCK_EUNSUPPORTED (backend not built in), DBLOCK_ENOMEM, DBLOCK_EDB. */
int dblock_client_open(dblock_client **out, const char *url,
                       const dblock_options *opts);

/* Stops the watchdog, renewal and reaper threads, rolls back / releases
 * nothing explicitly (held for_update locks end with their sessions; leased
 * locks expire), closes connections and frees the client. Calls still in
 * flight on other threads' behalf (renewals, a reaper pass) are cut, so it
 * returns promptly even when the server is unreachable. Losses not yet told
 * to on_lost — declared, or past their loss deadline when it was called —
 * are told before it returns, on the calling thread, one after another (it
 * takes as long as those callbacks). Locks still held become invalid
 * handles: release them first. NULL is a no-op.
 * fork (with fork(2); not posix_spawn, vfork or _Fork, which run no fork
 * handlers): the child's copies of the client's sockets are replaced by
 * /dev/null (so the parent's sessions end when the parent's own copies
 * close), and the child never uses or closes a connection it inherited.
 * A client whose threads run in the parent (it has taken a lock there),
 * and any SQLite client, stays the parent's: in the child, calls that
 * talk to the database on it return DBLOCK_EINVAL, and this function only
 * forgets it — it sends, joins, tells and closes nothing, and leaves its
 * memory allocated. A server client that had no thread at the fork
 * (opened, then the process detached) becomes the child's, with an owner
 * token and pid of its own, to use and free. A child that needs locks on
 * a SQLite file execs first (SQLite's own lock state is per process and
 * is copied by fork). */
void dblock_client_free(dblock_client *client);

/* Copies the client's most recent error (from any thread) into *out.
 * Returns 0, or DBLOCK_EINVAL if an argument is NULL. */
int dblock_client_last_error(const dblock_client *client,
                             dblock_error_info *out);

/* The backend name: "postgres", "mysql" or "sqlite". Never NULL for a
 * valid client. */
const char *dblock_client_backend(const dblock_client *client);

/* The client's strategy (never DEFAULT). */
dblock_strategy dblock_client_strategy(const dblock_client *client);

/* Cancels acquires: every dblock_lock_acquire on this client that is
 * waiting now returns DBLOCK_ECANCELED promptly (within a few ms: a wait
 * in the server is cut, a sleep between attempts woken; a sleep waiting
 * for a notification looks every 20 ms), and every one started
 * afterwards returns it at once, until dblock_client_cancel_clear(). A
 * grant that completed before the cancel reached it is kept (the acquire
 * returns 0). Nothing else is affected: held locks stay held and renewed,
 * releases and introspection work. Safe from any thread and from a signal
 * handler (async-signal-safe: atomic stores, write(2), shutdown(2)), so a
 * SIGINT handler can stop a blocked acquire. Use one client per task that
 * must be cancelled on its own. Returns 0, or DBLOCK_EINVAL for NULL. */
int dblock_client_cancel(dblock_client *client);

/* Ends the cancelled state: acquires wait normally again. Not for signal
 * handlers. Returns 0, or DBLOCK_EINVAL for NULL. */
int dblock_client_cancel_clear(dblock_client *client);

/* Statements (round trips) this client has sent to the server so far, over
 * all its connections. For tests and benchmarks. */
uint64_t dblock_client_round_trips(const dblock_client *client);

/* ---- Counters ---------------------------------------------------------- */

/* Upper bounds (ms) of the wait-time buckets of dblock_stats.wait_ms: a
 * grant counts in the first bucket whose bound its wait (from the acquire
 * call to its grant) does not exceed; the last bucket is everything over
 * the last bound. */
#define DBLOCK_STATS_WAIT_BOUNDS_MS {1, 10, 100, 1000, 10000}
#define DBLOCK_STATS_WAIT_BUCKETS 6

/* What a client has done since it was opened (all counters only grow). */
typedef struct dblock_stats {
  uint64_t grants;           /* acquires that returned 0 (reentrant too) */
  uint64_t busy;             /* acquires that returned DBLOCK_EBUSY */
  uint64_t timeouts;         /* acquires that returned DBLOCK_ETIMEOUT */
  uint64_t cancelled;        /* acquires that returned DBLOCK_ECANCELED */
  uint64_t failures;         /* acquires that failed otherwise */
  uint64_t waited;           /* grants that needed more than one attempt */
  uint64_t renewals;         /* renewals and session pings confirmed */
  uint64_t renewal_failures; /* renewals with an unknown outcome (retried) */
  uint64_t losses;           /* grants lost (each told once to on_lost) */
  uint64_t connects;         /* connections opened */
  uint64_t disconnects;      /* connections dropped as broken or cut */
  uint64_t wait_ms[DBLOCK_STATS_WAIT_BUCKETS]; /* grants by wait time */
  uint64_t wait_ms_sum;      /* total wait of all grants, ms */
  uint64_t wakeups;          /* waiters woken by a release's notification
                                (PostgreSQL) or on the wake board
                                (SQLite); insert and optimistic */
  uint64_t notified;         /* of those, notifications the client's
                                listener received (PostgreSQL) */
} dblock_stats;

/* Copies the client's counters into *out; size is sizeof(dblock_stats) as
 * the caller was compiled (fields are only ever appended; a smaller size
 * gets the fields it has room for). Returns 0 or DBLOCK_EINVAL. */
int dblock_client_stats(const dblock_client *client, dblock_stats *out,
                        size_t size);

/* Writes *s as OpenMetrics text (the Prometheus exposition format, "# EOF"
 * last) with metric names starting "dblock_client_", for an application's
 * /metrics page. Like snprintf: returns the length of the whole text
 * (write nothing when size is 0), or a negative DBLOCK_E... code. */
int dblock_stats_openmetrics(char *buf, size_t size, const dblock_stats *s);

/* Name of a strategy ("insert", "for_update", "optimistic"), or NULL. */
const char *dblock_strategy_name(dblock_strategy s);

/* Parses "insert", "for_update" (or "for-update"), "optimistic" into *out.
 * Returns 0 or DBLOCK_EINVAL. */
int dblock_strategy_parse(dblock_strategy *out, const char *name);

/* ---- Migrations -------------------------------------------------------- */

/* Applies every pending migration for the client's backend and table, in
 * order, each recorded with its checksum. Re-running is a no-op. Two
 * migrators racing end with the schema applied once. *applied (may be NULL)
 * receives how many were applied now. Errors: DBLOCK_EMIGRATE (an applied
 * migration differs from the one built in), DBLOCK_EPERM, DBLOCK_ECONN, ... */
int dblock_migrate(dblock_client *client, int *applied);

/* Adopts a schema that another tool (Flyway, golang-migrate: see
 * docs/operations.md) applied from dblock's shipped migrations: records as applied,
 * with this build's checksums, each migration whose objects are all in
 * the database — the longest run from the first — and runs none. Pending
 * ones are left for dblock_migrate. *recorded (may be NULL) receives how
 * many were recorded now; 0 when all were recorded already. Errors:
 * DBLOCK_ESCHEMA (no dblock schema found to adopt), DBLOCK_EPERM, ... */
int dblock_migrate_baseline(dblock_client *client, int *recorded);

typedef struct dblock_migration_info {
  int version;           /* 1, 2, ... */
  const char *name;      /* file name, e.g. "0001_lock_table.sql" */
  int applied;           /* 1 if recorded as applied */
  int64_t applied_at_us; /* when, 0 if pending */
  int checksum_ok;       /* 0 if the recorded checksum differs */
} dblock_migration_info;

/* Lists the built-in migrations and whether each is applied. On success
 * *out is an array of *count entries to free with dblock_migration_info_free.
 */
int dblock_migrate_status(dblock_migration_info **out, size_t *count,
                          dblock_client *client);
void dblock_migration_info_free(dblock_migration_info *info, size_t count);

/* ---- Locks ------------------------------------------------------------- */

/* Acquires the lock `name` for the calling thread.
 *   wait_ms == 0: try once (DBLOCK_EBUSY if held elsewhere);
 *   wait_ms  > 0: wait up to that long (DBLOCK_ETIMEOUT);
 *   wait_ms  < 0: wait forever.
 *   lease_ms == 0: the client's lease, renewed by the watchdog while held;
 *   lease_ms  > 0: an explicit lease, NOT renewed automatically (renew it
 *                  with dblock_lock_renew); ignored by for_update.
 * Never blind: a leased lock (insert, optimistic) is declared lost — the
 * on_lost callback fires, dblock_lock_is_lost() says 1 — at
 *     T + lease - margin    (margin: dblock_options.loss_margin_ms)
 * by this host's monotonic clock, where T is when the statement that last
 * set the lease (grant or renewal) was sent, unless a renewal confirmed
 * meanwhile has moved T. Nobody else can be granted the name before
 * T + lease by the server's clock, so the holder is told first, even when a
 * call is stuck on a stalled network (every call is bounded in time) and
 * for explicit leases too. The margin covers clock-rate differences and the
 * time the holder needs to stop. A for_update lock has no lease: its
 * session is pinged every min(lease / 3, 5 s) and the server's idle
 * limits for it are set to 3 pings (at least 10 s); a lock whose pings go
 * unconfirmed is declared lost a margin before that limit, so a session the
 * server may end is found gone first. (A session the server ends at once —
 * killed, or the network reset — frees the name at once; the holder learns
 * at its next ping.) On SQLite, which has no server to end a session and
 * whose for_update locks nobody else can take from a live process, such a
 * hold has no loss deadline.
 * If this thread already holds name on this client, the hold is reentrant
 * (a second handle; two releases free it) unless the client is
 * non_reentrant (DBLOCK_EDEADLK at once). A reentrant acquire keeps the
 * outer hold's lease and renewal: its own lease_ms is ignored.
 * An attempt must be answered before the loss deadline of the lease it
 * asks for (a reentrant one: the outer hold's), as a grant answered later
 * would be lost at once: past it the call is cut and DBLOCK_ECONN says so. A short explicit lease on a slow
 * path fails that way: lease - margin must exceed the round trip.
 * On success *out owns a handle to pass to dblock_lock_release.
 * Errors: DBLOCK_EBUSY, DBLOCK_ETIMEOUT, DBLOCK_EDEADLK, DBLOCK_EINVAL
 * (bad name), DBLOCK_EMISMATCH, DBLOCK_ESCHEMA, DBLOCK_ECONN, DBLOCK_EPERM,
 * DBLOCK_ECANCELED (dblock_client_cancel). */
int dblock_lock_acquire(dblock_lock **out, dblock_client *client,
                        const char *name, int64_t wait_ms, int64_t lease_ms);

/* Releases one hold and frees the handle (always, even on error, except
 * DBLOCK_EDEADLK: called from the client's own callback, where the handle
 * is left as it was). The name is free once every hold is released.
 * Returns 0, DBLOCK_ELOST if the lock had been lost (expired and taken
 * over, force-unlocked, session died), DBLOCK_ETIMEOUT if the database
 * stayed locked by another session for the whole call limit (a SQLite
 * writer, a for_update transaction on the name: not released, the lock
 * ends with its lease; a shorter lock is waited out), or a connection
 * error. A leased release whose reply is lost is asked again on a fresh
 * connection and answers 0 only if the row shows this release (a
 * force-unlock or another grant in between: DBLOCK_ELOST). Never frees
 * another owner's lock. NULL: DBLOCK_EINVAL. */
int dblock_lock_release(dblock_lock *lock);

/* Extends the lease by the lease the lock was acquired with, measured from
 * now by the server clock. Returns 0 or DBLOCK_ELOST (then the lock is gone;
 * release the handle). for_update: checks that the session is alive. */
int dblock_lock_renew(dblock_lock *lock);

/* Fencing token of the grant: strictly greater than every token issued for
 * this name before, in grant order — across holder and server crashes
 * (also a PostgreSQL crash-restart that keeps the postmaster), standby
 * promotion, poolers, reaped rows and, on SQLite, clocks that step (see the
 * docs/fencing.md for the limits: Galera, asynchronous standbys).
 * Reentrant holds share the first grant's token; an acquire by a thread
 * with no live hold on the name is always a fresh grant with a new token. */
int64_t dblock_lock_fence(const dblock_lock *lock);

/* The lock's name (owned by the handle). */
const char *dblock_lock_name(const dblock_lock *lock);

/* Current hold count of this owner on the name (1 + reentrant holds). */
int dblock_lock_hold_count(const dblock_lock *lock);

/* Server-clock expiry of the lease in µs since the epoch as last granted or
 * renewed; 0 for for_update locks, which have no lease. */
int64_t dblock_lock_expires_at(const dblock_lock *lock);

/* 1 if the lock is known to be lost: its loss deadline has passed by this
 * host's monotonic clock (whether or not the watchdog thread has run since;
 * see dblock_lock_acquire), or a call found it gone. Takes the client's
 * mutex: not for signal handlers. */
int dblock_lock_is_lost(const dblock_lock *lock);

/* ---- Introspection and administration ---------------------------------- */

typedef struct dblock_lock_info {
  char name[DBLOCK_NAME_MAX + 1];
  char strategy[16];   /* "insert", "for_update", "optimistic" */
  int held;            /* 1 if currently held (lease not expired / row locked) */
  char owner_host[256];
  int64_t owner_pid;
  int64_t owner_thread;
  char owner_token[33]; /* the owning client's random token (hex) */
  int hold_count;
  int64_t fence;
  int64_t acquired_at_us;
  int64_t expires_at_us; /* 0 when there is no lease (for_update) */
} dblock_lock_info;

/* Reads what the database knows about name. Returns 0 and fills *out (held
 * says whether it is held right now), or DBLOCK_ENOTHELD if there is no row
 * for the name. */
int dblock_lock_inspect(dblock_lock_info *out, dblock_client *client,
                        const char *name);

/* Lists every lock row (up to limit rows; limit <= 0 means all). On success
 * *out is an array of *count entries to free with free(). */
int dblock_lock_list(dblock_lock_info **out, size_t *count,
                     dblock_client *client, int limit);

/* ---- Doctor ------------------------------------------------------------ */

/* Severities of a doctor finding. */
#define DBLOCK_SEV_OK 0     /* as dblock needs it */
#define DBLOCK_SEV_INFO 1   /* worth knowing, no effect on the promises */
#define DBLOCK_SEV_WARN 2   /* can surprise (a lock wait cut short, ...) */
#define DBLOCK_SEV_UNSAFE 3 /* a promise can break: a lock granted twice,
                               a fence repeated, locks impossible here */

typedef struct dblock_finding {
  int severity;     /* DBLOCK_SEV_... */
  char topic[24];   /* "server", "topology", "durability", "timeouts",
                       "clock", "schema", "strategy" */
  char text[384];   /* what was found, one line */
  char advice[256]; /* what to do, one line; "" when nothing */
} dblock_finding;

/* Asks the server whether it keeps dblock's promises: what it is and its
 * topology (stand-alone, primary with synchronous / asynchronous standbys,
 * replica, Galera node), durability settings, settings that can end a lock
 * or a wait early, the server's clock against this host's, the migration
 * status, and whether the client's strategy works there. Works on a
 * replica with a read_only client. On success *out is an array of *count
 * findings to free with free(). */
int dblock_doctor(dblock_finding **out, size_t *count, dblock_client *client);

/* Frees name whoever holds it and advances its fencing token, so the old
 * holder's writes are refused by fenced resources and its handle reports
 * DBLOCK_ELOST. *new_fence (may be NULL) receives the advanced token.
 * Returns 0 or DBLOCK_ENOTHELD when the name has no row. */
int dblock_force_unlock(dblock_client *client, const char *name,
                        int64_t *new_fence);

/* Deletes the row of a name nobody holds — a leased row whose last lease
 * has ended (released or not), a for_update row whose lock no session has
 * — so that the name can be used with another strategy (otherwise
 * DBLOCK_EMISMATCH). Fencing tokens stay increasing: they come from the
 * table's sequence, not from the row. Returns 0, DBLOCK_ENOTHELD when there
 * is no row, DBLOCK_EBUSY when the name is held or its last lease has not
 * ended yet (nothing deleted). */
int dblock_forget(dblock_client *client, const char *name);

/* Releases a grant made by another client or process (for example
 * `dblock acquire` in an earlier shell step), named by its owner token,
 * owner thread and fence as dblock_lock_inspect reports them. One
 * owner-checked statement: it frees the name only if that exact grant still
 * owns it (expired but not taken over counts as owned). Leased strategies
 * (insert, optimistic) only: a for_update lock ends with its session.
 * Returns 0, or DBLOCK_ENOTHELD if the grant no longer owns the name. */
int dblock_release_grant(dblock_client *client, const char *name,
                         const char *owner_token, int64_t owner_thread,
                         int64_t fence);

/* One reaper pass: deletes rows whose lease expired more than grace_ms ago
 * (by the server clock), in batches of batch rows (0: 1000). Never deletes a
 * row that is held or locked. *deleted (may be NULL) receives the count. */
int dblock_reap(dblock_client *client, int64_t grace_ms, int batch,
                int64_t *deleted);

/* ---- Fenced writes in the application's own transaction ----
 *
 * On PostgreSQL and MariaDB, `dblock migrate` creates the SQL function
 * dblock_check(name, fence) (<table>_check for a table other than
 * dblock_locks): called inside the transaction that writes, it raises
 * SQLSTATE DBL01 unless the name is held, by the server's clock at that
 * moment, by the grant with that fence, and holds the lock row until the
 * transaction ends, so no later grant of the name commits before the
 * write does. Roll the whole transaction back on any error the check
 * raises (docs/fenced-writes.md). */
struct sqlite3;
/* SQLite: registers the same function on the application's own connection
 * db, for the lock table table (NULL: dblock_locks) in the database
 * schema (NULL: "main"; ATTACH the lock file before registering, when it
 * is not db's main file). There the clock is this host's, errors read
 * "dblock_check (DBL01): ...", it fails (DBL04) unless called inside an
 * explicit transaction, and it takes the
 * file's write lock first, so no grant commits before that transaction
 * ends (set a busy timeout on db: a renewal may hold the lock a moment).
 * Returns 0, DBLOCK_EINVAL (db NULL, a schema or table that is not a
 * lowercase identifier), DBLOCK_EDB (SQLite refused the function), or
 * DBLOCK_EUNSUPPORTED in a build without SQLite. */
int dblock_sqlite_check_register(struct sqlite3 *db, const char *schema, const char *table);

#ifdef __cplusplus
}
#endif

#endif /* DBLOCK_H */
