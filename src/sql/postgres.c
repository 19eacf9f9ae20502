/*
 * postgres.c — every statement dblock runs on PostgreSQL, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"
#include "../drivers/driver.h"
#include "fence.h"
#include "stmt.h"

#define MINE_PG "(l.state = 1 AND l.expires_at > statement_timestamp() " \
                "AND l.owner_token = ? AND l.owner_thread = ?::int8 AND ?::int4 = 1)"

/* The wait queue (migration 0004): a name whose release gave the turn to
 * a waiter's ticket is that ticket's until the turn runs out, so a
 * newcomer (or the releaser coming straight back) does not take it in
 * front of the waiter it was handed to; the oldest live turn wins. In fair
 * mode every live ticket older than the caller's keeps it waiting, so the
 * name goes in ticket order. Logical parameters: the caller's ticket
 * (INT64_MAX for none) and the fair flag. Correlated to the row's name, so
 * that it is evaluated per row (see fence.h on InitPlans). The queue only
 * orders the waiters; exclusion stays with the row's own state test. */
#define QUEUE_GUARD_PG                                                                \
  "NOT EXISTS (SELECT 1 FROM ${schema}.${table}_queue q WHERE q.name = l.name "      \
  "AND q.ticket < ?::int8 AND (q.turn_until > statement_timestamp() "                \
  "OR (?::int4 = 1 AND q.alive_until > statement_timestamp())))"

/* The row is this owner's live hold (a reentrant acquire; a row it left
 * behind is taken afresh), or free or expired and nobody is ahead in the
 * queue. */
#define TAKEABLE_PG(tok, thr)                                                          \
  "((l.state = 1 AND l.expires_at > statement_timestamp() AND l.owner_token = " tok   \
  " AND l.owner_thread = " thr ") OR ((l.state = 0 OR l.expires_at <= "                \
  "statement_timestamp()) AND " QUEUE_GUARD_PG "))"

/* What every grant returns: the fence, the hold count, the expiry (µs
 * since the epoch, server clock) and the row version. */
#define GRANT_RETURNING_PG \
  "RETURNING fence, hold_count, (extract(epoch FROM expires_at) * 1000000)::int8, version"

/* A grant as an UPDATE of the row l (INSERT_TAKE, OPT_CAS): one more hold
 * with the same fence when mine (the caller's own live hold, reentrant),
 * else a fresh hold with a fence above the row's and every one drawn.
 * Parameters: mine's, three times, then host, pid, thread, token and the
 * lease in µs. */
#define GRANT_SET_PG(strategy, mine)                                                    \
  "hold_count = CASE WHEN " mine " THEN l.hold_count + 1 ELSE 1 END, "                  \
  "fence = CASE WHEN " mine " THEN l.fence "                                            \
  "  ELSE GREATEST(l.fence + 1, " DBL_PG_NEXT_FENCE ") END, "                           \
  "acquired_at = CASE WHEN " mine " THEN l.acquired_at ELSE statement_timestamp() END, " \
  "strategy = '" strategy "', state = 1, version = l.version + 1, "                     \
  "owner_host = ?, owner_pid = ?::int8, owner_thread = ?::int8, owner_token = ?, "      \
  "renewed_at = statement_timestamp(), "                                                \
  "expires_at = statement_timestamp() + ?::int8 * interval '1 microsecond' "

/* (The NOT EXISTS reads the row as of the statement's start and skips the
 * INSERT when the row visibly keeps the caller out: ON CONFLICT DO UPDATE
 * locks the conflicting row even when its WHERE then refuses, and a row
 * lock is a WAL record, so every busy poll would cost a flushed commit —
 * and hold the row against the waiter the name was just handed to. When
 * it lets the INSERT through, the DO UPDATE's WHERE decides on the
 * newest row as before.) */
