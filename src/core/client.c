/*
 * client.c — opening and closing a client: its options, owner identity,
 * statements (expanded once), fork rules and log; the connections are
 * pool.c's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../sql/fence.h"
#include "internal.h"
#include "wait.h"

#define DEFAULT_TABLE "dblock_locks"
#define TABLE_MAX 40 /* leaves room for suffixes within PostgreSQL's 63 */

int64_t dbl_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The calling thread's id, asked of the kernel once per thread: a thread's
 * id never changes, and in a forked child (whose one thread inherits the
 * parent thread's copy) the atfork handler forgets it. */
static _Thread_local int64_t cached_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;
static void tid_forget(void) { cached_tid = 0; }
static void tid_register(void) { pthread_atfork(NULL, NULL, tid_forget); }

int64_t dbl_thread_id(void) {
  if (!cached_tid) {
    pthread_once(&tid_once, tid_register);
    cached_tid = (int64_t)syscall(SYS_gettid);
  }
  return cached_tid;
}

const char *dblock_strategy_name(dblock_strategy s) {
  const dbl_strategy *st = dbl_strategy_by_id(s);
  return st ? st->name : NULL;
}

int dblock_strategy_parse(dblock_strategy *out, const char *name) {
  char canon[32];
  const dbl_strategy *st;
  if (!out || !name || strlen(name) >= sizeof canon) return DBLOCK_EINVAL;
  /* ("for-update" is accepted for "for_update": shells and flags like dashes) */
  for (size_t i = 0; i <= strlen(name); i++) canon[i] = name[i] == '-' ? '_' : name[i];
  if (!(st = dbl_strategy_named(canon))) return DBLOCK_EINVAL;
  *out = st->id;
  return 0;
}

/* A table name is lowercase [a-z_][a-z0-9_]* of at most TABLE_MAX bytes:
 * no quoting is ever needed, and no backend folds or truncates it. */
static int check_table(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > TABLE_MAX) return 0;
  if (!(t[0] == '_' || (t[0] >= 'a' && t[0] <= 'z'))) return 0;
  for (size_t i = 1; i < n; i++)
    if (!(t[i] == '_' || (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9')))
      return 0;
  return 1;
}

/* Valid UTF-8 (no overlongs, no surrogates), 1..DBLOCK_NAME_MAX bytes. */
int dbl_check_name(dblock_client *cl, const char *name) {
  const unsigned char *s = (const unsigned char *)name;
  size_t n;
  if (!name) return dbl_failf(cl, DBLOCK_EINVAL, "lock name is NULL");
  n = strlen(name);
  if (n == 0) return dbl_failf(cl, DBLOCK_EINVAL, "lock name is empty");
  if (n > DBLOCK_NAME_MAX)
    return dbl_failf(cl, DBLOCK_EINVAL, "lock name is %zu bytes; the limit is %d",
                     n, DBLOCK_NAME_MAX);
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t k;
    unsigned cp;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; }
    else goto bad;
    if (i + k >= n) goto bad;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) goto bad;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      goto bad;
    i += k + 1;
  }
  return 0;
bad:
  return dbl_failf(cl, DBLOCK_EINVAL, "lock name is not valid UTF-8");
}

char *dbl_expand(const dblock_client *cl, const char *tmpl) {
  size_t cap = strlen(tmpl) * 2 + 256, o = 0;
  char *s = malloc(cap), check[64];
  if (!s) return NULL;
  /* the fenced-write check function: dblock_check for the default table,
   * else <table>_check (one per table: it reads that table) */
  if (strcmp(cl->table, DEFAULT_TABLE) == 0) snprintf(check, sizeof check, "dblock_check");
  else snprintf(check, sizeof check, "%s_check", cl->table);
  for (const char *p = tmpl; *p;) {
    const char *rep = NULL;
    size_t skip = 0;
    if (strncmp(p, "${table}", 8) == 0) rep = cl->table, skip = 8;
    else if (strncmp(p, "${schema}", 9) == 0) rep = cl->schema, skip = 9;
    else if (strncmp(p, "${check}", 8) == 0) rep = check, skip = 8;
    if (rep) {
      size_t rl = strlen(rep);
      if (o + rl + 1 >= cap) { free(s); return NULL; }
      memcpy(s + o, rep, rl);
      o += rl;
      p += skip;
    } else {
      if (o + 2 >= cap) { free(s); return NULL; }
      s[o++] = *p++;
    }
  }
  s[o] = 0;
  return s;
}

