/*
 * test_reaper.c — the reaper (DESIGN §5) on each backend: a pass over
 * 200,000 expired rows and 1,000 live ones deletes exactly the expired ones
 * in batches while other clients keep locking without waiting; two reapers
 * at once delete every row once; a reaper racing renewals never deletes a
 * renewed row, and a holder whose row was reaped is told it lost the lock;
 * the reaper thread works and stops at once when its client closes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drivers/driver.h"
#include "testutil.h"

/* Plants `expired` rows whose lease ended an hour ago and `live` rows held
 * for another hour, named exp-N and live-N, in table t. */
static void plant(const char *backend, const char *url, const char *t, int expired, int live) {
  char sql[1024];
  const char *kinds[2] = {"exp", "live"};
  int counts[2] = {expired, live};
  for (int k = 0; k < 2; k++) {
    const char *sign = k == 0 ? "-" : "+";
    if (!counts[k]) continue;
    if (strcmp(backend, "postgres") == 0)
      snprintf(sql, sizeof sql,
               "INSERT INTO public.%s (name, strategy, state, owner_token, hold_count, fence, "
               "acquired_at, expires_at) SELECT '%s-' || g, 'insert', 1, 'planted', 1, g, "
               "now() - interval '2 hours', now() %s interval '1 hour' "
               "FROM generate_series(1, %d) g",
               t, kinds[k], sign, counts[k]);
    else if (strcmp(backend, "mysql") == 0)
      snprintf(sql, sizeof sql,
               "INSERT INTO %s (name, strategy, state, owner_token, hold_count, fence, "
               "acquired_at, expires_at) SELECT CONCAT('%s-', seq), 'insert', 1, 'planted', 1, "
               "seq, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) %s INTERVAL 1 HOUR "
               "FROM seq_1_to_%d",
               t, kinds[k], sign, counts[k]);
    else
      snprintf(sql, sizeof sql,
               "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %d) "
               "INSERT INTO %s (name, strategy, state, owner_token, hold_count, fence, "
               "acquired_at, expires_at) SELECT '%s-' || n, 'insert', 1, 'planted', 1, n, "
               "(strftime('%%s','now') - 7200) * 1000000, "
               "(strftime('%%s','now') %s 3600) * 1000000 FROM g",
               counts[k], t, kinds[k], sign);
    tu_sql(url, sql, NULL);
  }
}

static int64_t count_like(const char *backend, const char *url, const char *t,
                          const char *prefix) {
  char sql[256];
  int64_t n = -1;
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s%s WHERE name LIKE '%s-%%'",
           strcmp(backend, "postgres") == 0 ? "public." : "", t, prefix);
  tu_sql(url, sql, &n);
  return n;
}

static dblock_client *fresh(const char *url, const char *t, dblock_strategy s) {
  dblock_client *c = tu_open(url, s, t, 0);
  tu_migrate(c);
  return c;
}

typedef struct pinger {
  dblock_client *c;
  atomic_int stop;
  int64_t worst_ms, ops, errors;
} pinger;

/* Acquires and releases other names as fast as it can, timing each call. */
static void *ping(void *arg) {
  pinger *p = arg;
  int i = 0;
  while (!atomic_load(&p->stop)) {
    char name[64];
    dblock_lock *l = NULL;
    int64_t t0 = tu_now_ms(), el;
    snprintf(name, sizeof name, "other-%d", i++ % 50);
    if (dblock_lock_acquire(&l, p->c, name, 0, 0) != 0) {
      p->errors++;
      continue;
    }
    el = tu_now_ms() - t0;
    if (el > p->worst_ms) p->worst_ms = el;
    t0 = tu_now_ms();
    if (dblock_lock_release(l) != 0) p->errors++;
    el = tu_now_ms() - t0;
    if (el > p->worst_ms) p->worst_ms = el;
    p->ops++;
  }
  return NULL;
}

#define MAX_SAMPLES 4096

typedef struct watcher {
  const char *url, *backend, *table;
  int64_t expired;
  atomic_int stop;
  int64_t samples, partial, errors;
  int64_t from[MAX_SAMPLES], to[MAX_SAMPLES]; /* each count's start and end, ms */
  int64_t seen[MAX_SAMPLES];                  /* what each count saw */
} watcher;

/* Counts the expired rows from its own connection until told to stop, and
 * counts the samples that saw some but not all of them deleted. A pass run
 * as one transaction could never show such a state to another connection:
 * every snapshot sees all of its deletions or none. Each count's start and
 * end are kept, so that the caller can tell how many fell inside the pass
 * (a loaded host may leave this thread unscheduled through a short one). */
