/*
 * test_topology.c — replicated databases (DESIGN §10), against the servers
 * tests/with-topology.sh starts: a PostgreSQL primary with a synchronous
 * standby, and a 3-node MariaDB Galera cluster.
 *
 * Galera: for_update refused at open; insert and optimistic with one client
 * per node on one name — no two critical sections overlap and every grant's
 * fence exceeds the one before; migrations apply, also after a part-way
 * failure; a read-only node is refused and a host list moves past it.
 * PostgreSQL: a standby is refused at open (read-only clients may inspect
 * there); asynchronous replication is warned about; the libpq multi-host
 * URL reaches the primary; after the primary is killed and the standby
 * promoted, held locks renew on the new primary, stay busy for others, and
 * fences keep growing. The failover test runs last: it ends the primary.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

static const char *env(const char *k) {
  const char *v = getenv(k);
  if (!v || !*v) fail_msg("%s is not set: run under tests/with-topology.sh", k);
  return v;
}

/* Runs a shell command (an admin client with SQL appended); fails the test
 * unless it exits 0. Returns its first line of output in out (if given). */
static void sh(char *out, size_t n, const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  FILE *f;
  int st;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (!(f = popen(cmd, "r"))) fail_msg("popen(%s) failed", cmd);
  if (out) {
    if (!fgets(out, (int)n, f)) out[0] = 0;
    out[strcspn(out, "\n")] = 0;
  }
  while (fgetc(f) != EOF) {
  }
  if ((st = pclose(f)) != 0) fail_msg("`%s` exited with status %d", cmd, st);
}

static char *galera_url(int node) { /* node 1..3; 0: the list 1,2,3 */
  static char urls[4][256];
  int p[3];
  if (sscanf(env("DBLOCK_TOPO_GALERA_PORTS"), "%d %d %d", &p[0], &p[1], &p[2]) != 3)
    fail_msg("bad DBLOCK_TOPO_GALERA_PORTS");
  if (node)
    snprintf(urls[node], sizeof urls[node], "mysql://dblock:%s@127.0.0.1:%d/dblock",
             env("DBLOCK_TOPO_PW"), p[node - 1]);
  else
    snprintf(urls[0], sizeof urls[0],
             "mysql://dblock:%s@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/dblock",
             env("DBLOCK_TOPO_PW"), p[0], p[1], p[2]);
  return urls[node];
}

static const char *pg_url(const char *which) { /* "primary", "standby", "both" */
  static char url[3][256];
  const char *pw = env("DBLOCK_TOPO_PW"), *pp = env("DBLOCK_TOPO_PG_PRIMARY_PORT"),
             *sp = env("DBLOCK_TOPO_PG_STANDBY_PORT");
  if (strcmp(which, "primary") == 0) {
    snprintf(url[0], sizeof url[0], "postgres://dblock:%s@127.0.0.1:%s/dblock", pw, pp);
    return url[0];
  }
  if (strcmp(which, "standby") == 0) {
    snprintf(url[1], sizeof url[1], "postgres://dblock:%s@127.0.0.1:%s/dblock", pw, sp);
    return url[1];
  }
  /* The standby first: the URL must still reach the primary. */
  snprintf(url[2], sizeof url[2], "postgres://dblock:%s@127.0.0.1:%s,127.0.0.1:%s/dblock", pw,
           sp, pp);
  return url[2];
}

static int try_open(dblock_client **c, const char *url, dblock_strategy s, const char *table,
                    int read_only) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  o.strategy = s;
  o.table = table;
  o.read_only = read_only;
  return dblock_client_open(c, url, &o);
}

/* ---- Galera ------------------------------------------------------------ */

static void test_galera_for_update_refused(void **st) {
  dblock_client *c = NULL;
  int rc;
  (void)st;
  for (int node = 1; node <= 3; node++) {
    rc = try_open(&c, galera_url(node), DBLOCK_STRATEGY_FOR_UPDATE, "topo_g", 0);
    if (rc != DBLOCK_EUNSUPPORTED || !strstr(tu_errmsg(NULL), "Galera"))
      fail_msg("for_update on Galera node %d: expected DBLOCK_EUNSUPPORTED naming Galera, "
               "got %d: %s", node, rc, tu_errmsg(NULL));
    assert_null(c);
  }
  /* Introspection does not take locks: a read-only client opens. */
  assert_int_equal(try_open(&c, galera_url(1), DBLOCK_STRATEGY_FOR_UPDATE, "topo_g", 1), 0);
  dblock_client_free(c);
}

