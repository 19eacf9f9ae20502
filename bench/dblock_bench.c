/*
 * dblock_bench — one measurement of BENCH.md: a workload (W1-W5, MEM) for
 * one backend and strategy, either through dblock or as the raw-SQL floor,
 * printed as one JSON object.
 *
 * The floor runs BENCH.md's statements through dblock's driver layer
 * (src/drivers: one libpq / libmysqlclient / libsqlite3 call per
 * statement, the same prepared-statement cache dblock uses), with none of
 * the lock logic: so the ratio dblock / floor prices exactly what dblock
 * adds on top of the statements.
 *
 * Every cycle carries the check: an overlap detector and a non-atomic
 * counter per name in shared memory; a run that fails it says "FAIL".
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dblock.h"
#include "drivers/driver.h"
#ifdef DBLOCK_BENCH_REDIS
#include <hiredis/hiredis.h>
#endif

#define MAX_CLIENTS 32
#define MAX_SAMPLES 200000
#define MAX_NAMES 10000

typedef struct slot {
  atomic_int inside;
  long counter;       /* deliberately non-atomic */
  int64_t last_fence; /* the fence of the name's previous grant (written
                         inside the critical section only) */
  atomic_long grants;
} slot;

typedef struct child_out {
  long grants, statements, release_errors, acquire_errors, wakeups;
  long n;                  /* samples stored */
  int64_t max_wait_us;     /* including a wait still open at window end */
  int32_t wait_us[MAX_SAMPLES], cycle_us[MAX_SAMPLES];
} child_out;

typedef struct shared {
  atomic_long overlaps, fence_backwards;
  int64_t start_us, window_start_us, window_end_us;
  slot slots[MAX_NAMES];
  child_out out[MAX_CLIENTS];
} shared;

static struct {
  const char *url, *workload, *mode;
  dblock_strategy strategy;
  int clients, names, fair;
  int64_t warmup_ms, window_ms;
} cfg = {NULL, "W1", "dblock", DBLOCK_STRATEGY_INSERT, 1, 1, 0, 1000, 10000};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "dblock-bench: %s: %s\n", what, msg);
  exit(1);
}

/* ---- raw access (the floor, and table set-up) ------------------------ */

typedef struct raw {
  const dbl_driver *d;
  dbl_conn *c;
  dbl_url u;
  long statements;
} raw;

static void raw_open(raw *r) {
  char why[256];
  dbl_err e;
  memset(r, 0, sizeof *r);
  memset(&e, 0, sizeof e);
  if (dbl_url_parse(&r->u, cfg.url, why, sizeof why)) die("url", why);
  r->d = dbl_driver_for(&r->u);
  if (r->d->connect(&r->c, &r->u, 5000, &e)) die("connect", e.msg);
}

static void raw_close(raw *r) {
  r->d->close(r->c);
  dbl_url_free(&r->u);
}

/* Runs sql; returns affected rows, or -1 on a busy / lock wait error. */
static long raw_q(raw *r, const char *sql, const dbl_param *p, int np) {
  dbl_err e;
  dbl_res res;
  long n;
  memset(&e, 0, sizeof e);
  r->statements++;
  if (r->d->query(r->c, sql, p, np, &res, &e) != 0) {
    if (e.code == DBLOCK_EBUSY || e.code == DBLOCK_ETIMEOUT || e.code == DBLOCK_ERETRY) return -1;
    die("query", e.msg);
  }
  n = res.nrows ? res.nrows : (long)res.affected;
  dbl_res_clear(&res);
  return n;
}

static void raw_script(raw *r, const char *sql) {
  dbl_err e;
  memset(&e, 0, sizeof e);
  r->d->script(r->c, sql, &e); /* DROP ... IF EXISTS may warn: ignore */
}

static int dialect(const raw *r) { return r->d->dialect; }