static void *watch(void *arg) {
  watcher *w = arg;
  const dbl_driver *d;
  dbl_conn *c = tu_conn(w->url, &d);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s%s WHERE name LIKE 'exp-%%'",
           strcmp(w->backend, "postgres") == 0 ? "public." : "", w->table);
  if (!c) {
    w->errors++;
    return NULL;
  }
  while (!atomic_load(&w->stop) && w->samples < MAX_SAMPLES) {
    dbl_res r;
    dbl_err e;
    int64_t from = tu_now_ms();
    memset(&e, 0, sizeof e);
    if (d->query(c, sql, NULL, 0, &r, &e) != 0) {
      w->errors++;
      break;
    }
    int64_t n = dbl_res_i64(&r, 0, 0);
    dbl_res_clear(&r);
    w->from[w->samples] = from;
    w->to[w->samples] = tu_now_ms();
    w->seen[w->samples] = n;
    w->samples++;
    if (n > 0 && n < w->expired) w->partial++;
    tu_sleep_ms(100); /* (a count reads the whole table: not too often) */
  }
  d->close(c);
  return NULL;
}

static void big_pass(const char *backend) {
  const char *url = tu_url(backend);
  char t[48];
  dblock_client *c, *other;
  /* (static: the watcher's arrays are large, and a failed assertion
   * leaves this frame with both threads still running) */
  static pinger p;
  static watcher w;
  uint64_t trips0;
  int64_t inside = 0, distinct = 0, last_seen = -1;
  pthread_t th, wth;
  int64_t deleted = 0, t0, el;
  int expired = getenv("DBLOCK_TEST_CYCLES") ? 50000 : 200000; /* lighter in sanitizer trees */
  snprintf(t, sizeof t, "reap_big_%d", (int)getpid());
  c = fresh(url, t, DBLOCK_STRATEGY_INSERT);
  plant(backend, url, t, expired, 1000);
  assert_int_equal(count_like(backend, url, t, "exp"), expired);
  other = tu_open(url, DBLOCK_STRATEGY_INSERT, t, 0);
  memset(&p, 0, sizeof p);
  p.c = other;
  memset(&w, 0, sizeof w);
  w.url = url;
  w.backend = backend;
  w.table = t;
  w.expired = expired;
  assert_int_equal(pthread_create(&th, NULL, ping, &p), 0);
  assert_int_equal(pthread_create(&wth, NULL, watch, &w), 0);
  tu_sleep_ms(200);
  trips0 = dblock_client_round_trips(c);
  t0 = tu_now_ms();
  assert_int_equal(dblock_reap(c, 0, 1000, &deleted), 0);
  el = tu_now_ms() - t0;
  trips0 = dblock_client_round_trips(c) - trips0;
  atomic_store(&p.stop, 1);
  atomic_store(&w.stop, 1);
  pthread_join(th, NULL);
  pthread_join(wth, NULL);
  for (int64_t i = 0; i < w.samples; i++) {
    int64_t n = w.seen[i];
    if (w.from[i] >= t0 && w.to[i] <= t0 + el) inside++;
    if (n > 0 && n < expired && n != last_seen) distinct++;
    if (n > 0 && n < expired) last_seen = n;
  }
  printf("# %s: reaped %lld rows in %lld ms (%.0f rows/s, %llu statements); concurrent client: "
         "%lld cycles, worst call %lld ms; watcher: %lld of %lld counts (%lld inside the pass) "
         "saw it part-done, %lld different states\n",
         backend, (long long)deleted, (long long)el, el ? deleted * 1000.0 / (double)el : 0.0,
         (unsigned long long)trips0, (long long)p.ops, (long long)p.worst_ms, (long long)w.partial,
         (long long)w.samples, (long long)inside, (long long)distinct);
  assert_int_equal(deleted, expired);
  assert_int_equal(count_like(backend, url, t, "exp"), 0);
  assert_int_equal(count_like(backend, url, t, "live"), 1000);
  assert_int_equal(p.errors, 0);
  assert_true(p.ops > 0);
  /* The pass runs a statement per batch at least, and commits batch by batch:
   * another connection saw it part-done in two different states (three
   * commits at least; a few huge batches would show fewer). Were the
   * watcher left unscheduled through most of the pass, so that fewer than
   * three counts ran inside it, that check would show nothing either way. */
  assert_true(trips0 >= (uint64_t)(expired / 1000));
  assert_int_equal(w.errors, 0);
  if (inside < 3)
    printf("# %s: the part-done check not shown: %lld counts inside the pass\n", backend,
           (long long)inside);
  if (inside >= 3 && distinct < 2)
    fail_msg("%lld counts ran inside the pass, %lld part-done states seen: few commits?",
             (long long)inside, (long long)distinct);
  /* A concurrent call must never wait for the pass (200 batches of 1,000
   * rows, 50 in the sanitizer trees), only for a batch in progress. A call
   * that waited for the pass would wait for most of it, so the limit is a
   * third of the pass, and at least 100 ms (SQLite, one writer for the
   * whole file: 200; the sanitizer trees run everything several times
   * slower). The batches themselves are shown above; this bound leaves room
   * for stalls of the whole host, which add to a batch: the other backends'
   * shards flush on the same two cores. Tighter limits failed on loaded
   * runs: 240 and 241 ms on SQLite and MariaDB at once in passes of 6 to
   * 8 s against a fixed limit, and 659 ms on PostgreSQL in a 3.5 s pass
   * (CI, 864a4cb) against a tenth of the pass. */
  {
    int64_t limit = tu_bound(TB_REAPER_CALL) * (strcmp(backend, "sqlite") == 0 ? 2 : 1);
    if (limit < el / 3) limit = el / 3;
    if (p.worst_ms > limit)
      fail_msg("a concurrent call waited %lld ms (limit %lld ms, the pass %lld ms)",
               (long long)p.worst_ms, (long long)limit, (long long)el);
  }
  dblock_client_free(other);
  dblock_client_free(c);
}
static void test_big_pass_sqlite(void **s) { (void)s; big_pass("sqlite"); }
static void test_big_pass_postgres(void **s) { (void)s; big_pass("postgres"); }
static void test_big_pass_mysql(void **s) { (void)s; big_pass("mysql"); }