/* Expands the dialect's statement table once, at open: a statement is
 * then an array lookup, with no lock and no failure. */
static int expand_statements(dblock_client *cl) {
  cl->dl = dbl_dialect_of(cl->drv->dialect);
  cl->defs = cl->dl->stmts;
  for (int i = 0; i < DBL_S_COUNT; i++)
    if (cl->defs[i].sql && !(cl->sqls[i] = dbl_expand(cl, cl->defs[i].sql)))
      return dbl_failf(cl, DBLOCK_ENOMEM, "out of memory");
  return 0;
}

void dbl_op_init(dbl_op *op, dblock_client *cl, dbl_pconn *pc,
                 struct dbl_held *h, dbl_err *e) {
  memset(op, 0, sizeof *op);
  op->drv = cl->drv;
  op->conn = pc ? pc->c : NULL;
  op->clock_offset_us = pc ? pc->clock_offset_us : 0;
  op->defs = cl->defs;
  op->sqls = (const char *const *)cl->sqls;
  op->table = cl->table;
  op->host = cl->host;
  op->token = cl->token;
  op->pid = cl->pid;
  op->e = e;
  op->version_hint = -1;
  if (h) {
    op->g.fence = h->fence;
    op->g.holds = h->holds;
    op->g.expires_us = h->expires_us;
    op->g.version = h->version;
    op->name = h->name;
    op->name_len = h->name_len;
    op->thread = h->thread;
    op->lease_ms = h->lease_ms;
  }
}

/* ---- Open / free ------------------------------------------------------- */

