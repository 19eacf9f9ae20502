/*
 * test_driver.c — the drivers against real servers: connecting, and the
 * classification of backend errors into dblock codes (BACKENDS.md), with
 * the password kept out of every message.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "drivers/driver.h"
#include "testutil.h"

/* Replaces the password in a server URL by another one. */
static void with_password(char *out, size_t n, const char *url, const char *pw) {
  const char *at = strrchr(url, '@'), *colon = strchr(strstr(url, "://") + 3, ':');
  snprintf(out, n, "%.*s:%s%s", (int)(colon - url), url, pw, at);
}

static void wrong_password(const char *which) {
  char url[512];
  dblock_client *c = NULL;
  dblock_error_info ei;
  with_password(url, sizeof url, tu_url(which), "Wr0ngPassw0rdXYZ");
  assert_int_equal(dblock_client_open(&c, url, NULL), DBLOCK_EAUTH);
  dblock_last_error(&ei);
  assert_int_equal(ei.code, DBLOCK_EAUTH);
  assert_null(strstr(ei.message, "Wr0ngPassw0rdXYZ"));
  assert_true(strlen(ei.message) > 10);
}
static void test_pg_wrong_password_is_auth(void **s) { (void)s; wrong_password("postgres"); }
static void test_my_wrong_password_is_auth(void **s) { (void)s; wrong_password("mysql"); }

/* A port nobody listens on: bind one, then close it. */
static int closed_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void closed_port_is_conn(const char *scheme) {
  char url[256];
  dblock_client *c = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  int64_t t0 = tu_now_ms();
  o.connect_timeout_ms = 2000;
  snprintf(url, sizeof url, "%s://u:SeCrEtPw@127.0.0.1:%d/db", scheme, closed_port());
  assert_int_equal(dblock_client_open(&c, url, &o), DBLOCK_ECONN);
  assert_true(tu_now_ms() - t0 < 3000);
  assert_null(strstr(tu_errmsg(NULL), "SeCrEtPw"));
}
static void test_pg_closed_port_is_conn(void **s) { (void)s; closed_port_is_conn("postgres"); }
static void test_my_closed_port_is_conn(void **s) { (void)s; closed_port_is_conn("mysql"); }

static void unknown_database(const char *which) {
  char url[512];
  const char *base = tu_url(which);
  dblock_client *c = NULL;
  int rc;
  snprintf(url, sizeof url, "%.*s/no_such_db_here", (int)(strrchr(base, '/') - base), base);
  rc = dblock_client_open(&c, url, NULL);
  /* MariaDB answers "access denied to database" (1044) when the user has
   * no rights there, which hides whether it exists: a permission error. */
  if (strcmp(which, "mysql") == 0) assert_int_equal(rc, DBLOCK_EPERM);
  else assert_int_equal(rc, DBLOCK_ECONN);
  assert_non_null(strstr(tu_errmsg(NULL), "no_such_db_here"));
  assert_null(strstr(tu_errmsg(NULL), getenv("DBLOCK_TEST_PW")));
}
static void test_pg_unknown_database(void **s) { (void)s; unknown_database("postgres"); }
static void test_my_unknown_database(void **s) { (void)s; unknown_database("mysql"); }

/* A missing lock table: schema-missing, telling the user what to do. */
static void test_missing_table_is_schema(void **s) {
  int n;
  const tu_backend *b = tu_backends(&n);
  (void)s;
  for (int i = 0; i < n; i++) {
    dblock_client *c = tu_open(b[i].url, DBLOCK_STRATEGY_INSERT, "never_migrated", 0);
    dblock_lock *l = NULL;
    int rc = dblock_lock_acquire(&l, c, "x", 0, 0);
    if (rc != DBLOCK_ESCHEMA) fail_msg("%s: rc %d (%s)", b[i].name, rc, tu_errmsg(c));
    assert_non_null(strstr(tu_errmsg(c), "dblock migrate"));
    dblock_client_free(c);
  }
}

/* A unique-key conflict on the driver interface is DBLOCK_EBUSY. */
static void test_unique_conflict_is_busy(void **s) {
  int n;
  const tu_backend *b = tu_backends(&n);
  (void)s;
  for (int i = 0; i < n; i++) {
    dbl_url u;
    char why[256];
    dbl_conn *c;
    dbl_err e;
    const dbl_driver *d;
    dbl_param p = DBL_I64(7);
    memset(&e, 0, sizeof e);
    assert_int_equal(dbl_url_parse(&u, b[i].url, why, sizeof why), 0);
    d = dbl_driver_for(&u);
    assert_int_equal(d->connect(&c, &u, 5000, &e), 0);
    d->script(c, "DROP TABLE IF EXISTS drv_uniq", &e);
    assert_int_equal(d->script(c, "CREATE TABLE drv_uniq (k INT PRIMARY KEY)", &e), 0);
    assert_int_equal(d->query(c, "INSERT INTO drv_uniq (k) VALUES (?)", &p, 1, NULL, &e), 0);
    assert_int_equal(d->query(c, "INSERT INTO drv_uniq (k) VALUES (?)", &p, 1, NULL, &e),
                     DBLOCK_EBUSY);
    assert_int_equal(e.code, DBLOCK_EBUSY);
    assert_true(e.sqlstate[0] || e.native);
    assert_true(strlen(e.msg) > 0);
    d->close(c);
    dbl_url_free(&u);
  }
}

