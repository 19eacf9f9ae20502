/*
 * test_url.c — URL parsing (DESIGN §2): every form, every bad form with a
 * clear reason, and the password never in the redacted text or a reason.
 * No server needed.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/url.h"
#include "testutil.h"

static void parse_ok(const char *text, dbl_url *u) {
  char why[256] = "";
  int rc = dbl_url_parse(u, text, why, sizeof why);
  if (rc != 0) fail_msg("'%s' rejected: %s", text, why);
}

static void test_postgres_full(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("postgres://alice:s%40cret@db.example:6543/app?sslmode=disable", &u);
  assert_int_equal(u.backend, DBL_B_PG);
  assert_string_equal(u.user, "alice");
  assert_string_equal(u.password, "s@cret");
  assert_string_equal(u.host, "db.example");
  assert_int_equal(u.port, 6543);
  assert_string_equal(u.dbname, "app");
  assert_string_equal(dbl_url_param(&u, "sslmode"), "disable");
  assert_null(strstr(u.redacted, "cret"));
  assert_non_null(strstr(u.redacted, "***"));
  dbl_url_free(&u);
}

static void test_postgresql_scheme_and_ipv6(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("postgresql://[::1]:5433/db", &u);
  assert_int_equal(u.backend, DBL_B_PG);
  assert_string_equal(u.host, "::1");
  assert_int_equal(u.port, 5433);
  dbl_url_free(&u);
}

static void test_pg_keyword_string(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("host=127.0.0.1 port=5432 user=bob password='pa ss' dbname=x", &u);
  assert_int_equal(u.backend, DBL_B_PG);
  assert_non_null(u.pg_keywords);
  assert_null(strstr(u.redacted, "pa ss"));
  dbl_url_free(&u);
}

static void test_mysql_socket(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("mariadb://root@localhost/app?socket=/run/mysqld/mysqld.sock", &u);
  assert_int_equal(u.backend, DBL_B_MY);
  assert_string_equal(u.user, "root");
  assert_null(u.password);
  assert_string_equal(dbl_url_param(&u, "socket"), "/run/mysqld/mysqld.sock");
  dbl_url_free(&u);
  parse_ok("mysql://u:p@127.0.0.1:3307/d", &u);
  assert_int_equal(u.port, 3307);
  dbl_url_free(&u);
}

static void test_sqlite_paths(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("sqlite:///var/lib/app/locks.db", &u);
  assert_int_equal(u.backend, DBL_B_LITE);
  assert_string_equal(u.path, "/var/lib/app/locks.db");
  dbl_url_free(&u);
  parse_ok("sqlite://relative.db?synchronous=normal", &u);
  assert_string_equal(u.path, "relative.db");
  assert_string_equal(dbl_url_param(&u, "synchronous"), "normal");
  dbl_url_free(&u);
}

/* Each bad URL is refused with a reason that names the problem and never
 * contains the password. */
/* libpq's multi-host form, also for MariaDB host lists: every host with
 * its own port (0 when absent), an IPv6 one included. */
static void test_host_list(void **state) {
  dbl_url u;
  (void)state;
  parse_ok("postgres://u:pw@h1:5433,[::1]:5434,h3/db?target_session_attrs=any", &u);
  assert_int_equal(u.nhosts, 3);
  assert_string_equal(u.hosts[0], "h1");
  assert_int_equal(u.ports[0], 5433);
  assert_string_equal(u.hosts[1], "::1");
  assert_int_equal(u.ports[1], 5434);
  assert_string_equal(u.hosts[2], "h3");
  assert_int_equal(u.ports[2], 0);
  assert_string_equal(u.host, "h1");
  assert_int_equal(u.port, 5433);
  assert_string_equal(u.dbname, "db");
  assert_null(strstr(u.redacted, "pw@"));
  dbl_url_free(&u);
  parse_ok("mysql://u@127.0.0.1:3306,127.0.0.1:3307/db", &u);
  assert_int_equal(u.nhosts, 2);
  assert_int_equal(u.ports[1], 3307);
  dbl_url_free(&u);
}

