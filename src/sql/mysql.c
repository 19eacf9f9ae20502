/*
 * mysql.c — every statement dblock runs on MariaDB / MySQL, with how its result is read
 * (see stmt.h for the ids, their parameters and the result slots).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drivers/driver.h"
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
    "    AND owner_thread = VALUES(owner_thread) AND ? = 0)))) > 0, "
    "  version + 1, version), "
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

/* renewed_at: when the row was freed. */
#define FREE_KEY "hold_count = 0, renewed_at = UTC_TIMESTAMP(6)"
static const char INSERT_FREE[] =
    "UPDATE ${table} SET state = 0, " FREE_KEY ", version = version + 1 "
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
    "(owner_token = ? AND owner_thread = ?)), strategy "
    "FROM ${table} WHERE name = ?";

static const char OPT_CREATE[] =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version) "
    "VALUES (?, 'optimistic', 0, 0)";

static const char OPT_FREE[] =
    "UPDATE ${table} SET state = 0, " FREE_KEY ", version = LAST_INSERT_ID(version + 1) "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1";

/* The grant: the row is locked, and the holder's columns and fence are
 * written, by one UPDATE inside the lock transaction (which waits for the
 * row lock; the fence is read back as LAST_INSERT_ID from the OK packet).
 * The release is ROLLBACK, not COMMIT: InnoDB flushes its redo at COMMIT
 * (innodb_flush_log_at_trx_commit = 1), never at ROLLBACK, so a grant costs
 * no flush — and the row's columns were only ever the holder's word while
 * it held the lock: others read them uncommitted (DIRTY_READ below), and
 * once the lock ends they are gone with it. The fence needs no commit
 * either: it comes from the sequence, which the epoch keeps ahead of
 * everything issued before a crash (GREATEST keeps it above the row's last
 * committed fence, which force-unlocks advance), and the UPDATE draws it
 * after the row lock is granted, so grants of a name get increasing
 * fences. (Migration 0004's MEMORY table ${table}_holders, which an
 * earlier release of dblock published holders in, is no longer used: a
 * MEMORY table is locked whole for every statement, and that serialised
 * every grant of every name.)
 *
 * The UPDATE changes no column's length, so InnoDB writes it in place.
 * A write that changes a length re-inserts the record in its page, and
 * that moves every lock on the row — the queue of waiters too — off it and
 * back, in the grant and again in the ROLLBACK: W2 (8 waiters, one name)
 * ran at 0.39 × the floor that way. So a for_update row keeps, committed,
 * holder columns as long as a grant's (FU_CREATE, FORCE): owner_host
 * padded with spaces to FU_HOST_W characters, owner_token 32 spaces (a
 * token is 32 hex digits), acquired_at '1970-01-01' (0 µs), not NULL. (A
 * host longer than FU_HOST_W, or one whose multi-byte characters pad to
 * more than FU_HOST_W bytes, is written as is: that grant is not in
 * place.) The grant writes only what introspection reads (fill_info,
 * FU_SESSION): not version or renewed_at, and not expires_at (indexed;
 * for_update has no expiry, and introspection ignores it). Readers trim
 * the spaces (fill_info in admin.c); nothing compares these columns of a
 * for_update row. Rows made by earlier releases keep their empty columns
 * and the slower grant until forgotten. */
#define FU_HOST_W "64"
/* The token must be the sequence's own draw (LASTVAL, evaluated after the
 * NEXTVAL on its left): a token taken from the row's fence + 1 would be
 * undone by the ROLLBACK and handed out again by the next grant. So a row
 * whose fence is not below the draw (the sequence moved back by hand, or
 * restored apart from the table) fails the grant with an overflow (fence.h
 * DBL_FENCE_BEHIND_MY_SUM); the core moves the sequence past the row
 * (fence_catch_up below) and asks again. */
