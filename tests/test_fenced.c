/*
 * test_fenced.c — fenced writes in the application's own transaction
 * (docs/fencing.md): dblock_check(name, fence) called on the
 * application's own connection, inside the transaction that writes. One
 * group per pair, fenced/<backend>/<strategy>: the leased strategies'
 * checks (a stale holder's write refused by the database, the row held
 * against a takeover until the writer commits, bad input refused with
 * nothing written) and for_update's refusal. The check under SIGSTOP and
 * SIGKILL nemeses is test_faults.c's (test_fenced_writes_under_faults).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pairs.h"
#include "testutil.h"

/* The check function of cur.table (dblock_check for the default table). */
static const char *check_fn(void) {
  static char fn[64];
  snprintf(fn, sizeof fn, "%s_check", cur.table);
  return fn;
}

static void app_must(tu_app *a, const char *sql) {
  char msg[512];
  if (tu_app_exec(a, sql, NULL, msg) != 0) fail_msg("%s: %s", sql, msg);
}

/* The resource the tests write: one row (its value, the fence of the last
 * write and the one before it) and the history of writes, emptied. */
static void resource_reset(tu_app *a) {
  char sql[512];
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s_res (id int PRIMARY KEY, val bigint NOT NULL, "
           "last_fence bigint NOT NULL, prev bigint NOT NULL)",
           cur.table);
  app_must(a, sql);
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s_hist (fence bigint NOT NULL, prev bigint NOT NULL)",
           cur.table);
  app_must(a, sql);
  snprintf(sql, sizeof sql, "DELETE FROM %s_res", cur.table);
  app_must(a, sql);
  snprintf(sql, sizeof sql, "DELETE FROM %s_hist", cur.table);
  app_must(a, sql);
  snprintf(sql, sizeof sql, "INSERT INTO %s_res VALUES (1, 0, 0, 0)", cur.table);
  app_must(a, sql);
}

static int64_t resource(tu_app *a, const char *col) {
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT %s FROM %s_res WHERE id = 1", col, cur.table);
  return tu_app_i64(a, sql);
}

static int64_t history_rows(tu_app *a) {
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s_hist", cur.table);
  return tu_app_i64(a, sql);
}

/* Opens the application's transaction on a and checks name's fence in it
 * (check = 0: no check): 0, or -1 (rolled back) with the refusal. */
static int begin_checked(tu_app *a, const char *name, const char *fence, int check,
                         char code[6], char msg[512]) {
  char sql[512];
  app_must(a, "BEGIN");
  if (!check) return 0;
  if (name) snprintf(sql, sizeof sql, "SELECT %s('%s', %s)", check_fn(), name, fence);
  else snprintf(sql, sizeof sql, "SELECT %s(NULL, %s)", check_fn(), fence);
  if (tu_app_exec(a, sql, code, msg) == 0) return 0;
  app_must(a, "ROLLBACK");
  return -1;
}

/* The write itself and its commit: the resource takes fence as its last,
 * and the history records (fence, the last before it). */
static void write_commit(tu_app *a, int64_t fence) {
  char sql[512];
  snprintf(sql, sizeof sql,
           "UPDATE %s_res SET prev = last_fence, last_fence = %lld, val = val + 1 WHERE id = 1",
           cur.table, (long long)fence);
  app_must(a, sql);
  snprintf(sql, sizeof sql,
           "INSERT INTO %s_hist (fence, prev) SELECT last_fence, prev FROM %s_res WHERE id = 1",
           cur.table, cur.table);
  app_must(a, sql);
  app_must(a, "COMMIT");
}

/* One fenced write in the application's own transaction. */
static int fenced_write(tu_app *a, const char *name, int64_t fence, int check, char code[6],
                        char msg[512]) {
  char f[32];
  snprintf(f, sizeof f, "%lld", (long long)fence);
  if (begin_checked(a, name, f, check, code, msg) != 0) return -1;
  write_commit(a, fence);
  return 0;
}

/* The hard case fencing exists for: holder A's lease runs out while it is
 * paused (here: an explicit lease nobody renews), B takes the name and
 * writes, then A — on its own connection, in its own transaction — writes
 * with its old fence. The database refuses it (DBL01, naming the lock) and
 * the resource keeps B's write. The same stale write without the check
 * is accepted: that is what the check adds. */
