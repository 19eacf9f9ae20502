/*
 * test_scale.c — waiters cost no connections, and never starve a holder
 * (docs/waiting.md, "Connections").
 *
 * 32 processes x 16 threads, one client per process (pool_size 1), wait
 * for 8 names on a server that accepts 100 connections for the test's
 * user (PostgreSQL: ALTER ROLE … CONNECTION LIMIT 100; MariaDB: SET
 * GLOBAL max_connections = 100 — the figures of issue 35, where waiting
 * on a connection each made the server refuse new ones and holders lost
 * their locks). Every thread acquires a random name with a 30 s wait,
 * holds it 1 ms — one grant in 50 holds it 2.5 s, across a renewal of its
 * 6 s lease — and releases it, for 6 s. Every acquire must be granted
 * within its wait, with 0 overlaps (a holder slot per name in shared
 * memory), 0 connection errors, 0 locks lost, 0 failed releases; the
 * servers' peak connection count for the test's user is printed (and must
 * stay under the limit, which the errors would show anyway).
 * insert and optimistic, on PostgreSQL and MariaDB (for_update pins a
 * connection per holder and per waiter by design: its sizing rule is in
 * docs/waiting.md).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drivers/driver.h"
#include "testutil.h"

#define PROCS 32
#define THREADS 16
#define NAMES 8
#define LIMIT 100
#define WINDOW_MS 6000
#define WAIT_MS 30000

typedef struct shared {
  atomic_int holder[NAMES]; /* who holds each name (0: nobody) */
  atomic_long grants, overlaps, econn, timeouts, other_errors, release_errors, lost;
  atomic_int go;
} shared;

typedef struct worker_arg {
  dblock_client *c;
  shared *sh;
  char names[NAMES][64];
  int me;
  unsigned seed;
} worker_arg;

static void count_lost(const char *name, int64_t fence, int reason, void *arg) {
  (void)name, (void)fence, (void)reason;
  atomic_fetch_add(&((shared *)arg)->lost, 1);
}

static void *worker_thread(void *p) {
  worker_arg *w = p;
  shared *sh = w->sh;
  int64_t end = tu_now_ms() + WINDOW_MS;
  for (int i = 0; tu_now_ms() < end; i++) {
    int k = (int)(rand_r(&w->seed) % NAMES), expected = 0, rc;
    dblock_lock *l = NULL;
    rc = dblock_lock_acquire(&l, w->c, w->names[k], WAIT_MS, 0);
    if (rc != 0) {
      atomic_fetch_add(rc == DBLOCK_ECONN      ? &sh->econn
                       : rc == DBLOCK_ETIMEOUT ? &sh->timeouts
                                               : &sh->other_errors,
                       1);
      fprintf(stderr, "worker %d: acquire %s: %s\n", w->me, w->names[k], tu_errmsg(w->c));
      continue;
    }
    atomic_fetch_add(&sh->grants, 1);
    if (!atomic_compare_exchange_strong(&sh->holder[k], &expected, w->me))
      atomic_fetch_add(&sh->overlaps, 1);
    tu_sleep_ms(rand_r(&w->seed) % 50 == 0 ? 2500 : 1);
    expected = w->me;
    atomic_compare_exchange_strong(&sh->holder[k], &expected, 0);
    if ((rc = dblock_lock_release(l)) != 0) {
      atomic_fetch_add(rc == DBLOCK_ECONN ? &sh->econn : &sh->release_errors, 1);
      fprintf(stderr, "worker %d: release %s: %s\n", w->me, w->names[k], tu_errmsg(w->c));
    }
  }
  return NULL;
}

static void process_main(const char *url, dblock_strategy st, const char *table,
                         const char *prefix, shared *sh, int proc) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c = NULL;
  pthread_t th[THREADS];
  worker_arg w[THREADS];
  o.strategy = st;
  o.table = table;
  o.pool_size = 1;
  o.lease_ms = 6000;
  o.on_lost = count_lost;
  o.on_lost_arg = sh;
  if (dblock_client_open(&c, url, &o) != 0) {
    fprintf(stderr, "process %d: open: %s\n", proc, tu_errmsg(NULL));
    atomic_fetch_add(&sh->econn, 1);
    _exit(3);
  }
  while (!atomic_load(&sh->go)) tu_sleep_ms(5);
  for (int t = 0; t < THREADS; t++) {
    w[t].c = c;
    w[t].sh = sh;
    w[t].me = proc * THREADS + t + 1;
    w[t].seed = (unsigned)w[t].me * 2654435761u;
    for (int k = 0; k < NAMES; k++) snprintf(w[t].names[k], sizeof w[t].names[k], "%s-%d", prefix, k);
    if (pthread_create(&th[t], NULL, worker_thread, &w[t]) != 0) _exit(4);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  dblock_client_free(c);
  _exit(0);
}

/* The test user's connections on the server, sampled every 100 ms on one
 * connection of the sampler's own (counted, and taken off). */
