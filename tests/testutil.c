#include "testutil.h"

#include "drivers/driver.h"

#include <sqlite3.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <unistd.h>

const tu_backend *tu_backends(int *count) {
  static tu_backend b[3];
  static char lite[256];
  if (!b[0].name) {
    const char *dir = getenv("DBLOCK_TEST_TMP");
    snprintf(lite, sizeof lite, "sqlite://%s/dblock-test-%d.db", dir ? dir : "/tmp",
             (int)getpid());
    b[0] = (tu_backend){"sqlite", lite};
    b[1] = (tu_backend){"postgres", getenv("DBLOCK_TEST_PG_URL")};
    b[2] = (tu_backend){"mysql", getenv("DBLOCK_TEST_MY_URL")};
    for (int i = 1; i < 3; i++)
      if (!b[i].url) {
        fprintf(stderr, "testutil: %s URL missing: run the tests through "
                        "tests/with-servers.sh (make check)\n", b[i].name);
        exit(1);
      }
  }
  *count = 3;
  return b;
}

int tu_backend_wanted(const char *be) {
  const char *list = getenv("DBLOCK_TEST_BACKEND"), *p;
  size_t len;
  if (!list || !*list) return 1;
  if (!be) be = "none";
  len = strlen(be);
  for (p = list; (p = strstr(p, be)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return 1;
  return 0;
}

size_t tu_shard_tests(struct CMUnitTest *t, size_t n) {
  static const char *const names[] = {"sqlite", "postgres", "mysql"};
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    const char *be = NULL;
    for (size_t k = 0; k < 3 && !be; k++) {
      char tag[16];
      snprintf(tag, sizeof tag, "_%s", names[k]);
      if (strstr(t[i].name, tag)) be = names[k];
    }
    if (tu_backend_wanted(be)) t[kept++] = t[i];
  }
  return kept;
}

const char *tu_errmsg(dblock_client *c) {
  static _Thread_local dblock_error_info ei;
  if (c) dblock_client_last_error(c, &ei);
  else dblock_last_error(&ei);
  return ei.message;
}

dblock_client *tu_open_opts(const char *url, const dblock_options *o) {
  dblock_client *c = NULL;
  int rc = dblock_client_open(&c, url, o);
  if (rc != 0) fail_msg("dblock_client_open(%s): %d %s", url, rc, tu_errmsg(NULL));
  return c;
}

dblock_client *tu_open(const char *url, dblock_strategy s, const char *table,
                       int64_t lease_ms) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  o.strategy = s;
  o.table = table;
  o.lease_ms = lease_ms;
  return tu_open_opts(url, &o);
}

void tu_migrate(dblock_client *c) {
  int rc = dblock_migrate(c, NULL);
  if (rc != 0) fail_msg("dblock_migrate: %d %s", rc, tu_errmsg(c));
}

int64_t tu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tu_sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char *tu_name(const char *prefix) {
  /* A ring, so a test can keep several names at once. */
  static _Thread_local char buf[16][128];
  static _Thread_local int slot;
  static int n;
  char *out = buf[slot++ % 16];
  snprintf(out, sizeof buf[0], "%s-%d-%d-%lld", prefix, (int)getpid(), ++n,
           (long long)tu_now_ms());
  return out;
}

const char *tu_url(const char *backend) {
  int n;
  const tu_backend *b = tu_backends(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(b[i].name, backend) == 0) return b[i].url;
  fail_msg("no backend named %s", backend);
  return NULL;
}

dbl_conn *tu_conn(const char *url, const dbl_driver **drv) {
  dbl_url u;
  char why[256];
  dbl_conn *c = NULL;
  dbl_err e;
  memset(&e, 0, sizeof e);
  if (dbl_url_parse(&u, url, why, sizeof why) != 0) {
    fprintf(stderr, "url: %s\n", why);
    return NULL;
  }
  *drv = dbl_driver_for(&u);
  if ((*drv)->connect(&c, &u, 5000, &e) != 0) fprintf(stderr, "connect: %s\n", e.msg);
  dbl_url_free(&u); /* (a connection keeps what it needs) */
  return c;
}