static int fill_options(dblock_client *cl, const dblock_options *o) {
  dblock_options d = DBLOCK_OPTIONS_INIT;
  if (o) {
    if (o->version < 1 || o->version > DBLOCK_OPTIONS_VERSION)
      return dbl_failf(cl, DBLOCK_EINVAL,
                       "dblock_options.version is %u; this library knows 1..%d",
                       o->version, DBLOCK_OPTIONS_VERSION);
    /* An older caller's struct ends before the fields of later versions. */
    if (o->version == 1) memcpy(&d, o, offsetof(dblock_options, call_timeout_ms));
    else if (o->version == 2) memcpy(&d, o, offsetof(dblock_options, read_only));
    else if (o->version == 3) memcpy(&d, o, offsetof(dblock_options, log_level));
    else if (o->version == 4) memcpy(&d, o, offsetof(dblock_options, fair));
    else d = *o;
  }
  if (d.strategy == DBLOCK_STRATEGY_DEFAULT) d.strategy = DBLOCK_STRATEGY_INSERT;
  if (!dblock_strategy_name(d.strategy))
    return dbl_failf(cl, DBLOCK_EINVAL, "unknown strategy %d", (int)d.strategy);
  if (d.lease_ms < 0 || d.backoff_min_ms < 0 || d.backoff_max_ms < 0 ||
      d.connect_timeout_ms < 0 || d.reaper_interval_ms < 0 ||
      d.reaper_grace_ms < 0 || d.pool_size < 0 || d.call_timeout_ms < 0 ||
      d.loss_margin_ms < 0)
    return dbl_failf(cl, DBLOCK_EINVAL, "negative value in dblock_options");
  if (d.fair != 0 && d.fair != 1)
    return dbl_failf(cl, DBLOCK_EINVAL, "fair must be 0 or 1 (it is %d)", d.fair);
  if (!d.lease_ms) d.lease_ms = 30000;
  if (d.lease_ms < 100)
    return dbl_failf(cl, DBLOCK_EINVAL, "lease_ms must be at least 100");
  if (!d.backoff_min_ms) d.backoff_min_ms = 2;
  if (!d.backoff_max_ms) d.backoff_max_ms = 250;
  if (d.backoff_max_ms < d.backoff_min_ms) d.backoff_max_ms = d.backoff_min_ms;
  if (!d.connect_timeout_ms) d.connect_timeout_ms = 5000;
  if (!d.call_timeout_ms) d.call_timeout_ms = 10000;
  if (d.call_timeout_ms < 100)
    return dbl_failf(cl, DBLOCK_EINVAL, "call_timeout_ms must be at least 100");
  if (!d.pool_size) d.pool_size = 4;
  if (!d.log_level) d.log_level = DBLOCK_LOG_WARNING;
  if (d.log_level < DBLOCK_LOG_WARNING || d.log_level > DBLOCK_LOG_INFO)
    return dbl_failf(cl, DBLOCK_EINVAL, "log_level must be DBLOCK_LOG_WARNING or DBLOCK_LOG_INFO");
  if (d.table && !check_table(d.table))
    return dbl_failf(cl, DBLOCK_EINVAL,
                     "bad table name: use lowercase letters, digits and '_' "
                     "(not first), at most %d bytes",
                     TABLE_MAX);
  snprintf(cl->table, sizeof cl->table, "%s", d.table ? d.table : DEFAULT_TABLE);
  snprintf(cl->schema, sizeof cl->schema, "public");
  if (d.owner_host) snprintf(cl->host, sizeof cl->host, "%s", d.owner_host);
  else if (gethostname(cl->host, sizeof cl->host - 1) != 0)
    snprintf(cl->host, sizeof cl->host, "unknown");
  /* Pointers in the copy must not outlive the caller's strings. */
  d.table = NULL;
  d.owner_host = NULL;
  cl->opts = d;
  return 0;
}

int dbl_read_only(dblock_client *cl) {
  return dbl_failf(cl, DBLOCK_EPERM,
                   "this client was opened read-only (dblock_options.read_only): it inspects "
                   "locks but takes, releases and changes none");
}

_Thread_local const dblock_client *dbl_tls_callback;

static void make_token(char out[33]);

int dbl_foreign(const dblock_client *cl) {
  long long me = (long long)getpid(), t = atomic_load(&cl->threads_pid);
  if (t != 0 && t != me) return 1;
  /* (an embedded backend has no probe: driver.h) */
  return cl->drv && !cl->drv->probe && cl->pid != 0 && cl->pid != (int64_t)me;
}

int dbl_fork_guard(dblock_client *cl) {
  if (dbl_foreign(cl)) {
    dbl_err e;
    memset(&e, 0, sizeof e);
    (void)dbl_fork_refusal(cl, &e);
    return dbl_fail(cl, &e);
  }
  if (cl->pid != (int64_t)getpid()) {
    /* Adopted (no thread at the fork): an owner of its own, so that no
     * row of the parent's ever reads as this process's (token + thread
     * id), and owner_pid says who holds. */
    dbl_lock(cl);
    if (cl->pid != (int64_t)getpid()) {
      cl->pid = (int64_t)getpid();
      make_token(cl->token);
      snprintf(cl->channel, sizeof cl->channel, "dblock_%.24s", cl->token);
    }
    dbl_unlock(cl);
  }
  return 0;
}

void dbl_threads_here(dblock_client *cl) {
  long long none = 0;
  (void)atomic_compare_exchange_strong(&cl->threads_pid, &none, (long long)getpid());
}