#define INSERT_ACQUIRE_BODY                                                            \
    "INSERT INTO ${schema}.${table} AS l (name, strategy, state, version, "            \
    "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "            \
    "acquired_at, renewed_at, expires_at) "                                            \
    "SELECT ?, 'insert', 1, 1, ?, ?::int8, ?::int8, ?, 1, "                             \
    DBL_PG_NEXT_FENCE ", statement_timestamp(), "                                      \
    "statement_timestamp(), statement_timestamp() + ?::int8 * interval '1 microsecond' " \
    "WHERE NOT EXISTS (SELECT 1 FROM ${schema}.${table} AS l "         \
    "WHERE l.name = ? AND NOT "                                                        \
    TAKEABLE_PG("?", "?::int8") ") "                                                   \
    "ON CONFLICT (name) DO UPDATE SET "                                                \
    "hold_count = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "     \
    "  AND ?::int4 = 1 THEN l.hold_count + 1 ELSE 1 END, "                             \
    "fence = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "          \
    "  AND ?::int4 = 1 THEN l.fence ELSE GREATEST(l.fence + 1, excluded.fence) END, "  \
    "acquired_at = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "    \
    "  AND ?::int4 = 1 THEN l.acquired_at ELSE excluded.acquired_at END, "             \
    "strategy = 'insert', state = 1, version = l.version + 1, "                        \
    "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "               \
    "owner_thread = excluded.owner_thread, owner_token = excluded.owner_token, "       \
    "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at "              \
    "WHERE l.strategy <> 'for_update' AND "                                            \
    TAKEABLE_PG("excluded.owner_token", "excluded.owner_thread") " "                   \
    GRANT_RETURNING_PG

static const char INSERT_ACQUIRE[] = INSERT_ACQUIRE_BODY;

/* A blocking waiter's attempt (lock.c, queue.c): the grant as above, and
 * in the same statement its ticket — dropped on a grant; else refreshed
 * (alive for another window; a turn that ran out is given up, so a later
 * release may give it another), or taken if it has none (join = 1). A
 * busy answer is one row: the ticket (column 4), the row's strategy and
 * whether the row itself keeps the caller out (held, or someone ahead) —
 * so that a waiter learns all it needs from this one statement. Logical
 * parameters after the plain statement's: the ticket (0: none), join, the
 * client's channel, the alive window and the turn length in µs. */
#define QUEUE_CTES_PG                                                                  \
  "d AS (DELETE FROM ${schema}.${table}_queue WHERE ticket = ?::int8 AND channel = ? " \
  "AND EXISTS (SELECT 1 FROM g)), "                                                    \
  "j AS (INSERT INTO ${schema}.${table}_queue (name, channel, turn_len, alive_until) "  \
  "SELECT ?, ?, ?::int8 * interval '1 microsecond', "                                  \
  "statement_timestamp() + ?::int8 * interval '1 microsecond' "                        \
  "WHERE ?::int4 = 1 AND NOT EXISTS (SELECT 1 FROM g) AND NOT EXISTS "                  \
  "(SELECT 1 FROM ${schema}.${table}_queue WHERE ticket = ?::int8 AND channel = ?) "   \
  "RETURNING ticket), "                                                                 \
  "r AS (UPDATE ${schema}.${table}_queue SET "                                          \
  "alive_until = statement_timestamp() + ?::int8 * interval '1 microsecond', "          \
  "turn_until = CASE WHEN turn_until <= statement_timestamp() THEN NULL "               \
  "ELSE turn_until END WHERE ticket = ?::int8 AND channel = ? "                         \
  "AND NOT EXISTS (SELECT 1 FROM g) "                                                   \
  "RETURNING ticket), "                                                                 \
  "s AS (SELECT l.strategy, (NOT " TAKEABLE_PG("?", "?::int8") ")::int AS busy "        \
  "FROM ${schema}.${table} AS l WHERE l.name = ?) "                                     \
  "SELECT fence, hold_count, expires, version, 0::int8, NULL::text, 0 FROM g "          \
  "UNION ALL SELECT NULL, NULL, NULL, NULL, ticket, (SELECT strategy FROM s), "         \
  "(SELECT busy FROM s) FROM j "                                                        \
  "UNION ALL SELECT NULL, NULL, NULL, NULL, ticket, (SELECT strategy FROM s), "         \
  "(SELECT busy FROM s) FROM r"

static const char INSERT_QUEUED[] =
    "WITH g (fence, hold_count, expires, version) AS (" INSERT_ACQUIRE_BODY "), "
    QUEUE_CTES_PG;

