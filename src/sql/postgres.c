/*
 * postgres.c — every statement dblock runs on PostgreSQL, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drivers/driver.h"
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

/* ---- introspection ---- */
#define COLS                                                                   \
  "name, strategy, (state = 1 AND expires_at > statement_timestamp())::int, "  \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "(extract(epoch FROM acquired_at) * 1000000)::int8, "                        \
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
 * with DBLOCK_ELOST and fenced resources refuse its token. */
static const char FORCE[] =
    "UPDATE ${schema}.${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = GREATEST(fence + 1, " DBL_PG_NEXT_FENCE "), "
    "owner_token = '', owner_thread = 0, expires_at = statement_timestamp() "
    "WHERE name = ? RETURNING fence";
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
 * epoch row) have expires_at NULL and are never picked. */
static const char REAP[] =
    "DELETE FROM ${schema}.${table} WHERE name IN (SELECT name FROM ${schema}.${table} "
    "WHERE expires_at < statement_timestamp() - ?::int8 * interval '1 microsecond' "
    "LIMIT ?::int8 FOR UPDATE SKIP LOCKED) "
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

/* The epoch bump (fence.h): a flushed commit that moves the durable epoch
 * in the '' row, unless another session vouched meanwhile, then the vouch
 * that refills ${table}_alive. */
static const char EPOCH_BUMP[] =
    "BEGIN; SET LOCAL synchronous_commit = on; "
    "UPDATE ${schema}.${table} SET fence = fence + 1 WHERE name = '' "
    "AND NOT EXISTS (SELECT 1 FROM ${schema}.${table}_alive); COMMIT";
static const char EPOCH_VOUCH[] =
    "INSERT INTO ${schema}.${table}_alive (id, epoch) "
    "SELECT 1, fence FROM ${schema}.${table} WHERE name = '' "
    "ON CONFLICT (id) DO UPDATE SET epoch = GREATEST(${table}_alive.epoch, excluded.epoch)";

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
    [DBL_S_MIG_TRACK] = {MIG_TRACK, NULL, 0, DBL_OUT_NONE},
    [DBL_S_MIG_LIST] = {MIG_LIST, NULL, 1, DBL_OUT_NONE},
    [DBL_S_MIG_RECORD] = {MIG_RECORD, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_BUMP] = {EPOCH_BUMP, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_VOUCH] = {EPOCH_VOUCH, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_READ] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP_PICK] = {NULL, NULL, 0, DBL_OUT_NONE},
};

/* ---- procedures ---- */


static int epoch_bump(const dbl_sqlrun *x) {
  int rc;
  if ((rc = x->drv->script(x->c, x->sqls[DBL_S_EPOCH_BUMP], x->e)) != 0) {
    dbl_err scratch;
    if (!x->drv->broken(x->c)) x->drv->rollback(x->c, &scratch);
    return rc;
  }
  return x->drv->script(x->c, x->sqls[DBL_S_EPOCH_VOUCH], x->e);
}

/* The migration lock: a transaction-level advisory lock keyed by the
 * table, so it ends with the migration's transaction. */
static int migrate_lock(const dbl_sqlrun *x, int lock, int ok) {
  char key[96];
  uint64_t h = 1469598103934665603ull;
  dbl_param p;
  int rc;
  if (!lock) {
    dbl_err scratch;
    if (!ok) x->drv->rollback(x->c, &scratch);
    return 0;
  }
  snprintf(key, sizeof key, "dblock-migrate-%s", x->table);
  for (const char *s = key; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  if ((rc = x->drv->begin(x->c, x->e)) != 0) return rc;
  p = DBL_I64((int64_t)(h >> 1));
  return x->drv->query(x->c, "SELECT pg_advisory_xact_lock(?::int8)", &p, 1, NULL, x->e);
}

const dbl_sqldialect dbl_dialect_postgres = {
    .stmts = dbl_sql_postgres,
    .epoch_bump = epoch_bump,
    .migrate_lock = migrate_lock,
};