/* Two reaper processes at once: every expired row deleted exactly once. */
static void two_reapers(const char *backend) {
  const char *url = tu_url(backend);
  char t[48];
  dblock_client *c;
  int fds[2], pipes[2][2];
  int64_t total = 0;
  pid_t pid[2];
  snprintf(t, sizeof t, "reap_two_%d", (int)getpid());
  c = fresh(url, t, DBLOCK_STRATEGY_INSERT);
  plant(backend, url, t, 20000, 100);
  dblock_client_free(c);
  assert_int_equal(pipe(fds), 0);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(pipe(pipes[k]), 0);
    if ((pid[k] = fork()) == 0) {
      dblock_client *rc = NULL;
      dblock_options o = DBLOCK_OPTIONS_INIT;
      int64_t d = -1;
      char go;
      o.table = t;
      close(fds[1]);
      if (dblock_client_open(&rc, url, &o) != 0) _exit(1);
      if (read(fds[0], &go, 1) < 0) _exit(1);
      if (dblock_reap(rc, 0, 500, &d) != 0) {
        fprintf(stderr, "reaper %d: %s\n", k, tu_errmsg(rc));
        _exit(2);
      }
      if (write(pipes[k][1], &d, sizeof d) != sizeof d) _exit(3);
      dblock_client_free(rc);
      _exit(0);
    }
    close(pipes[k][1]);
  }
  close(fds[0]);
  tu_sleep_ms(100);
  close(fds[1]);
  for (int k = 0; k < 2; k++) {
    int st;
    int64_t d = 0;
    assert_int_equal(read(pipes[k][0], &d, sizeof d), (ssize_t)sizeof d);
    waitpid(pid[k], &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    total += d;
  }
  assert_int_equal(total, 20000);
  assert_int_equal(count_like(backend, url, t, "exp"), 0);
  assert_int_equal(count_like(backend, url, t, "live"), 100);
}
static void test_two_reapers_sqlite(void **s) { (void)s; two_reapers("sqlite"); }
static void test_two_reapers_postgres(void **s) { (void)s; two_reapers("postgres"); }
static void test_two_reapers_mysql(void **s) { (void)s; two_reapers("mysql"); }


typedef struct racer {
  dblock_client *c;
  int64_t deleted;
  int rc;
} racer;

static void *reap_now(void *arg) {
  racer *r = arg;
  r->rc = dblock_reap(r->c, 0, 100, &r->deleted);
  return NULL;
}

/* Ends the lease of row name on the server's side, as a server clock that
 * stepped forward would: its expiry a moment in the past. */