void tu_sql(const char *url, const char *sql, int64_t *count) {
  dbl_conn *c;
  dbl_err e;
  dbl_res r;
  const dbl_driver *d;
  memset(&e, 0, sizeof e);
  if (!(c = tu_conn(url, &d))) fail_msg("no connection to %s", url);
  if (count) {
    if (d->query(c, sql, NULL, 0, &r, &e) != 0) fail_msg("%s: %s", sql, e.msg);
    *count = dbl_res_i64(&r, 0, 0);
    dbl_res_clear(&r);
  } else if (d->script(c, sql, &e) != 0) {
    fail_msg("%s: %s", sql, e.msg);
  }
  d->close(c);
}

void tu_admin_sql(const char *backend, const char *sql) {
  char cmd[1024];
  int pg = strcmp(backend, "postgres") == 0;
  const char *admin = getenv(pg ? "DBLOCK_TEST_PG_ADMIN" : "DBLOCK_TEST_MY_ADMIN");
  assert_non_null(admin);
  snprintf(cmd, sizeof cmd, "%s %s \"%s\" >/dev/null", admin, pg ? "-c" : "-e", sql);
  if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

int tu_all_threads_stopped(int pid) {
  char path[64];
  for (int i = 0; i < 400; i++) {
    DIR *dir;
    struct dirent *de;
    int all = 1, seen = 0;
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    if (!(dir = opendir(path))) return 0;
    while ((de = readdir(dir)) && all) {
      char stat[320], buf[512], *p = NULL;
      FILE *f;
      if (de->d_name[0] == '.') continue;
      snprintf(stat, sizeof stat, "/proc/%d/task/%s/stat", pid, de->d_name);
      if ((f = fopen(stat, "r"))) {
        p = fgets(buf, sizeof buf, f);
        fclose(f);
      }
      /* (the state follows the last ')': a name may hold spaces and ')') */
      all = p && (p = strrchr(buf, ')')) && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
      seen++;
    }
    closedir(dir);
    if (all && seen) return 1;
    tu_sleep_ms(5);
  }
  return 0;
}

int tu_thread_in_board_sleep(int tid) {
  char path[64], buf[256];
  int in_a_row = 0;
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
  for (int i = 0; i < 1000 && in_a_row < 3; i++) {
    FILE *f = fopen(path, "r");
    char *p = f ? fgets(buf, sizeof buf, f) : NULL;
    long nr = -1;
    unsigned long addr = 0, op = 0;
    if (f) fclose(f);
    if (!p) return -1; /* (hidden, or no such thread) */
    /* "nr arg1 arg2 ...", or "running", or "-1 sp pc" outside a call */
    int n = sscanf(buf, "%ld %lx %lx", &nr, &addr, &op);
    in_a_row = n == 3 && nr == SYS_futex && op == FUTEX_WAIT_BITSET ? in_a_row + 1 : 0;
    if (in_a_row < 3) tu_sleep_ms(5);
  }
  return in_a_row >= 3;
}

void tu_stop_between_writes(int pid, const char *url) {
  enum { TRIES = 100 };
  const dbl_driver *d = NULL;
  dbl_conn *x = NULL;
  dbl_err e;
  const char *why = NULL;
  memset(&e, 0, sizeof e);
  if (strncmp(url, "sqlite", 6) == 0 && !(x = tu_conn(url, &d))) why = "no connection to the file";
  for (int i = 0; !why; i++) {
    memset(&e, 0, sizeof e);
    if (kill(pid, SIGSTOP) != 0 || !tu_all_threads_stopped(pid)) why = "it did not stop";
    else if (!x || d->script(x, "PRAGMA busy_timeout = 0; BEGIN IMMEDIATE; ROLLBACK", &e) == 0)
      break;
    else if (i == TRIES - 1) why = "the database stayed write-locked at every stop";
    else {
      kill(pid, SIGCONT);
      tu_sleep_ms(3);
    }
  }
  if (x) d->close(x);
  if (why) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("stopping process %d between its writes: %s%s%s", pid, why, e.msg[0] ? ": " : "",
             e.msg);
  }
}

void tu_lose_epoch(const char *url, const char *table) {
  char sql[160];
  snprintf(sql, sizeof sql, "%s; TRUNCATE %s_alive",
           strncmp(url, "postgres", 8) == 0 ? "SET lock_timeout = '5s'"
                                            : "SET SESSION lock_wait_timeout = 5",
           table);
  tu_sql(url, sql, NULL);
}