/* MariaDB lock waits: a try (wait 0) and a wait of whole seconds carry no
 * statement time limit, so a slow but unblocked statement (a loaded
 * server) is not cut short and called busy; a sub-second wait's limit
 * applies to the next statement only and never stays on the pooled
 * connection for later ones. */
static void test_my_lock_wait_never_leaks(void **s) {
  dbl_conn *c;
  dbl_err e;
  dbl_res r;
  const dbl_driver *d;
  (void)s;
  memset(&e, 0, sizeof e);
  assert_non_null(c = tu_conn(tu_url("mysql"), &d));
  /* a try: InnoDB does not wait at all, and no statement time limit is set
   * (a 1 ms limit used to call a free name busy on a loaded server) */
  assert_int_equal(d->set_lock_wait(c, 0, &e), 0);
  assert_int_equal(d->query(c, "SELECT @@max_statement_time * 1000, @@innodb_lock_wait_timeout",
                            NULL, 0, &r, &e), 0);
  if (dbl_res_i64(&r, 0, 0) != 0 || dbl_res_i64(&r, 0, 1) != 0)
    fail_msg("a try set max_statement_time %s ms, innodb_lock_wait_timeout %s s",
             dbl_res_get(&r, 0, 0), dbl_res_get(&r, 0, 1));
  dbl_res_clear(&r);
  if (d->query(c, "SELECT BENCHMARK(1000000, MD5('x'))", NULL, 0, NULL, &e) != 0)
    fail_msg("slow statement after a try's lock wait: %d %s", e.code, e.msg);
  /* sub-second: armed for one statement, gone after it */
  assert_int_equal(d->set_lock_wait(c, 300, &e), 0);
  assert_int_equal(d->query(c, "SELECT 1", NULL, 0, NULL, &e), 0);
  assert_int_equal(d->query(c, "SELECT @@max_statement_time * 1000", NULL, 0, &r, &e), 0);
  if (dbl_res_i64(&r, 0, 0) != 0) fail_msg("max_statement_time stayed %s", dbl_res_get(&r, 0, 0));
  dbl_res_clear(&r);
  /* whole seconds: no statement limit at all */
  assert_int_equal(d->set_lock_wait(c, 1000, &e), 0);
  assert_int_equal(d->query(c, "SELECT @@max_statement_time * 1000, @@innodb_lock_wait_timeout",
                            NULL, 0, &r, &e), 0);
  assert_int_equal(dbl_res_i64(&r, 0, 0), 0);
  assert_int_equal(dbl_res_i64(&r, 0, 1), 1);
  dbl_res_clear(&r);
  d->close(c);
}

/* A role that may only read the lock table: the write is refused as a
 * permission error, not a generic one. */
static void read_only_role(const char *main_url, const char *ro_url) {
  dblock_client *c = tu_open(main_url, DBLOCK_STRATEGY_INSERT, NULL, 0);
  dblock_lock *l = NULL;
  int rc;
  tu_migrate(c);
  dblock_client_free(c);
  c = tu_open(ro_url, DBLOCK_STRATEGY_INSERT, NULL, 0);
  rc = dblock_lock_acquire(&l, c, "ro-test", 0, 0);
  if (rc != DBLOCK_EPERM) fail_msg("rc %d (%s)", rc, tu_errmsg(c));
  dblock_client_free(c);
}
static void test_pg_read_only_role_is_perm(void **s) {
  (void)s;
  read_only_role(getenv("DBLOCK_TEST_PG_URL"), getenv("DBLOCK_TEST_PG_RO_URL"));
}
static void test_my_read_only_role_is_perm(void **s) {
  (void)s;
  read_only_role(getenv("DBLOCK_TEST_MY_URL"), getenv("DBLOCK_TEST_MY_RO_URL"));
}

/* libpq keyword strings: a bad keyword is a bad argument, and the
 * password in the string does not leak. */
static void test_pg_keyword_string_errors(void **s) {
  dblock_client *c = NULL;
  (void)s;
  assert_int_equal(dblock_client_open(&c, "host=127.0.0.1 password=KwSecret99 bogus_opt=1", NULL),
                   DBLOCK_EINVAL);
  assert_null(strstr(tu_errmsg(NULL), "KwSecret99"));
}

static void test_sqlite_unopenable_path(void **s) {
  dblock_client *c = NULL;
  (void)s;
  assert_int_equal(dblock_client_open(&c, "sqlite:///nonexistent-dir/x/locks.db", NULL),
                   DBLOCK_ECONN);
  assert_non_null(strstr(tu_errmsg(NULL), "nonexistent-dir"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pg_wrong_password_is_auth),
      cmocka_unit_test(test_my_wrong_password_is_auth),
      cmocka_unit_test(test_pg_closed_port_is_conn),
      cmocka_unit_test(test_my_closed_port_is_conn),
      cmocka_unit_test(test_pg_unknown_database),
      cmocka_unit_test(test_my_unknown_database),
      cmocka_unit_test(test_missing_table_is_schema),
      cmocka_unit_test(test_unique_conflict_is_busy),
      cmocka_unit_test(test_my_lock_wait_never_leaks),
      cmocka_unit_test(test_pg_read_only_role_is_perm),
      cmocka_unit_test(test_my_read_only_role_is_perm),
      cmocka_unit_test(test_pg_keyword_string_errors),
      cmocka_unit_test(test_sqlite_unopenable_path),
  };
  return cmocka_run_group_tests_name("driver", tests, NULL, NULL);
}