static void test_stale_write_refused(void **s) {
  char name[128], code[6], msg[512];
  dblock_client *a, *b;
  dblock_lock *la, *lb;
  tu_app *app_a, *app_b;
  int64_t fa, fb;
  (void)s;
  a = cli(0);
  b = cli(0);
  app_a = tu_app_open(cur.url, cur.table);
  app_b = tu_app_open(cur.url, cur.table);
  resource_reset(app_a);
  snprintf(name, sizeof name, "%s", tu_name("stale"));
  assert_int_equal(dblock_lock_acquire(&la, a, name, 0, SHORT_LEASE_MS), 0);
  fa = dblock_lock_fence(la);
  assert_int_equal(fenced_write(app_a, name, fa, 1, code, msg), 0);
  tu_sleep_ms(SHORT_LEASE_MS + 200); /* (A "paused" past its lease) */
  lb = tu_acquire(b, name, 0, 0);
  fb = dblock_lock_fence(lb);
  assert_true(fb > fa);
  assert_int_equal(fenced_write(app_b, name, fb, 1, code, msg), 0);
  /* A resumes and writes with its old fence */
  assert_int_equal(fenced_write(app_a, name, fa, 1, code, msg), -1);
  print_message("stale write %s/%s: refused: [%s] %s\n", cur.backend,
                dblock_strategy_name(cur.strategy), code, msg);
  assert_string_equal(code, "DBL01");
  assert_non_null(strstr(msg, name));
  assert_int_equal(resource(app_a, "val"), 2);
  assert_int_equal(resource(app_a, "last_fence"), fb);
  /* without the check the database takes the stale write over B's */
  assert_int_equal(fenced_write(app_a, name, fa, 0, code, msg), 0);
  assert_int_equal(resource(app_a, "last_fence"), fa);
  must_release(lb);
  assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  tu_app_close(app_a);
  tu_app_close(app_b);
  dblock_client_free(a);
  dblock_client_free(b);
}

/* The race the row hold closes: A's check passes, and while A's
 * transaction is still open its lease runs out and B asks for the name.
 * B is not granted — the row shows A's grant a full second after the
 * lease ended — until A commits; B's grant comes after A's commit. */
static void test_check_holds_row(void **s) {
  char name[128], code[6], msg[512], f[32];
  dblock_client *a, *b, *look;
  dblock_lock *la;
  dblock_lock_info info;
  tu_app *app;
  waiter w;
  pthread_t th;
  int64_t fa, t_grant, t_commit;
  (void)s;
  a = cli(0);
  b = cli(0);
  look = cli(0);
  app = tu_app_open(cur.url, cur.table);
  resource_reset(app);
  snprintf(name, sizeof name, "%s", tu_name("hold"));
  assert_int_equal(dblock_lock_acquire(&la, a, name, 0, SHORT_LEASE_MS), 0);
  t_grant = tu_now_ms();
  fa = dblock_lock_fence(la);
  snprintf(f, sizeof f, "%lld", (long long)fa);
  assert_int_equal(begin_checked(app, name, f, 1, code, msg), 0);
  w = (waiter){.c = b, .name = name, .rc = -99, .wait_ms = 20000};
  assert_int_equal(pthread_create(&th, NULL, blocking_waiter, &w), 0);
  tu_sleep_ms(t_grant + SHORT_LEASE_MS + 1000 - tu_now_ms());
  memset(&info, 0, sizeof info);
  assert_int_equal(dblock_lock_inspect(&info, look, name), 0);
  if (info.fence != fa)
    fail_msg("a grant (fence %lld) came while the checked transaction was open",
             (long long)info.fence);
  write_commit(app, fa);
  t_commit = tu_now_ms();
  pthread_join(th, NULL);
  assert_int_equal(w.rc, 0);
  print_message("row hold %s/%s: lease ended at +%d ms, A committed at +%lld ms, B granted at "
                "+%lld ms\n",
                cur.backend, dblock_strategy_name(cur.strategy), SHORT_LEASE_MS,
                (long long)(t_commit - t_grant), (long long)(w.got_at - t_grant));
  if (w.got_at < t_commit) fail_msg("B was granted before A's checked transaction committed");
  assert_int_equal(resource(app, "last_fence"), fa);
  assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  tu_app_close(app);
  dblock_client_free(a);
  dblock_client_free(b);
  dblock_client_free(look);
}

/* Bad input: each check refused with a clear error and nothing written —
 * an unknown name, a NULL fence or name, another grant's fence, a lease
 * that ended, a released lock. */
