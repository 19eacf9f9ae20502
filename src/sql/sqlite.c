/*
 * sqlite.c — every statement dblock runs on SQLite, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include "../drivers/driver.h"
#include "fence.h"
#include "stmt.h"

#define MINE_LITE "(l.state = 1 AND l.expires_at > dblock_now_us() " \
                  "AND l.owner_token = ? AND l.owner_thread = ? AND ? = 1)"

/* SQLite: the same upsert as PostgreSQL; the fence is drawn by
 * DBL_LITE_NEXT_FENCE (above the file's high-water mark and the clock). */
static const char INSERT_ACQUIRE[] =
    "INSERT INTO ${table} AS l (name, strategy, state, version, owner_host, "
    "owner_pid, owner_thread, owner_token, hold_count, fence, acquired_at, "
    "renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?, ?, ?, 1, " DBL_LITE_NEXT_FENCE ", "
    "dblock_now_us(), dblock_now_us(), dblock_now_us() + ?) "
    "ON CONFLICT (name) DO UPDATE SET "
    "hold_count = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.fence ELSE MAX(l.fence + 1, excluded.fence) END, "
    "acquired_at = CASE WHEN l.state = 1 AND l.expires_at > excluded.acquired_at "
    "  AND ? = 1 THEN l.acquired_at ELSE excluded.acquired_at END, "
    "strategy = 'insert', state = 1, version = l.version + 1, "
    "owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, "
    "owner_thread = excluded.owner_thread, owner_token = excluded.owner_token, "
    "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at "
    "WHERE l.strategy <> 'for_update' AND (l.state = 0 "
    "  OR l.expires_at <= excluded.acquired_at "
    "  OR (l.owner_token = excluded.owner_token AND l.owner_thread = excluded.owner_thread)) "
    "RETURNING fence, hold_count, expires_at, version";

static const char OPT_CAS[] =
    "UPDATE ${table} AS l SET "
    "hold_count = CASE WHEN " MINE_LITE " THEN l.hold_count + 1 ELSE 1 END, "
    "fence = CASE WHEN " MINE_LITE " THEN l.fence "
    "  ELSE MAX(l.fence + 1, " DBL_LITE_NEXT_FENCE ") END, "
    "acquired_at = CASE WHEN " MINE_LITE " THEN l.acquired_at ELSE dblock_now_us() END, "
    "strategy = 'optimistic', state = 1, version = l.version + 1, "
    "owner_host = ?, owner_pid = ?, owner_thread = ?, owner_token = ?, "
    "renewed_at = dblock_now_us(), expires_at = dblock_now_us() + ? "
    "WHERE l.name = ? AND (l.version = ? OR ? = -2) AND l.strategy <> 'for_update' "
    "AND (l.state = 0 OR l.expires_at <= dblock_now_us() "
    "  OR (l.owner_token = ? AND l.owner_thread = ?)) "
    "RETURNING fence, hold_count, expires_at, version";

static const char OPT_READ[] =
    "SELECT version, (state = 1 AND expires_at > dblock_now_us() AND NOT "
    "(owner_token = ? AND owner_thread = ?)), strategy FROM ${table} WHERE name = ?";

static const char OPT_CREATE[] =
    "INSERT INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0) ON CONFLICT (name) DO NOTHING";

static const char OPT_FREE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ? AND fence = ? AND state = 1 RETURNING version";

static const char FU_TAKE[] =
    "UPDATE ${table} SET fence = MAX(fence + 1, " DBL_LITE_NEXT_FENCE "), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?, "
    "owner_thread = ?, owner_token = ?, acquired_at = dblock_now_us(), "
    "renewed_at = dblock_now_us(), expires_at = NULL "
    "WHERE name = ? AND strategy = 'for_update' "
    "RETURNING fence, dblock_publish('${table}' || char(31) || name, acquired_at || ' ' || "
    "fence || ' ' || owner_pid || ' ' || owner_thread || ' ' || owner_host)";

static const char FU_CREATE[] =
    "INSERT INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0) ON CONFLICT (name) DO NOTHING";

static const char LEASE_RENEW[] =
    "UPDATE ${table} SET version = version + 1, renewed_at = dblock_now_us(), "
    "expires_at = dblock_now_us() + ? "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 RETURNING expires_at, version";

static const char LEASE_DECR[] =
    "UPDATE ${table} SET hold_count = hold_count - 1, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND hold_count > 1 RETURNING version";


/* (the same text as MariaDB's) */
static const char INSERT_FREE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? AND fence = ? AND state = 1";
static const char LEASE_FREED[] =
    "SELECT version FROM ${table} WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ? AND fence = ? AND state = 0";
static const char ROW_STRATEGY[] = "SELECT strategy FROM ${table} WHERE name = ?";

/* ---- introspection ---- */
#define COLS                                                                   \
  "name, strategy, (state = 1 AND expires_at > dblock_now_us()), "             \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "acquired_at, expires_at"
static const char INFO_ONE[] = "SELECT " COLS " FROM ${table} WHERE name = ?";
static const char INFO_ALL[] =
    "SELECT " COLS " FROM ${table} WHERE name <> '' ORDER BY name LIMIT ?";
/* What the holder published through dblock_publish() in FU_TAKE
 * ("ACQUIRED " + DBL_HOLDER_FORMAT; see the driver's sqlite.c), split into
 * the holder string and the acquisition time. */
