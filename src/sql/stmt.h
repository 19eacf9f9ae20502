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
 * value at several `?` (or in another order) says so in `bind`, one digit
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

typedef enum dbl_sid {
  /* insert strategy. Params: name, host, pid, thread, token, lease µs,
   * reentrant flag. Out: the grant. Count 0 = busy. */
  DBL_S_INSERT_ACQUIRE,
  /* insert / optimistic release (final). Params: name, token, thread,
   * fence. Out: version (when the dialect can say). Count 1 = freed. */
  DBL_S_INSERT_FREE,
  DBL_S_OPT_FREE,
  /* optimistic compare-and-set. Params: token, thread, reentrant flag,
   * host, pid, lease µs, name, version (-2: any). Out: the grant. */
  DBL_S_OPT_CAS,
  /* optimistic: read a row. Params: token, thread, name. Columns: version,
   * held by another owner (0/1), strategy. */
  DBL_S_OPT_READ,
  /* create a missing row, free. Params: name. */
  DBL_S_OPT_CREATE,
  DBL_S_FU_CREATE,
  /* for_update: take the row inside the lock transaction. Params: host,
   * pid, thread, token, name. Out: fence. Count 1 = granted. */
  DBL_S_FU_TAKE,
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
  const char *bind; /* logical parameter per `?` ("0122"); NULL: in order */
  int count_rows;   /* count = rows returned; 0: affected rows */
  /* out[slot]: DBL_FROM_* or a column. All zero-initialised entries would
   * read column 0, so every table entry spells its slots out (DBL_OUT_*). */
  signed char out[DBL_O_COUNT];
} dbl_sqldef;

/* Slot lists for the table entries. */
#define DBL_OUT_NONE {DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}
#define DBL_OUT_VERSION(c) {DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE, (c)}

/* The statement table of a driver's dialect (by dbl_driver.dialect). */
const dbl_sqldef *dbl_sql_table(int dialect);

extern const dbl_sqldef dbl_sql_postgres[DBL_S_COUNT];
extern const dbl_sqldef dbl_sql_mysql[DBL_S_COUNT];
extern const dbl_sqldef dbl_sql_sqlite[DBL_S_COUNT];

#endif