int dbl_callback_guard(dblock_client *cl) {
  if (!cl || dbl_tls_callback != cl) return 0;
  return dbl_failf(cl, DBLOCK_EDEADLK,
                   "called from this client's own on_lost or log callback, where it could "
                   "wait for the thread running the callback: note the event and act on it "
                   "from another thread");
}

void dbl_log(dblock_client *cl, int level, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  if (level > cl->opts.log_level) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (cl->opts.log) {
    const dblock_client *outer = dbl_tls_callback;
    dbl_tls_callback = cl;
    cl->opts.log(level, msg, cl->opts.log_arg);
    dbl_tls_callback = outer;
  } else fprintf(stderr, "dblock: %s: %s\n", level <= DBLOCK_LOG_WARNING ? "warning" : "info", msg);
}

struct open_cut { const dbl_driver *drv; dbl_pconn *pc; };
static void cut_pconn(void *arg) {
  struct open_cut *k = arg;
  k->pc->interrupted = 1;
  k->drv->interrupt(k->pc->c);
}

/* The check at open: the full probe (under its own time limit: the
 * watchdog is not running yet), the guard, and a warning for every way the
 * topology can lose a granted lock (dbl_topology_risks). */
static int open_check(dblock_client *cl, dbl_pconn *pc, dbl_err *e) {
  dbl_topology t;
  dbl_timer tm;
  struct open_cut k = {cl->drv, pc};
  char risks[4][320];
  int rc, n;
  if (!cl->drv->probe) return 0;
  dbl_timer_start(&tm, cl->opts.call_timeout_ms, cut_pconn, &k);
  rc = cl->drv->probe(pc->c, &t, 1, e);
  if (dbl_timer_stop(&tm) && rc == 0)
    rc = dbl_err_set(e, DBLOCK_ECONN, "08006", 0, "no answer from the server in time");
  if (rc) return rc;
  if ((rc = dbl_topology_guard(cl, &t, e)) != 0) return rc;
  if (!cl->opts.read_only) {
    n = dbl_topology_risks(&t, risks, 4);
    for (int i = 0; i < n; i++) dbl_warn(cl, "%s", risks[i]);
  }
  return 0;
}