/* The lock table's CREATE TABLE as shipped (the first statement of
 * migration 0001), for table t. */
static void first_statement(char *out, size_t n, const char *t) {
  char path[512], buf[8192], *semi, *p;
  FILE *f;
  size_t len;
  snprintf(path, sizeof path, "%s/migrations/mysql/0001_lock_table.sql",
           getenv("DBLOCK_SRC") ? getenv("DBLOCK_SRC") : ".");
  if (!(f = fopen(path, "r"))) fail_msg("cannot read %s", path);
  len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  if (!(p = strstr(buf, "CREATE TABLE")) || !(semi = strchr(p, ';'))) fail_msg("no CREATE TABLE");
  *semi = 0;
  out[0] = 0;
  for (char *q; (q = strstr(p, "${table}")) != NULL; p = q + 8) {
    strncat(out, p, (size_t)(q - p) < n - strlen(out) - 1 ? (size_t)(q - p) : 0);
    strncat(out, t, n - strlen(out) - 1);
  }
  strncat(out, p, n - strlen(out) - 1);
}

static void test_galera_migrate(void **st) {
  dblock_client *c;
  dblock_lock *l;
  char ddl[4096], cmd[6000];
  int applied = -1;
  (void)st;
  /* A fresh table: applies on node 1, found done on node 3. */
  c = tu_open(galera_url(1), DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  assert_int_equal(dblock_migrate(c, &applied), 0);
  assert_true(applied >= 3);
  dblock_client_free(c);
  c = tu_open(galera_url(3), DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  assert_int_equal(dblock_migrate(c, &applied), 0);
  assert_int_equal(applied, 0);
  l = tu_acquire(c, "m", 0, 0);
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
  /* Part-way: the table exists (created on node 2 by the shipped DDL), the
   * rest of 0001 never ran — what a failed migrate used to leave. */
  first_statement(ddl, sizeof ddl, "topo_gp");
  snprintf(cmd, sizeof cmd, "%s dblock -e \"%s\"", env("DBLOCK_TOPO_GALERA_ADMIN2"), ddl);
  sh(NULL, 0, "%s", cmd);
  c = tu_open(galera_url(1), DBLOCK_STRATEGY_INSERT, "topo_gp", 0);
  if (dblock_migrate(c, &applied) != 0)
    fail_msg("migrate after a part-way migration: %s", tu_errmsg(c));
  assert_true(applied >= 3);
  l = tu_acquire(c, "p", 0, 0);
  assert_true(dblock_lock_fence(l) > 0);
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
}

/* One client per node on one name. */
#define RACE_MS 8000
typedef struct race {
  const char *name;
  dblock_strategy strategy;
  atomic_int in_cs;
  pthread_mutex_t mu;
  int64_t last_fence;
  long grants, overlaps, regressions, errors;
  char err[256];
} race;
typedef struct racer {
  race *r;
  int node;
} racer;

static void *race_main(void *p) {
  racer *me = p;
  race *r = me->r;
  dblock_client *c = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  int64_t end;
  o.strategy = r->strategy;
  o.table = "topo_gr";
  o.lease_ms = 5000;
  if (dblock_client_open(&c, galera_url(me->node), &o) != 0) {
    pthread_mutex_lock(&r->mu);
    r->errors++;
    snprintf(r->err, sizeof r->err, "open on node %d: %s", me->node, tu_errmsg(NULL));
    pthread_mutex_unlock(&r->mu);
    return NULL;
  }
  end = tu_now_ms() + RACE_MS;
  while (tu_now_ms() < end) {
    dblock_lock *l = NULL;
    int rc = dblock_lock_acquire(&l, c, r->name, 500, 0);
    if (rc == DBLOCK_EBUSY || rc == DBLOCK_ETIMEOUT) continue;
    if (rc != 0) {
      pthread_mutex_lock(&r->mu);
      r->errors++;
      snprintf(r->err, sizeof r->err, "acquire on node %d: %d %s", me->node, rc, tu_errmsg(c));
      pthread_mutex_unlock(&r->mu);
      continue;
    }
    if (atomic_fetch_add(&r->in_cs, 1) != 0) {
      pthread_mutex_lock(&r->mu);
      r->overlaps++;
      pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_lock(&r->mu);
    r->grants++;
    if (dblock_lock_fence(l) <= r->last_fence) r->regressions++;
    else r->last_fence = dblock_lock_fence(l);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_sub(&r->in_cs, 1);
    if ((rc = dblock_lock_release(l)) != 0) {
      pthread_mutex_lock(&r->mu);
      r->errors++;
      snprintf(r->err, sizeof r->err, "release on node %d: %d %s", me->node, rc, tu_errmsg(c));
      pthread_mutex_unlock(&r->mu);
    }
  }
  dblock_client_free(c);
  return NULL;
}

static void galera_race(dblock_strategy s) {
  race r = {.name = tu_name("race"), .strategy = s};
  racer who[3];
  pthread_t t[3];
  dblock_client *c = tu_open(galera_url(1), s, "topo_gr", 0);
  tu_migrate(c);
  dblock_client_free(c);
  pthread_mutex_init(&r.mu, NULL);
  for (int i = 0; i < 3; i++) {
    who[i] = (racer){&r, i + 1};
    assert_int_equal(pthread_create(&t[i], NULL, race_main, &who[i]), 0);
  }
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("# galera %s, one client per node, %d s: %ld grants, %ld overlaps, %ld fence "
         "regressions, %ld errors\n",
         dblock_strategy_name(s), RACE_MS / 1000, r.grants, r.overlaps, r.regressions, r.errors);
  if (r.errors) fail_msg("%ld errors, the last: %s", r.errors, r.err);
  assert_int_equal(r.overlaps, 0);
  assert_int_equal(r.regressions, 0);
  assert_true(r.grants >= 30);
}

static void test_galera_insert_race(void **st) {
  (void)st;
  galera_race(DBLOCK_STRATEGY_INSERT);
}

static void test_galera_optimistic_race(void **st) {
  (void)st;
  galera_race(DBLOCK_STRATEGY_OPTIMISTIC);
}

/* The fenced-write check on url (table's function) for name's grant l
 * fails with SQLSTATE want, inside a transaction, and passes nothing. */
static void check_refused(const char *url, const char *table, const char *name, dblock_lock *l,
                          const char *want) {
  tu_app *app = tu_app_open(url, table);
  char sql[256], code[6], msg[512];
  snprintf(sql, sizeof sql, "SELECT %s_check('%s', %lld)", table, name,
           (long long)dblock_lock_fence(l));
  assert_int_equal(tu_app_exec(app, "BEGIN", NULL, NULL), 0);
  assert_int_equal(tu_app_exec(app, sql, code, msg), -1);
  print_message("check on %s: [%s] %s\n", url, code, msg);
  assert_string_equal(code, want);
  tu_app_exec(app, "ROLLBACK", NULL, NULL);
  tu_app_close(app);
}

/* Fenced writes are refused on Galera (docs/fenced-writes.md): a shared
 * lock is local to its node and a read does not certify, so a takeover on
 * another node would not wait for the checking transaction. The check
 * says so (DBL03) instead of passing. */
static void test_galera_check_refused(void **st) {
  dblock_client *c = tu_open(galera_url(1), DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  dblock_lock *l;
  (void)st;
  tu_migrate(c);
  l = tu_acquire(c, "fenced", 0, 0);
  check_refused(galera_url(2), "topo_gm", "fenced", l, "DBL03");
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
}

/* A node set read-only is refused at open (the user dblock has ALL
 * PRIVILEGES on the database: the server's state decides, not a failed
 * write); a host list starting with it reaches a writable node. */
static void test_galera_read_only_node(void **st) {
  dblock_client *c = NULL;
  dblock_lock *l;
  char url[300];
  int p[3], rc;
  (void)st;
  sscanf(env("DBLOCK_TOPO_GALERA_PORTS"), "%d %d %d", &p[0], &p[1], &p[2]);
  sh(NULL, 0, "%s -e 'SET GLOBAL read_only = 1'", env("DBLOCK_TOPO_GALERA_ADMIN3"));
  rc = try_open(&c, galera_url(3), DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  if (rc != DBLOCK_EREPLICA || !strstr(tu_errmsg(NULL), "List every server")) {
    sh(NULL, 0, "%s -e 'SET GLOBAL read_only = 0'", env("DBLOCK_TOPO_GALERA_ADMIN3"));
    fail_msg("read-only node: expected DBLOCK_EREPLICA with advice, got %d: %s", rc,
             tu_errmsg(NULL));
  }
  snprintf(url, sizeof url, "mysql://dblock:%s@127.0.0.1:%d,127.0.0.1:%d/dblock",
           env("DBLOCK_TOPO_PW"), p[2], p[1]);
  rc = try_open(&c, url, DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  if (rc == 0) {
    l = tu_acquire(c, "ro", 0, 0);
    assert_int_equal(dblock_lock_release(l), 0);
    dblock_client_free(c);
  }
  {
    /* Inspecting works on the read-only node. */
    dblock_client *ro = NULL;
    dblock_lock_info *list = NULL;
    size_t n = 0;
    int orc = try_open(&ro, galera_url(3), DBLOCK_STRATEGY_INSERT, "topo_gm", 1), lrc = -99;
    if (orc == 0) lrc = dblock_lock_list(&list, &n, ro, 0);
    free(list);
    dblock_client_free(ro);
    sh(NULL, 0, "%s -e 'SET GLOBAL read_only = 0'", env("DBLOCK_TOPO_GALERA_ADMIN3"));
    if (rc != 0) fail_msg("host list [read-only, writable]: %d %s", rc, tu_errmsg(NULL));
    assert_int_equal(orc, 0);
    assert_int_equal(lrc, 0);
  }
}

/* A node that refuses client queries with 1047 (what a node outside the
 * primary component answers; here wsrep_reject_queries = ALL) is a lost
 * connection, not a database error: alone it fails with DBLOCK_ECONN, and a
 * host list starting with it moves on to the next node. */
static void test_galera_node_without_service(void **st) {
  dblock_client *c = NULL;
  dblock_lock *l;
  char url[300];
  int p[3], rc, rc_list;
  (void)st;
  sscanf(env("DBLOCK_TOPO_GALERA_PORTS"), "%d %d %d", &p[0], &p[1], &p[2]);
  sh(NULL, 0, "%s -e 'SET GLOBAL wsrep_reject_queries = ALL'", env("DBLOCK_TOPO_GALERA_ADMIN1"));
  rc = try_open(&c, galera_url(1), DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  dblock_client_free(c);
  c = NULL;
  snprintf(url, sizeof url, "mysql://dblock:%s@127.0.0.1:%d,127.0.0.1:%d/dblock",
           env("DBLOCK_TOPO_PW"), p[0], p[1]);
  rc_list = try_open(&c, url, DBLOCK_STRATEGY_INSERT, "topo_gm", 0);
  if (rc_list == 0) {
    l = tu_acquire(c, "noservice", 0, 0);
    assert_int_equal(dblock_lock_release(l), 0);
    dblock_client_free(c);
  }
  sh(NULL, 0, "%s -e 'SET GLOBAL wsrep_reject_queries = NONE'", env("DBLOCK_TOPO_GALERA_ADMIN1"));
  if (rc != DBLOCK_ECONN) fail_msg("node refusing queries: expected DBLOCK_ECONN, got %d: %s", rc,
                                   tu_errmsg(NULL));
  if (rc_list != 0) fail_msg("host list [refusing, serving]: %d %s", rc_list, tu_errmsg(NULL));
}

/* The findings of dblock_doctor on url with a read-only client: 1 if one
 * of topic has severity sev and text containing needle. */
static int doctor_says(const char *url, dblock_strategy s, const char *topic, int sev,
                       const char *needle) {
  dblock_client *c = NULL;
  dblock_finding *f = NULL;
  size_t n = 0;
  int found = 0;
  if (try_open(&c, url, s, "topo_gm", 1) != 0) fail_msg("open %s: %s", url, tu_errmsg(NULL));
  if (dblock_doctor(&f, &n, c) != 0) fail_msg("doctor: %s", tu_errmsg(c));
  for (size_t i = 0; i < n; i++)
    found |= strcmp(f[i].topic, topic) == 0 && f[i].severity == sev && strstr(f[i].text, needle);
  if (!found) {
    fprintf(stderr, "doctor on %s found:\n", url);
    for (size_t i = 0; i < n; i++)
      fprintf(stderr, "  %d %s %s\n", f[i].severity, f[i].topic, f[i].text);
  }
  free(f);
  dblock_client_free(c);
  return found;
}

static void test_galera_doctor(void **st) {
  char cmd[600], out[4096] = "";
  FILE *p;
  size_t len;
  int status;
  (void)st;
  assert_true(doctor_says(galera_url(2), DBLOCK_STRATEGY_INSERT, "topology", DBLOCK_SEV_OK,
                          "Galera node, cluster of 3, synced"));
  assert_true(doctor_says(galera_url(2), DBLOCK_STRATEGY_FOR_UPDATE, "strategy",
                          DBLOCK_SEV_UNSAFE, "cannot work on Galera"));
  /* The command: JSON, and exit status 5 for the unsafe strategy. */
  snprintf(cmd, sizeof cmd, "%s/dblock --url '%s' --table topo_gm --strategy for_update doctor --json",
           tu_tree(), galera_url(1));
  if (!(p = popen(cmd, "r"))) fail_msg("popen failed");
  len = fread(out, 1, sizeof out - 1, p);
  out[len] = 0;
  status = pclose(p);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 5 || !strstr(out, "\"ok\":false,") ||
      !strstr(out, "\"topic\":\"topology\",\"text\":\"Galera node, cluster of 3"))
    fail_msg("`dblock doctor --json` on Galera with for_update: status %d, output %s", status,
             out);
}

/* ---- PostgreSQL -------------------------------------------------------- */

static void test_pg_standby_refused(void **st) {
  dblock_client *c = tu_open(pg_url("primary"), DBLOCK_STRATEGY_INSERT, "topo_p", 0), *ro = NULL;
  dblock_lock *l;
  dblock_lock_info info;
  int rc;
  (void)st;
  tu_migrate(c);
  l = tu_acquire(c, "held", 0, 0);
  rc = try_open(&ro, pg_url("standby"), DBLOCK_STRATEGY_INSERT, "topo_p", 0);
  if (rc != DBLOCK_EREPLICA || !strstr(tu_errmsg(NULL), "List every server"))
    fail_msg("open on the standby: expected DBLOCK_EREPLICA with advice, got %d: %s", rc,
             tu_errmsg(NULL));
  /* A read-only client inspects there (synchronous: the row is there). */
  assert_int_equal(try_open(&ro, pg_url("standby"), DBLOCK_STRATEGY_INSERT, "topo_p", 1), 0);
  if ((rc = dblock_lock_inspect(&info, ro, "held")) != 0)
    fail_msg("inspect on the standby: %d %s", rc, tu_errmsg(ro));
  assert_int_equal(info.held, 1);
  assert_int_equal(info.fence, dblock_lock_fence(l));
  {
    dblock_lock *x = NULL;
    assert_int_equal(dblock_lock_acquire(&x, ro, "other", 0, 0), DBLOCK_EPERM);
  }
  dblock_client_free(ro);
  /* A fenced write's check on the standby fails (a shared row lock is a
   * write there), never passes. */
  check_refused(pg_url("standby"), "topo_p", "held", l, "25006");
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
  assert_true(doctor_says(pg_url("standby"), DBLOCK_STRATEGY_INSERT, "topology",
                          DBLOCK_SEV_UNSAFE, "read-only server"));
}

static char warned[1024];
static void catch_log(int level, const char *msg, void *arg) {
  (void)arg;
  if (level == DBLOCK_LOG_WARNING) snprintf(warned, sizeof warned, "%s", msg);
}

static void wait_sync_state(const char *want) {
  char got[64] = "";
  for (int i = 0; i < 100; i++) {
    sh(got, sizeof got,
       "%s -c \"SELECT coalesce((SELECT sync_state FROM pg_stat_replication LIMIT 1), 'none')\"",
       env("DBLOCK_TOPO_PG_ADMIN_PRIMARY"));
    if (strcmp(got, want) == 0) return;
    tu_sleep_ms(100);
  }
  fail_msg("the standby's sync_state stayed %s, expected %s", got, want);
}

static void test_pg_async_warning(void **st) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c;
  (void)st;
  o.log = catch_log;
  sh(NULL, 0, "%s -c \"ALTER SYSTEM SET synchronous_standby_names = ''\" -c \"SELECT pg_reload_conf()\"",
     env("DBLOCK_TOPO_PG_ADMIN_PRIMARY"));
  wait_sync_state("async");
  warned[0] = 0;
  c = tu_open_opts(pg_url("primary"), &o);
  dblock_client_free(c);
  {
    int unsafe = doctor_says(pg_url("primary"), DBLOCK_STRATEGY_INSERT, "durability",
                             DBLOCK_SEV_UNSAFE, "asynchronously");
    if (!unsafe) {
      sh(NULL, 0, "%s -c \"ALTER SYSTEM RESET synchronous_standby_names\" -c \"SELECT pg_reload_conf()\"",
         env("DBLOCK_TOPO_PG_ADMIN_PRIMARY"));
      fail_msg("doctor did not call the asynchronous standby unsafe");
    }
  }
  sh(NULL, 0, "%s -c \"ALTER SYSTEM RESET synchronous_standby_names\" -c \"SELECT pg_reload_conf()\"",
     env("DBLOCK_TOPO_PG_ADMIN_PRIMARY"));
  if (!strstr(warned, "asynchronously"))
    fail_msg("asynchronous standby: expected a warning, got \"%s\"", warned);
  wait_sync_state("sync");
  warned[0] = 0;
  c = tu_open_opts(pg_url("primary"), &o);
  dblock_client_free(c);
  if (warned[0]) fail_msg("synchronous standby: unexpected warning \"%s\"", warned);
  assert_true(doctor_says(pg_url("primary"), DBLOCK_STRATEGY_INSERT, "topology",
                          DBLOCK_SEV_INFO, "primary with 1 streaming standby"));
}

/* The only synchronous standby is down: every commit on the primary waits
 * for it, forever (statement_timeout does not end that wait). A try-acquire
 * must still return within the client's call limit, not hang. */
static void test_pg_sync_standby_down(void **st) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c;
  dblock_lock *l = NULL;
  int64_t t0, ms;
  int rc;
  (void)st;
  o.table = "topo_p";
  o.call_timeout_ms = 1000;
  c = tu_open_opts(pg_url("primary"), &o);
  sh(NULL, 0, "%s -D %s -m fast -w stop >/dev/null", env("DBLOCK_TOPO_PG_CTL"),
     env("DBLOCK_TOPO_PG_STANDBY_DATA"));
  t0 = tu_now_ms();
  rc = dblock_lock_acquire(&l, c, tu_name("sdown"), 0, 0);
  ms = tu_now_ms() - t0;
  sh(NULL, 0, "%s -D %s -l %s/../standby.log -w start >/dev/null", env("DBLOCK_TOPO_PG_CTL"),
     env("DBLOCK_TOPO_PG_STANDBY_DATA"), env("DBLOCK_TOPO_PG_STANDBY_DATA"));
  wait_sync_state("sync");
  dblock_client_free(c);
  if (rc != DBLOCK_ECONN || ms > 3000)
    fail_msg("try-acquire with the synchronous standby down: expected DBLOCK_ECONN within the "
             "1 s call limit, got %d after %lld ms: %s", rc, (long long)ms, tu_errmsg(NULL));
}

static void test_pg_multi_host_url(void **st) {
  dblock_client *c;
  dblock_lock *l;
  (void)st;
  c = tu_open(pg_url("both"), DBLOCK_STRATEGY_INSERT, "topo_p", 0);
  l = tu_acquire(c, tu_name("mh"), 0, 0);
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
}

/* Kill the primary (immediate: no shutdown checkpoint), promote the
 * standby. Locks held through the multi-host URL keep renewing there. */
#define FO_LOCKS 20
static void test_pg_failover(void **st) {
  static const dblock_strategy strategies[2] = {DBLOCK_STRATEGY_INSERT,
                                                DBLOCK_STRATEGY_OPTIMISTIC};
  dblock_client *c[2], *other[2], *fu;
  dblock_lock *l[2][FO_LOCKS], *fl;
  dblock_options fo = DBLOCK_OPTIONS_INIT;
  char names[FO_LOCKS][64];
  int64_t max_fence = 0;
  (void)st;
  for (int s = 0; s < 2; s++) {
    dblock_options o = DBLOCK_OPTIONS_INIT;
    o.strategy = strategies[s];
    o.table = "topo_fo";
    o.lease_ms = 6000;
    o.on_lost = tu_on_lost;
    c[s] = tu_open_opts(pg_url("both"), &o);
    tu_migrate(c[s]);
  }
  for (int i = 0; i < FO_LOCKS; i++) snprintf(names[i], sizeof names[i], "%.60s", tu_name("fo"));
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < FO_LOCKS; i++) {
      char n[96];
      snprintf(n, sizeof n, "%.60s-%d", names[i], s);
      l[s][i] = tu_acquire(c[s], n, 0, 0);
      if (dblock_lock_fence(l[s][i]) > max_fence) max_fence = dblock_lock_fence(l[s][i]);
    }
  fo.strategy = DBLOCK_STRATEGY_FOR_UPDATE;
  fo.table = "topo_fo";
  fo.on_lost = tu_on_lost;
  fu = tu_open_opts(pg_url("both"), &fo);
  fl = tu_acquire(fu, tu_name("fo-fu"), 0, 0);
  atomic_store(&tu_lost_calls, 0);

  sh(NULL, 0, "%s -D %s -m immediate -w stop >/dev/null", env("DBLOCK_TOPO_PG_CTL"),
     env("DBLOCK_TOPO_PG_PRIMARY_DATA"));
  sh(NULL, 0, "%s -D %s -w promote >/dev/null", env("DBLOCK_TOPO_PG_CTL"),
     env("DBLOCK_TOPO_PG_STANDBY_DATA"));
  /* More than a renewal period (lease / 3) on the new primary. */
  tu_sleep_ms(4000);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < FO_LOCKS; i++) {
      int rc = dblock_lock_renew(l[s][i]);
      if (rc != 0 || dblock_lock_is_lost(l[s][i]))
        fail_msg("%s lock %d after failover: renew %d (%s), lost %d",
                 dblock_strategy_name(strategies[s]), i, rc, tu_errmsg(c[s]),
                 dblock_lock_is_lost(l[s][i]));
    }
  /* The for_update lock lived in a session of the dead primary: lost, and
   * told (never silently re-taken). */
  for (int i = 0; i < 150 && !dblock_lock_is_lost(fl); i++) tu_sleep_ms(100);
  assert_int_equal(dblock_lock_is_lost(fl), 1);
  assert_int_equal(tu_await_lost_calls(1, 2000), 1);
  assert_int_equal(dblock_lock_release(fl), DBLOCK_ELOST);
  dblock_client_free(fu);
  /* Others: busy on every held name; new grants above every old fence. */
  for (int s = 0; s < 2; s++) {
    other[s] = tu_open(pg_url("both"), strategies[s], "topo_fo", 0);
    for (int i = 0; i < FO_LOCKS; i++) {
      char n[96];
      dblock_lock *x = NULL;
      int rc;
      snprintf(n, sizeof n, "%.60s-%d", names[i], s);
      rc = dblock_lock_acquire(&x, other[s], n, 0, 0);
      if (rc != DBLOCK_EBUSY) fail_msg("%s after failover: expected busy, got %d", n, rc);
    }
    for (int i = 0; i < 5; i++) {
      dblock_lock *x = tu_acquire(other[s], tu_name("fo-new"), 0, 0);
      if (dblock_lock_fence(x) <= max_fence)
        fail_msg("fence %lld after failover is not above %lld",
                 (long long)dblock_lock_fence(x), (long long)max_fence);
      assert_int_equal(dblock_lock_release(x), 0);
    }
    dblock_client_free(other[s]);
  }
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < FO_LOCKS; i++) assert_int_equal(dblock_lock_release(l[s][i]), 0);
    dblock_client_free(c[s]);
  }
  assert_int_equal(atomic_load(&tu_lost_calls), 1);
}

int main(void) {
  const struct CMUnitTest galera[] = {
      cmocka_unit_test(test_galera_for_update_refused),
      cmocka_unit_test(test_galera_migrate),
      cmocka_unit_test(test_galera_insert_race),
      cmocka_unit_test(test_galera_optimistic_race),
      cmocka_unit_test(test_galera_check_refused),
      cmocka_unit_test(test_galera_read_only_node),
      cmocka_unit_test(test_galera_doctor),
      cmocka_unit_test(test_galera_node_without_service),
  };
  const struct CMUnitTest pg[] = {
      cmocka_unit_test(test_pg_standby_refused),
      cmocka_unit_test(test_pg_async_warning),
      cmocka_unit_test(test_pg_sync_standby_down),
      cmocka_unit_test(test_pg_multi_host_url),
      cmocka_unit_test(test_pg_failover), /* last: ends the primary */
  };
  int failed = 0;
  failed += cmocka_run_group_tests_name("topology/galera", galera, NULL, NULL);
  failed += cmocka_run_group_tests_name("topology/postgres", pg, NULL, NULL);
  return failed ? 1 : 0;
}