static void expire_row(const char *backend, const char *url, const char *t, const char *name) {
  char sql[256];
  if (strcmp(backend, "postgres") == 0)
    snprintf(sql, sizeof sql,
             "UPDATE public.%s SET expires_at = now() - interval '1 millisecond' "
             "WHERE name = '%s'", t, name);
  else if (strcmp(backend, "mysql") == 0)
    snprintf(sql, sizeof sql,
             "UPDATE %s SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1000 MICROSECOND "
             "WHERE name = '%s'", t, name);
  else
    snprintf(sql, sizeof sql,
             "UPDATE %s SET expires_at = (CAST(strftime('%%s','now') AS INTEGER) - 1) * 1000000 "
             "WHERE name = '%s'", t, name);
  tu_sql(url, sql, NULL);
}

/* A holder renews just as its lease ran out while a reaper passes: either
 * the renewal wins and the row survives (held), or the reaper wins, the
 * renewal says lost and the callback fires. Never a renewed row deleted.
 * Odd rounds race on the server: a 30 s lease whose row's expiry is set
 * in the past by SQL (the client's clock still trusts it, so the renewal
 * is sent), the renewal and the reap sent together. Even rounds: a 200 ms
 * lease renewed 5 ms past its end, which the client's clock refuses (a
 * call past the loss deadline is never sent) while the reaper deletes.
 * The loss margin is 1 ms so that those acquires have 199 ms to answer
 * (with the default, half of so short a lease, a loaded host overran
 * 100 ms and the acquire was cut as born lost); a round whose acquire is
 * cut all the same is skipped (at most 5 of 20). */
static void race_renewal(const char *backend) {
  const char *url = tu_url(backend);
  char t[48];
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *a, *reaper;
  int renewed = 0, reaped = 0, skipped = 0, refused = 0;
  snprintf(t, sizeof t, "reap_race_%d", (int)getpid());
  reaper = fresh(url, t, DBLOCK_STRATEGY_INSERT);
  o.table = t;
  o.on_lost = tu_on_lost;
  o.loss_margin_ms = 1;
  a = tu_open_opts(url, &o);
  for (int i = 0; i < 40; i++) {
    char name[32];
    dblock_lock *l;
    dblock_lock_info info;
    racer r = {reaper, 0, -99};
    pthread_t th;
    int rc, before = atomic_load(&tu_lost_calls), ins;
    snprintf(name, sizeof name, "race-%d", i);
    rc = dblock_lock_acquire(&l, a, name, 0, i % 2 ? 30000 : 200);
    if (rc == DBLOCK_ECONN && i % 2 == 0) { /* (cut: not answered within the 199 ms) */
      skipped++;
      continue;
    }
    assert_int_equal(rc, 0);
    if (i % 2) expire_row(backend, url, t, name);
    else tu_sleep_ms(205); /* the lease has just ended */
    assert_int_equal(pthread_create(&th, NULL, reap_now, &r), 0);
    rc = dblock_lock_renew(l);
    pthread_join(th, NULL);
    assert_int_equal(r.rc, 0);
    ins = dblock_lock_inspect(&info, reaper, name);
    if (rc == 0) {
      /* Renewed: the row must still be there and held. */
      assert_int_equal(ins, 0);
      assert_int_equal(info.held, 1);
      renewed++;
      assert_int_equal(dblock_lock_release(l), 0);
    } else {
      assert_int_equal(rc, DBLOCK_ELOST);
      assert_int_equal(ins, DBLOCK_ENOTHELD);
      assert_int_equal(atomic_load(&tu_lost_calls), before + 1);
      assert_int_equal(dblock_lock_is_lost(l), 1);
      reaped++;
      if (i % 2 == 0) refused++;
      assert_int_equal(dblock_lock_release(l), DBLOCK_ELOST);
    }
  }
  printf("# %s: %d renewals won, %d reaps won (%d of them refused by the clock), %d acquires "
         "cut\n", backend, renewed, reaped, refused, skipped);
  if (skipped > 5) fail_msg("%d of 20 acquires with a 200 ms lease were cut", skipped);
  dblock_client_free(a);
  dblock_client_free(reaper);
}
/* A for_update row that was force-unlocked (which gives it an expiry in
 * the past) and then taken again is held by its new session's row lock:
 * a reaper pass skips it and deletes the other expired rows at once. (On
 * MariaDB every pass used to wait 5 s for that row lock and fail.) SQLite:
 * a held for_update lock is the database's write lock, which every writer
 * waits for — force-unlock is refused there, so this case cannot arise. */
