/*
 * stmt.h — every SQL statement dblock runs, by id, and how its result is
 * read.
 *
 * Each dialect has one constant table (src/sql/postgres.c, mysql.c,
 * sqlite.c) indexed by dbl_sid. A client expands its dialect's table once,
 * at open (${table} and ${schema} replaced), so a statement is an array
 * lookup; the drivers cache one prepared statement per expanded text per
 * connection. Strategies and the core ask for statements by id and read
 * results through the table's description; they never test the dialect.
 *
 * Parameters: a strategy passes each value once, in the order listed for
 * the statement below (its "logical" parameters); a dialect that needs one
 * value at several `?` (or in another order) says so in `bind`, one character
 * per `?` naming the logical parameter. NULL: the `?` take the logical
 * parameters in order.
 *
 * Results: `count` says how many rows a statement touched (rows returned
 * by RETURNING / SELECT, or affected rows where the dialect has no
 * RETURNING), and out[] says where the values a caller reads come from —
 * a column of the first row, the LAST_INSERT_ID(expr) of the OK packet
 * (MySQL), or nowhere (the caller falls back: an estimate, "unknown").
 */
#ifndef DBLOCK_STMT_H
#define DBLOCK_STMT_H

#include <stddef.h>
#include <stdint.h>

#include "../drivers/driver.h"

