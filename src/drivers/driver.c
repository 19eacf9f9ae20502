/*
 * driver.c — what every driver shares: result storage, error filling, and
 * the choice of driver by URL scheme.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const dbl_driver *dbl_driver_for(const dbl_url *url) {
  /* A backend left out of the build (make WITH_PG=0 ...) has no driver:
   * the caller reports DBLOCK_EUNSUPPORTED. */
  switch (url->backend) {
#if DBLOCK_WITH_PG
  case DBL_B_PG: return &dbl_driver_pg;
#endif
#if DBLOCK_WITH_MYSQL
  case DBL_B_MY: return &dbl_driver_mysql;
#endif
#if DBLOCK_WITH_SQLITE
  case DBL_B_LITE: return &dbl_driver_sqlite;
#endif
  default: return NULL;
  }
}

#if !DBLOCK_WITH_SQLITE
int dblock_sqlite_check_register(struct sqlite3 *db, const char *schema, const char *table) {
  (void)db, (void)schema, (void)table;
  return DBLOCK_EUNSUPPORTED;
}
#endif

void dbl_res_clear(dbl_res *r) {
  if (!r) return;
  if (r->vals)
    for (int i = 0; i < r->nrows * r->ncols; i++) free(r->vals[i]);
  free(r->vals);
  free(r->lens);
  memset(r, 0, sizeof *r);
}

int dbl_res_alloc(dbl_res *r, int nrows, int ncols) {
  size_t n = (size_t)nrows * (size_t)ncols;
  r->nrows = nrows;
  r->ncols = ncols;
  if (n == 0) return 0;
  r->vals = calloc(n, sizeof *r->vals);
  r->lens = calloc(n, sizeof *r->lens);
  if (!r->vals || !r->lens) {
    free(r->vals);
    free(r->lens);
    r->vals = NULL;
    r->lens = NULL;
    r->nrows = r->ncols = 0;
    return DBLOCK_ENOMEM;
  }
  return 0;
}

int dbl_res_set(dbl_res *r, int row, int col, const char *p, size_t len) {
  size_t i = (size_t)row * (size_t)r->ncols + (size_t)col;
  if (!p) return 0;
  r->vals[i] = malloc(len + 1);
  if (!r->vals[i]) return DBLOCK_ENOMEM;
  memcpy(r->vals[i], p, len);
  r->vals[i][len] = 0;
  r->lens[i] = len;
  return 0;
}

const char *dbl_res_get(const dbl_res *r, int row, int col) {
  if (!r || row < 0 || col < 0 || row >= r->nrows || col >= r->ncols)
    return NULL;
  return r->vals[row * r->ncols + col];
}

int64_t dbl_res_i64(const dbl_res *r, int row, int col) {
  const char *v = dbl_res_get(r, row, col);
  return v ? strtoll(v, NULL, 10) : 0;
}

int dbl_err_set(dbl_err *e, int code, const char *sqlstate, int native,
                const char *fmt, ...) {
  va_list ap;
  char *nl;
  if (!e) return code;
  e->code = code;
  snprintf(e->sqlstate, sizeof e->sqlstate, "%s", sqlstate ? sqlstate : "");
  e->native = native;
  e->stmt = 0;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  /* Messages are one line: backends like to end theirs with '\n'. */
  while ((nl = strchr(e->msg, '\n')) != NULL) {
    if (nl[1] == 0) *nl = 0;
    else *nl = ' ';
  }
  return code;
}

void dbl_err_scrub(dbl_err *e, const char *secret) {
  size_t sl;
  char *hit;
  if (!e || !secret || !(sl = strlen(secret))) return;
  /* The replacement is never longer than the secret, so msg cannot grow. */
  size_t rl = sl < 3 ? sl : 3;
  while ((hit = strstr(e->msg, secret)) != NULL) {
    memset(hit, '*', rl);
    memmove(hit + rl, hit + sl, strlen(hit + sl) + 1);
  }
}

void *dbl_cache_get(dbl_stmt_cache *k, const char *sql) {
  for (size_t i = 0; i < sizeof k->slot / sizeof k->slot[0]; i++)
    if (k->slot[i].sql && strcmp(k->slot[i].sql, sql) == 0) {
      k->slot[i].used = ++k->tick;
      return k->slot[i].stmt;
    }
  return NULL;
}

int dbl_cache_put(dbl_stmt_cache *k, const char *sql, void *stmt, void **evicted) {
  size_t v = 0;
  char *copy = strdup(sql);
  *evicted = NULL;
  if (!copy) return DBLOCK_ENOMEM;
  for (size_t i = 0; i < sizeof k->slot / sizeof k->slot[0]; i++) {
    if (!k->slot[i].sql) {
      v = i;
      break;
    }
    if (k->slot[i].used < k->slot[v].used) v = i;
  }
  if (k->slot[v].sql) {
    *evicted = k->slot[v].stmt;
    free(k->slot[v].sql);
  }
  k->slot[v].sql = copy;
  k->slot[v].stmt = stmt;
  k->slot[v].used = ++k->tick;
  return 0;
}

void dbl_cache_clear(dbl_stmt_cache *k, void (*drop)(void *stmt)) {
  for (size_t i = 0; i < sizeof k->slot / sizeof k->slot[0]; i++)
    if (k->slot[i].sql) {
      drop(k->slot[i].stmt);
      free(k->slot[i].sql);
      k->slot[i].sql = NULL;
    }
}

int dbl_fd_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (fd < 0) return 1;
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

