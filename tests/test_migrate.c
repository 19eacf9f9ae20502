/*
 * test_migrate.c — migrations on each backend: applied once and recorded,
 * re-running is a no-op, a changed applied migration is refused, and
 * concurrent migrators on an empty database apply the schema once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char table[64];

static void fresh_table(const char *tag) {
  static int n;
  snprintf(table, sizeof table, "mig_%s_%d_%d", tag, (int)getpid(), ++n);
}

static void test_idempotent(void **s) {
  int n;
  const tu_backend *b = tu_backends(&n);
  (void)s;
  for (int i = 0; i < n; i++) {
    dblock_client *c;
    dblock_migration_info *info;
    size_t count;
    int applied = -1;
    fresh_table("idem");
    c = tu_open(b[i].url, DBLOCK_STRATEGY_INSERT, table, 0);
    assert_int_equal(dblock_migrate_status(&info, &count, c), 0);
    assert_true(count >= 1);
    assert_int_equal(info[0].applied, 0);
    dblock_migration_info_free(info, count);
    assert_int_equal(dblock_migrate(c, &applied), 0);
    assert_int_equal(applied, (int)count);
    assert_int_equal(dblock_migrate(c, &applied), 0);
    assert_int_equal(applied, 0);
    assert_int_equal(dblock_migrate_status(&info, &count, c), 0);
    for (size_t k = 0; k < count; k++) {
      assert_int_equal(info[k].applied, 1);
      assert_int_equal(info[k].checksum_ok, 1);
      assert_true(info[k].applied_at_us > 0);
    }
    dblock_migration_info_free(info, count);
    dblock_client_free(c);
  }
}

static void test_tamper_detected(void **s) {
  int n;
  const tu_backend *b = tu_backends(&n);
  (void)s;
  for (int i = 0; i < n; i++) {
    dblock_client *c;
    dblock_migration_info *info;
    size_t count;
    char sql[256];
    fresh_table("tamper");
    c = tu_open(b[i].url, DBLOCK_STRATEGY_INSERT, table, 0);
    tu_migrate(c);
    /* As if 0001 had been edited after it was applied. */
    snprintf(sql, sizeof sql, "UPDATE %s_migrations SET checksum = 'deadbeefdeadbeef' WHERE version = 1",
             table);
    tu_sql(b[i].url, sql, NULL);
    assert_int_equal(dblock_migrate(c, NULL), DBLOCK_EMIGRATE);
    assert_non_null(strstr(tu_errmsg(c), "0001_lock_table.sql"));
    assert_non_null(strstr(tu_errmsg(c), "checksum"));
    assert_int_equal(dblock_migrate_status(&info, &count, c), 0);
    assert_int_equal(info[0].checksum_ok, 0);
    dblock_migration_info_free(info, count);
    dblock_client_free(c);
  }
}

/* How many built-in migrations the backend of url has. */
static int migrations_for(const char *url) {
  dblock_client *c = tu_open(url, DBLOCK_STRATEGY_INSERT, "never_migrated_count", 0);
  dblock_migration_info *info;
  size_t count = 0;
  assert_int_equal(dblock_migrate_status(&info, &count, c), 0);
  dblock_migration_info_free(info, count);
  dblock_client_free(c);
  return (int)count;
}

/* Four processes migrate the same empty table at the same moment: all
 * succeed and exactly one of them applied the migrations. */
static void test_concurrent_migrators(void **s) {
  int n;
  const tu_backend *b = tu_backends(&n);
  (void)s;
  for (int i = 0; i < n; i++) {
    int fds[2], total = 0, failures = 0, appliers = 0;
    pid_t pid[4];
    fresh_table("race");
    assert_int_equal(pipe(fds), 0);
    for (int k = 0; k < 4; k++) {
      if ((pid[k] = fork()) == 0) {
        dblock_client *c = NULL;
        dblock_options o = DBLOCK_OPTIONS_INIT;
        int applied = 0;
        char go;
        o.table = table;
        close(fds[1]);
        if (dblock_client_open(&c, b[i].url, &o) != 0) _exit(100);
        if (read(fds[0], &go, 1) < 0) _exit(101);
        if (dblock_migrate(c, &applied) != 0) {
          fprintf(stderr, "migrator: %s\n", tu_errmsg(c));
          _exit(102);
        }
        dblock_client_free(c);
        _exit(applied);
      }
    }
    close(fds[0]);
    tu_sleep_ms(100);
    close(fds[1]);
    for (int k = 0; k < 4; k++) {
      int st;
      waitpid(pid[k], &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) >= 100) failures++;
      else {
        total += WEXITSTATUS(st);
        appliers += WEXITSTATUS(st) > 0;
      }
    }
    if (failures) fail_msg("%s: %d migrators failed", b[i].name, failures);
    /* One of them applied every migration; the others found nothing to do. */
    assert_int_equal(appliers, 1);
    assert_int_equal(total, migrations_for(b[i].url));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idempotent),
      cmocka_unit_test(test_tamper_detected),
      cmocka_unit_test(test_concurrent_migrators),
  };
  return cmocka_run_group_tests_name("migrate", tests, NULL, NULL);
}