static void test_bad_input(void **s) {
  char name[128], other[128], code[6], msg[512], f[32];
  dblock_client *a;
  dblock_lock *l, *lo, *lx;
  tu_app *app;
  typedef struct {
    const char *what, *name, *fence, *want;
  } bad_case;
  bad_case cases[4];
  int n = 0;
  (void)s;
  a = cli(0);
  app = tu_app_open(cur.url, cur.table);
  resource_reset(app);
  snprintf(name, sizeof name, "%s", tu_name("bad"));
  snprintf(other, sizeof other, "%s", tu_name("bad-other"));
  l = tu_acquire(a, name, 0, 0);
  lo = tu_acquire(a, other, 0, 0);
  snprintf(f, sizeof f, "%lld", (long long)dblock_lock_fence(lo));
  cases[n++] = (bad_case){"an unknown name", "no-such-lock", "1", "DBL01"};
  cases[n++] = (bad_case){"a NULL fence", name, "NULL", "22004"};
  cases[n++] = (bad_case){"a NULL name", NULL, "1", "22004"};
  cases[n++] = (bad_case){"another grant's fence", name, f, "DBL01"};
  for (int i = 0; i < n; i++) {
    assert_int_equal(begin_checked(app, cases[i].name, cases[i].fence, 1, code, msg), -1);
    print_message("%s: [%s] %s\n", cases[i].what, code, msg);
    assert_string_equal(code, cases[i].want);
  }
  /* outside a transaction nothing would hold the row until a write:
   * refused (DBL04) where the server can tell; PostgreSQL cannot (a
   * function there cannot see whether its statement is the whole
   * transaction: docs/fenced-writes.md says so) */
  {
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s('%s', %lld)", check_fn(), name,
             (long long)dblock_lock_fence(l));
    if (is("postgres")) {
      assert_int_equal(tu_app_exec(app, sql, code, msg), 0);
    } else {
      assert_int_equal(tu_app_exec(app, sql, code, msg), -1);
      print_message("outside a transaction: [%s] %s\n", code, msg);
      assert_string_equal(code, "DBL04");
    }
  }
  /* a released lock */
  {
    char fr[32];
    snprintf(fr, sizeof fr, "%lld", (long long)dblock_lock_fence(lo));
    must_release(lo);
    assert_int_equal(begin_checked(app, other, fr, 1, code, msg), -1);
    print_message("a released lock: [%s] %s\n", code, msg);
    assert_string_equal(code, "DBL01");
    assert_non_null(strstr(msg, other));
  }
  /* a lease that ended */
  {
    char fx[32], xname[128];
    snprintf(xname, sizeof xname, "%s", tu_name("bad-expired"));
    assert_int_equal(dblock_lock_acquire(&lx, a, xname, 0, SHORT_LEASE_MS), 0);
    snprintf(fx, sizeof fx, "%lld", (long long)dblock_lock_fence(lx));
    tu_sleep_ms(SHORT_LEASE_MS + 100);
    assert_int_equal(begin_checked(app, xname, fx, 1, code, msg), -1);
    print_message("an expired lease: [%s] %s\n", code, msg);
    assert_string_equal(code, "DBL01");
    assert_non_null(strstr(msg, xname));
    assert_int_equal(dblock_lock_release(lx), DBLOCK_ELOST);
  }
  /* nothing was written */
  assert_int_equal(resource(app, "val"), 0);
  assert_int_equal(history_rows(app), 0);
  must_release(l);
  tu_app_close(app);
  dblock_client_free(a);
}

/* for_update: the holder's own session holds the row, so a shared lock
 * from the application's transaction would wait for the holder. The check
 * is refused at once (DBL02), naming the strategies that fence writes, and
 * the holder keeps its lock. */
static void test_for_update_refused(void **s) {
  char name[128], code[6], msg[512], f[32];
  dblock_client *a;
  dblock_lock *l;
  tu_app *app;
  int64_t t0, el;
  (void)s;
  a = cli(0);
  app = tu_app_open(cur.url, cur.table);
  snprintf(name, sizeof name, "%s", tu_name("fu"));
  l = tu_acquire(a, name, 0, 0);
  snprintf(f, sizeof f, "%lld", (long long)dblock_lock_fence(l));
  t0 = tu_now_ms();
  assert_int_equal(begin_checked(app, name, f, 1, code, msg), -1);
  el = tu_now_ms() - t0;
  print_message("for_update %s: refused after %lld ms: [%s] %s\n", cur.backend, (long long)el,
                code, msg);
  assert_string_equal(code, "DBL02");
  assert_non_null(strstr(msg, "insert or optimistic"));
  if (el > 2000) fail_msg("the refusal took %lld ms: it waited for the holder", (long long)el);
  assert_int_equal(dblock_lock_is_lost(l), 0); /* (still held) */
  must_release(l);
  tu_app_close(app);
  dblock_client_free(a);
}

/* Least privilege (PostgreSQL, MariaDB): a role with no privilege on the
 * lock table (on MariaDB: only on its own data) is refused the check
 * until it is granted EXECUTE on the function, and then needs nothing
 * more — it still cannot read the lock table itself. */
