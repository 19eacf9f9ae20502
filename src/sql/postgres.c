/*
 * postgres.c — every statement dblock runs on PostgreSQL, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include "fence.h"
#include "stmt.h"

#define MINE_PG "(l.state = 1 AND l.expires_at > statement_timestamp() " \
                "AND l.owner_token = ? AND l.owner_thread = ?::int8 AND ?::int4 = 1)"

static const char INSERT_ACQUIRE[] =
    "INSERT INTO ${schema}.${table} AS l (name, strategy, state, version, "
    "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "
    "acquired_at, renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?::int8, ?::int8, ?, 1, "
    DBL_PG_NEXT_FENCE ", statement_timestamp(), "
    "statement_timestamp(), statement_timestamp() + ?::int8 * interval '1 microsecond') "
    "ON CONFLICT (name) DO UPDATE SET "
    "hold_count = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.fence ELSE GREATEST(l.fence + 1, excluded.fence) END, "
    "acquired_at = CASE WHEN l.state = 1 AND l.expires_at > statement_timestamp() "
    "  AND ?::int4 = 1 THEN l.acquired_at ELSE excluded.acquired_at END, "
    "strategy = 'insert', state = 1, version = l.version + 1, "
    "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "
    "owner_thread = excluded.owner_thread, owner_token = excluded.owner_token, "
    "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at "
    "WHERE l.strategy <> 'for_update' AND (l.state = 0 "
    "  OR l.expires_at <= statement_timestamp() "
    "  OR (l.owner_token = excluded.owner_token AND l.owner_thread = excluded.owner_thread)) "
    "RETURNING fence, hold_count, (extract(epoch FROM expires_at) * 1000000)::int8, version";

/* Release: the row goes back to free and keeps its fence (see above) and
 * its expiry (which tells the reaper when it may collect it). */
static const char INSERT_FREE[] =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 AND fence = ?::int8 "
    "AND state = 1";

static const char OPT_CAS[] =
    "UPDATE ${schema}.${table} AS l SET "
    "hold_count = CASE WHEN " MINE_PG " THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN " MINE_PG " THEN l.fence "
    "  ELSE GREATEST(l.fence + 1, " DBL_PG_NEXT_FENCE ") END, "
    "acquired_at = CASE WHEN " MINE_PG " THEN l.acquired_at ELSE statement_timestamp() END, "
    "strategy = 'optimistic', state = 1, version = l.version + 1, "
    "owner_host = ?, owner_pid = ?::int8, owner_thread = ?::int8, owner_token = ?, "
    "renewed_at = statement_timestamp(), "
    "expires_at = statement_timestamp() + ?::int8 * interval '1 microsecond' "
    "WHERE l.name = ? AND (l.version = ?::int8 OR ?::int8 = -2) AND l.strategy <> 'for_update' "
    "AND (l.state = 0 OR l.expires_at <= statement_timestamp() "
    "  OR (l.owner_token = ? AND l.owner_thread = ?::int8)) "
    "RETURNING fence, hold_count, (extract(epoch FROM expires_at) * 1000000)::int8, version";

/* Reading the row: version, whether someone else holds it now, strategy. */
static const char OPT_READ[] =
    "SELECT version, (state = 1 AND expires_at > statement_timestamp() AND NOT "
    "(owner_token = ? AND owner_thread = ?::int8))::int, strategy "
    "FROM ${schema}.${table} WHERE name = ?";

/* Creating a missing row, free, at version 0. */
static const char OPT_CREATE[] =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0) ON CONFLICT (name) DO NOTHING";

/* Release frees the row and leaves expires_at alone: no indexed column
 * changes, so PostgreSQL can update the row in place (a HOT update, no
 * index writes). A free row's old expiry only tells the reaper when it may
 * delete it. */
static const char OPT_FREE[] =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ?::int8 "
    "AND fence = ?::int8 AND state = 1 RETURNING version";

static const char FU_TAKE[] =
    "UPDATE ${schema}.${table} SET "
    "fence = GREATEST(fence + 1, " DBL_PG_NEXT_FENCE "), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?::int8, "
    "owner_thread = ?::int8, owner_token = ?, acquired_at = statement_timestamp(), "
    "renewed_at = statement_timestamp(), expires_at = NULL, owner_session = pg_backend_pid() "
    "WHERE name = ? AND strategy = 'for_update' "
    "RETURNING fence, set_config('application_name', left('dblock ' || fence || ' ' || "
    "owner_pid || ' ' || owner_thread || ' ' || owner_host, 63), true)";

/* The row a name's lock lives on, created free and committed on first use
 * so that every session can see (and probe) it. */
static const char FU_CREATE[] =
    "INSERT INTO ${schema}.${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0) ON CONFLICT (name) DO NOTHING";

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

const dbl_sqldef dbl_sql_postgres[DBL_S_COUNT] = {
    [DBL_S_INSERT_ACQUIRE] = {INSERT_ACQUIRE, "012345666", 1, {0, 1, 2, 3}},
    [DBL_S_INSERT_FREE] = {INSERT_FREE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_OPT_FREE] = {OPT_FREE, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_OPT_CAS] = {OPT_CAS, "0120120123410567701", 1, {0, 1, 2, 3}},
    [DBL_S_OPT_READ] = {OPT_READ, NULL, 1, DBL_OUT_NONE},
    [DBL_S_OPT_CREATE] = {OPT_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_CREATE] = {FU_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_TAKE] = {FU_TAKE, NULL, 1, {0, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FU_PING] = {"SELECT 1", NULL, 1, DBL_OUT_NONE},
    [DBL_S_LEASE_RENEW] = {LEASE_RENEW, NULL, 1, {DBL_FROM_NONE, DBL_FROM_NONE, 0, 1}},
    [DBL_S_LEASE_DECR] = {LEASE_DECR, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_LEASE_FREED] = {LEASE_FREED, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_ROW_STRATEGY] = {ROW_STRATEGY, NULL, 1, DBL_OUT_NONE},
};
