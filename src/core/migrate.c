/*
 * migrate.c — applying the built-in migrations, recorded with checksums in
 * ${table}_migrations. Concurrent migrators serialize on a database lock
 * (PostgreSQL advisory transaction lock, MySQL GET_LOCK, SQLite's write
 * lock), so the schema is applied once and the others find nothing to do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "migrations.h"

/* How long one dblock_migrate call may take, waits included. */
#define MIGRATE_BOUND_MS 300000

/* FNV-1a 64 of the file as shipped, as 16 hex digits. */
static void checksum(const char *s, char out[17]) {
  uint64_t h = dbl_fnv1a(DBL_FNV_INIT, s);
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

typedef struct applied {
  int version;
  char checksum[33];
  int64_t at;
} applied;

/* Reads the applied list. A missing tracking table means none applied. */
static int read_applied(dblock_client *cl, dbl_conn *c, applied **out, int *n,
                        dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, c, e);
  dbl_out o;
  dbl_res r;
  int rc = dbl_sql_run(&x, DBL_S_MIG_LIST, NULL, 0, &o, 1);
  r = o.res;
  *out = NULL;
  *n = 0;
  if (rc == DBLOCK_ESCHEMA) return 0;
  if (rc) return rc;
  if (r.nrows && !(*out = calloc((size_t)r.nrows, sizeof **out))) {
    dbl_res_clear(&r);
    return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  }
  for (int i = 0; i < r.nrows; i++) {
    (*out)[i].version = (int)dbl_res_i64(&r, i, 0);
    snprintf((*out)[i].checksum, sizeof (*out)[i].checksum, "%s",
             dbl_res_get(&r, i, 1) ? dbl_res_get(&r, i, 1) : "");
    (*out)[i].at = dbl_res_i64(&r, i, 2);
  }
  *n = r.nrows;
  dbl_res_clear(&r);
  return 0;
}

static const applied *find(const applied *a, int n, int version) {
  for (int i = 0; i < n; i++)
    if (a[i].version == version) return &a[i];
  return NULL;
}

/* Takes the migration lock (the dialect's: a transaction-level lock that
 * opens the migration's transaction, or a session lock); returns 0 or an
 * error. */
static int lock_migrations(dblock_client *cl, dbl_conn *c, dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, c, e);
  return cl->dl->migrate_lock(&x, 1, 0);
}

/* Gives the migration lock up; ok = 0 rolls the transaction back where it
 * holds the lock. */
static void unlock_migrations(dblock_client *cl, dbl_conn *c, int ok) {
  dbl_err scratch;
  dbl_sqlrun x = dbl_runner(cl, c, &scratch);
  memset(&scratch, 0, sizeof scratch);
  cl->dl->migrate_lock(&x, 0, ok);
}

/* Ends the migration's transaction where DDL is transactional. */
static int commit_migrations(dblock_client *cl, dbl_conn *c, dbl_err *e) {
  return cl->dl->ddl_autocommits ? 0 : cl->drv->commit(c, e);
}

/* Creates the tracking table if it is missing. */
static int track(dblock_client *cl, dbl_conn *c, dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, c, e);
  dbl_out o;
  return dbl_sql_run(&x, DBL_S_MIG_TRACK, NULL, 0, &o, 0);
}

/* Takes the connection a migration runs on: its own, longer call bound
 * (it may wait for another migrator, up to 120 s, and for DDL locks behind
 * lock transactions), and never on a replica, whatever the user's
 * privileges (*topo: what the probe found). what names the operation in
 * the refusal. */
static int migration_conn(dblock_client *cl, dbl_pconn **out, dbl_topology *topo,
                          const char *what, dbl_err *e) {
  dbl_pconn *pc;
  int rc;
  memset(topo, 0, sizeof *topo);
  if ((rc = dbl_pool_take(cl, &pc, 0, e)) != 0) return rc;
  dbl_call_bound(cl, pc, dbl_mono_ms() + MIGRATE_BOUND_MS);
  if (cl->drv->probe && (rc = cl->drv->probe(pc->c, topo, 0, e)) == 0 && topo->read_only)
    rc = dbl_err_set(e, DBLOCK_EREPLICA, "25006", 0,
                     "connected to a read-only server: %s on the primary", what);
  if (rc != 0) {
    dbl_pool_return(cl, pc, rc);
    return rc;
  }
  *out = pc;
  return 0;
}