typedef enum dbl_sid {
  /* insert strategy. Params: name, host, pid, thread, token, lease µs,
   * reentrant flag, then the queue's two (below). Out: the grant. Count
   * 0 = busy. */
  DBL_S_INSERT_ACQUIRE,
  /* The same for a blocking waiter, with its place in the wait queue
   * (only where the dialect has one, see queue.c). Params: INSERT_ACQUIRE's,
   * then the caller's ticket or INT64_MAX and the fair flag (these two
   * also for INSERT_ACQUIRE), then the ticket (0: none), join flag, the
   * client's notification channel, alive window µs and turn length µs. Out:
   * the grant, or (busy) one row: column 4 the ticket, 5 the row's
   * strategy, 6 whether the row keeps the caller out (see OPT_READ). */
  DBL_S_INSERT_QUEUED,
  /* insert / optimistic release (final). Params: name, token, thread,
   * fence. Out: version (OPT_FREE, when the
   * dialect can say). Count 1 = freed. */
  DBL_S_INSERT_FREE,
  DBL_S_OPT_FREE,
  /* optimistic compare-and-set. Params: token, thread, reentrant flag,
   * host, pid, lease µs, name, version (-2: any), then as INSERT_ACQUIRE
   * the queue's two. Out: the grant. */
  DBL_S_OPT_CAS,
  /* (with the queue parameters as for INSERT_QUEUED after version: before,
   * fair for both; ticket, join, channel, alive, turn for QUEUED) */
  DBL_S_OPT_QUEUED,
  /* optimistic: read a row. Params: token, thread, name, then the queue's
   * before-ticket and fair flag (as for INSERT_ACQUIRE). Columns: version,
   * kept out (0/1: held by another owner, or someone ahead in the wait
   * queue), strategy. */
  DBL_S_OPT_READ,
  /* create a missing row, free. Params: name. */
  DBL_S_OPT_CREATE,
  DBL_S_FU_CREATE,
  /* for_update: take the row inside the lock transaction. Params: host,
   * pid, thread, token, name. Out: fence. Count >= 1 = granted. */
  DBL_S_FU_TAKE,
  /* for_update: the release, where it is not COMMIT (a parameterless
   * script; MariaDB: ROLLBACK, see mysql.c FU_TAKE). NULL: COMMIT. */
  DBL_S_FU_RELEASE,
  /* for_update: is the holding session alive? No params. NULL SQL: the
   * dialect has nothing to check (SQLite: the transaction is in-process). */
  DBL_S_FU_PING,
  /* lease renewal. Params: lease µs, name, token, thread, fence. Out:
   * expiry, version. Count 1 = renewed. */
  DBL_S_LEASE_RENEW,
  /* release of an inner reentrant hold. Params: name, token, thread,
   * fence. Out: version. */
  DBL_S_LEASE_DECR,
  /* after a lost release reply: is the row free and still this grant's?
   * Params: name, token, thread, fence. Out: version. Count 1 = yes. */
  DBL_S_LEASE_FREED,
  /* a row's strategy. Params: name. Column: strategy. */
  DBL_S_ROW_STRATEGY,
  /* for_update introspection. PROBE (params: name) returns the row only
   * if nobody holds its lock; NULL: a lock transaction locks the whole
   * database (SQLite), probed by trying to open one. HOLDER (params: name)
   * returns what the holding session published — the holder string
   * "FENCE PID THREAD HOST" (DBL_HOLDER_FORMAT) and the acquisition time in
   * µs; NULL: the row itself, read uncommitted (DIRTY_READ), shows the
   * holder (MariaDB). */
  DBL_S_FU_PROBE,
  DBL_S_FU_HOLDER,
  /* Makes the next statement read uncommitted rows (a script, no params);
   * NULL where there are no dirty reads. */
  DBL_S_DIRTY_READ,
  /* Ending a for_update holder's session: KILL_BY_NAME (params: name)
   * where the server finds the session from the row's locker; else
   * SESSION (params: name; column: the session id the holder wrote,
   * read uncommitted) and KILL_SESSION (params: session id). */
  DBL_S_FU_KILL_BY_NAME,
  DBL_S_FU_SESSION,
  DBL_S_KILL_SESSION,
  /* Introspection rows (columns: see fill_info in admin.c). ONE params:
   * name; ALL params: limit. */
  DBL_S_INFO_ONE,
  DBL_S_INFO_ALL,
  /* force-unlock. Params: name. Out: the new fence. Count 1 = done. */
  DBL_S_FORCE,
  /* the wait queue: drop a ticket (params: ticket, channel), and the
   * reaper's sweep of dead tickets (params: grace µs). NULL: no queue. */
  DBL_S_QUEUE_LEAVE,
  DBL_S_QUEUE_REAP,
  /* forget a free name. Params: name. Count 1 = deleted. */
  DBL_S_FORGET,
  /* release another process's grant. Params: name, token, thread, fence. */
  DBL_S_DROP_GRANT,
  /* one reaper batch. Params: grace µs, batch. Count = rows deleted.
   * NULL: the dialect reaps with its own procedure (dbl_dialect.reap_batch). */
  DBL_S_REAP,
  /* the server's clock, µs since the epoch (no params); NULL where every
   * granting statement returns the expiry itself. */
  DBL_S_SERVER_NOW,
  /* the server's connection limit and the connections open now (columns
   * 0 and 1; no params), for dblock_doctor; NULL where there is no server. */
  DBL_S_CONN_USE,
  /* migrations: create the tracking table (script), list applied
   * (columns: version, checksum, applied µs), record one (params: version,
   * name, checksum). */
  DBL_S_MIG_TRACK,
  DBL_S_MIG_LIST,
  DBL_S_MIG_RECORD,
  /* Used only by the dialects' own procedures (below): the epoch bump and
   * vouch (scripts), the epoch read, the epoch move (PostgreSQL: a query
   * inside the bump's transaction), the reaper's pick. */
  DBL_S_EPOCH_BUMP,
  DBL_S_EPOCH_VOUCH,
  DBL_S_EPOCH_READ,
  DBL_S_EPOCH_MOVE,
  DBL_S_REAP_PICK,
  DBL_S_COUNT
} dbl_sid;

/* Result value slots (out[]): the grant's fence, this owner's hold count,
 * the expiry (µs, server clock), the row version. */
enum { DBL_O_FENCE, DBL_O_HOLDS, DBL_O_EXPIRES, DBL_O_VERSION, DBL_O_COUNT };
/* Where a slot's value comes from: a column index >= 0, or: */
#define DBL_FROM_NONE ((signed char)-1)      /* not available */
#define DBL_FROM_INSERT_ID ((signed char)-2) /* LAST_INSERT_ID(expr) */

typedef struct dbl_sqldef {
  const char *sql;  /* template; NULL: not run on this dialect */
  const char *bind; /* logical parameter per `?` ("0122", "a" = 10); NULL: in order */
  int count_rows;   /* count = rows returned; 0: affected rows */
  /* out[slot]: DBL_FROM_* or a column. All zero-initialised entries would
   * read column 0, so every table entry spells its slots out (DBL_OUT_*). */
  signed char out[DBL_O_COUNT];
} dbl_sqldef;

