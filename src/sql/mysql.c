/*
 * mysql.c — every statement dblock runs on MariaDB / MySQL, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include "fence.h"
#include "stmt.h"


/* MySQL evaluates ON DUPLICATE KEY assignments left to right, each seeing
 * the columns already assigned; so the two conditions are computed once,
 * first, into session variables (@dbl_m: this owner holds it, @dbl_g: it
 * is free or expired), and every later assignment uses them. The fence is
 * passed back through LAST_INSERT_ID(expr), which the OK packet carries:
 * no extra round trip. Affected rows: 1 inserted, 2 updated, 0 busy. */
static const char INSERT_ACQUIRE[] =
    "INSERT INTO ${table} (name, strategy, state, version, owner_host, "
    "owner_pid, owner_thread, owner_token, hold_count, fence, acquired_at, "
    "renewed_at, expires_at) "
    "VALUES (?, 'insert', 1, 1, ?, ?, ?, ?, 1, "
    "LAST_INSERT_ID(" DBL_MY_NEXT_FENCE "), UTC_TIMESTAMP(6), "
    "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) "
    "ON DUPLICATE KEY UPDATE "
    "version = IF((@dbl_m := (state = 1 AND expires_at > UTC_TIMESTAMP(6) "
    "    AND owner_token = VALUES(owner_token) AND owner_thread = VALUES(owner_thread) "
    "    AND ? = 1)) "
    "  + (@dbl_g := (strategy <> 'for_update' AND (state = 0 "
    "    OR expires_at <= UTC_TIMESTAMP(6) OR (owner_token = VALUES(owner_token) "
    "    AND owner_thread = VALUES(owner_thread) AND ? = 0)))) > 0, version + 1, version), "
    "hold_count = IF(@dbl_m, hold_count + 1, IF(@dbl_g, 1, hold_count)), "
    "fence = LAST_INSERT_ID(IF(@dbl_g, GREATEST(fence + 1, VALUES(fence)), fence)), "
    "acquired_at = IF(@dbl_g, VALUES(acquired_at), acquired_at), "
    "renewed_at = IF(@dbl_m OR @dbl_g, VALUES(renewed_at), renewed_at), "
    "owner_host = IF(@dbl_g, VALUES(owner_host), owner_host), "
    "owner_pid = IF(@dbl_g, VALUES(owner_pid), owner_pid), "
    "strategy = IF(@dbl_g, 'insert', strategy), "
    "state = IF(@dbl_g, 1, state), "
    "owner_token = IF(@dbl_g, VALUES(owner_token), owner_token), "
    "owner_thread = IF(@dbl_g, VALUES(owner_thread), owner_thread), "
    "expires_at = IF(@dbl_m OR @dbl_g, VALUES(expires_at), expires_at)";

static const char INSERT_FREE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? AND fence = ? AND state = 1";

/* MySQL: single-table UPDATE assigns left to right, so the "mine" test is
 * taken once into @dbl_m before any column it reads is assigned. The new
 * fence comes back through LAST_INSERT_ID(expr). */
static const char OPT_CAS[] =
    "UPDATE ${table} SET "
    "hold_count = IF((@dbl_m := (state = 1 AND expires_at > UTC_TIMESTAMP(6) "
    "  AND owner_token = ? AND owner_thread = ? AND ? = 1)), hold_count + 1, 1), "
    "fence = LAST_INSERT_ID(IF(@dbl_m, fence, "
    "  GREATEST(fence + 1, " DBL_MY_NEXT_FENCE "))), "
    "acquired_at = IF(@dbl_m, acquired_at, UTC_TIMESTAMP(6)), "
    "strategy = 'optimistic', state = 1, version = version + 1, "
    "owner_host = ?, owner_pid = ?, owner_thread = ?, owner_token = ?, "
    "renewed_at = UTC_TIMESTAMP(6), "
    "expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND "
    "WHERE name = ? AND (version = ? OR ? = -2) AND strategy <> 'for_update' "
    "AND (state = 0 OR expires_at <= UTC_TIMESTAMP(6) "
    "  OR (owner_token = ? AND owner_thread = ?))";

static const char OPT_READ[] =
    "SELECT version, (state = 1 AND expires_at > UTC_TIMESTAMP(6) AND NOT "
    "(owner_token = ? AND owner_thread = ?)), strategy FROM ${table} WHERE name = ?";

static const char OPT_CREATE[] =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0)";

static const char OPT_FREE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = LAST_INSERT_ID(version + 1) "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1";

static const char FU_TAKE[] =
    "UPDATE ${table} SET "
    "fence = LAST_INSERT_ID(GREATEST(fence + 1, " DBL_MY_NEXT_FENCE ")), "
    "version = version + 1, hold_count = 1, owner_host = ?, owner_pid = ?, "
    "owner_thread = ?, owner_token = ?, acquired_at = UTC_TIMESTAMP(6), "
    "renewed_at = UTC_TIMESTAMP(6), expires_at = NULL, owner_session = CONNECTION_ID() "
    "WHERE name = ? AND strategy = 'for_update'";

static const char FU_CREATE[] =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'for_update', 0, 0)";

static const char LEASE_RENEW[] =
    "UPDATE ${table} SET version = LAST_INSERT_ID(version + 1), "
    "renewed_at = UTC_TIMESTAMP(6), "
    "expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1";

static const char LEASE_DECR[] =
    "UPDATE ${table} SET hold_count = hold_count - 1, "
    "version = LAST_INSERT_ID(version + 1) "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND hold_count > 1";

static const char LEASE_FREED[] =
    "SELECT version FROM ${table} WHERE name = ? AND owner_token = ? "
    "AND owner_thread = ? AND fence = ? AND state = 0";


static const char ROW_STRATEGY[] = "SELECT strategy FROM ${table} WHERE name = ?";

const dbl_sqldef dbl_sql_mysql[DBL_S_COUNT] = {
    [DBL_S_INSERT_ACQUIRE] = {INSERT_ACQUIRE, "01234566", 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_INSERT_FREE] = {INSERT_FREE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_OPT_FREE] = {OPT_FREE, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_OPT_CAS] = {OPT_CAS, "0123410567701", 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_OPT_READ] = {OPT_READ, NULL, 1, DBL_OUT_NONE},
    [DBL_S_OPT_CREATE] = {OPT_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_CREATE] = {FU_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_TAKE] = {FU_TAKE, NULL, 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FU_PING] = {"SELECT 1", NULL, 1, DBL_OUT_NONE},
    [DBL_S_LEASE_RENEW] = {LEASE_RENEW, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_LEASE_DECR] = {LEASE_DECR, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_LEASE_FREED] = {LEASE_FREED, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_ROW_STRATEGY] = {ROW_STRATEGY, NULL, 1, DBL_OUT_NONE},
};