static const char FU_TAKE[] =
    "UPDATE ${table} SET "
    "fence = LAST_INSERT_ID(GREATEST(fence + 1, " DBL_MY_NEXT_FENCE ") "
    "+ IF(fence < LASTVAL(${table}_fence_seq), 0, " DBL_FENCE_BEHIND_MY_SUM "GREATEST(fence, 1))), "
    "state = 1, hold_count = 1, "
    "owner_host = RPAD(?, GREATEST(CHAR_LENGTH(?), " FU_HOST_W "), ' '), owner_pid = ?, "
    "owner_thread = ?, owner_token = ?, acquired_at = UTC_TIMESTAMP(6), "
    "owner_session = CONNECTION_ID() "
    "WHERE name = ? AND strategy = 'for_update'";

static const char FU_CREATE[] =
    "INSERT IGNORE INTO ${table} (name, strategy, state, version, owner_host, owner_token, "
    "acquired_at) VALUES (?, 'for_update', 0, 0, REPEAT(' ', " FU_HOST_W "), "
    "REPEAT(' ', 32), '1970-01-01')";

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

/* ---- introspection ---- */
#define COLS                                                                   \
  "name, strategy, (state = 1 AND expires_at > UTC_TIMESTAMP(6)), "            \
  "owner_host, owner_pid, owner_thread, owner_token, hold_count, fence, "      \
  "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', acquired_at), "                    \
  "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at)"
static const char INFO_ONE[] = "SELECT " COLS " FROM ${table} WHERE name = ?";
static const char INFO_ALL[] =
    "SELECT " COLS " FROM ${table} WHERE name <> '' ORDER BY name LIMIT ?";
/* (see postgres.c) */
static const char FU_PROBE[] =
    "SELECT 1 FROM ${table} WHERE name = ? LOCK IN SHARE MODE SKIP LOCKED";
/* The holder's columns are written inside its open transaction: the next
 * statement reads them uncommitted. SET TRANSACTION without SESSION
 * applies to the next transaction only. */
static const char DIRTY_READ[] = "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED";
/* The holder's session id (its uncommitted column, read dirty), then
 * KILL it. Only a holder's own write says state = 1: a committed
 * for_update row never does (FU_CREATE and FORCE write 0, and builds that
 * committed their grant did not set it), so a session id some earlier
 * build left committed in the row — by now maybe another client's
 * connection — is never killed. */
static const char FU_SESSION[] =
    "SELECT owner_session FROM ${table} WHERE name = ? AND state = 1";

/* ---- administration (see postgres.c) ---- */
static const char FORCE[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "fence = LAST_INSERT_ID(GREATEST(fence + 1, " DBL_MY_NEXT_FENCE ")), "
    "owner_token = IF(strategy = 'for_update', REPEAT(' ', 32), ''), owner_thread = 0, "
    "expires_at = UTC_TIMESTAMP(6) WHERE name = ?"; /* (the padding: see FU_TAKE) */
static const char FORGET[] =
    "DELETE FROM ${table} WHERE name = ? AND name <> '' AND "
    "(strategy = 'for_update' OR expires_at < UTC_TIMESTAMP(6))";
static const char DROP_GRANT[] =
    "UPDATE ${table} SET state = 0, hold_count = 0, version = version + 1, "
    "owner_token = '', owner_thread = 0 "
    "WHERE name = ? AND owner_token = ? AND owner_thread = ? "
    "AND fence = ? AND state = 1 AND strategy <> 'for_update'";
/* A multi-table DELETE waits for every row lock it meets, and a held
 * for_update row can carry an old expires_at (set by a force-unlock, then
 * taken again): every pass used to wait for it and fail. So a batch is
 * picked with SKIP LOCKED in a transaction — rows locked by a lock session
 * are passed over, and two reapers split the work instead of deadlocking —
 * and deleted by name (reap_batch below). */
static const char REAP_PICK[] =
    "SELECT name FROM ${table} FORCE INDEX (${table}_expires_idx) "
    "WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND "
    "LIMIT ? FOR UPDATE SKIP LOCKED";
/* UPDATE cannot return the new expiry here: it is estimated from the local
 * clock and this offset, measured once per connection. */
static const char SERVER_NOW[] =
    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))";