/* Drops and recreates what a measurement uses. */
static void reset_tables(void) {
  raw r;
  char sql[1024];
  const char *t = dblock_strategy_name(cfg.strategy);
  if (strcmp(cfg.mode, "redis") == 0) return; /* (keys expire; names are reused) */
  raw_open(&r);
  if (strcmp(cfg.mode, "floor") == 0) {
    snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS bench_floor_%s", t);
    raw_script(&r, sql);
    snprintf(sql, sizeof sql,
             "CREATE TABLE bench_floor_%s (name VARCHAR(64) PRIMARY KEY, state INT NOT NULL "
             "DEFAULT 0, owner VARCHAR(64) NOT NULL DEFAULT '')",
             t);
    raw_script(&r, sql);
    if (cfg.strategy != DBLOCK_STRATEGY_INSERT) /* rows exist up front */
      for (int i = 0; i < cfg.names; i++) {
        char name[32];
        dbl_param p;
        snprintf(sql, sizeof sql, "INSERT INTO bench_floor_%s (name) VALUES (?)", t);
        snprintf(name, sizeof name, "n%d", i);
        p = DBL_STR(name);
        raw_q(&r, sql, &p, 1);
      }
  } else {
    const char *objs[] = {"%s_migrations", "%s_alive", "%s_queue", "%s_holders", "%s"};
    for (int i = 0; i < 5; i++) {
      char obj[64];
      snprintf(obj, sizeof obj, objs[i], "bench_locks");
      snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS %s%s",
               dialect(&r) == DBL_PG ? "public." : "", obj);
      raw_script(&r, sql);
    }
    if (dialect(&r) != DBL_LITE) {
      snprintf(sql, sizeof sql, "DROP SEQUENCE IF EXISTS %sbench_locks_fence_seq",
               dialect(&r) == DBL_PG ? "public." : "");
      raw_script(&r, sql);
    }
  }
  raw_close(&r);
  if (strcmp(cfg.mode, "dblock") == 0) {
    dblock_client *c;
    dblock_options o = DBLOCK_OPTIONS_INIT;
    o.table = "bench_locks";
    if (dblock_client_open(&c, cfg.url, &o) || dblock_migrate(c, NULL)) {
      dblock_error_info ei;
      dblock_last_error(&ei);
      die("migrate", ei.message);
    }
    /* for_update and optimistic keep a row per name: like the floor's, the
     * rows exist up front, so the window measures the steady state (a
     * name's first use costs one more, flushed, statement). n0 is made by
     * the library (one grant), the others are copies of it: rows in the
     * library's own format (MariaDB pads a for_update row: FU_TAKE in
     * src/sql/mysql.c) without a flushed statement per name. */
    if (cfg.strategy != DBLOCK_STRATEGY_INSERT && strcmp(cfg.workload, "W5") != 0 &&
        strcmp(cfg.workload, "MEM") != 0) {
      dblock_client *mk;
      dblock_lock *l;
      o.strategy = cfg.strategy;
      if (dblock_client_open(&mk, cfg.url, &o) || dblock_lock_acquire(&l, mk, "n0", 0, 0) ||
          dblock_lock_release(l)) {
        dblock_error_info ei;
        dblock_last_error(&ei);
        die("make n0", ei.message);
      }
      dblock_client_free(mk);
      raw_open(&r);
      r.d->begin(r.c, &(dbl_err){0}); /* (one flush for them all) */
      for (int i2 = 1; i2 < cfg.names; i2++) {
        char name[32];
        dbl_param p;
        snprintf(name, sizeof name, "n%d", i2);
        p = DBL_STR(name);
        raw_q(&r,
              "INSERT INTO bench_locks (name, strategy, state, version, owner_host, "
              "owner_token, acquired_at, renewed_at) SELECT ?, strategy, state, version, "
              "owner_host, owner_token, acquired_at, renewed_at FROM bench_locks "
              "WHERE name = 'n0'",
              &p, 1);
      }
      r.d->commit(r.c, &(dbl_err){0});
      raw_close(&r);
    }
    dblock_client_free(c);
  }
}

/* ---- one client ------------------------------------------------------ */

typedef struct locker {
  raw r;
  dblock_client *c;
#ifdef DBLOCK_BENCH_REDIS
  redisContext *rc;
  char sha[41];
#endif
  dblock_lock *held;
  char owner[32];
  int counting;
  long stmts0;
} locker;