typedef struct sampler {
  const char *url, *sql;
  atomic_int stop;
  int64_t peak;
  pthread_t th;
} sampler;

static void *sample_main(void *p) {
  sampler *s = p;
  const dbl_driver *d;
  dbl_conn *c = tu_conn(s->url, &d);
  if (!c) return NULL;
  while (!atomic_load(&s->stop)) {
    dbl_err e;
    dbl_res r;
    memset(&e, 0, sizeof e);
    if (d->query(c, s->sql, NULL, 0, &r, &e) == 0) {
      int64_t n = dbl_res_i64(&r, 0, 0) - 1;
      if (n > s->peak) s->peak = n;
      dbl_res_clear(&r);
    }
    tu_sleep_ms(100);
  }
  d->close(c);
  return NULL;
}

/* The server accepts LIMIT connections for the test's user (on = 1), or
 * as many as before (on = 0). */
static void limit_connections(const char *backend, int on) {
  char sql[128];
  if (strcmp(backend, "postgres") == 0)
    snprintf(sql, sizeof sql, "ALTER ROLE dblock CONNECTION LIMIT %d", on ? LIMIT : -1);
  else
    snprintf(sql, sizeof sql, "SET GLOBAL max_connections = %d", on ? LIMIT : 300);
  tu_admin_sql(backend, sql);
}

static void run_pair(const char *backend, dblock_strategy st) {
  const char *url = tu_url(backend);
  char table[48];
  const char *prefix = tu_name("scale");
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t pids[PROCS];
  sampler smp = {.url = url,
                 .sql = strcmp(backend, "postgres") == 0
                            ? "SELECT count(*) FROM pg_stat_activity WHERE usename = 'dblock'"
                            : "SELECT count(*) FROM information_schema.PROCESSLIST "
                              "WHERE USER = 'dblock'"};
  int bad_exit = 0;
  int64_t t0;
  dblock_client *c;
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  snprintf(table, sizeof table, "scale_%s", dblock_strategy_name(st));
  c = tu_open(url, st, table, 0);
  tu_migrate(c);
  dblock_client_free(c);
  limit_connections(backend, 1);
  fflush(NULL);
  for (int i = 0; i < PROCS; i++)
    if ((pids[i] = fork()) == 0) process_main(url, st, table, prefix, sh, i);
  assert_int_equal(pthread_create(&smp.th, NULL, sample_main, &smp), 0);
  tu_sleep_ms(1000); /* (every process opens its client: 32 connects) */
  t0 = tu_now_ms();
  atomic_store(&sh->go, 1);
  for (int i = 0; i < PROCS; i++) {
    int stt;
    waitpid(pids[i], &stt, 0);
    if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0) bad_exit++;
  }
  atomic_store(&smp.stop, 1);
  pthread_join(smp.th, NULL);
  limit_connections(backend, 0);
  printf("# scale %s/%s: %d processes x %d threads, %d names, %lld ms: %ld grants, peak %lld "
         "connections of %d; overlaps %ld, connection errors %ld, timeouts %ld, other errors "
         "%ld, failed releases %ld, locks lost %ld\n",
         backend, dblock_strategy_name(st), PROCS, THREADS, NAMES,
         (long long)(tu_now_ms() - t0), atomic_load(&sh->grants), (long long)smp.peak, LIMIT,
         atomic_load(&sh->overlaps), atomic_load(&sh->econn), atomic_load(&sh->timeouts),
         atomic_load(&sh->other_errors), atomic_load(&sh->release_errors),
         atomic_load(&sh->lost));
  assert_int_equal(bad_exit, 0);
  assert_true(atomic_load(&sh->grants) > 0);
  assert_int_equal(atomic_load(&sh->overlaps), 0);
  assert_int_equal(atomic_load(&sh->econn), 0);
  assert_int_equal(atomic_load(&sh->timeouts), 0);
  assert_int_equal(atomic_load(&sh->other_errors), 0);
  assert_int_equal(atomic_load(&sh->release_errors), 0);
  assert_int_equal(atomic_load(&sh->lost), 0);
  assert_true(smp.peak < LIMIT);
  munmap(sh, sizeof *sh);
}

#define PAIR(b, s, S)                                                                  \
  static void test_scale_##b##_##s(void **st) {                                        \
    (void)st;                                                                          \
    run_pair(#b, S);                                                                   \
  }
PAIR(postgres, insert, DBLOCK_STRATEGY_INSERT)
PAIR(postgres, optimistic, DBLOCK_STRATEGY_OPTIMISTIC)
PAIR(mysql, insert, DBLOCK_STRATEGY_INSERT)
PAIR(mysql, optimistic, DBLOCK_STRATEGY_OPTIMISTIC)

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scale_postgres_insert),
      cmocka_unit_test(test_scale_postgres_optimistic),
      cmocka_unit_test(test_scale_mysql_insert),
      cmocka_unit_test(test_scale_mysql_optimistic),
  };
  size_t n = tu_shard_tests(tests, sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("scale", tests, n, NULL, NULL);
}