/* Release: the row goes back to free and keeps its fence (see above) and
 * its expiry (which tells the reaper when it may collect it). A release
 * hands the name to its oldest live waiter that has not had a turn, or
 * whose turn is still running (it may have missed its chance to someone
 * who slipped in — a statement that began before the turn was given —
 * and sleeps: it is told again): a turn of that ticket's length, and a
 * NOTIFY on its client's channel with the ticket (delivered at commit).
 *
 * Every release commits without waiting for its WAL flush (the
 * set_config, local to the release's own transaction): the next grant of
 * the name updates the same row, so its flushed commit carries the
 * release to disk with it (WAL is written in order) and a grant is never
 * durable without the release before it; with no grant following, the
 * WAL writer flushes it within a few hundred milliseconds. A crash in
 * that gap loses the release: the name stays held by a holder that has
 * let it go until the lease ends — never held by two, and its fence
 * unchanged (so the order of fences is kept). That saves one flush per
 * cycle — the price of a durable release buys nothing a lease does not
 * already give. */
#define NEXT_TURN_PG                                                                   \
  "(w.turn_until IS NULL OR w.turn_until > statement_timestamp()) "                    \
  "AND w.alive_until > statement_timestamp()"
#define HAND_OFF_PG(upd)                                                               \
  upd " RETURNING version, CASE WHEN EXISTS (SELECT 1 FROM ${schema}.${table}_queue q "   \
  "WHERE q.name = ${table}.name) THEN ${schema}.${table}_hand_off(name) END, "          \
  "set_config('synchronous_commit', 'off', true)"

static const char INSERT_FREE[] = HAND_OFF_PG(
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1, "
    "renewed_at = statement_timestamp() "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 AND fence = ?::int8 "
    "AND state = 1");

#define OPT_CAS_BODY                                                                   \
    "UPDATE ${schema}.${table} AS l SET " GRANT_SET_PG("optimistic", MINE_PG)          \
    "WHERE l.name = ? AND (l.version = ?::int8 OR ?::int8 = -2) AND l.strategy <> 'for_update' " \
    "AND " TAKEABLE_PG("?", "?::int8") " " GRANT_RETURNING_PG

static const char OPT_CAS[] = OPT_CAS_BODY;

static const char OPT_QUEUED[] =
    "WITH g (fence, hold_count, expires, version) AS (" OPT_CAS_BODY "), "
    QUEUE_CTES_PG;

/* Reading the row: version, whether it keeps this owner out (held by
 * another, or someone ahead in the wait queue), strategy. */
static const char OPT_READ[] =
    "SELECT l.version, (NOT " TAKEABLE_PG("?", "?::int8") ")::int, l.strategy "
    "FROM ${schema}.${table} AS l WHERE l.name = ?";

/* Creating a missing row, free, at version 0. */
static const char OPT_CREATE[] =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0) ON CONFLICT (name) DO NOTHING";

/* Release frees the row and leaves expires_at alone: no indexed column
 * changes, so PostgreSQL can update the row in place (a HOT update, no
 * index writes). A free row's old expiry only tells the reaper when it may
 * delete it. */
static const char OPT_FREE[] = HAND_OFF_PG(
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1, "
    "renewed_at = statement_timestamp() "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1");

/* The grant only locks the row: no new row version, so waiters queued on
 * the row's lock are handed it without chasing an update chain (W2, 8
 * waiters on one name: p99 wait 2.0-2.3 ms, against 4.1-6.4 ms for the
 * UPDATE of the holder columns it replaces). The fence is drawn after the
 * lock is granted: the CTE is materialised, so its LockRows runs below the
 * projection that calls nextval (in a plain SELECT … FOR UPDATE the target
 * list is computed below LockRows, before the wait, and a waiter would
 * carry a token drawn before its predecessor's). The token is the draw,
 * which is above every token drawn before it; it must also be above the
 * row's fence (force-unlock's): should the sequence ever be behind that
 * (moved back by hand), the grant fails, casting a text that names
 * dblock.fence_behind to int8 (fence.h), and the core reports it. Taking
 * the row's fence + 1 instead would need a write into the row that a
 * holder dying before its COMMIT undoes, and the next grant would repeat
 * it; moving the epoch up while the server runs would not do either: a
 * statement reads the epoch in its snapshot, taken before it waits for the
 * row, so a waiter would draw with the old epoch after a newcomer drew
 * with the new one. The holder is published in its session's
 * application_name, SET LOCAL (FU_HOLDER). Params: name, pid, thread,
 * host. */
static const char FU_TAKE[] =
    "WITH f AS MATERIALIZED (SELECT fence FROM ${schema}.${table} "
    "WHERE name = ? AND strategy = 'for_update' FOR UPDATE), "
    "g AS MATERIALIZED (SELECT " DBL_PG_NEXT_FENCE " AS draw, fence FROM f), "
    "t AS (SELECT CASE WHEN draw > fence THEN draw "
    "ELSE ('" DBL_FENCE_BEHIND_PG_NAME " ' || fence)::int8 END AS fence FROM g) "
    "SELECT fence, set_config('application_name', left('dblock ' || fence || ' ' || "
    "?::int8 || ' ' || ?::int8 || ' ' || ?::text, 63), true) FROM t";

/* The row a name's lock lives on, created free and committed on first use
 * so that every session can see (and probe) it. */
static const char FU_CREATE[] =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0) ON CONFLICT (name) DO NOTHING";