static const char FU_HOLDER[] =
    "SELECT substr(v, instr(v, ' ') + 1), CAST(substr(v, 1, instr(v, ' ') - 1) AS INTEGER) "
    "FROM (SELECT dblock_published('${table}' || char(31) || ?) AS v) WHERE v IS NOT NULL";

/* ---- administration (see postgres.c) ---- */
static const char FORCE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = MAX(fence + 1, " DBL_LITE_NEXT_FENCE "), owner_token = '', owner_thread = 0, "
    "expires_at = dblock_now_us() WHERE name = ? RETURNING fence";
static const char FORGET[] =
    "DELETE FROM ${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < dblock_now_us())";
static const char DROP_GRANT[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "owner_token = '', owner_thread = 0 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND strategy <> 'for_update'";
static const char REAP[] =
    "DELETE FROM ${table} WHERE name IN (SELECT name FROM ${table} "
    "WHERE expires_at < dblock_now_us() - ? LIMIT ?)";

/* ---- migrations ---- */
static const char MIG_TRACK[] =
    "CREATE TABLE IF NOT EXISTS ${table}_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
    " checksum TEXT NOT NULL, applied_at INTEGER NOT NULL)";
static const char MIG_LIST[] =
    "SELECT version, checksum, applied_at FROM ${table}_migrations ORDER BY version";
static const char MIG_RECORD[] =
    "INSERT INTO ${table}_migrations (version, name, checksum, applied_at) "
    "VALUES (?, ?, ?, dblock_now_us())";

const dbl_sqldef dbl_sql_sqlite[DBL_S_COUNT] = {
    [DBL_S_INSERT_ACQUIRE] = {INSERT_ACQUIRE, "012345666", 1, {0, 1, 2, 3}},
    [DBL_S_INSERT_FREE] = {INSERT_FREE, "0123", 0, DBL_OUT_NONE},
    [DBL_S_OPT_FREE] = {OPT_FREE, "0123", 1, DBL_OUT_VERSION(0)},
    [DBL_S_OPT_CAS] = {OPT_CAS, "0120120123410567701", 1, {0, 1, 2, 3}},
    [DBL_S_OPT_READ] = {OPT_READ, "012", 1, DBL_OUT_NONE},
    [DBL_S_OPT_CREATE] = {OPT_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_CREATE] = {FU_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_TAKE] = {FU_TAKE, NULL, 1, {0, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FU_PING] = {NULL, NULL, 0, DBL_OUT_NONE}, /* nothing to check */
    [DBL_S_LEASE_RENEW] = {LEASE_RENEW, NULL, 1, {DBL_FROM_NONE, DBL_FROM_NONE, 0, 1}},
    [DBL_S_LEASE_DECR] = {LEASE_DECR, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_LEASE_FREED] = {LEASE_FREED, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_ROW_STRATEGY] = {ROW_STRATEGY, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_PROBE] = {NULL, NULL, 0, DBL_OUT_NONE}, /* the whole file is locked */
    [DBL_S_FU_HOLDER] = {FU_HOLDER, NULL, 1, DBL_OUT_NONE},
    [DBL_S_DIRTY_READ] = {NULL, NULL, 0, DBL_OUT_NONE},
    /* (no other process's transaction can be ended: force-unlock of a held
     * for_update lock is not possible) */
    [DBL_S_FU_KILL_BY_NAME] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_SESSION] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_KILL_SESSION] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_INFO_ONE] = {INFO_ONE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_INFO_ALL] = {INFO_ALL, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FORCE] = {FORCE, NULL, 1, {0, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FORGET] = {FORGET, NULL, 0, DBL_OUT_NONE},
    [DBL_S_DROP_GRANT] = {DROP_GRANT, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP] = {REAP, NULL, 0, DBL_OUT_NONE},
    [DBL_S_SERVER_NOW] = {NULL, NULL, 0, DBL_OUT_NONE}, /* RETURNING gives the expiry */
    [DBL_S_CONN_USE] = {NULL, NULL, 0, DBL_OUT_NONE}, /* no server */
    [DBL_S_MIG_TRACK] = {MIG_TRACK, NULL, 0, DBL_OUT_NONE},
    [DBL_S_MIG_LIST] = {MIG_LIST, NULL, 1, DBL_OUT_NONE},
    [DBL_S_MIG_RECORD] = {MIG_RECORD, NULL, 0, DBL_OUT_NONE},
    /* (no epoch: the '' row's high-water mark, kept by triggers) */
    [DBL_S_EPOCH_BUMP] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_VOUCH] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_READ] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_MOVE] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP_PICK] = {NULL, NULL, 0, DBL_OUT_NONE},
};

/* The migration lock: the migration's own write transaction (BEGIN
 * IMMEDIATE locks the file), waiting up to 120 s for other writers. */
static int migrate_lock(const dbl_sqlrun *x, int lock, int ok) {
  if (!lock) {
    dbl_err scratch;
    if (!ok) x->drv->rollback(x->c, &scratch);
    return 0;
  }
  x->drv->set_lock_wait(x->c, 120000, x->e);
  return x->drv->begin(x->c, x->e);
}

const dbl_sqldialect dbl_dialect_sqlite = {
    .stmts = dbl_sql_sqlite,
    .one_writer = 1,
    .migrate_lock = migrate_lock,
};