/* ---- sockets across fork ----
 * Every connection's socket, as the client library's descriptor and our
 * duplicate of it. A forked child inherits both: if it kept them, a
 * for_update lock's session would outlive a parent killed with SIGKILL for
 * as long as the child lives (the server sees no close while one copy is
 * open), and a child that freed its copy of the client would end the
 * parent's sessions (libpq's Terminate, COM_QUIT) or shut their sockets
 * down (interrupt). So at every fork the child's copies are replaced by
 * /dev/null (fork_child): the child can neither use nor end the parent's
 * sessions, and they end with the parent. The library's descriptor is
 * replaced only while it still is the same socket as our duplicate (same
 * inode): the library closes its own when it finds the connection dead,
 * and its number may by then belong to an unrelated file. */
struct tracked {
  int lib, dup;
};
static pthread_mutex_t fds_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tracked *fds;
static int nfds, capfds;
static pthread_once_t fds_once = PTHREAD_ONCE_INIT;
static int fds_nul = -1; /* /dev/null, opened once (a child may have no room or no /dev) */

/* (async-signal-safe calls only: the child of a threaded process) */
static void fork_child(void) {
  int nul = fds_nul;
  for (int i = 0; nul >= 0 && i < nfds; i++) {
    struct stat ls, ds;
    if (fstat(fds[i].dup, &ds) != 0) continue;
    if (fds[i].lib >= 0 && fstat(fds[i].lib, &ls) == 0 && ls.st_dev == ds.st_dev &&
        ls.st_ino == ds.st_ino && dup2(nul, fds[i].lib) >= 0)
      (void)fcntl(fds[i].lib, F_SETFD, FD_CLOEXEC);
    if (dup2(nul, fds[i].dup) >= 0) (void)fcntl(fds[i].dup, F_SETFD, FD_CLOEXEC);
  }
  /* The child's copies are /dev/null for good (it never closes a
   * connection it inherited: client.c), and their numbers are its own to
   * reuse: none may be replaced again at a later fork. */
  nfds = 0;
  pthread_mutex_unlock(&fds_mu);
}
static void fork_prepare(void) { pthread_mutex_lock(&fds_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&fds_mu); }
static void fds_init(void) {
  fds_nul = open("/dev/null", O_RDWR | O_CLOEXEC);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int dbl_fd_dup(int fd) {
  int d;
  if (fd < 0 || (d = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) return -1;
  pthread_once(&fds_once, fds_init);
  pthread_mutex_lock(&fds_mu);
  while (nfds == capfds) {
    /* Grown with the mutex let go: an allocator's own fork handler may
     * hold its locks while fork_prepare waits for this mutex. */
    int cap = capfds ? capfds * 2 : 16;
    struct tracked *t, *old = NULL;
    pthread_mutex_unlock(&fds_mu);
    if (!(t = malloc((size_t)cap * sizeof *t))) return d; /* (untracked: as before) */
    pthread_mutex_lock(&fds_mu);
    if (capfds < cap) {
      if (nfds) memcpy(t, fds, (size_t)nfds * sizeof *t);
      old = fds;
      fds = t;
      capfds = cap;
    } else {
      old = t; /* (another thread grew it meanwhile) */
    }
    pthread_mutex_unlock(&fds_mu);
    free(old);
    pthread_mutex_lock(&fds_mu);
  }
  fds[nfds].lib = fd;
  fds[nfds++].dup = d;
  pthread_mutex_unlock(&fds_mu);
  return d;
}

void dbl_fd_close(int dup) {
  if (dup < 0) return;
  pthread_mutex_lock(&fds_mu);
  for (int i = 0; i < nfds; i++)
    if (fds[i].dup == dup) {
      fds[i] = fds[--nfds];
      break;
    }
  /* (closed under the mutex: no fork sees the number listed once free) */
  close(dup);
  pthread_mutex_unlock(&fds_mu);
}

void dbl_fd_cut(int fd) {
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

void dbl_topology_settings(dbl_topology *t, const dbl_res *r) {
  int max = (int)(sizeof t->settings / sizeof t->settings[0]);
  for (int i = 0; i < r->nrows && t->nsettings < max; i++) {
    const char *n = dbl_res_get(r, i, 0), *v = dbl_res_get(r, i, 1);
    snprintf(t->settings[t->nsettings].name, sizeof t->settings[0].name, "%s", n ? n : "");
    snprintf(t->settings[t->nsettings].value, sizeof t->settings[0].value, "%s", v ? v : "");
    t->nsettings++;
  }
}

const char *dbl_topology_setting(const dbl_topology *t, const char *name) {
  for (int i = 0; i < t->nsettings; i++)
    if (strcasecmp(t->settings[i].name, name) == 0) return t->settings[i].value;
  return NULL;
}

static void *timer_main(void *p) {
  dbl_timer *t = p;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(t->ms / 1000);
  ts.tv_nsec += (long)(t->ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&t->mu);
  while (!t->stopped)
    if (pthread_cond_timedwait(&t->cv, &t->mu, &ts) == ETIMEDOUT) break;
  if (!t->stopped) {
    t->fired = 1;
    t->cut(t->arg); /* only shuts a socket down: safe under the mutex */
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

int dbl_timer_start(dbl_timer *t, int64_t ms, void (*cut)(void *arg), void *arg) {
  pthread_condattr_t ca;
  memset(t, 0, sizeof *t);
  t->ms = ms > 0 ? ms : 1;
  t->cut = cut;
  t->arg = arg;
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  t->started = pthread_create(&t->thread, NULL, timer_main, t) == 0;
  return t->started ? 0 : -1;
}

int dbl_timer_stop(dbl_timer *t) {
  pthread_mutex_lock(&t->mu);
  t->stopped = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  if (t->started) pthread_join(t->thread, NULL);
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  return t->fired;
}