/* A waiter that gives up (timed out, cancelled, failed) drops its ticket;
 * if the name was handed to it, the turn passes on as a release would pass
 * it (its commit need not be flushed: the queue is UNLOGGED). Params:
 * ticket, channel. A ticket is always named with its client's channel:
 * the numbers start again at 1 after a crash empties the queue, and a
 * waiter may still hold a number from before. */
static const char QUEUE_LEAVE[] =
    "WITH x AS (DELETE FROM ${schema}.${table}_queue WHERE ticket = ?::int8 AND channel = ? "
    "RETURNING ticket, name, turn_until > statement_timestamp() AS had_turn), "
    "n AS (UPDATE ${schema}.${table}_queue q SET "
    "turn_until = statement_timestamp() + q.turn_len, "
    "alive_until = GREATEST(q.alive_until, statement_timestamp() + q.turn_len) "
    "WHERE q.ticket = (SELECT w.ticket FROM ${schema}.${table}_queue w JOIN x "
    "ON w.name = x.name AND w.ticket <> x.ticket AND x.had_turn WHERE " NEXT_TURN_PG " ORDER BY w.ticket LIMIT 1) "
    "RETURNING CASE WHEN q.channel <> '' THEN pg_notify(q.channel, q.ticket::text) END, "
    "set_config('synchronous_commit', 'off', true)) "
    "SELECT (SELECT count(*) FROM n) FROM x";
/* Dead tickets (their waiter stopped refreshing them). Params: grace µs. */
static const char QUEUE_REAP[] =
    "DELETE FROM ${schema}.${table}_queue WHERE alive_until < statement_timestamp() "
    "- ?::int8 * interval '1 microsecond'";

/* ---- renew: extend expires_at from the server's now ---- */
static const char LEASE_RENEW[] =
    "UPDATE ${schema}.${table} SET version = version + 1, "
    "renewed_at = statement_timestamp(), "
    "expires_at = statement_timestamp() + ?::int8 * interval '1 microsecond' "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 "
    "RETURNING (extract(epoch FROM expires_at) * 1000000)::int8, version";

/* ---- release of an inner reentrant hold ---- */
static const char LEASE_DECR[] =
    "UPDATE ${schema}.${table} SET hold_count = hold_count - 1, "
    "version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 AND hold_count > 1 RETURNING version";

/* Our release frees the row and leaves owner and fence as they were; a
 * force-unlock clears the owner and advances the fence, and any grant
 * since writes its own owner and fence. So a free row still naming this
 * grant is the first release's work, and nothing else is. */
static const char LEASE_FREED[] =
    "SELECT version FROM ${schema}.${table} WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ?::int8 AND fence = ?::int8 AND state = 0";

static const char ROW_STRATEGY[] = "SELECT strategy FROM ${schema}.${table} WHERE name = ?";

/* ---- introspection ---- */
/* A for_update grant writes nothing into the row (FU_TAKE): its holder
 * columns name nobody (or a holder of an older dblock build), so they are
 * shown empty; a held lock's holder comes from its publication. */
