/*
 * doctor.c — dblock_doctor: does this database keep dblock's promises?
 * The driver layer judges what its server reported (drivers/topology.c);
 * this file adds what the core knows: the strategy, a pooler named in the
 * URL, the server's clock against ours, and the migrations.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define MAX_FINDINGS 32

static void note(dblock_finding *f, int *n, int sev, const char *topic, const char *advice,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void note(dblock_finding *f, int *n, int sev, const char *topic, const char *advice,
                 const char *fmt, ...) {
  va_list ap;
  if (*n >= MAX_FINDINGS) return;
  f[*n].severity = sev;
  snprintf(f[*n].topic, sizeof f[*n].topic, "%s", topic);
  snprintf(f[*n].advice, sizeof f[*n].advice, "%s", advice ? advice : "");
  va_start(ap, fmt);
  vsnprintf(f[*n].text, sizeof f[*n].text, fmt, ap);
  va_end(ap);
  (*n)++;
}

static int64_t real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The server's clock minus ours, measured at the middle of one call. */
static int clock_offset(dblock_client *cl, dbl_pconn *pc, int64_t *off, dbl_err *e) {
  int64_t before = real_us(), srv, after;
  int rc = cl->drv->now_us(pc->c, &srv, e);
  after = real_us();
  if (rc == 0) *off = srv - (before + after) / 2;
  return rc;
}

/* The sizing rule for this client's strategy against the server's
 * connection limit (docs/waiting.md, "Connections"): for_update pins a
 * connection per holder and per waiter; the leased strategies need at
 * most pool_size per client, one reserve while holding, and on
 * PostgreSQL a listener. Where the server has no limit (SQLite): none. */
static void connection_findings(dblock_client *cl, dbl_pconn *pc, dblock_finding *f, int *n) {
  dbl_sqlrun x = dbl_runner(cl, pc->c, &(dbl_err){0});
  dbl_out o;
  int64_t max, used;
  if (!cl->defs[DBL_S_CONN_USE].sql || dbl_sql_run(&x, DBL_S_CONN_USE, NULL, 0, &o, 1) != 0)
    return;
  max = o.res.nrows ? dbl_res_i64(&o.res, 0, 0) : 0;
  used = o.res.nrows ? dbl_res_i64(&o.res, 0, 1) : 0;
  dbl_res_clear(&o.res);
  if (max <= 0) return;
  if (cl->strat->pins_connection)
    note(f, n, used * 10 >= max * 8 ? DBLOCK_SEV_WARN : DBLOCK_SEV_INFO, "connections",
         "size max_connections for every holder + every waiter + one per client",
         "%lld of max_connections %lld in use; the %s strategy pins a connection per holder "
         "and per waiter",
         (long long)used, (long long)max, cl->strat->name);
  else
    note(f, n, used * 10 >= max * 8 ? DBLOCK_SEV_WARN : DBLOCK_SEV_OK, "connections",
         used * 10 >= max * 8 ? "raise max_connections, or lower pool_size" : NULL,
         "%lld of max_connections %lld in use; a client of the %s strategy needs at most "
         "pool_size (%d) + 1 while it holds a lock%s, however many of its threads wait",
         (long long)used, (long long)max, cl->strat->name, cl->opts.pool_size,
         dbl_queue_possible(cl) ? " + 1 listener" : "");
}

static void schema_findings(dblock_client *cl, dblock_finding *f, int *n) {
  dblock_migration_info *mi = NULL;
  size_t count = 0, applied = 0, bad = 0;
  if (dblock_migrate_status(&mi, &count, cl) != 0) {
    dblock_error_info ei;
    dblock_client_last_error(cl, &ei);
    note(f, n, DBLOCK_SEV_WARN, "schema", NULL, "migration status unreadable: %s", ei.message);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    applied += mi[i].applied != 0;
    bad += mi[i].applied && !mi[i].checksum_ok;
  }
  dblock_migration_info_free(mi, count);
  if (bad)
    note(f, n, DBLOCK_SEV_UNSAFE, "schema", "compare the schema with this build's migrations",
         "table %s: %zu applied migration(s) differ from this build's", cl->table, bad);
  else if (applied == count)
    note(f, n, DBLOCK_SEV_OK, "schema", NULL, "table %s: all %zu migrations applied", cl->table,
         count);
  else
    note(f, n, DBLOCK_SEV_WARN, "schema", "run `dblock migrate`",
         "table %s: %zu of %zu migrations pending", cl->table, count - applied, count);
}