dblock_lock *tu_acquire(dblock_client *c, const char *name, int64_t wait_ms,
                        int64_t lease_ms) {
  dblock_lock *l = NULL;
  int rc;
  /* An explicit lease must leave its acquire at least 500 ms to answer
   * before the loss deadline (lease minus the default margin, at most half
   * the lease): with less, a loaded CI host cut such acquires as born lost.
   * A test that means a shorter one calls dblock_lock_acquire itself. */
  if (lease_ms > 0) {
    int64_t m = lease_ms / 20 < 100 ? 100 : lease_ms / 20;
    if (lease_ms - (m < lease_ms / 2 ? m : lease_ms / 2) < 500)
      fail_msg("tu_acquire '%s': a %lld ms lease leaves its acquire under 500 ms", name,
               (long long)lease_ms);
  }
  rc = dblock_lock_acquire(&l, c, name, wait_ms, lease_ms);
  if (rc != 0) fail_msg("acquire '%s': %d %s", name, rc, tu_errmsg(c));
  return l;
}

int tu_try(dblock_client *c, const char *name) {
  dblock_lock *l = NULL;
  int rc = dblock_lock_acquire(&l, c, name, 0, 0);
  if (rc == 0) dblock_lock_release(l);
  return rc;
}

atomic_int tu_lost_calls;

void tu_on_lost(const char *name, int64_t fence, int reason, void *arg) {
  (void)name;
  (void)fence;
  (void)reason;
  (void)arg;
  atomic_fetch_add(&tu_lost_calls, 1);
}

const char *tu_tree(void) {
  const char *t = getenv("DBLOCK_TEST_TREE");
  return t && *t ? t : "build";
}

/* The bounds (ms): normal tree, sanitizer trees. Each is the contract's
 * own figure plus room that a loaded run showed it needs; widen one here,
 * with the run that needed it, never at the test. */
static const struct {
  int64_t normal, sanitized;
} bounds[TB_COUNT] = {
    /* (100 ms over the wait: a client's set-up happens in each try) */
    [TB_TIMED_WAIT] = {400, 450},
    /* (the bug is a grant at the next 5 s poll; a fresh-clone run sharing
     * the host with two sanitizer builds saw 1,132 ms on MariaDB) */
    [TB_WAKE] = {2000, 3000},
    /* (a wait that spun past its deadline took the whole hold and more) */
    [TB_HOLD_WAIT] = {500, 700},
    /* (the loss deadline comes at most 1.2 s after the last confirmed
     * renewal; 1.3 s more for the watchdog and a worker) */
    [TB_LOSS_TOLD] = {2500, 3500},
    /* (240 and 241 ms seen on SQLite and MariaDB at once on loaded runs:
     * SQLite's is twice this, and a test allows a third of its pass) */
    [TB_REAPER_CALL] = {100, 300},
    /* (each program start takes a while under the sanitizers) */
    [TB_CLI_HOLD] = {2000, 5000},
};

int64_t tu_bound(tu_bound_id b) {
  return strcmp(tu_tree(), "build") == 0 ? bounds[b].normal : bounds[b].sanitized;
}

int tu_await_lost_calls(int want, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  while (atomic_load(&tu_lost_calls) < want && tu_now_ms() < end) tu_sleep_ms(5);
  return atomic_load(&tu_lost_calls);
}

/* The holders tu_spawn_holder started, killed at exit if still there (a
 * failed assertion may leave one waiting, or stopped with SIGSTOP). */
static int g_holders[32];
static int g_nholders;

static void kill_holders(void) {
  for (int i = 0; i < g_nholders; i++)
    if (tu_alive(g_holders[i])) {
      kill(g_holders[i], SIGKILL);
      waitpid(g_holders[i], NULL, 0);
    }
}

/* Reads one line from fd into line (size n, without its newline) within
 * ms; 0, or -1 on end of file, error or timeout. */
static int read_line(int fd, char *line, size_t n, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  size_t got = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int64_t left = end - tu_now_ms();
    int r;
    if (left <= 0) return -1;
    r = poll(&pf, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || read(fd, line + got, 1) != 1) return -1;
    if (line[got] == '\n' || got + 1 == n) break;
    got++;
  }
  line[got] = 0;
  return 0;
}

/* Kills holder pid (if it still runs) and fails the test saying how it
 * ended and what went wrong. */