/* ---- migrations ---- */
static const char MIG_TRACK[] =
    "CREATE TABLE IF NOT EXISTS ${table}_migrations ("
    " version INT PRIMARY KEY, name VARCHAR(255) NOT NULL,"
    " checksum VARCHAR(32) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6)) ENGINE=InnoDB";
static const char MIG_LIST[] =
    "SELECT version, checksum, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', applied_at) "
    "FROM ${table}_migrations ORDER BY version";
/* (IGNORE: on Galera GET_LOCK is per node, so two migrators on two nodes
 * can both apply a migration — harmless, see restartable — and both record
 * it.) */
static const char MIG_RECORD[] =
    "INSERT IGNORE INTO ${table}_migrations (version, name, checksum) VALUES (?, ?, ?)";

/* ---- the fencing epoch ----
 * The fence is the sequence value alone, and a bump moves the sequence
 * itself to the next 2^40 block (SETVAL). Galera replicates the sequence
 * (NOCACHE there) but not ${table}_alive (MEMORY, per node): a per-node
 * epoch in the token would let a node that vouched earlier hand out tokens
 * below those of a node that bumped later, while a shared sequence that
 * only moves forward orders every node's tokens. */
/* (NEXTVAL only when a bump will follow: every new session's first grant
 * comes this way, and on Galera a sequence write can fail certification.) */
static const char EPOCH_READ[] =
    "SELECT (SELECT fence FROM ${table} WHERE name = ''), "
    "IF(EXISTS (SELECT 1 FROM ${table}_alive), 0, NEXTVAL(${table}_fence_seq)), "
    "EXISTS (SELECT 1 FROM ${table}_alive)";
/* (MEMORY is not transactional: the jump must be flushed first, so a
 * failure in between leaves the table empty and the next grant bumps again.
 * The COMMIT ends the read on a lock connection, which runs without
 * autocommit.) */
/* The session then keeps, in its variable, that it saw this server vouch
 * (DBL_MY_NEXT_FENCE reads only the variable: fence.h) — read from the
 * table, so that a vouch that wrote nothing (no '' row) leaves it NULL and
 * the grants keep failing. */
static const char EPOCH_VOUCH[] =
    "INSERT INTO ${table}_alive (id, epoch) SELECT 1, fence FROM ${table} WHERE name = '' "
    "ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch)); COMMIT; "
    "SET @dblock_alive_${table} = (SELECT " DBL_MY_SESSION_MARK " FROM ${table}_alive "
    "WHERE id = 1)";