static void test_bad_urls(void **state) {
  static const struct { const char *url, *needle; } bad[] = {
      {"", "no database URL"},
      {"redis://h/0", "unsupported URL scheme 'redis'"},
      {"postgres://u:topsecret@h:99999/db", "port"},
      {"postgres://u:topsecret@h:12ab/db", "port"},
      {"postgres://u:topsecret@h:/db", "empty port"},
      {"mysql://u:top%zzsecret@h/db", "escape"},
      {"sqlite://", "file path"},
      {"postgres://u:topsecret@[::1/db", "IPv6"},
      {"just some words", "not a database URL"},
      {"mysql://u:topsecret@h/db?novalue", "key=value"},
      {"postgres://u:topsecret@h1:5432,,h2/db", "empty host"},
      {"postgres://u:topsecret@h1:5432,h2:/db", "empty port"},
      {"postgres://u:topsecret@h1:5432,h2:x/db", "port"},
      {"mysql://u:topsecret@a,b,c,d,e,f,g,h,i/db", "more than 8 hosts"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dbl_url u;
    char why[256] = "";
    int rc = dbl_url_parse(&u, bad[i].url, why, sizeof why);
    if (rc != DBLOCK_EINVAL) fail_msg("'%s' accepted (rc %d)", bad[i].url, rc);
    if (!strstr(why, bad[i].needle))
      fail_msg("'%s': reason '%s' lacks '%s'", bad[i].url, why, bad[i].needle);
    assert_null(strstr(why, "topsecret"));
  }
}

/* The same checks through the public API: a bad URL fails client_open with
 * DBLOCK_EINVAL and a message; NULL URL falls back to DBLOCK_URL. */
static void test_public_api_bad_url(void **state) {
  dblock_client *c = (dblock_client *)1;
  dblock_error_info ei;
  (void)state;
  assert_int_equal(dblock_client_open(&c, "ftp://x", NULL), DBLOCK_EINVAL);
  assert_null(c);
  dblock_last_error(&ei);
  assert_int_equal(ei.code, DBLOCK_EINVAL);
  assert_non_null(strstr(ei.message, "unsupported URL scheme"));
  unsetenv("DBLOCK_URL");
  assert_int_equal(dblock_client_open(&c, NULL, NULL), DBLOCK_EINVAL);
  dblock_last_error(&ei);
  assert_non_null(strstr(ei.message, "DBLOCK_URL"));
}

static void test_bad_options(void **state) {
  dblock_client *c = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_error_info ei;
  static const char *const tables[] = {"locks\"; DROP TABLE x; --", "Locks", "a-b", "",
                                       "x234567890123456789012345678901234567890123"};
  (void)state;
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    o.table = tables[i];
    assert_int_equal(dblock_client_open(&c, "sqlite:///tmp/never-created.db", &o),
                     DBLOCK_EINVAL);
    dblock_last_error(&ei);
    assert_non_null(strstr(ei.message, "table name"));
  }
  o.table = NULL;
  o.log_level = 7; /* no such level */
  assert_int_equal(dblock_client_open(&c, "sqlite:///tmp/never-created.db", &o), DBLOCK_EINVAL);
  o.log_level = 0;
  o.version = 99;
  assert_int_equal(dblock_client_open(&c, "sqlite:///tmp/never-created.db", &o), DBLOCK_EINVAL);
  assert_int_equal(access("/tmp/never-created.db", F_OK), -1);
}

static void test_strerror_covers_codes(void **state) {
  (void)state;
  for (int code = 0; code >= DBLOCK_ECANCELED; code--)
    assert_string_not_equal(dblock_strerror(code), "unknown error");
  assert_string_equal(dblock_strerror(-999), "unknown error");
}

/* Counters as OpenMetrics text: every counter with its _total sample,
 * cumulative histogram buckets ending in +Inf, "# EOF" last; sized like
 * snprintf (size 0 gives the length, a short buffer is cut but
 * terminated). Bad arguments: DBLOCK_EINVAL. */
static void test_stats_openmetrics(void **state) {
  dblock_stats st;
  char buf[4096], small[32];
  int n;
  (void)state;
  memset(&st, 0, sizeof st);
  st.grants = 7;
  st.losses = 2;
  st.wait_ms[0] = 5;
  st.wait_ms[2] = 1;
  st.wait_ms[DBLOCK_STATS_WAIT_BUCKETS - 1] = 1;
  n = dblock_stats_openmetrics(NULL, 0, &st);
  assert_true(n > 0 && n < (int)sizeof buf);
  assert_int_equal(dblock_stats_openmetrics(buf, sizeof buf, &st), n);
  assert_int_equal((int)strlen(buf), n);
  assert_non_null(strstr(buf, "# TYPE dblock_client_grants counter\n"));
  assert_non_null(strstr(buf, "\ndblock_client_grants_total 7\n"));
  assert_non_null(strstr(buf, "\ndblock_client_losses_total 2\n"));
  st.wait_ms_sum = 1234;
  n = dblock_stats_openmetrics(NULL, 0, &st);
  assert_int_equal(dblock_stats_openmetrics(buf, sizeof buf, &st), n);
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_bucket{le=\"0.001\"} 5\n"));
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_bucket{le=\"1.0\"} 6\n"));
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_sum 1.234\n"));
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_bucket{le=\"0.1\"} 6\n"));
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_bucket{le=\"+Inf\"} 7\n"));
  assert_non_null(strstr(buf, "dblock_client_wait_seconds_count 7\n"));
  assert_string_equal(buf + n - 6, "# EOF\n");
  assert_int_equal(dblock_stats_openmetrics(small, sizeof small, &st), n);
  assert_int_equal((int)strlen(small), (int)sizeof small - 1);
  assert_int_equal(dblock_stats_openmetrics(buf, sizeof buf, NULL), DBLOCK_EINVAL);
  assert_int_equal(dblock_client_stats(NULL, &st, sizeof st), DBLOCK_EINVAL);
  assert_int_equal(dblock_client_cancel(NULL), DBLOCK_EINVAL);
  assert_int_equal(dblock_client_cancel_clear(NULL), DBLOCK_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_postgres_full),     cmocka_unit_test(test_postgresql_scheme_and_ipv6),
      cmocka_unit_test(test_pg_keyword_string), cmocka_unit_test(test_mysql_socket),
      cmocka_unit_test(test_sqlite_paths),      cmocka_unit_test(test_bad_urls),
      cmocka_unit_test(test_public_api_bad_url), cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_strerror_covers_codes), cmocka_unit_test(test_host_list),
      cmocka_unit_test(test_stats_openmetrics),
  };
  return cmocka_run_group_tests_name("url", tests, NULL, NULL);
}