/* Records migration m as applied, with this build's checksum sum. */
static int record(dblock_client *cl, dbl_conn *c, const dbl_migration *m, const char *sum,
                  dbl_err *e) {
  dbl_param p[3] = {DBL_I64(m->version), DBL_STR(m->name), DBL_STR(sum)};
  dbl_sqlrun x = dbl_runner(cl, c, e);
  dbl_out o;
  return dbl_sql_run(&x, DBL_S_MIG_RECORD, p, 3, &o, 0);
}

/* ---- Baseline: adopting a schema another tool applied ---- */

/* What each migration leaves in the database, as queries whose first
 * value is 0 when it is not there. Catalog queries first, so that none can
 * fail on a missing object (each statement runs only when the ones before
 * it found something): they run inside the migration transaction. Kept
 * here, not in the migration files: those are checksummed as shipped. */
typedef struct probe {
  const char *backend;
  int version;
  const char *sql[3];
} probe;

#define PG_REL(suffix)                                                                    \
  "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "      \
  "WHERE n.nspname = '${schema}' AND c.relname = '${table}" suffix "'"
#define MY_REL(suffix)                                                                    \
  "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND " \
  "table_name = '${table}" suffix "'"

static const probe PROBES[] = {
    {"postgres", 1,
     {PG_REL("") " AND c.relkind IN ('r', 'p')",
      "SELECT count(*) FROM ${schema}.${table} WHERE name = ''",
      PG_REL("_fence_seq") " AND c.relkind = 'S'"}},
    {"postgres", 2,
     {"SELECT count(*) FROM information_schema.columns WHERE table_schema = '${schema}' AND "
      "table_name = '${table}' AND column_name = 'owner_session'"}},
    {"postgres", 3, {PG_REL("_alive")}},
    {"postgres", 4,
     {PG_REL("_queue"),
      "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
      "WHERE n.nspname = '${schema}' AND p.proname = '${table}_hand_off'"}},
    {"postgres", 5,
     {"SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
      "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '${schema}' "
      "AND c.relname = '${table}_alive' AND t.tgname = '${table}_alive_kept'"}},
    {"postgres", 6,
     {"SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
      "WHERE n.nspname = '${schema}' AND p.proname = '${check}'"}},
    {"mysql", 1,
     {MY_REL("") " AND table_type = 'BASE TABLE'",
      "SELECT count(*) FROM ${table} WHERE name = ''",
      MY_REL("_fence_seq") " AND table_type = 'SEQUENCE'"}},
    {"mysql", 2,
     {"SELECT count(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND "
      "table_name = '${table}' AND column_name = 'owner_session'"}},
    {"mysql", 3, {MY_REL("_alive")}},
    {"mysql", 4, {MY_REL("_holders")}},
    {"mysql", 5,
     {"SELECT count(*) FROM information_schema.routines WHERE routine_schema = DATABASE() "
      "AND routine_name = '${check}' AND routine_type = 'FUNCTION'"}},
    {"sqlite", 1,
     {"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '${table}'",
      "SELECT count(*) FROM ${table} WHERE name = ''"}},
    {"sqlite", 2, {"SELECT count(*) FROM pragma_table_info('${table}') WHERE name = 'owner_session'"}},
    {"sqlite", 3,
     {"SELECT count(*) = 2 FROM sqlite_master WHERE type = 'trigger' AND name IN "
      "('${table}_fence_hw_ins', '${table}_fence_hw_upd')"}},
};

/* 1 if migration version's objects are all in the database, 0 if not (or
 * it has no probe: never assumed applied), or a negative code when a probe
 * failed (connection, permission). */
static int present(dblock_client *cl, dbl_conn *c, int version, dbl_err *e) {
  for (size_t i = 0; i < sizeof PROBES / sizeof PROBES[0]; i++) {
    const probe *p = &PROBES[i];
    if (p->version != version || strcmp(p->backend, cl->drv->name) != 0) continue;
    for (int k = 0; k < 3 && p->sql[k]; k++) {
      dbl_res r;
      int rc, yes;
      char *sql = dbl_expand(cl, p->sql[k]);
      if (!sql) return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
      rc = cl->drv->query(c, sql, NULL, 0, &r, e);
      free(sql);
      if (rc != 0) return rc;
      yes = dbl_res_i64(&r, 0, 0) > 0;
      dbl_res_clear(&r);
      if (!yes) return 0;
    }
    return 1;
  }
  return 0;
}