const dbl_sqldef dbl_sql_mysql[DBL_S_COUNT] = {
    [DBL_S_INSERT_ACQUIRE] = {INSERT_ACQUIRE, "01234566", 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_INSERT_FREE] = {INSERT_FREE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_OPT_FREE] = {OPT_FREE, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_OPT_CAS] = {OPT_CAS, "0123410567701", 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_OPT_READ] = {OPT_READ, "012", 1, DBL_OUT_NONE},
    [DBL_S_OPT_CREATE] = {OPT_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_CREATE] = {FU_CREATE, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_TAKE] = {FU_TAKE, "001234", 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FU_RELEASE] = {"ROLLBACK", NULL, 0, DBL_OUT_NONE}, /* see FU_TAKE */
    [DBL_S_FU_PING] = {"SELECT 1", NULL, 1, DBL_OUT_NONE},
    [DBL_S_LEASE_RENEW] = {LEASE_RENEW, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_LEASE_DECR] = {LEASE_DECR, NULL, 0, DBL_OUT_VERSION(DBL_FROM_INSERT_ID)},
    [DBL_S_LEASE_FREED] = {LEASE_FREED, NULL, 1, DBL_OUT_VERSION(0)},
    [DBL_S_ROW_STRATEGY] = {ROW_STRATEGY, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_PROBE] = {FU_PROBE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FU_HOLDER] = {NULL, NULL, 0, DBL_OUT_NONE}, /* the row, read dirty */
    [DBL_S_DIRTY_READ] = {DIRTY_READ, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_KILL_BY_NAME] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_FU_SESSION] = {FU_SESSION, NULL, 1, DBL_OUT_NONE},
    [DBL_S_KILL_SESSION] = {"KILL CONNECTION ?", NULL, 0, DBL_OUT_NONE},
    [DBL_S_INFO_ONE] = {INFO_ONE, NULL, 1, DBL_OUT_NONE},
    [DBL_S_INFO_ALL] = {INFO_ALL, NULL, 1, DBL_OUT_NONE},
    [DBL_S_FORCE] = {FORCE, NULL, 0, {DBL_FROM_INSERT_ID, DBL_FROM_NONE, DBL_FROM_NONE, DBL_FROM_NONE}},
    [DBL_S_FORGET] = {FORGET, NULL, 0, DBL_OUT_NONE},
    [DBL_S_DROP_GRANT] = {DROP_GRANT, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP] = {NULL, NULL, 0, DBL_OUT_NONE}, /* reap_batch */
    [DBL_S_SERVER_NOW] = {SERVER_NOW, NULL, 1, DBL_OUT_NONE},
    [DBL_S_CONN_USE] = {"SELECT @@max_connections, (SELECT VARIABLE_VALUE FROM "
                        "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'THREADS_CONNECTED')",
                        NULL, 1, DBL_OUT_NONE},
    [DBL_S_MIG_TRACK] = {MIG_TRACK, NULL, 0, DBL_OUT_NONE},
    [DBL_S_MIG_LIST] = {MIG_LIST, NULL, 1, DBL_OUT_NONE},
    [DBL_S_MIG_RECORD] = {MIG_RECORD, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_BUMP] = {NULL, NULL, 0, DBL_OUT_NONE}, /* epoch_bump */
    [DBL_S_EPOCH_VOUCH] = {EPOCH_VOUCH, NULL, 0, DBL_OUT_NONE},
    [DBL_S_EPOCH_READ] = {EPOCH_READ, NULL, 1, DBL_OUT_NONE},
    [DBL_S_EPOCH_MOVE] = {NULL, NULL, 0, DBL_OUT_NONE},
    [DBL_S_REAP_PICK] = {REAP_PICK, NULL, 1, DBL_OUT_NONE},
};

/* ---- procedures ---- */

/* The bump: E = one above both the durable epoch and the sequence's
 * block; the sequence jumps to E << 40 and the '' row records E in a
 * committed (flushed, with innodb_flush_log_at_trx_commit = 1) transaction,
 * whose flush also covers the jump logged before it. */
static int bump(const dbl_sqlrun *x, int *moved) {
  dbl_res r;
  char sql[256];
  int64_t epoch;
  int rc, vouched;
  if ((rc = x->drv->query(x->c, x->sqls[DBL_S_EPOCH_READ], NULL, 0, &r, x->e)) != 0) return rc;
  epoch = dbl_res_i64(&r, 0, 0);
  if ((dbl_res_i64(&r, 0, 1) >> 40) > epoch) epoch = dbl_res_i64(&r, 0, 1) >> 40;
  epoch++;
  vouched = dbl_res_i64(&r, 0, 2) != 0;
  dbl_res_clear(&r);
  if (vouched) return x->drv->script(x->c, "COMMIT", x->e); /* another session did it */
  *moved = 1;
  /* A literal: SETVAL takes no expression (table names are [a-z0-9_]). */
  snprintf(sql, sizeof sql, "SELECT SETVAL(%s_fence_seq, %lld)", x->table,
           (long long)(epoch << 40));
  if ((rc = x->drv->script(x->c, sql, x->e)) != 0) return rc;
  snprintf(sql, sizeof sql,
           "START TRANSACTION; UPDATE %s SET fence = GREATEST(fence, %lld) WHERE name = ''; "
           "COMMIT",
           x->table, (long long)epoch);
  return x->drv->script(x->c, sql, x->e);
}