#define NOT_FU(col, none) "CASE WHEN strategy = 'for_update' THEN " none " ELSE " col " END, "
#define COLS                                                                   \
  "name, strategy, (state = 1 AND expires_at > statement_timestamp())::int, "  \
  NOT_FU("owner_host", "''") NOT_FU("owner_pid", "0") NOT_FU("owner_thread", "0") \
  NOT_FU("owner_token", "''") "hold_count, fence, "                            \
  NOT_FU("(extract(epoch FROM acquired_at) * 1000000)::int8", "0")             \
  "(extract(epoch FROM expires_at) * 1000000)::int8"
static const char INFO_ONE[] = "SELECT " COLS " FROM ${schema}.${table} WHERE name = ?";
static const char INFO_ALL[] =
    "SELECT " COLS " FROM ${schema}.${table} WHERE name <> '' ORDER BY name LIMIT ?";

/* for_update rows are held while their row is locked: the probe returns
 * the row only if nobody holds it (a shared lock conflicts with the
 * holder's exclusive one and is released at once, autocommit). */
static const char FU_PROBE[] =
    "SELECT 1 FROM ${schema}.${table} WHERE name = ? FOR SHARE SKIP LOCKED";
/* No dirty reads: the holder published itself in its session's
 * application_name ("dblock " + DBL_HOLDER_FORMAT, see FU_TAKE), found
 * through the row's locker (xmax = backend_xid). */
static const char FU_HOLDER[] =
    "SELECT substr(a.application_name, 8), (extract(epoch FROM a.xact_start) * 1000000)::int8 "
    "FROM pg_stat_activity a JOIN ${schema}.${table} t ON a.backend_xid = t.xmax "
    "WHERE t.name = ? AND a.application_name LIKE 'dblock %'";
/* A held for_update lock is a transaction: end it by ending its session. */
static const char FU_KILL_BY_NAME[] =
    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a "
    "JOIN ${schema}.${table} t ON a.backend_xid = t.xmax WHERE t.name = ?";

/* ---- administration ---- */
/* Frees a leased row and advances its fence past anything issued, so the
 * old holder's renewals and releases (checked by owner and fence) fail
 * with DBLOCK_ELOST and fenced resources refuse its token. The fence is
 * drawn after the row is locked, as in FU_TAKE: an UPDATE computes its new
 * values before it waits for the row and again only if the row changed
 * meanwhile, and a for_update grant that came first (the force-unlocked
 * holder's successor) locks the row without changing it, so a draw made
 * before the wait would sit below that grant's. A for_update row keeps
 * expires_at NULL (no lease: the reaper never picks it). */
static const char FORCE[] =
    "WITH f AS MATERIALIZED (SELECT name, fence FROM ${schema}.${table} WHERE name = ? "
    "FOR UPDATE), "
    "g AS MATERIALIZED (SELECT name, GREATEST(fence + 1, " DBL_PG_NEXT_FENCE ") AS fence FROM f) "
    "UPDATE ${schema}.${table} l SET state = 0, hold_count = 0, version = l.version + 1, "
    "fence = g.fence, owner_token = '', owner_thread = 0, "
    "expires_at = CASE WHEN l.strategy = 'for_update' THEN NULL ELSE statement_timestamp() END "
    "FROM g WHERE l.name = g.name RETURNING l.fence";
static const char FORGET[] =
    "DELETE FROM ${schema}.${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < statement_timestamp())";
/* (Like a release: the row is freed and keeps its fence as the floor for
 * the next grant; the reaper collects it after its lease. Unlike a
 * release it clears the owner: the holder, asking again after a lost
 * release reply, must see that someone else ended its grant — see
 * LEASE_FREED.) */
static const char DROP_GRANT[] =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1, "
    "owner_token = '', owner_thread = 0 "
    "WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ?::int8 AND fence = ?::int8 AND state = 1 "
    "AND strategy <> 'for_update'";
/* One bounded batch. The expiry test sits in the DELETE itself, so a row
 * renewed after it was picked is re-checked and kept; SKIP LOCKED lets
 * several reapers share the work. Rows without a lease (for_update, the
 * epoch row) have expires_at NULL and are never picked (for_update rows
 * that a force-unlock of an earlier release left with an expiry are
 * excluded by name). */