/* Floor acquire, blocking: returns when granted. */
static void floor_acquire(locker *k, const char *name) {
  const char *t = dblock_strategy_name(cfg.strategy);
  char sql[256];
  dbl_param p[2];
  raw *r = &k->r;
  switch (cfg.strategy) {
  case DBLOCK_STRATEGY_FOR_UPDATE:
    p[0] = DBL_STR(name);
    for (;;) {
      if (dialect(r) == DBL_LITE) {
        r->statements++;
        if (r->d->begin(r->c, &(dbl_err){0}) == 0) return; /* the file lock is the lock */
        continue;
      }
      r->statements++;
      r->d->begin(r->c, &(dbl_err){0});
      snprintf(sql, sizeof sql, "SELECT name FROM bench_floor_%s WHERE name = ? FOR UPDATE", t);
      if (raw_q(r, sql, p, 1) >= 0) return;
      r->d->rollback(r->c, &(dbl_err){0});
    }
  case DBLOCK_STRATEGY_OPTIMISTIC:
    snprintf(sql, sizeof sql,
             "UPDATE bench_floor_%s SET state = 1, owner = ? WHERE name = ? AND state = 0", t);
    break;
  default:
    snprintf(sql, sizeof sql,
             dialect(r) == DBL_PG   ? "INSERT INTO bench_floor_%s (name, owner) VALUES (?, ?) "
                                      "ON CONFLICT DO NOTHING"
             : dialect(r) == DBL_MY ? "INSERT IGNORE INTO bench_floor_%s (name, owner) VALUES (?, ?)"
                                    : "INSERT OR IGNORE INTO bench_floor_%s (name, owner) VALUES (?, ?)",
             t);
    break;
  }
  if (cfg.strategy == DBLOCK_STRATEGY_OPTIMISTIC) {
    p[0] = DBL_STR(k->owner);
    p[1] = DBL_STR(name);
  } else {
    p[0] = DBL_STR(name);
    p[1] = DBL_STR(k->owner);
  }
  /* Polling floor: retry sleeping uniformly 0.5-1.5 ms (BENCH.md). */
  while (raw_q(r, sql, p, 2) != 1) sleep_us(500 + rand() % 1000);
}

static int floor_release(locker *k, const char *name) {
  const char *t = dblock_strategy_name(cfg.strategy);
  char sql[256];
  dbl_param p[2];
  raw *r = &k->r;
  if (cfg.strategy == DBLOCK_STRATEGY_FOR_UPDATE) {
    r->statements++;
    return r->d->commit(r->c, &(dbl_err){0});
  }
  snprintf(sql, sizeof sql,
           cfg.strategy == DBLOCK_STRATEGY_OPTIMISTIC
               ? "UPDATE bench_floor_%s SET state = 0, owner = '' WHERE name = ? AND owner = ?"
               : "DELETE FROM bench_floor_%s WHERE name = ? AND owner = ?",
           t);
  p[0] = DBL_STR(name);
  p[1] = DBL_STR(k->owner);
  return raw_q(r, sql, p, 2) == 1 ? 0 : -1;
}

/* ---- the Redis anchor (BENCH.md): SET NX PX to acquire, retrying like
 * the floor; a Lua compare-and-delete to release ---------------------- */
