/*
 * fence.h — the SQL expression that draws a new fencing token, per dialect,
 * shared by the strategies and by force-unlock.
 *
 * PostgreSQL: epoch << 40 | sequence value; MariaDB: the sequence value,
 * which a bump moves to epoch << 40. A sequence value is
 * not durable by itself (BACKENDS.md: after a crash it can be handed out
 * again), so the epoch comes from ${table}_alive, a table the server empties
 * whenever it may have lost unflushed state: PostgreSQL UNLOGGED (emptied by
 * crash recovery — also the reinitialization after one backend crashed,
 * which keeps the postmaster — and empty on a promoted standby), MariaDB
 * ENGINE=MEMORY (empty after every restart). PostgreSQL reads it inside
 * every granting statement, so no connection (nor a pooler's) can carry a
 * stale epoch across a restart; MariaDB once per server session (below).
 * When it is empty the expression fails (PostgreSQL: 42704 naming
 * dblock.no_epoch; MariaDB: error 1139, a regular expression that does not
 * compile, chosen only then); the core then bumps the durable epoch (committed,
 * flushed) and refills the table before asking again (DBL_NO_EPOCH,
 * client.c).
 *
 * SQLite: the row named '' keeps the highest fence ever issued in the file
 * (triggers, migration 0003) and the next one is above it and above this
 * host's clock in µs, so a fence never follows a clock that steps back.
 */
#ifndef DBLOCK_FENCE_H
#define DBLOCK_FENCE_H

/* (PostgreSQL: the failure is a lookup of an unset setting, evaluated only
 * when COALESCE needs it. An uncorrelated subquery would not do: it is an
 * InitPlan, which PostgreSQL evaluates eagerly when an UPDATE re-checks a
 * row that a concurrent transaction changed — EvalPlanQual.) */
#define DBL_PG_NEXT_FENCE                                                        \
  "(COALESCE((SELECT epoch FROM ${schema}.${table}_alive WHERE id = 1), "        \
  "current_setting('dblock.no_epoch')::int8) << 40) "                            \
  "+ nextval('${schema}.${table}_fence_seq')"
/* (MariaDB: the sequence carries the epoch — a bump moves it to the next
 * 2^40 block — so that on Galera, where ${table}_alive is per node, tokens
 * from all nodes come from one forward-only sequence; src/sql/mysql.c bump.
 * The granting statement does not name ${table}_alive: MariaDB locks a
 * MEMORY table whole for every statement that names it, evaluated or not,
 * and that serialised all grants of all names (MariaDB for_update W3 at
 * 0.64 × the floor; 0.9 × without the table). Instead each server session
 * learns once that its server vouched (EPOCH_VOUCH, after the bump path
 * that its first grant's failure takes) and keeps that in a session
 * variable, which the grant reads. As safe as reading the table: a
 * session never outlives its server's start — a restart or a failover
 * means new sessions, whose first grant fails and looks again — and
 * poolers that share server sessions (ProxySQL) pin a session once it
 * sets a user variable. The value is checked, not only present: see
 * DBL_MY_SESSION_MARK. The failure is a pattern picked at run time: 'v'
 * matches 'v' (1 - 1 = 0), and '(' does not compile. Not '': under
 * sql_mode EMPTY_STRING_IS_NULL that is NULL, and a NULL fence is stored
 * as 0 by a non-strict UPDATE. It used to be a scalar subquery of two
 * rows, which MariaDB sets up on every execution, used or not: 10-20 µs
 * of server time per grant.) */
#define DBL_MY_NEXT_FENCE                                                        \
  "('v' REGEXP IF(@dblock_alive_${table} = " DBL_MY_SESSION_MARK ", 'v', '(')) - 1 " \
  "+ NEXTVAL(${table}_fence_seq)"
/* What the variable holds: this session and database, so that a value
 * copied into another session (a proxy that replays session state on a
 * fresh server session) or read in another database fails closed. It is
 * set only from a read of ${table}_alive (EPOCH_VOUCH in mysql.c): a replay
 * of that statement on a restarted server reads the empty table and sets
 * NULL. */
#define DBL_MY_SESSION_MARK "CONCAT(CONNECTION_ID(), '/', DATABASE())"
#define DBL_LITE_NEXT_FENCE \
  "MAX((SELECT fence FROM ${table} WHERE name = '') + 1, dblock_now_us())"

/* How a granting statement that found no vouched epoch fails: PostgreSQL
 * SQLSTATE 42704 with this name in the message, MariaDB error 1139
 * (ER_REGEXP_ERROR; no other dblock statement has a pattern). */
#define DBL_NO_EPOCH_PG "42704"
#define DBL_NO_EPOCH_PG_NAME "dblock.no_epoch"
#define DBL_NO_EPOCH_MY_NATIVE 1139
/* How a for_update grant fails when the sequence is behind the name's row
 * (FU_TAKE in src/sql/postgres.c and mysql.c; the core then calls the
 * dialect's fence_catch_up, or reports it). PostgreSQL: 22P02, a text
 * naming it cast to int8 (it holds the row's fence, so the planner cannot
 * fold it, and unlike a setting nobody can configure it away). MariaDB: an
 * addition that overflows, error 1690 in every sql_mode (a pattern that
 * does not compile, as above, is only NULL and a warning when the pattern
 * depends on the row). */
#define DBL_FENCE_BEHIND_PG "22P02"
#define DBL_FENCE_BEHIND_PG_NAME "dblock.fence_behind"
#define DBL_FENCE_BEHIND_MY_SUM "9223372036854775807 + "
#define DBL_FENCE_BEHIND_MY_NATIVE 1690

#endif