static const char REAP[] =
    "DELETE FROM ${schema}.${table} WHERE name IN (SELECT name FROM ${schema}.${table} "
    "WHERE expires_at < statement_timestamp() - ?::int8 * interval '1 microsecond' "
    "AND strategy <> 'for_update' LIMIT ?::int8 FOR UPDATE SKIP LOCKED) "
    "AND expires_at < statement_timestamp() - ?::int8 * interval '1 microsecond'";

/* ---- migrations ---- */
static const char MIG_TRACK[] =
    "CREATE TABLE IF NOT EXISTS ${schema}.${table}_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";
static const char MIG_LIST[] =
    "SELECT version, checksum, (extract(epoch FROM applied_at) * 1000000)::int8 "
    "FROM ${schema}.${table}_migrations ORDER BY version";
static const char MIG_RECORD[] =
    "INSERT INTO ${schema}.${table}_migrations (version, name, checksum) VALUES (?::int4, ?, ?)";

/* The epoch bump (fence.h): one flushed transaction that moves the
 * durable epoch in the '' row and vouches for it in ${table}_alive, unless
 * another session vouched meanwhile. Once vouched, the epoch must not move
 * again while the server runs: a granting statement reads it in the
 * snapshot it took before waiting for its row (for_update's draw has
 * nothing else to order it), so a second move would let a waiter that
 * read the old epoch, overtaken by a newcomer that read the new one, be
 * granted a token below the newcomer's (test_faults test_epoch_bump_race).
 * Hence:
 * - EPOCH_BUMP opens the transaction and, unless the table is already
 *   filled, locks the '' row, so that bumpers that found the table empty
 *   together go one at a time;
 * - EPOCH_MOVE tests the table in a statement of its own, whose snapshot
 *   (READ COMMITTED, one per statement: set here, whatever the role's
 *   default) is taken once the lock is held and so sees an earlier
 *   bumper's vouch — an UPDATE that waited for the row itself would
 *   re-check its condition in its old snapshot. It returns the new epoch
 *   when it moved it;
 * - EPOCH_VOUCH fills the table in the same transaction, which becomes
 *   visible only once its commit is flushed (synchronous_commit = on),
 *   and never changes a table that already holds an epoch (migration
 *   0005 makes the server refuse that too). A bumper that moved nothing
 *   rolls back instead: no flush while the others queue on the row. */
static const char EPOCH_BUMP[] =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = on; "
    "SELECT 1 FROM ${schema}.${table} WHERE name = '' "
    "AND NOT EXISTS (SELECT 1 FROM ${schema}.${table}_alive) FOR UPDATE";
static const char EPOCH_MOVE[] =
    "UPDATE ${schema}.${table} SET fence = fence + 1 WHERE name = '' "
    "AND NOT EXISTS (SELECT 1 FROM ${schema}.${table}_alive) RETURNING fence";
static const char EPOCH_VOUCH[] =
    "INSERT INTO ${schema}.${table}_alive (id, epoch) "
    "SELECT 1, fence FROM ${schema}.${table} WHERE name = '' ON CONFLICT (id) DO NOTHING; "
    "COMMIT";