static void make_token(char out[33]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { /* no entropy source: fall back to time and pid */
      uint64_t x = (uint64_t)dbl_mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
      for (size_t i = got; i < sizeof b; i++) b[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)i;
      break;
    }
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof b; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

int dblock_client_open(dblock_client **out, const char *url,
                       const dblock_options *opts) {
  dblock_client *cl;
  char why[256];
  dbl_err e;
  dbl_pconn *pc = NULL;
  int rc;
  if (!out) return dbl_failf(NULL, DBLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!url) url = getenv("DBLOCK_URL");
  if (!(cl = calloc(1, sizeof *cl))) return dbl_failf(NULL, DBLOCK_ENOMEM, "out of memory");
  dbl_mutex_init(cl);
  {
    /* Timed waits (watchdog, reaper) measure by the monotonic clock, so a
     * wall-clock jump neither stalls nor rushes a renewal. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cl->cv, &ca);
    pthread_cond_init(&cl->wd.wake, &ca);
    pthread_cond_init(&cl->reaper.wake, &ca);
    pthread_cond_init(&cl->wd.work, &ca);
    pthread_cond_init(&cl->pool.cv, &ca);
    pthread_condattr_destroy(&ca);
  }
  if (dbl_cancel_init(cl) != 0) {
    rc = dbl_failf(cl, DBLOCK_ENOMEM, "cannot create the cancel pipe: out of descriptors?");
    goto err;
  }
  if ((rc = fill_options(cl, opts)) != 0) goto err;
  if ((rc = dbl_url_parse(&cl->url, url, why, sizeof why)) != 0) {
    rc = dbl_failf(cl, rc, "%s", rc == DBLOCK_ENOMEM ? "out of memory" : why);
    goto err;
  }
  if (!(cl->drv = dbl_driver_for(&cl->url))) {
    static const char *const how[] = {
        [DBL_B_PG] = "PostgreSQL: make WITH_PG=1, with libpq-dev",
        [DBL_B_MY] = "MySQL/MariaDB: make WITH_MYSQL=1, with libmariadb-dev",
        [DBL_B_LITE] = "SQLite: make WITH_SQLITE=1, with libsqlite3-dev"};
    rc = dbl_failf(cl, DBLOCK_EUNSUPPORTED,
                   "this libdblock was built without the backend of '%s' (%s)",
                   cl->url.redacted,
                   cl->url.backend > DBL_B_NONE && cl->url.backend <= DBL_B_LITE
                       ? how[cl->url.backend]
                       : "unknown backend");
    goto err;
  }
  cl->strat = dbl_strategy_by_id(cl->opts.strategy);
  if ((rc = expand_statements(cl)) != 0) goto err;
  if (cl->opts.fair && !dbl_queue_possible(cl)) {
    rc = dbl_failf(cl, DBLOCK_EUNSUPPORTED,
                   "fair mode needs dblock's wait queue: PostgreSQL with the insert or "
                   "optimistic strategy");
    goto err;
  }
  cl->waiter = dbl_waiter_for(cl);
  cl->pid = (int64_t)getpid();
  make_token(cl->token);
  snprintf(cl->channel, sizeof cl->channel, "dblock_%.24s", cl->token);
  memset(&e, 0, sizeof e);
  /* Connect once now so a bad URL or password, a replica or a topology
   * the strategy cannot work on fails here (the lock table need not exist
   * yet: dblock_migrate creates it). */
  if ((rc = dbl_pool_open(cl, &pc, 0, &e)) != 0) {
    rc = dbl_fail(cl, &e);
    goto err;
  }
  if ((rc = open_check(cl, pc, &e)) != 0) {
    dbl_pool_discard(cl, pc);
    rc = dbl_fail(cl, &e);
    goto err;
  }
  dbl_pool_put(cl, pc);
  /* (The watchdog starts with the first call that needs bounding: a
   * client that is opened and then forked has no thread yet.) */
  if (cl->opts.reaper_interval_ms > 0 && (rc = dbl_reaper_start(cl)) != 0) goto err;
  *out = cl;
  return 0;
err:
  dblock_client_free(cl);
  return rc;
}

/* Tells on_lost, on the caller's thread, of every loss declared but not
 * yet told once the workers have stopped — queued while every teller was
 * busy in a slow callback, or declared by is_lost just before — and of
 * every hold whose loss deadline had passed at `called` (when
 * dblock_client_free was called: not one that passed only because the
 * free stopped renewing it): on_lost is called once per lost grant, and
 * is_lost may already have said 1 for it. Called with no other thread of
 * the client left; the list is looked at again after each call, in which
 * is_lost may have declared another. */
static void tell_untold(dblock_client *cl, int64_t called) {
  struct dbl_held *h;
  dbl_lock(cl);
  for (h = cl->held; h; h = h->next) (void)dbl_declare_if_due(cl, h, called);
  do {
    for (h = cl->held; h; h = h->next) {
      /* (one that another thread of the caller's is telling — a release
       * racing the free, which dblock.h rules out — is waited for) */
      while (h->lost_notified == LOST_TELLING) dbl_wait(cl, &cl->cv);
      if (h->lost_notified == LOST_QUEUED) {
        h->lost_notified = LOST_TELLING;
        cl->wd.ntell--;
        dbl_tell_locked(cl, h); /* (lets mu go during the callback) */
        break;
      }
    }
  } while (h);
  dbl_unlock(cl);
}

void dblock_client_free(dblock_client *cl) {
  dbl_pconn *pc;
  struct dbl_held *h;
  int64_t called = dbl_mono_ms();
  if (!cl) return;
  /* A forked child's copy of a client whose threads run in the parent
   * (they are not in this process: a join would wait forever; the mutex
   * may have been held by one of them at the fork; the holds are the
   * parent's), or of a SQLite client (its handles are the parent's files,
   * which a close could checkpoint under it). It is only forgotten:
   * nothing is sent, joined, told or closed, and its memory stays. (A
   * server client that had no thread at the fork is the child's own:
   * freed, its inherited connections forgotten when closed: pool.c) */
  if (dbl_foreign(cl)) return;
  /* From its own callback it would join the thread running it. */
  if (dbl_callback_guard(cl) != 0) return;
  dbl_lock(cl);
  cl->closing = 1;
  /* Renewals and reaper passes still talking to the server end now, so
   * closing never waits for an unreachable server. */
  dbl_interrupt_all(cl);
  dbl_signal(&cl->cv, 1);
  dbl_signal(&cl->wd.wake, 1);
  dbl_signal(&cl->reaper.wake, 1);
  dbl_signal(&cl->wd.work, 1);
  dbl_signal(&cl->pool.cv, 1);
  dbl_unlock(cl);
  dbl_queue_stop(cl);
  /* Their calls in flight were cut above, and any they start now is cut
   * at once (dbl_call_bound): the joins cannot wait on the network. */
  for (int i = 0; i < cl->wd.nworkers; i++) pthread_join(cl->wd.workers[i], NULL);
  if (cl->reaper.started) pthread_join(cl->reaper.thread, NULL);
  if (cl->wd.started) pthread_join(cl->wd.thread, NULL);
  tell_untold(cl, called);
  while ((h = cl->held) != NULL) { /* handles not released: drop them */
    cl->held = h->next;
    if (h->pinned) dbl_pool_discard(cl, h->pinned);
    free(h);
  }
  while ((pc = cl->pool.idle) != NULL) {
    cl->pool.idle = pc->next;
    dbl_pool_discard(cl, pc);
  }
  while ((pc = cl->pool.txn_idle) != NULL) {
    cl->pool.txn_idle = pc->next;
    dbl_pool_discard(cl, pc);
  }
  if ((pc = cl->pool.reserve) != NULL) dbl_pool_discard(cl, pc); /* (clears cl->pool.reserve) */
  /* Every thread that could hold a connection is joined and every list
   * above is empty: a connection still counted is an orphan (a path that
   * dropped it without closing it). It is closed all the same, so that
   * its session and socket end with the client. The sanitizer builds
   * say so, and leave it for LeakSanitizer to report with the stack that
   * opened it (it once reported leaked connections at a test's exit,
   * unexplained); the TSan build, which has no leak report, aborts. */
#ifdef DBL_CHECK_LOCKS
  if (cl->pool.nall > 0) {
    fprintf(stderr, "dblock: internal error: %d connection(s) neither idle nor held at client free\n",
            cl->pool.nall);
#if defined(__SANITIZE_THREAD__)
    abort(); /* (ThreadSanitizer has no leak report to leave it to) */
#endif
  }
#else
  while (cl->pool.nall > 0) dbl_pool_discard_cancelled(cl, cl->pool.all[cl->pool.nall - 1]);
#endif
  for (int i = 0; i < DBL_S_COUNT; i++) free(cl->sqls[i]);
  dbl_cancel_close(cl);
  dbl_board_close(cl);
  dbl_url_free(&cl->url);
  free(cl->pool.all);
  pthread_cond_destroy(&cl->cv);
  pthread_cond_destroy(&cl->wd.wake);
  pthread_cond_destroy(&cl->reaper.wake);
  pthread_cond_destroy(&cl->wd.work);
  pthread_cond_destroy(&cl->pool.cv);
  pthread_mutex_destroy(&cl->mu);
  free(cl);
}

const char *dblock_client_backend(const dblock_client *cl) {
  return cl && cl->drv ? cl->drv->name : NULL;
}

dblock_strategy dblock_client_strategy(const dblock_client *cl) {
  return cl ? cl->opts.strategy : DBLOCK_STRATEGY_DEFAULT;
}