static void holder_failed(int pid, const char *what) {
  int st = 0;
  /* (not tu_alive: its reap would throw the exit status away) */
  if (waitpid(pid, &st, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("the holder process %s (killed)", what);
  }
  fail_msg("the holder process %s (exit status %d, signal %d)", what,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int tu_spawn_holder(const char *url, const dblock_options *o, const char *name, int64_t wait_ms,
                    int *out) {
  char prog[256], lease[24], wait[24], fair[8], backoff[24], line[32];
  int fds[2];
  pid_t pid;
  if (o->backoff_min_ms != o->backoff_max_ms)
    fail_msg("tu_spawn_holder: lockhelper takes one backoff (min = max)");
  if (g_nholders == (int)(sizeof g_holders / sizeof g_holders[0]))
    fail_msg("tu_spawn_holder: too many holders in one test process");
  snprintf(prog, sizeof prog, "%s/lockhelper", tu_tree());
  snprintf(lease, sizeof lease, "%lld", (long long)o->lease_ms);
  snprintf(wait, sizeof wait, "%lld", (long long)wait_ms);
  snprintf(fair, sizeof fair, "%d", o->fair ? 1 : 0);
  snprintf(backoff, sizeof backoff, "%lld", (long long)o->backoff_min_ms);
  if (access(prog, X_OK) != 0) fail_msg("%s: %s (make tests builds it)", prog, strerror(errno));
  if (pipe2(fds, O_CLOEXEC) != 0) fail_msg("pipe: %s", strerror(errno));
  if ((pid = fork()) == 0) {
    /* (between fork and exec only async-signal-safe calls; dup2 clears
     * close-on-exec on the copy) */
    dup2(fds[1], 1);
    execl(prog, prog, url, dblock_strategy_name(o->strategy), o->table ? o->table : "-", name,
          lease, wait, fair, backoff, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    fail_msg("fork: %s", strerror(errno));
  }
  if (g_nholders++ == 0) atexit(kill_holders);
  g_holders[g_nholders - 1] = (int)pid;
  if (read_line(fds[0], line, sizeof line, 10000) != 0 || strcmp(line, "open") != 0) {
    close(fds[0]);
    holder_failed((int)pid, "did not open its client within 10 s");
  }
  if (out) *out = fds[0];
  else close(fds[0]); /* (it ignores SIGPIPE) */
  return (int)pid;
}

int64_t tu_holder_fence(int fd, int pid) {
  char line[32];
  if (read_line(fd, line, sizeof line, 10000) != 0 || line[0] < '0' || line[0] > '9')
    holder_failed(pid, "wrote no fence within 10 s");
  return strtoll(line, NULL, 10);
}

int tu_alive(int pid) {
  int st;
  return waitpid(pid, &st, WNOHANG) == 0;
}

int tu_threads_named(const char *comm, int *tids, int max) {
  DIR *dir = opendir("/proc/self/task");
  struct dirent *de;
  int found = 0;
  if (!dir) fail_msg("/proc/self/task: %s", strerror(errno));
  while ((de = readdir(dir))) {
    char path[300], name[64] = "";
    FILE *f;
    if (de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = 0;
    fclose(f);
    if (strcmp(name, comm) == 0) {
      if (found < max) tids[found] = atoi(de->d_name);
      found++;
    }
  }
  closedir(dir);
  return found;
}

int tu_new_thread_named(const char *comm, const int *old, int nold) {
  int tids[64], n, fresh = 0, tid = -1;
  /* (a thread is named by its creator just after it starts, and a thread
   * it starts carries its name until named in turn: looked at again for a
   * while rather than once) */
  for (int i = 0; i < 200; i++) {
    n = tu_threads_named(comm, tids, 64);
    fresh = 0;
    for (int k = 0; k < n && k < 64; k++) {
      int seen = 0;
      for (int j = 0; j < nold; j++) seen |= tids[k] == old[j];
      if (!seen) {
        fresh++;
        tid = tids[k];
      }
    }
    if (fresh == 1) return tid;
    tu_sleep_ms(10);
  }
  fail_msg("%d new threads named %s in this process, want 1", fresh, comm);
  return -1;
}

int tu_freeze_thread(int tid, int64_t max_ms, int *ctl) {
  char prog[256], arg[24], max[24], line[128] = "";
  int out[2], in[2];
  pid_t pid;
  /* (Yama's ptrace_scope 1 lets only an ancestor trace: allow any) */
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  snprintf(prog, sizeof prog, "%s/lockhelper", tu_tree());
  snprintf(arg, sizeof arg, "%d", tid);
  snprintf(max, sizeof max, "%lld", (long long)max_ms);
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0)
    fail_msg("pipe: %s", strerror(errno));
  if ((pid = fork()) == 0) {
    dup2(out[1], 1);
    dup2(in[0], 0);
    execl(prog, prog, "--freeze", arg, max, (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  close(in[0]);
  if (pid < 0) fail_msg("fork: %s", strerror(errno));
  if (read_line(out[0], line, sizeof line, 10000) != 0 || strcmp(line, "frozen") != 0) {
    char scope[16] = "?";
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f) {
      if (fgets(scope, sizeof scope, f)) scope[strcspn(scope, "\n")] = 0;
      fclose(f);
    }
    close(out[0]);
    close(in[1]);
    kill(pid, SIGKILL); /* (its death detaches the thread) */
    waitpid(pid, NULL, 0);
    fail_msg("could not stop thread %d with %s --freeze: '%s' (this test needs ptrace: "
             "CAP_SYS_PTRACE or Yama ptrace_scope 0/1; ptrace_scope here: %s)",
             tid, prog, line[0] ? line : "no answer", scope);
  }
  close(out[0]);
  *ctl = in[1];
  return (int)pid;
}

void tu_thaw_thread(int pid, int ctl) {
  close(ctl); /* (the freezer lets the thread go when its stdin ends) */
  waitpid(pid, NULL, 0);
}

struct tu_app {
  const dbl_driver *d;
  dbl_conn *c;
  sqlite3 *db;
};

tu_app *tu_app_open(const char *url, const char *table) {
  tu_app *a = calloc(1, sizeof *a);
  assert_non_null(a);
  if (strncmp(url, "sqlite://", 9) == 0) {
    if (sqlite3_open_v2(url + 9, &a->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
      fail_msg("cannot open %s: %s", url + 9, sqlite3_errmsg(a->db));
    sqlite3_busy_timeout(a->db, 5000);
    assert_int_equal(dblock_sqlite_check_register(a->db, NULL, table), 0);
  } else if (!(a->c = tu_conn(url, &a->d))) {
    fail_msg("no connection to %s", url);
  }
  return a;
}

void tu_app_close(tu_app *a) {
  if (!a) return;
  if (a->db) sqlite3_close(a->db);
  if (a->c) a->d->close(a->c);
  free(a);
}

int tu_app_exec(tu_app *a, const char *sql, char code[6], char msg[512]) {
  const char *m = "", *p;
  char *err = NULL;
  dbl_err e;
  int rc;
  memset(&e, 0, sizeof e);
  if (code) code[0] = 0;
  if (a->db) {
    rc = sqlite3_exec(a->db, sql, NULL, NULL, &err) == SQLITE_OK ? 0 : -1;
    m = err ? err : sqlite3_errmsg(a->db);
    if (rc && code && (p = strstr(m, "dblock_check (")) != NULL) snprintf(code, 6, "%s", p + 14);
  } else {
    rc = a->d->script(a->c, sql, &e) == 0 ? 0 : -1;
    m = e.msg;
    if (rc && code) snprintf(code, 6, "%s", e.sqlstate);
  }
  if (msg) snprintf(msg, 512, "%s", rc ? m : "");
  sqlite3_free(err);
  return rc;
}

int tu_app_try_i64(tu_app *a, const char *sql, int64_t *out) {
  int rc = -1;
  if (a->db) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      *out = sqlite3_column_int64(st, 0);
      rc = 0;
    }
    sqlite3_finalize(st);
  } else {
    dbl_err e;
    dbl_res r;
    memset(&e, 0, sizeof e);
    if (a->d->query(a->c, sql, NULL, 0, &r, &e) == 0) {
      *out = dbl_res_i64(&r, 0, 0);
      dbl_res_clear(&r);
      rc = 0;
    }
  }
  return rc;
}

int64_t tu_app_i64(tu_app *a, const char *sql) {
  int64_t v = 0;
  if (tu_app_try_i64(a, sql, &v) != 0) fail_msg("%s: failed", sql);
  return v;
}