const dbl_sqldef dbl_sql_postgres[DBL_S_COUNT] = {
    [DBL_S_INSERT_ACQUIRE] = {INSERT_ACQUIRE, "0123450437866678", 1, {0, 1, 2, 3}},
    [DBL_S_INSERT_QUEUED] = {INSERT_QUEUED, "01234504378666789b0bdca9bc9b43780", 1, {0, 1, 2, 3}},
    [DBL_S_INSERT_FREE] = {INSERT_FREE, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_OPT_FREE] = {OPT_FREE, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_OPT_CAS] = {OPT_CAS, "012012012341056770189", 1, {0, 1, 2, 3}},
    [DBL_S_OPT_QUEUED] = {OPT_QUEUED, "012012012341056770189ac6cedbacdac01896", 1, {0, 1, 2, 3}},
    [DBL_S_OPT_READ] = {OPT_READ, "01342", 1, DBL_OUT_NONE},
    [DBL_S_OPT_CREATE] = {OPT_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_CREATE] = {FU_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_TAKE] = {FU_TAKE, "4120", 1, {0, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FU_PING] = {"SELECT 1", NULL, 1, DBL_OUT_NONE},
    [DBL_S_LEASE_RENEW] = {LEASE_RENEW, NULL, 1, {DBL_FROM_NONE, DBL_FROM_NONE, 0, 1}},
    [DBL_S_LEASE_DECR] = {LEASE_DECR, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_LEASE_FREED] = {LEASE_FREED, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_ROW_STRATEGY] = {ROW_STRATEGY, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_PROBE] = {FU_PROBE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_HOLDER] = {FU_HOLDER, NULL, 1, DBL_OUT_NONE},
    [DBL_S_DIRTY_READ] = {NULL, NULL, 0, DBL_OUT_NONE}, /* no dirty reads */
    [DBL_S_FU_KILL_BY_NAME] = {FU_KILL_BY_NAME, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_SESSION] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_KILL_SESSION] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_INFO_ONE] = {INFO_ONE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_INFO_ALL] = {INFO_ALL, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FORCE] = {FORCE, NULL, 1, {0, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FORGET] = {FORGET, NULL, 0, DBL_OUT_NONE},
    [DBL_S_DROP_GRANT] = {DROP_GRANT, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP] = {REAP, "010", 0, DBL_OUT_NONE},
    [DBL_S_SERVER_NOW] = {NULL, NULL, 0, DBL_OUT_NONE}, /* RETURNING gives the expiry */
    [DBL_S_CONN_USE] = {"SELECT current_setting('max_connections')::int8, "
                        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
                        NULL, 1, DBL_OUT_NONE},
    [DBL_S_QUEUE_LEAVE] = {QUEUE_LEAVE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_QUEUE_REAP] = {QUEUE_REAP, NULL, 0, DBL_OUT_NONE},
    [DBL_S_MIG_TRACK] = {MIG_TRACK, NULL, 0, DBL_OUT_NONE},
    [DBL_S_MIG_LIST] = {MIG_LIST, NULL, 1, DBL_OUT_NONE},
    [DBL_S_MIG_RECORD] = {MIG_RECORD, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_BUMP] = {EPOCH_BUMP, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_VOUCH] = {EPOCH_VOUCH, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_MOVE] = {EPOCH_MOVE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_EPOCH_READ] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP_PICK] = {NULL, NULL, 0, DBL_OUT_NONE},
};

/* ---- procedures ---- */


static int epoch_bump(const dbl_sqlrun *x, int *moved) {
  dbl_res r;
  int rc;
  *moved = 0;
  if ((rc = x->drv->script(x->c, x->sqls[DBL_S_EPOCH_BUMP], x->e)) == 0 &&
      (rc = x->drv->query(x->c, x->sqls[DBL_S_EPOCH_MOVE], NULL, 0, &r, x->e)) == 0) {
    *moved = r.nrows == 1;
    dbl_res_clear(&r);
    rc = *moved ? x->drv->script(x->c, x->sqls[DBL_S_EPOCH_VOUCH], x->e)
                : x->drv->rollback(x->c, x->e);
  }
  if (rc != 0) {
    dbl_err scratch;
    *moved = 0;
    if (!x->drv->broken(x->c)) x->drv->rollback(x->c, &scratch);
  }
  return rc;
}

/* The migration lock: a transaction-level advisory lock keyed by the
 * table, so it ends with the migration's transaction. */
static int migrate_lock(const dbl_sqlrun *x, int lock, int ok) {
  char key[96];
  uint64_t h;
  dbl_param p;
  int rc;
  if (!lock) {
    dbl_err scratch;
    if (!ok) x->drv->rollback(x->c, &scratch);
    return 0;
  }
  snprintf(key, sizeof key, "dblock-migrate-%s", x->table);
  h = dbl_fnv1a(DBL_FNV_INIT, key);
  if ((rc = x->drv->begin(x->c, x->e)) != 0) return rc;
  p = DBL_I64((int64_t)(h >> 1));
  return x->drv->query(x->c, "SELECT pg_advisory_xact_lock(?::int8)", &p, 1, NULL, x->e);
}

const dbl_sqldialect dbl_dialect_postgres = {
    .stmts = dbl_sql_postgres,
    .epoch_bump = epoch_bump,
    .migrate_lock = migrate_lock,
};