static void reap_skips_held(const char *backend) {
  const char *url = tu_url(backend);
  char t[48];
  dblock_client *reaper, *a, *b, *admin;
  dblock_lock *la, *lb;
  dblock_lock_info info;
  int64_t deleted = -1, t0, el;
  int rc;
  snprintf(t, sizeof t, "reap_held_%d", (int)getpid());
  reaper = fresh(url, t, DBLOCK_STRATEGY_INSERT);
  a = tu_open(url, DBLOCK_STRATEGY_FOR_UPDATE, t, 0);
  b = tu_open(url, DBLOCK_STRATEGY_FOR_UPDATE, t, 0);
  admin = tu_open(url, DBLOCK_STRATEGY_FOR_UPDATE, t, 0);
  la = tu_acquire(a, "held", 0, 0);
  assert_int_equal(dblock_force_unlock(admin, "held", NULL), 0);
  lb = tu_acquire(b, "held", 5000, 0);
  plant(backend, url, t, 50, 0);
  t0 = tu_now_ms();
  if ((rc = dblock_reap(reaper, 0, 10, &deleted)) != 0)
    fail_msg("reap with a held for_update row: rc %d (%s)", rc, tu_errmsg(reaper));
  el = tu_now_ms() - t0;
  if (deleted != 50) fail_msg("reaped %lld rows, want the 50 expired ones", (long long)deleted);
  /* (the bug waited 5 s for the row lock; 4 s leaves a loaded host room) */
  if (el > 4000) fail_msg("the pass took %lld ms (waited for the held row?)", (long long)el);
  assert_int_equal(dblock_lock_inspect(&info, admin, "held"), 0);
  assert_int_equal(info.held, 1);
  assert_int_equal(dblock_lock_release(lb), 0);
  assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  dblock_client_free(a);
  dblock_client_free(b);
  dblock_client_free(admin);
  dblock_client_free(reaper);
}
static void test_reap_skips_held_postgres(void **s) { (void)s; reap_skips_held("postgres"); }
static void test_reap_skips_held_mysql(void **s) { (void)s; reap_skips_held("mysql"); }

static void test_race_renewal_sqlite(void **s) { (void)s; race_renewal("sqlite"); }
static void test_race_renewal_postgres(void **s) { (void)s; race_renewal("postgres"); }
static void test_race_renewal_mysql(void **s) { (void)s; race_renewal("mysql"); }

/* The reaper thread deletes expired rows on its interval and stops at once
 * when the client closes, even with a long interval. */
static void reaper_thread(const char *backend) {
  const char *url = tu_url(backend);
  char t[48];
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c, *d;
  int64_t t0;
  snprintf(t, sizeof t, "reap_thread_%d", (int)getpid());
  c = fresh(url, t, DBLOCK_STRATEGY_INSERT);
  plant(backend, url, t, 300, 10);
  o.table = t;
  o.reaper_interval_ms = 100;
  d = tu_open_opts(url, &o);
  t0 = tu_now_ms();
  while (count_like(backend, url, t, "exp") > 0 && tu_now_ms() - t0 < 3000) tu_sleep_ms(50);
  assert_int_equal(count_like(backend, url, t, "exp"), 0);
  assert_int_equal(count_like(backend, url, t, "live"), 10);
  dblock_client_free(d);
  o.reaper_interval_ms = 60000;
  d = tu_open_opts(url, &o);
  t0 = tu_now_ms();
  dblock_client_free(d);
  /* (not the interval's 60 s: closing its connections is all it waits
   * for, and a loaded host can stretch that past 100 ms) */
  if (tu_now_ms() - t0 > 2000)
    fail_msg("client_free with the reaper thread took %lld ms", (long long)(tu_now_ms() - t0));
  dblock_client_free(c);
}
static void test_reaper_thread_sqlite(void **s) { (void)s; reaper_thread("sqlite"); }
static void test_reaper_thread_postgres(void **s) { (void)s; reaper_thread("postgres"); }
static void test_reaper_thread_mysql(void **s) { (void)s; reaper_thread("mysql"); }

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(test_big_pass_sqlite),       cmocka_unit_test(test_big_pass_postgres),
      cmocka_unit_test(test_big_pass_mysql),        cmocka_unit_test(test_two_reapers_sqlite),
      cmocka_unit_test(test_two_reapers_postgres),  cmocka_unit_test(test_two_reapers_mysql),
      cmocka_unit_test(test_race_renewal_sqlite),   cmocka_unit_test(test_race_renewal_postgres),
      cmocka_unit_test(test_race_renewal_mysql),    cmocka_unit_test(test_reaper_thread_sqlite),
      cmocka_unit_test(test_reaper_thread_postgres), cmocka_unit_test(test_reaper_thread_mysql),
      cmocka_unit_test(test_reap_skips_held_postgres),
      cmocka_unit_test(test_reap_skips_held_mysql),
  };
  size_t n = tu_shard_tests(tests, sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("reaper", tests, n, NULL, NULL);
}