/* Moves the sequence past the fence in name's row: SETVAL never moves a
 * MariaDB sequence back (it does nothing when already past), and it is not
 * transactional. The read ends with a COMMIT: lock connections run
 * without autocommit. */
static int fence_catch_up(const dbl_sqlrun *x, const char *name, size_t name_len) {
  dbl_param p = DBL_TEXT(name, name_len);
  dbl_res r;
  char sql[256];
  int64_t fence;
  int rc;
  if ((rc = x->drv->query(x->c, x->sqls[DBL_S_INFO_ONE], &p, 1, &r, x->e)) != 0) return rc;
  fence = r.nrows == 1 ? dbl_res_i64(&r, 0, 8) : 0;
  dbl_res_clear(&r);
  if ((rc = x->drv->script(x->c, "COMMIT", x->e)) != 0 || fence <= 0) return rc;
  /* A literal: SETVAL takes no expression (table names are [a-z0-9_]). */
  snprintf(sql, sizeof sql, "SELECT SETVAL(%s_fence_seq, %lld)", x->table, (long long)fence);
  return x->drv->script(x->c, sql, x->e);
}

static int epoch_bump(const dbl_sqlrun *x, int *moved) {
  int rc;
  if ((rc = bump(x, moved)) != 0) {
    dbl_err scratch;
    if (!x->drv->broken(x->c)) x->drv->rollback(x->c, &scratch);
    return rc;
  }
  return x->drv->script(x->c, x->sqls[DBL_S_EPOCH_VOUCH], x->e);
}

/* One reaper batch (see REAP_PICK): *got receives how many rows went. The
 * DELETEs name the picked rows as hex literals (binary-safe: nothing of a
 * name is ever SQL), run through the driver's script path in one round
 * trip: a batch has up to reap_batch_max names, more than a prepared
 * statement's parameters. */
static int reap_batch(const dbl_sqlrun *x, int64_t grace_ms, int batch, int64_t *got) {
  static const char hex[] = "0123456789abcdef";
  dbl_res r;
  dbl_param q[2] = {DBL_I64(grace_ms * 1000), DBL_I64(batch)};
  char *sql = NULL;
  size_t size, n;
  int rc;
  *got = 0;
  if ((rc = x->drv->begin(x->c, x->e)) != 0) return rc;
  if ((rc = x->drv->query(x->c, x->sqls[DBL_S_REAP_PICK], q, 2, &r, x->e)) != 0) goto fail;
  if (r.nrows > 0) {
    size = 16 + (size_t)r.nrows * (strlen(x->table) + 2 * DBLOCK_NAME_MAX + 40);
    if (!(sql = malloc(size))) {
      dbl_res_clear(&r);
      rc = dbl_err_set(x->e, DBLOCK_ENOMEM, "", 0, "out of memory");
      goto fail;
    }
    /* One primary-key DELETE per picked row, all in one round trip: an IN
     * list let the optimizer scan the table (on a small one), waiting for
     * the very rows SKIP LOCKED passed over. */
    n = 0;
    for (int i = 0; i < r.nrows; i++) {
      const unsigned char *name = (const unsigned char *)dbl_res_get(&r, i, 0);
      n += (size_t)snprintf(sql + n, size - n, "%sDELETE FROM %s WHERE name = X'", i ? ";" : "",
                            x->table);
      for (; name && *name && n + 4 < size; name++) {
        sql[n++] = hex[*name >> 4];
        sql[n++] = hex[*name & 15];
      }
      sql[n++] = '\'';
      sql[n] = 0;
    }
    /* Every picked row is locked by us and still expired: all of them go. */
    if ((rc = x->drv->script(x->c, sql, x->e)) == 0) *got = r.nrows;
    free(sql);
  }
  dbl_res_clear(&r);
  if (rc != 0) goto fail;
  return x->drv->commit(x->c, x->e);
fail: {
  dbl_err scratch;
  memset(&scratch, 0, sizeof scratch);
  x->drv->rollback(x->c, &scratch);
  return rc;
}
}