int dblock_migrate_baseline(dblock_client *cl, int *recorded) {
  dbl_pconn *pc;
  dbl_err e;
  applied *done = NULL;
  int ndone = 0, rc, count = 0, have[64] = {0}, upto = 0;
  char sum[17];
  dbl_topology topo;
  if (recorded) *recorded = 0;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (cl->opts.read_only) return dbl_read_only(cl);
  memset(&e, 0, sizeof e);
  if ((rc = migration_conn(cl, &pc, &topo, "baseline", &e)) != 0) return dbl_fail(cl, &e);
  if ((rc = cl->drv->set_lock_wait(pc->c, -1, &e)) != 0 ||
      (rc = lock_migrations(cl, pc->c, &e)) != 0)
    goto out;
  /* Under the migration lock (no migrator can change the schema
   * meanwhile): the longest run of migrations, from the first, whose
   * objects are all there. A later one found without an earlier one is not
   * adopted. */
  for (int v = 1; v < 64; v++) {
    int found = 0;
    for (int i = 0; i < dbl_migrations_count; i++)
      found |= dbl_migrations[i].version == v && strcmp(dbl_migrations[i].backend, cl->drv->name) == 0;
    if (!found) break;
    if ((rc = present(cl, pc->c, v, &e)) < 0) goto out;
    if (!rc) break;
    have[v] = 1;
    upto = v;
  }
  rc = 0;
  if (upto == 0) {
    /* Nothing to adopt: say so having written nothing (not even the
     * tracking table). Migrations recorded already stand as they are. */
    if ((rc = read_applied(cl, pc->c, &done, &ndone, &e)) != 0) goto out;
    if (!ndone)
      rc = dbl_err_set(&e, DBLOCK_ESCHEMA, "", 0,
                       "no dblock schema for table '%s' to adopt (the lock table with its "
                       "epoch row is not there): run dblock migrate instead",
                       cl->table);
    else
      rc = commit_migrations(cl, pc->c, &e);
    goto out;
  }
  if ((rc = track(cl, pc->c, &e)) != 0) goto out;
  if ((rc = read_applied(cl, pc->c, &done, &ndone, &e)) != 0) goto out;
  for (int i = 0; i < dbl_migrations_count; i++) {
    const dbl_migration *m = &dbl_migrations[i];
    if (strcmp(m->backend, cl->drv->name) != 0 || m->version >= 64 || !have[m->version]) continue;
    if (find(done, ndone, m->version)) continue; /* recorded already */
    checksum(m->sql, sum);
    if ((rc = record(cl, pc->c, m, sum, &e)) != 0) goto out;
    count++;
  }
  rc = commit_migrations(cl, pc->c, &e);
out:
  unlock_migrations(cl, pc->c, rc == 0);
  free(done);
  dbl_pool_return(cl, pc, rc);
  if (rc) return dbl_fail(cl, &e);
  if (recorded) *recorded = count;
  return 0;
}

