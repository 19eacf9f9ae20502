/*
 * test_contention.c — mutual exclusion under load, for each backend x
 * strategy: 8 processes x N cycles (300; DBLOCK_TEST_CYCLES overrides),
 * each cycle reading a counter in shared memory, sleeping >= 1 ms and
 * writing counter + 1 under the lock, while an overlap detector in shared
 * memory records any moment two processes are inside at once. The counter
 * must be exact and the detector must stay at zero. Each grant also checks
 * its fencing token against the one before it in counter order (kept in
 * shared memory inside the critical section): fences must strictly grow.
 * On the servers the workers start just after the fencing epoch was lost,
 * as after a crash, so their first grants advance it side by side.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define PROCS 8

typedef struct shared {
  atomic_int inside;      /* who is in the critical section (0 = nobody) */
  atomic_long overlaps;
  long counter;           /* deliberately non-atomic */
  atomic_long release_errors;
  atomic_long acquire_errors;
  long long last_fence;   /* the previous grant's fence (under the lock) */
  atomic_long fence_regressions;
} shared;

static void worker(const char *url, dblock_strategy st, const char *table,
                   const char *name, int cycles, shared *sh, int me, int go_fd) {
  dblock_client *c = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  char go;
  o.strategy = st;
  o.table = table;
  o.backoff_max_ms = 20;
  if (dblock_client_open(&c, url, &o) != 0) _exit(3);
  if (read(go_fd, &go, 1) < 0) _exit(4);
  for (int i = 0; i < cycles; i++) {
    dblock_lock *l = NULL;
    int expected = 0;
    long v;
    if (dblock_lock_acquire(&l, c, name, -1, 0) != 0) {
      fprintf(stderr, "worker %d: acquire: %s\n", me, tu_errmsg(c));
      atomic_fetch_add(&sh->acquire_errors, 1);
      continue;
    }
    if (!atomic_compare_exchange_strong(&sh->inside, &expected, me))
      atomic_fetch_add(&sh->overlaps, 1);
    v = sh->counter;
    if (dblock_lock_fence(l) <= sh->last_fence) atomic_fetch_add(&sh->fence_regressions, 1);
    sh->last_fence = dblock_lock_fence(l);
    atomic_signal_fence(memory_order_seq_cst);
    tu_sleep_ms(1);
    sh->counter = v + 1;
    expected = me;
    atomic_compare_exchange_strong(&sh->inside, &expected, 0);
    if (dblock_lock_release(l) != 0) atomic_fetch_add(&sh->release_errors, 1);
  }
  dblock_client_free(c);
  _exit(0);
}

static void run_pair(const char *backend, dblock_strategy st) {
  int n, fds[2], cycles = 300, bad_exit = 0;
  const tu_backend *b = tu_backends(&n);
  const char *url = NULL, *env = getenv("DBLOCK_TEST_CYCLES");
  char table[48], name[96];
  pid_t pids[PROCS];
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  dblock_client *c;
  int64_t t0, epoch0 = 0, epoch1 = 0;
  char sql[96];
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  if (env) cycles = atoi(env);
  for (int i = 0; i < n; i++)
    if (strcmp(b[i].name, backend) == 0) url = b[i].url;
  snprintf(table, sizeof table, "cont_%s", dblock_strategy_name(st));
  snprintf(name, sizeof name, "%s", tu_name("counter"));
  c = tu_open(url, st, table, 0);
  tu_migrate(c);
  dblock_client_free(c);
  /* The workers start on a server that has just lost its fencing epoch
   * (what a crash does to ${table}_alive): their first grants find it gone
   * together and race to advance it, while the others' grants queue. */
  if (strcmp(backend, "sqlite") != 0) {
    tu_lose_epoch(url, table);
    snprintf(sql, sizeof sql, "SELECT fence FROM %s WHERE name = ''", table);
    tu_sql(url, sql, &epoch0);
  }
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  for (int i = 0; i < PROCS; i++)
    if ((pids[i] = fork()) == 0) {
      close(fds[1]);
      worker(url, st, table, name, cycles, sh, i + 1, fds[0]);
    }
  close(fds[0]);
  tu_sleep_ms(200);
  t0 = tu_now_ms();
  close(fds[1]);
  for (int i = 0; i < PROCS; i++) {
    int stt;
    waitpid(pids[i], &stt, 0);
    if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0) bad_exit++;
  }
  printf("# %s/%s: %d x %d cycles in %lld ms, counter %ld, overlaps %ld, fence regressions %ld\n",
         backend, dblock_strategy_name(st), PROCS, cycles, (long long)(tu_now_ms() - t0),
         sh->counter, (long)atomic_load(&sh->overlaps), (long)atomic_load(&sh->fence_regressions));
  assert_int_equal(bad_exit, 0);
  assert_int_equal(atomic_load(&sh->acquire_errors), 0);
  assert_int_equal(atomic_load(&sh->release_errors), 0);
  assert_int_equal(atomic_load(&sh->overlaps), 0);
  assert_int_equal(atomic_load(&sh->fence_regressions), 0);
  assert_int_equal(sh->counter, (long)PROCS * cycles);
  /* PostgreSQL: the workers that found the epoch lost together moved it
   * once (MariaDB's bumps may each jump the sequence: only gaps). */
  if (strcmp(backend, "postgres") == 0) {
    tu_sql(url, sql, &epoch1);
    if (epoch1 != epoch0 + 1)
      fail_msg("the workers moved the epoch from %lld to %lld, not once", (long long)epoch0,
               (long long)epoch1);
  }
  munmap(sh, sizeof *sh);
}

#define PAIR(b, s, S)                                                                  \
  static void test_contention_##b##_##s(void **st) {                                   \
    (void)st;                                                                          \
    run_pair(#b, S);                                                                   \
  }
PAIR(sqlite, insert, DBLOCK_STRATEGY_INSERT)
PAIR(sqlite, for_update, DBLOCK_STRATEGY_FOR_UPDATE)
PAIR(sqlite, optimistic, DBLOCK_STRATEGY_OPTIMISTIC)
PAIR(postgres, insert, DBLOCK_STRATEGY_INSERT)
PAIR(postgres, for_update, DBLOCK_STRATEGY_FOR_UPDATE)
PAIR(postgres, optimistic, DBLOCK_STRATEGY_OPTIMISTIC)
PAIR(mysql, insert, DBLOCK_STRATEGY_INSERT)
PAIR(mysql, for_update, DBLOCK_STRATEGY_FOR_UPDATE)
PAIR(mysql, optimistic, DBLOCK_STRATEGY_OPTIMISTIC)

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(test_contention_sqlite_insert),
      cmocka_unit_test(test_contention_sqlite_for_update),
      cmocka_unit_test(test_contention_sqlite_optimistic),
      cmocka_unit_test(test_contention_postgres_insert),
      cmocka_unit_test(test_contention_postgres_for_update),
      cmocka_unit_test(test_contention_postgres_optimistic),
      cmocka_unit_test(test_contention_mysql_insert),
      cmocka_unit_test(test_contention_mysql_for_update),
      cmocka_unit_test(test_contention_mysql_optimistic),
  };
  size_t n = tu_shard_tests(tests, sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("contention", tests, n, NULL, NULL);
}