#ifdef DBLOCK_BENCH_REDIS
static const char REDIS_RELEASE[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

static void redis_open(locker *k) {
  const char *hp = cfg.url + strlen("redis://");
  char host[64];
  int port;
  redisReply *r;
  if (sscanf(hp, "%63[^:]:%d", host, &port) != 2) die("url", "want redis://HOST:PORT");
  k->rc = redisConnect(host, port);
  if (!k->rc || k->rc->err) die("redis connect", k->rc ? k->rc->errstr : "out of memory");
  r = redisCommand(k->rc, "SCRIPT LOAD %s", REDIS_RELEASE);
  if (!r || r->type != REDIS_REPLY_STRING) die("redis", "SCRIPT LOAD failed");
  snprintf(k->sha, sizeof k->sha, "%s", r->str);
  freeReplyObject(r);
}

static void redis_acquire(locker *k, const char *name) {
  for (;;) {
    redisReply *r = redisCommand(k->rc, "SET %s %s NX PX 30000", name, k->owner);
    int ok;
    k->r.statements++;
    if (!r) die("redis", k->rc->errstr);
    ok = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (ok) return;
    sleep_us(500 + rand() % 1000);
  }
}

static int redis_release(locker *k, const char *name) {
  redisReply *r = redisCommand(k->rc, "EVALSHA %s 1 %s %s", k->sha, name, k->owner);
  int ok;
  k->r.statements++;
  if (!r) die("redis", k->rc->errstr);
  ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return ok ? 0 : -1;
}
#endif

static void run_child(shared *sh, int me, int go_fd) {
  locker k;
  child_out *o = &sh->out[me];
  char go;
  int floor = strcmp(cfg.mode, "floor") == 0, redis = strcmp(cfg.mode, "redis") == 0;
  unsigned seed = (unsigned)(getpid() * 2654435761u);
  memset(&k, 0, sizeof k);
  snprintf(k.owner, sizeof k.owner, "c%d-%d", me, (int)getpid());
  srand(seed);
  if (redis) {
#ifdef DBLOCK_BENCH_REDIS
    redis_open(&k);
#endif
    floor = 1; /* (counted like the floor: commands sent) */
  } else if (floor) {
    raw_open(&k.r);
  } else {
    dblock_options opt = DBLOCK_OPTIONS_INIT;
    opt.strategy = cfg.strategy;
    opt.table = "bench_locks";
    opt.fair = cfg.fair;
    if (dblock_client_open(&k.c, cfg.url, &opt)) die("open", "dblock_client_open failed");
  }
  if (read(go_fd, &go, 1) < 0) _exit(2);
  for (;;) {
    char name[32];
    int64_t t0 = now_us(), tg, t1;
    int idx = cfg.names > 1 ? (int)(rand_r(&seed) % (unsigned)cfg.names) : 0;
    int in_window;
    slot *s = &sh->slots[idx];
    int expect = 0;
    long v;
    if (t0 >= sh->window_end_us) break;
    if (t0 >= sh->window_start_us && !k.counting) { /* statements from the window on */
      k.counting = 1;
      k.stmts0 = floor ? k.r.statements : (long)dblock_client_round_trips(k.c);
    }
    snprintf(name, sizeof name, "n%d", idx);
    if (redis) {
#ifdef DBLOCK_BENCH_REDIS
      redis_acquire(&k, name);
#endif
    } else if (floor) {
      floor_acquire(&k, name);
    } else if (dblock_lock_acquire(&k.held, k.c, name, -1, 0) != 0) {
      o->acquire_errors++;
      continue;
    }
    tg = now_us();
    /* The check: nobody else inside, and a non-atomic increment; for
     * dblock also the fence order — each grant's fence above the name's
     * previous one (the counter orders the grants). */
    if (!atomic_compare_exchange_strong(&s->inside, &expect, me + 1))
      atomic_fetch_add(&sh->overlaps, 1);
    if (!floor) {
      int64_t f = dblock_lock_fence(k.held);
      if (f <= s->last_fence) atomic_fetch_add(&sh->fence_backwards, 1);
      s->last_fence = f;
    }
    v = s->counter;
    atomic_signal_fence(memory_order_seq_cst);
    s->counter = v + 1;
    atomic_fetch_add(&s->grants, 1);
    expect = me + 1;
    atomic_compare_exchange_strong(&s->inside, &expect, 0);
#ifdef DBLOCK_BENCH_REDIS
    if (redis ? redis_release(&k, name) : floor ? floor_release(&k, name)
              : dblock_lock_release(k.held))
      o->release_errors++;
#else
    if (floor ? floor_release(&k, name) : dblock_lock_release(k.held)) o->release_errors++;
#endif
    t1 = now_us();
    in_window = tg >= sh->window_start_us && tg < sh->window_end_us;
    if (t0 < sh->window_end_us && tg >= sh->window_end_us &&
        sh->window_end_us - t0 > o->max_wait_us)
      o->max_wait_us = sh->window_end_us - t0; /* still waiting at the close */
    if (!in_window) continue;
    o->grants++;
    if (tg - t0 > o->max_wait_us) o->max_wait_us = tg - t0;
    if (o->n < MAX_SAMPLES) {
      o->wait_us[o->n] = (int32_t)(tg - t0);
      o->cycle_us[o->n] = (int32_t)(t1 - t0);
      o->n++;
    }
  }
  o->statements = (floor ? k.r.statements : (long)dblock_client_round_trips(k.c)) - k.stmts0;
  if (!floor) {
    dblock_stats st;
    if (dblock_client_stats(k.c, &st, sizeof st) == 0) o->wakeups = (long)st.wakeups;
  }
#ifdef DBLOCK_BENCH_REDIS
  if (redis) redisFree(k.rc);
  else
#endif
  if (floor) raw_close(&k.r);
  else dblock_client_free(k.c);
  _exit(0);
}

static int cmp32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static double pct(const int32_t *v, long n, double q) {
  long rank;
  if (n == 0) return 0;
  rank = (long)(q * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  return v[rank - 1] / 1000.0;
}

/* How a waiter learns that the name is free (BENCH.md, W2): the client's
 * waiter (src/core/wait.h) — the server's lock queue (for_update), a
 * release's notification (dblock on PostgreSQL, insert / optimistic), the
 * wake board (dblock on SQLite, insert / optimistic), or polling. */
static const char *wake_path(void) {
  if (strcmp(cfg.mode, "dblock") != 0)
    return cfg.strategy == DBLOCK_STRATEGY_FOR_UPDATE && strcmp(cfg.mode, "floor") == 0
               ? "server queue"
               : "poll";
  if (cfg.strategy == DBLOCK_STRATEGY_FOR_UPDATE) return "server queue";
  if (strncmp(cfg.url, "postgres", 8) == 0) return "notification";
  if (strncmp(cfg.url, "sqlite", 6) == 0) return "wake board";
  return "poll";
}

static void run_locking(void) {
  shared *sh = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int fds[2];
  pid_t pids[MAX_CLIENTS];
  long total = 0, n = 0, minc = -1, maxc = 0, statements = 0, rel_err = 0, acq_err = 0, bad = 0;
  long wakeups = 0;
  int64_t max_wait = 0;
  int32_t *waits, *cycles;
  int ok = 1;
  if (sh == MAP_FAILED) die("mmap", strerror(errno));
  memset(sh, 0, sizeof *sh);
  reset_tables();
  if (pipe(fds)) die("pipe", strerror(errno));
  fflush(NULL);
  for (int i = 0; i < cfg.clients; i++)
    if ((pids[i] = fork()) == 0) {
      close(fds[1]);
      run_child(sh, i, fds[0]);
    }
  close(fds[0]);
  sleep_us(300000); /* all connect first */
  sh->start_us = now_us();
  sh->window_start_us = sh->start_us + cfg.warmup_ms * 1000;
  sh->window_end_us = sh->window_start_us + cfg.window_ms * 1000;
  close(fds[1]); /* start together */
  for (int i = 0; i < cfg.clients; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  waits = malloc(sizeof *waits * (size_t)MAX_SAMPLES * (size_t)cfg.clients);
  cycles = malloc(sizeof *cycles * (size_t)MAX_SAMPLES * (size_t)cfg.clients);
  for (int i = 0; i < cfg.clients; i++) {
    child_out *o = &sh->out[i];
    memcpy(waits + n, o->wait_us, sizeof *waits * (size_t)o->n);
    memcpy(cycles + n, o->cycle_us, sizeof *cycles * (size_t)o->n);
    n += o->n;
    total += o->grants;
    statements += o->statements;
    wakeups += o->wakeups;
    rel_err += o->release_errors;
    acq_err += o->acquire_errors;
    if (minc < 0 || o->grants < minc) minc = o->grants;
    if (o->grants > maxc) maxc = o->grants;
    if (o->max_wait_us > max_wait) max_wait = o->max_wait_us;
  }
  qsort(waits, (size_t)n, sizeof *waits, cmp32);
  qsort(cycles, (size_t)n, sizeof *cycles, cmp32);
  for (int i = 0; i < cfg.names; i++)
    if (sh->slots[i].counter != atomic_load(&sh->slots[i].grants)) ok = 0;
  if (atomic_load(&sh->overlaps) || atomic_load(&sh->fence_backwards) || rel_err || acq_err ||
      bad)
    ok = 0;
  printf("{\"workload\":\"%s\",\"mode\":\"%s\",\"strategy\":\"%s\",\"clients\":%d,\"names\":%d,"
         "\"window_ms\":%lld,\"grants\":%ld,\"grants_per_s\":%.1f,"
         "\"wait_p50_ms\":%.3f,\"wait_p99_ms\":%.3f,\"wait_max_ms\":%.3f,"
         "\"cycle_p50_ms\":%.3f,\"cycle_p99_ms\":%.3f,"
         "\"grants_min\":%ld,\"grants_max\":%ld,\"fairness\":%.3f,"
         "\"statements_per_grant\":%.2f,\"wakeups_per_grant\":%.2f,\"wake\":\"%s\","
         "\"overlaps\":%ld,\"fence_backwards\":%ld,\"release_errors\":%ld,"
         "\"check\":\"%s\"}\n",
         cfg.workload, cfg.mode, dblock_strategy_name(cfg.strategy), cfg.clients, cfg.names,
         (long long)cfg.window_ms, total, total * 1000.0 / (double)cfg.window_ms,
         pct(waits, n, 0.5), pct(waits, n, 0.99), max_wait / 1000.0, pct(cycles, n, 0.5),
         pct(cycles, n, 0.99), minc, maxc, maxc ? (double)minc / (double)maxc : 0.0,
         total ? (double)statements / (double)total : 0.0,
         total ? (double)wakeups / (double)total : 0.0, wake_path(),
         (long)atomic_load(&sh->overlaps), (long)atomic_load(&sh->fence_backwards), rel_err,
         ok && total > 0 ? "ok" : "FAIL");
  free(waits);
  free(cycles);
  munmap(sh, sizeof *sh);
}

/* ---- W5: the reaper -------------------------------------------------- */

static void plant(raw *r, int count, const char *prefix, const char *sign) {
  char sql[1024];
  if (dialect(r) == DBL_PG)
    snprintf(sql, sizeof sql,
             "INSERT INTO public.bench_locks (name, strategy, state, owner_token, hold_count, "
             "fence, acquired_at, expires_at) SELECT '%s' || g, 'insert', 1, 'x', 1, g, "
             "now(), now() %s interval '1 hour' FROM generate_series(1, %d) g",
             prefix, sign, count);
  else if (dialect(r) == DBL_MY)
    snprintf(sql, sizeof sql,
             "INSERT INTO bench_locks (name, strategy, state, owner_token, hold_count, fence, "
             "acquired_at, expires_at) SELECT CONCAT('%s', seq), 'insert', 1, 'x', 1, seq, "
             "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) %s INTERVAL 1 HOUR FROM seq_1_to_%d",
             prefix, sign, count);
  else
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %d) "
             "INSERT INTO bench_locks (name, strategy, state, owner_token, hold_count, fence, "
             "acquired_at, expires_at) SELECT '%s' || n, 'insert', 1, 'x', 1, n, 0, "
             "(strftime('%%s','now') %s 3600) * 1000000 FROM g",
             count, prefix, sign);
  raw_script(r, sql);
}

static void run_reaper(void) {
  raw r;
  dblock_client *reaper, *other;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  int64_t deleted = 0, t0, el, worst = 0, live = 0;
  long cycles = 0;
  pid_t pid;
  int fds[2];
  dbl_res res;
  dbl_err e;
  cfg.mode = "dblock";
  reset_tables();
  raw_open(&r);
  plant(&r, 100000, "exp-", "-");
  plant(&r, 1000, "live-", "+");
  o.table = "bench_locks";
  if (dblock_client_open(&reaper, cfg.url, &o)) die("open", "reaper");
  if (pipe(fds)) die("pipe", strerror(errno));
  if ((pid = fork()) == 0) { /* the concurrent acquirer */
    int64_t w = 0;
    long n = 0;
    char go;
    close(fds[0]);
    if (dblock_client_open(&other, cfg.url, &o)) _exit(1);
    for (int64_t end = now_us() + 200000 + cfg.window_ms * 1000; now_us() < end; n++) {
      dblock_lock *l;
      int64_t a = now_us();
      char name[32];
      snprintf(name, sizeof name, "other-%ld", n % 100);
      if (dblock_lock_acquire(&l, other, name, -1, 0) == 0) dblock_lock_release(l);
      if (now_us() - a > w) w = now_us() - a;
    }
    (void)go;
    if (write(fds[1], &w, sizeof w) != sizeof w || write(fds[1], &n, sizeof n) != sizeof n) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  sleep_us(200000);
  t0 = now_us();
  if (dblock_reap(reaper, 0, 1000, &deleted)) die("reap", "failed");
  el = now_us() - t0;
  if (read(fds[0], &worst, sizeof worst) != sizeof worst || read(fds[0], &cycles, sizeof cycles) != sizeof cycles)
    die("acquirer", "failed");
  waitpid(pid, NULL, 0);
  memset(&e, 0, sizeof e);
  r.d->query(r.c,
             dialect(&r) == DBL_PG ? "SELECT COUNT(*) FROM public.bench_locks WHERE name LIKE 'live-%'"
                                   : "SELECT COUNT(*) FROM bench_locks WHERE name LIKE 'live-%'",
             NULL, 0, &res, &e);
  live = dbl_res_i64(&res, 0, 0);
  dbl_res_clear(&res);
  raw_close(&r);
  dblock_client_free(reaper);
  printf("{\"workload\":\"W5\",\"mode\":\"dblock\",\"deleted\":%lld,\"seconds\":%.3f,"
         "\"rows_per_s\":%.0f,\"acquire_max_wait_ms\":%.3f,\"acquire_cycles\":%ld,"
         "\"live_survived\":%lld,\"check\":\"%s\"}\n",
         (long long)deleted, el / 1e6, deleted * 1e6 / (double)(el ? el : 1), worst / 1000.0,
         cycles, (long long)live, deleted == 100000 && live == 1000 ? "ok" : "FAIL");
}

/* ---- memory: 10,000 locks held at once ---------------------------------- */

static long rss_kb(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void run_memory(void) {
  dblock_client *c;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  static dblock_lock *held[10000];
  long before, after;
  int got = 0;
  cfg.mode = "dblock";
  reset_tables();
  o.table = "bench_locks";
  o.strategy = DBLOCK_STRATEGY_INSERT;
  if (dblock_client_open(&c, cfg.url, &o)) die("open", "memory");
  before = rss_kb();
  for (int i = 0; i < 10000; i++) {
    char name[32];
    snprintf(name, sizeof name, "mem-%d", i);
    if (dblock_lock_acquire(&held[i], c, name, 0, 0) == 0) got++;
  }
  after = rss_kb();
  for (int i = 0; i < got; i++) dblock_lock_release(held[i]);
  dblock_client_free(c);
  printf("{\"workload\":\"MEM\",\"mode\":\"dblock\",\"locks\":%d,\"rss_growth_mb\":%.2f,"
         "\"check\":\"%s\"}\n",
         got, (after - before) / 1024.0, got == 10000 ? "ok" : "FAIL");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"url", required_argument, NULL, 'u'},      {"strategy", required_argument, NULL, 's'},
      {"workload", required_argument, NULL, 'w'}, {"mode", required_argument, NULL, 'm'},
      {"clients", required_argument, NULL, 'c'},  {"names", required_argument, NULL, 'n'},
      {"warmup", required_argument, NULL, 'W'},   {"window", required_argument, NULL, 'T'},
      {"fair", no_argument, NULL, 'f'},           {"features", no_argument, NULL, 'F'},
      {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'u': cfg.url = optarg; break;
    case 's':
      if (dblock_strategy_parse(&cfg.strategy, optarg)) die("strategy", optarg);
      break;
    case 'w': cfg.workload = optarg; break;
    case 'm': cfg.mode = optarg; break;
    case 'c': cfg.clients = atoi(optarg); break;
    case 'n': cfg.names = atoi(optarg); break;
    case 'W': cfg.warmup_ms = atoll(optarg); break;
    case 'T': cfg.window_ms = atoll(optarg); break;
    case 'f': cfg.fair = 1; break;
    case 'F': /* what this build can measure besides dblock and the floor */
#ifdef DBLOCK_BENCH_REDIS
      puts("redis");
#endif
      return 0;
    default:
      fprintf(stderr, "usage: dblock-bench --url U --strategy S --workload W1..W5|MEM "
                      "--mode dblock|floor|redis [--clients N] [--names N] [--warmup MS] "
                      "[--window MS] [--fair]\n");
      return 2;
    }
  }
  if (!cfg.url || cfg.clients < 1 || cfg.clients > MAX_CLIENTS || cfg.names < 1 ||
      cfg.names > MAX_NAMES)
    die("usage", "--url, 1..32 clients, 1..10000 names");
#ifndef DBLOCK_BENCH_REDIS
  if (strcmp(cfg.mode, "redis") == 0) die("usage", "built without hiredis (libhiredis-dev)");
#endif
  if (strcmp(cfg.workload, "W5") == 0) run_reaper();
  else if (strcmp(cfg.workload, "MEM") == 0) run_memory();
  else run_locking();
  return 0;
}