/* The migration lock: a named lock held by the session until released
 * (DDL commits by itself here, so no transaction can hold it). */
static int migrate_lock(const dbl_sqlrun *x, int lock, int ok) {
  char key[96];
  dbl_param p;
  dbl_res r;
  int rc;
  snprintf(key, sizeof key, "dblock-migrate-%s", x->table);
  p = DBL_STR(key);
  if (!lock) {
    dbl_err scratch;
    memset(&scratch, 0, sizeof scratch);
    (void)ok;
    x->drv->query(x->c, "SELECT RELEASE_LOCK(?)", &p, 1, NULL, &scratch);
    return 0;
  }
  if ((rc = x->drv->query(x->c, "SELECT GET_LOCK(?, 120)", &p, 1, &r, x->e)) != 0) return rc;
  rc = dbl_res_i64(&r, 0, 0) == 1 ? 0
                                  : dbl_err_set(x->e, DBLOCK_ETIMEOUT, "", 0,
                                                "another migrator held the migration lock for 120 s");
  dbl_res_clear(&r);
  return rc;
}

/* Returns a malloc'd copy of s with every `from` replaced by `to`. */
static char *replace_all(const char *s, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to), n = 0;
  char *out, *o;
  for (const char *p = strstr(s, from); p; p = strstr(p + fl, from)) n++;
  if (!(out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1))) return NULL;
  o = out;
  for (const char *p; (p = strstr(s, from)) != NULL; s = p + fl) {
    memcpy(o, s, (size_t)(p - s));
    o += p - s;
    memcpy(o, to, tl);
    o += tl;
  }
  strcpy(o, s);
  return out;
}

/* MariaDB runs DDL outside transactions, one statement at a time (and on
 * Galera replicates each on its own): a migration that fails part-way
 * leaves what it did. So each statement is made a no-op when its work is
 * already there — a rerun completes the migration — and on Galera
 * sequences get NOCACHE (a cached sequence is refused there, 1235). The
 * checksum stays the shipped file's. Returns a malloc'd script or NULL. */
static char *migration_text(const char *sql, int galera) {
  static const char *rules[][2] = {
      {"CREATE TABLE ", "CREATE TABLE IF NOT EXISTS "},
      {"CREATE SEQUENCE ", "CREATE SEQUENCE IF NOT EXISTS "},
      {"_fence_seq;", "_fence_seq NOCACHE;"}, /* Galera only: the last rule */
      {"INSERT INTO ", "INSERT IGNORE INTO "},
      {"ADD COLUMN ", "ADD COLUMN IF NOT EXISTS "},
  };
  char *cur = strdup(sql);
  for (size_t i = 0; cur && i < sizeof rules / sizeof rules[0]; i++) {
    char *next;
    if (i == 2 && !galera) continue;
    next = replace_all(cur, rules[i][0], rules[i][1]);
    free(cur);
    cur = next;
  }
  return cur;
}

const dbl_sqldialect dbl_dialect_mysql = {
    .stmts = dbl_sql_mysql,
    .ddl_autocommits = 1,
    .reap_batch_max = 10000, /* (one script's DELETE list) */
    .epoch_bump = epoch_bump,
    .fence_catch_up = fence_catch_up,
    .reap_batch = reap_batch,
    .migrate_lock = migrate_lock,
    .migration_text = migration_text,
};