/* Slot lists for the table entries. */
#define DBL_OUT_NONE {DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}
#define DBL_OUT_VERSION(c) {DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE, (c)}

/* What statements run on: a connection, the client's expanded statements
 * and its table name. */
typedef struct dbl_sqlrun {
  const dbl_driver *drv;
  dbl_conn *c;
  const dbl_sqldef *defs;
  const char *const *sqls; /* expanded, by dbl_sid */
  const char *table;
  dbl_err *e;
} dbl_sqlrun;

/* A statement's outcome, read the way its dialect table says. */
typedef struct dbl_out {
  int64_t count;                  /* rows touched: returned or affected */
  int64_t v[DBL_O_COUNT];         /* the result slots... */
  unsigned char has[DBL_O_COUNT]; /* ...and which of them the dialect gave */
  dbl_res res;                    /* the rows, if asked to keep them (then
                                     clear with dbl_res_clear) */
} dbl_out;

/* Runs statement id with its logical parameters lp[0..nlp) (listed per
 * statement above) and reads the outcome into *o. keep: leave the rows in
 * o->res for the caller (who clears them); else they are cleared. A
 * statement the dialect does not run returns 0 with count 0. Returns 0 or
 * the driver's error (x->e set). */
int dbl_sql_run(const dbl_sqlrun *x, dbl_sid id, const dbl_param *lp, int nlp, dbl_out *o,
                int keep);
/* The same, as the first statement of a lock transaction opened by the
 * driver (dbl_driver.lock_begin) with row-lock waits of wait_ms. */
int dbl_sql_run_locking(const dbl_sqlrun *x, dbl_sid id, const dbl_param *lp, int nlp,
                        int64_t wait_ms, dbl_out *o);
/* Runs a parameterless statement as a script (SET, multi-statement);
 * 0 without a round trip where the dialect has none. */
int dbl_sql_script(const dbl_sqlrun *x, dbl_sid id);

/* A dialect: its statements, and the few procedures whose steps (not only
 * whose text) differ between databases. */
typedef struct dbl_sqldialect {
  const dbl_sqldef *stmts;     /* DBL_S_COUNT entries */
  int one_writer;              /* one writer at a time for the whole
                                  database: the reaper leaves gaps */
  int ddl_autocommits;         /* DDL commits by itself: migrations are
                                  made restartable, not transactional */
  int reap_batch_max;          /* largest reaper batch; 0 no limit */
  /* Bumps the durable fencing epoch (flushed) and vouches for it in
   * ${table}_alive (see fence.h); *moved = 0 when the epoch was already
   * vouched for on this server and only this session learned it (MariaDB:
   * every new session's first grant). NULL: the dialect has no epoch. */
  int (*epoch_bump)(const dbl_sqlrun *x, int *moved);
  /* Moves the fence sequence forward past the fence in name's row, never
   * back (after a grant failed with dbl_fence_behind). NULL: the dialect
   * cannot do that safely while the server runs (PostgreSQL: setval can
   * move a sequence back, and a statement reads the epoch in a snapshot
   * taken before its lock wait), so the failure goes to the caller. */
  int (*fence_catch_up)(const dbl_sqlrun *x, const char *name, size_t name_len);
  /* One reaper batch where DBL_S_REAP is NULL: *got rows deleted. */
  int (*reap_batch)(const dbl_sqlrun *x, int64_t grace_ms, int batch, int64_t *got);
  /* Takes (lock = 1) the migration lock, or gives it up (lock = 0; ok:
   * the migration succeeded). Where it is held by a transaction, taking
   * it opens that transaction and giving it up on failure rolls back. */
  int (*migrate_lock)(const dbl_sqlrun *x, int lock, int ok);
  /* The script to run for a migration (malloc'd; NULL: out of memory);
   * NULL function: the expanded text as shipped. */
  char *(*migration_text)(const char *sql, int galera);
} dbl_sqldialect;

/* The dialect of a driver (by dbl_driver.dialect). */
const dbl_sqldialect *dbl_dialect_of(int dialect);

extern const dbl_sqldialect dbl_dialect_postgres, dbl_dialect_mysql, dbl_dialect_sqlite;

/* The holder string a for_update holder publishes (DBL_S_FU_HOLDER):
 * fence, process id, thread id, then the host (which may hold spaces). */
#define DBL_HOLDER_FORMAT "%lld %lld %lld %n"

#endif