int dblock_migrate(dblock_client *cl, int *applied_now) {
  dbl_pconn *pc;
  dbl_err e;
  applied *done = NULL;
  int ndone = 0, rc, count = 0;
  char sum[17];
  dbl_topology topo;
  if (applied_now) *applied_now = 0;
  if (!cl) return dbl_failf(NULL, DBLOCK_EINVAL, "client is NULL");
  if (cl->opts.read_only) return dbl_read_only(cl);
  memset(&e, 0, sizeof e);
  /* (A connection taken without setup: before the lock table exists
   * there is no epoch to load.) */
  if ((rc = migration_conn(cl, &pc, &topo, "migrate", &e)) != 0) return dbl_fail(cl, &e);
  /* DDL and the migration lock may wait (for another migrator). */
  if ((rc = cl->drv->set_lock_wait(pc->c, -1, &e)) != 0) goto out;
  if ((rc = lock_migrations(cl, pc->c, &e)) != 0) goto out;
  if ((rc = track(cl, pc->c, &e)) != 0) goto out;
  if ((rc = read_applied(cl, pc->c, &done, &ndone, &e)) != 0) goto out;
  for (int i = 0; i < dbl_migrations_count; i++) {
    const dbl_migration *m = &dbl_migrations[i];
    const applied *a;
    if (strcmp(m->backend, cl->drv->name) != 0) continue;
    checksum(m->sql, sum);
    if ((a = find(done, ndone, m->version)) != NULL) {
      if (strcmp(a->checksum, sum) != 0) {
        rc = dbl_err_set(&e, DBLOCK_EMIGRATE, "", 0,
                         "migration %s was applied with checksum %s but this build's "
                         "copy has %s: refusing to continue (was the file edited?)",
                         m->name, a->checksum, sum);
        goto out;
      }
      continue;
    }
    {
      /* (the dialect may rewrite the script: see dbl_sqldialect.migration_text) */
      char *sql = dbl_expand(cl, m->sql), *text = sql;
      if (sql && cl->dl->migration_text) {
        text = cl->dl->migration_text(sql, topo.galera);
        free(sql);
      }
      if (!text) {
        rc = dbl_err_set(&e, DBLOCK_ENOMEM, "", 0, "out of memory");
        goto out;
      }
      rc = cl->drv->script(pc->c, text, &e);
      free(text);
    }
    if (rc != 0 || (rc = record(cl, pc->c, m, sum, &e)) != 0) goto out;
    count++;
  }
  for (int i = 0; i < ndone; i++) {
    int known = 0;
    for (int j = 0; j < dbl_migrations_count; j++)
      known |= strcmp(dbl_migrations[j].backend, cl->drv->name) == 0 &&
               dbl_migrations[j].version == done[i].version;
    if (!known) {
      rc = dbl_err_set(&e, DBLOCK_EMIGRATE, "", 0,
                       "the database has migration %d, which this build does not know: "
                       "the schema is newer than this library",
                       done[i].version);
      goto out;
    }
  }
  rc = commit_migrations(cl, pc->c, &e);
out:
  unlock_migrations(cl, pc->c, rc == 0);
  free(done);
  dbl_pool_return(cl, pc, rc);
  if (rc) return dbl_fail(cl, &e);
  if (applied_now) *applied_now = count;
  return 0;
}

int dblock_migrate_status(dblock_migration_info **out, size_t *count,
                          dblock_client *cl) {
  dbl_pconn *pc;
  dbl_err e;
  applied *done = NULL;
  int ndone = 0, rc;
  size_t n = 0;
  char sum[17];
  dblock_migration_info *info;
  if (!out || !count || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  *out = NULL;
  *count = 0;
  memset(&e, 0, sizeof e);
  if ((rc = dbl_pool_take(cl, &pc, 0, &e)) != 0) return dbl_fail(cl, &e);
  /* A missing tracking table reads as "nothing applied". */
  rc = read_applied(cl, pc->c, &done, &ndone, &e);
  dbl_pool_put(cl, pc);
  if (rc) return dbl_fail(cl, &e);
  for (int i = 0; i < dbl_migrations_count; i++)
    n += strcmp(dbl_migrations[i].backend, cl->drv->name) == 0;
  if (!(info = calloc(n ? n : 1, sizeof *info))) {
    free(done);
    return dbl_failf(cl, DBLOCK_ENOMEM, "out of memory");
  }
  n = 0;
  for (int i = 0; i < dbl_migrations_count; i++) {
    const dbl_migration *m = &dbl_migrations[i];
    const applied *a;
    if (strcmp(m->backend, cl->drv->name) != 0) continue;
    a = find(done, ndone, m->version);
    checksum(m->sql, sum);
    info[n].version = m->version;
    info[n].name = m->name;
    info[n].applied = a != NULL;
    info[n].applied_at_us = a ? a->at : 0;
    info[n].checksum_ok = !a || strcmp(a->checksum, sum) == 0;
    n++;
  }
  free(done);
  *out = info;
  *count = n;
  return 0;
}

void dblock_migration_info_free(dblock_migration_info *info, size_t count) {
  (void)count;
  free(info);
}