static void test_execute_is_enough(void **s) {
  char name[128], url[512], sql[512], code[6], msg[512], f[32];
  int pg = is("postgres");
  const char *pw = getenv("DBLOCK_TEST_PW"), *port = getenv(pg ? "DBLOCK_TEST_PG_PORT" : "DBLOCK_TEST_MY_PORT");
  dblock_client *a;
  dblock_lock *l;
  tu_app *app;
  (void)s;
  assert_non_null(pw);
  assert_non_null(port);
  /* (a role left by an earlier run that failed half way) */
  tu_admin_sql(cur.backend,
               pg ? "DO 'BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ''fx_exec'') THEN "
                    "EXECUTE ''DROP OWNED BY fx_exec''; EXECUTE ''DROP ROLE fx_exec''; END IF; END'"
                  : "DROP USER IF EXISTS 'fx_exec'@'127.0.0.1'");
  a = cli(0);
  snprintf(name, sizeof name, "%s", tu_name("exec"));
  l = tu_acquire(a, name, 0, 0);
  snprintf(f, sizeof f, "%lld", (long long)dblock_lock_fence(l));
  if (pg) {
    snprintf(sql, sizeof sql,
             "CREATE ROLE fx_exec LOGIN PASSWORD '%s'; GRANT CONNECT ON DATABASE dblock TO fx_exec",
             pw);
    tu_admin_sql(cur.backend, sql);
    snprintf(url, sizeof url, "postgres://fx_exec:%s@127.0.0.1:%s/dblock", pw, port);
  } else {
    snprintf(sql, sizeof sql, "CREATE USER 'fx_exec'@'127.0.0.1' IDENTIFIED BY '%s'", pw);
    tu_admin_sql(cur.backend, sql);
    /* (MariaDB lets a user choose a database only where it has some
     * privilege: here, on the application's own data) */
    app = tu_app_open(cur.url, cur.table);
    resource_reset(app);
    tu_app_close(app);
    snprintf(sql, sizeof sql, "GRANT SELECT ON dblock.%s_res TO 'fx_exec'@'127.0.0.1'", cur.table);
    tu_admin_sql(cur.backend, sql);
    snprintf(url, sizeof url, "mysql://fx_exec:%s@127.0.0.1:%s/dblock", pw, port);
  }
  app = tu_app_open(url, cur.table);
  assert_int_equal(begin_checked(app, name, f, 1, code, msg), -1);
  print_message("without EXECUTE: [%s] %s\n", code, msg);
  assert_string_equal(code, pg ? "42501" : "42000");
  tu_app_close(app);
  if (pg) snprintf(sql, sizeof sql, "GRANT EXECUTE ON FUNCTION public.%s(text, bigint) TO fx_exec", check_fn());
  else snprintf(sql, sizeof sql, "GRANT EXECUTE ON FUNCTION dblock.%s TO 'fx_exec'@'127.0.0.1'", check_fn());
  tu_admin_sql(cur.backend, sql);
  app = tu_app_open(url, cur.table);
  assert_int_equal(begin_checked(app, name, f, 1, code, msg), 0);
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", cur.table);
  assert_int_equal(tu_app_exec(app, sql, code, msg), -1); /* (no privilege on the table) */
  print_message("with EXECUTE only: the check passes; reading the table: [%s] %s\n", code, msg);
  tu_app_exec(app, "ROLLBACK", NULL, NULL);
  tu_app_close(app);
  must_release(l);
  dblock_client_free(a);
  tu_admin_sql(cur.backend, pg ? "DROP OWNED BY fx_exec; DROP ROLE fx_exec"
                               : "DROP USER 'fx_exec'@'127.0.0.1'");
}

static const struct CMUnitTest leased_tests[] = {
    cmocka_unit_test(test_stale_write_refused),
    cmocka_unit_test(test_check_holds_row),
    cmocka_unit_test(test_bad_input),
};
/* (the servers' privileges: PostgreSQL and MariaDB, one leased pair) */
static const struct CMUnitTest privilege_tests[] = {
    cmocka_unit_test(test_execute_is_enough),
};
static const struct CMUnitTest for_update_tests[] = {
    cmocka_unit_test(test_for_update_refused),
};

static int run_pair(const char *pair) {
  char group[96];
  int failed = 0;
  snprintf(group, sizeof group, "fenced/%s", pair);
  if (leased()) failed += cmocka_run_group_tests_name(group, leased_tests, group_setup, NULL);
  else failed += cmocka_run_group_tests_name(group, for_update_tests, group_setup, NULL);
  if (cur.strategy == DBLOCK_STRATEGY_INSERT && !is("sqlite"))
    failed += cmocka_run_group_tests_name(group, privilege_tests, NULL, NULL);
  return failed;
}

int main(void) {
  static const char *const tables[3] = {"fx_insert", "fx_for_update", "fx_optimistic"};
  return pairs_run(tables, run_pair) ? 1 : 0;
}