int dblock_doctor(dblock_finding **out, size_t *count, dblock_client *cl) {
  dblock_finding *f;
  dbl_pconn *pc;
  dbl_topology t;
  dbl_err e;
  int64_t off = 0;
  int n = 0, rc;
  if (!out || !count || !cl) return dbl_failf(cl, DBLOCK_EINVAL, "NULL argument");
  *out = NULL;
  *count = 0;
  if (!(f = calloc(MAX_FINDINGS, sizeof *f))) return dbl_failf(cl, DBLOCK_ENOMEM, "out of memory");
  memset(&e, 0, sizeof e);
  memset(&t, 0, sizeof t);
  if ((rc = dbl_pool_get(cl, &pc, 0, &e)) != 0) {
    free(f);
    return dbl_fail(cl, &e);
  }
  if (cl->drv->probe) rc = dbl_call_check(cl, pc, cl->drv->probe(pc->c, &t, 1, &e), &e);
  if (rc == 0) rc = dbl_call_check(cl, pc, clock_offset(cl, pc, &off, &e), &e);
  dbl_pool_return(cl, pc, rc);
  if (rc != 0) {
    free(f);
    return dbl_fail(cl, &e);
  }
  if (cl->drv->probe) {
    dbl_topology_findings(&t, f, &n, MAX_FINDINGS);
  } else {
    note(f, &n, DBLOCK_SEV_INFO, "server", NULL, "embedded SQLite database file");
    note(f, &n, DBLOCK_SEV_OK, "topology", NULL,
         "one file on this host's disk: every process sharing it shares the locks");
  }
  if (dbl_url_param(&cl->url, "pooler"))
    note(f, &n, DBLOCK_SEV_INFO, "topology", NULL,
         "behind a transaction-pooling proxy (pooler=%s in the URL): statements are sent "
         "unnamed and session settings are left alone",
         dbl_url_param(&cl->url, "pooler"));
  if (t.galera && cl->strat->node_local)
    note(f, &n, DBLOCK_SEV_UNSAFE, "strategy", "use --strategy insert or optimistic",
         "the %s strategy cannot work on Galera (node-local row locks); dblock refuses it",
         cl->strat->name);
  else if (t.read_only)
    note(f, &n, DBLOCK_SEV_INFO, "strategy", NULL, "the %s strategy needs the primary",
         cl->strat->name);
  else
    note(f, &n, DBLOCK_SEV_OK, "strategy", NULL, "the %s strategy works here", cl->strat->name);
  {
    int64_t a = off < 0 ? -off : off;
    note(f, &n, a > 60000000 ? DBLOCK_SEV_WARN : a > 1000000 ? DBLOCK_SEV_INFO : DBLOCK_SEV_OK,
         "clock", a > 60000000 ? "check NTP on this host and the server" : NULL,
         cl->drv->probe ? "server clock minus this host's: %+.3f s (leases use the server's "
                          "clock; only displayed times are affected)"
                        : "SQLite leases follow each process's own clock (this host: "
                          "offset %+.3f s, always 0)",
         (double)off / 1e6);
  }
  if (dbl_pool_get(cl, &pc, 0, &e) == 0) {
    connection_findings(cl, pc, f, &n);
    dbl_pool_return(cl, pc, 0);
  }
  schema_findings(cl, f, &n);
  *out = f;
  *count = (size_t)n;
  return 0;
}
