/*
 * test_bank.c — runs the real dblock-bank demo with --rounds 50 against
 * SQLite, PostgreSQL and MariaDB, and checks what it shows: anomalies
 * without a lock, none under each strategy, the stale fenced write refused.
 * (DBLOCK_TEST_BANK_ROUNDS changes the rounds: the sanitizer trees run
 * fewer, with the same checks.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

static void run_demo(const char *backend) {
  int n, st;
  const tu_backend *b = tu_backends(&n);
  const char *url = NULL, *tree = getenv("DBLOCK_TEST_TREE");
  char cmd[1024], line[512];
  int no_lock_anomalies = -1, locked_rows = 0, refused = 0, verdict = 0;
  int want = getenv("DBLOCK_TEST_BANK_ROUNDS") ? atoi(getenv("DBLOCK_TEST_BANK_ROUNDS")) : 50;
  FILE *p;
  for (int i = 0; i < n; i++)
    if (strcmp(b[i].name, backend) == 0) url = b[i].url;
  if (want < 5) want = 5;
  snprintf(cmd, sizeof cmd, "%s/dblock-bank --rounds %d --think 20 --url '%s' 2>&1",
           tree ? tree : "build", want, url);
  assert_non_null(p = popen(cmd, "r"));
  while (fgets(line, sizeof line, p)) {
    char mode[32];
    int rounds, done, anomalies;
    fputs(line, stdout);
    if (sscanf(line, "no lock %d %d %*s", &rounds, &done) == 2) {
      char *last = strrchr(line, ' ');
      no_lock_anomalies = atoi(last);
      assert_int_equal(rounds, want);
    } else if (sscanf(line, "%31s %d %d", mode, &rounds, &done) == 3 &&
               (strcmp(mode, "insert") == 0 || strcmp(mode, "for_update") == 0 ||
                strcmp(mode, "optimistic") == 0)) {
      anomalies = atoi(strrchr(line, ' '));
      assert_int_equal(rounds, want);
      assert_int_equal(done, want); /* exactly one withdrawal per round */
      assert_int_equal(anomalies, 0);
      locked_rows++;
    }
    if (strstr(line, "stale write REFUSED")) refused++;
    if (strstr(line, "verdict: without a lock the race corrupts")) verdict = 1;
  }
  st = pclose(p);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(locked_rows, 3);
  assert_true(no_lock_anomalies > 0);
  assert_int_equal(refused, 2);
  assert_int_equal(verdict, 1);
}

static void test_bank_sqlite(void **s) { (void)s; run_demo("sqlite"); }
static void test_bank_postgres(void **s) { (void)s; run_demo("postgres"); }
static void test_bank_mysql(void **s) { (void)s; run_demo("mysql"); }

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bank_sqlite),
      cmocka_unit_test(test_bank_postgres),
      cmocka_unit_test(test_bank_mysql),
  };
  size_t n = tu_shard_tests(tests, sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("bank", tests, n, NULL, NULL);
}
