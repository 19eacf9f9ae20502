/*
 * dblock_cli.c — the plumbing the dblock commands share: usage errors,
 * failure reports (text and --json), opening the client, and waits for a
 * busy lock that SIGINT, SIGTERM or SIGHUP can interrupt.
 */
#include "dblock_cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "out.h"

const char *const PROG = "dblock";

/* The running command's name, or NULL before one is known. */
static const char *cmd_name(const args *a) { return a && a->cmd ? a->cmd->name : NULL; }

int cli_usage_error(const args *a, const char *fmt, ...) {
  va_list ap;
  const char *c = cmd_name(a);
  fprintf(stderr, "%s: ", PROG);
  if (c) fprintf(stderr, "%s: ", c);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (try '%s %s%s--help')\n", PROG, c ? c : "", c ? " " : "");
  return CLI_USAGE;
}

void cli_json_open(void) {
  fputs("{\"version\":", stdout);
  cli_json_str(stdout, DBLOCK_VERSION_STRING);
}

/* ---- failures naming the holder ---------------------------------------- */

/* Describes NAME's holder as "host H, pid P (fence F) until T" (for_update:
 * "... for as long as its session lasts") into buf, with *info the row.
 * Returns 1, or 0 when the lookup fails or the row shows nobody holding
 * the name, or does not say who. */
static int holder_phrase(char *buf, size_t size, dblock_client *cl, const char *name,
                         dblock_lock_info *info) {
  char host[300], until[48];
  if (dblock_lock_inspect(info, cl, name) != 0 || !info->held ||
      (!info->owner_host[0] && !info->owner_pid))
    return 0;
  out_cell(host, sizeof host, info->owner_host[0] ? info->owner_host : "?");
  if (info->expires_at_us) {
    memcpy(until, "until ", 6);
    cli_iso8601(until + 6, sizeof until - 6, info->expires_at_us, 0);
  } else {
    snprintf(until, sizeof until, "for as long as its session lasts");
  }
  snprintf(buf, size, "host %s, pid %lld (fence %lld) %s", host, (long long)info->owner_pid,
           (long long)info->fence, until);
  return 1;
}

/* Prints the --json failure object for rc with message (and the holder's
 * row when holder is not NULL) on stdout. */
static void fail_json(int rc, const char *message, const dblock_lock_info *holder) {
  char t[40];
  cli_json_open();
  fputs(",\"ok\":false,\"error\":", stdout);
  cli_json_str(stdout, dblock_strerror(rc));
  printf(",\"code\":%d,\"message\":", rc);
  cli_json_str(stdout, message);
  if (holder) {
    fputs(",\"holder\":{\"owner_host\":", stdout);
    cli_json_str(stdout, holder->owner_host);
    printf(",\"owner_pid\":%lld,\"owner_thread\":%lld,\"fence\":%lld,\"strategy\":",
           (long long)holder->owner_pid, (long long)holder->owner_thread,
           (long long)holder->fence);
    cli_json_str(stdout, holder->strategy);
    fputs(",\"acquired_at\":", stdout);
    if (holder->acquired_at_us)
      cli_json_str(stdout, cli_iso8601(t, sizeof t, holder->acquired_at_us, 6));
    else fputs("null", stdout);
    fputs(",\"expires_at\":", stdout);
    if (holder->expires_at_us)
      cli_json_str(stdout, cli_iso8601(t, sizeof t, holder->expires_at_us, 6));
    else fputs("null", stdout);
    putchar('}');
  }
  fputs("}\n", stdout);
  fflush(stdout);
}

int cli_fail(const args *a, const char *what, dblock_client *cl, int rc) {
  return cli_fail_lock(a, what, cl, rc, NULL);
}

int cli_fail_lock(const args *a, const char *what, dblock_client *cl, int rc, const char *name) {
  dblock_lock_info info;
  char who[400], msg[800], cell[300];
  int code;
  if (name && cl && (rc == DBLOCK_EBUSY || rc == DBLOCK_ETIMEOUT) &&
      holder_phrase(who, sizeof who, cl, name, &info)) {
    out_cell(cell, sizeof cell, name);
    if (rc == DBLOCK_EBUSY)
      snprintf(msg, sizeof msg, "lock '%s' is held by another owner: %s", cell, who);
    else
      snprintf(msg, sizeof msg, "timed out after %lld ms waiting for lock '%s', held by %s",
               (long long)a->wait_ms, cell, who);
    if (a->json) fail_json(rc, msg, &info);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, msg);
    return a->conflict_code;
  }
  if (a->json) {
    dblock_error_info ei;
    if (cl) dblock_client_last_error(cl, &ei);
    else dblock_last_error(&ei);
    fail_json(rc, ei.code == rc && ei.message[0] ? ei.message : dblock_strerror(rc), NULL);
  }
  code = cli_report(PROG, what, cl, rc);
  return code == CLI_BUSY ? a->conflict_code : code;
}

/* ---- the client --------------------------------------------------------- */

atomic_int cli_lost;
dblock_lock *volatile cli_kept;

/* The client's on_lost callback: runs on a library thread, so it only
 * raises cli_lost for the command's own thread to see. */
static void on_lost(const char *name, int64_t fence, int reason, void *arg) {
  (void)name, (void)fence, (void)reason, (void)arg;
  atomic_store(&cli_lost, 1);
}

/* The log hook of --quiet: drops the library's warnings and notes. */
static void drop_log(int level, const char *msg, void *arg) { (void)level, (void)msg, (void)arg; }

/* The file a sqlite:// URL names, into path (0), or 1 when the URL is
 * not SQLite or its path is escaped (%XX: the library decodes it, and
 * judges it). */
static int sqlite_path(const char *url, char *path, size_t n) {
  const char *p = url + strlen("sqlite://"), *end;
  if (strncmp(url, "sqlite://", strlen("sqlite://")) != 0) return 1;
  end = strchr(p, '?') ? strchr(p, '?') : p + strlen(p);
  if (end == p || (size_t)(end - p) >= n || memchr(p, '%', (size_t)(end - p))) return 1;
  memcpy(path, p, (size_t)(end - p));
  path[end - p] = 0;
  return 0;
}

int cli_open_client(dblock_client **cl, args *a) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  const char *url = cli_url(a->url);
  int rc;
  if (!url) return cli_usage_error(a, "no database URL: give --url or set DBLOCK_URL");
  {
    /* A SQLite file is created by migrate alone: any other command on a
     * missing file (a mistyped path) would create an empty database, and
     * then say the schema is missing. */
    char path[4096];
    if (a->cmd && strcmp(a->cmd->name, "migrate") != 0 && !sqlite_path(url, path, sizeof path) &&
        access(path, F_OK) != 0 && errno == ENOENT) {
      char msg[4200];
      snprintf(msg, sizeof msg,
               "no SQLite database file '%s' (a mistyped path? 'dblock migrate' creates it)",
               path);
      if (a->json) fail_json(DBLOCK_ECONN, msg, NULL);
      fprintf(stderr, "%s: %s: %s\n", PROG, a->cmd->name, msg);
      return CLI_DBERR;
    }
  }
  o.strategy = a->strategy;
  o.table = a->table;
  o.owner_host = a->owner_host;
  o.fair = a->fair;
  o.on_lost = on_lost;
  if (a->quiet) o.log = drop_log; /* (else the library prints them on stderr) */
  /* Commands that only read may run against a replica (and on Galera
   * whatever --strategy says). */
  o.read_only = a->cmd && (strcmp(a->cmd->name, "status") == 0 ||
                           strcmp(a->cmd->name, "list") == 0 ||
                           strcmp(a->cmd->name, "stats") == 0 ||
                           strcmp(a->cmd->name, "doctor") == 0 ||
                           (strcmp(a->cmd->name, "migrate") == 0 && a->migrate_status));
  if (a->cmd && strcmp(a->cmd->name, "run") == 0) {
    int64_t lease = a->lease_ms ? a->lease_ms : 30000, margin = lease / 20;
    o.lease_ms = a->lease_ms;
    /* run declares the lock lost early enough for a command that ignores
     * SIGTERM to be SIGKILLed (--kill-after later) before the lease ends,
     * when the lease leaves room for that (the library caps it at half). */
    if (margin < 100) margin = 100;
    if (margin < a->kill_after_ms + 250) margin = a->kill_after_ms + 250;
    o.loss_margin_ms = margin;
  }
  if ((rc = dblock_client_open(cl, url, &o)) != 0 && rc == DBLOCK_EUNSUPPORTED && a->fair)
    return cli_usage_error(a, "--fair needs PostgreSQL with the insert or optimistic strategy");
  if (rc != 0) return cli_fail(a, "cannot open the database", NULL, rc);
  return 0;
}

int cli_need_name(args *a, const char **name) {
  if (a->npos < 1) return cli_usage_error(a, "missing lock NAME");
  if (a->npos > 1) return cli_usage_error(a, "unexpected argument '%s'", a->pos[1]);
  *name = a->pos[0];
  return 0;
}

/* ---- interruptible waits ----------------------------------------------- */

/* A wait for a busy lock (acquire, run) ends on SIGINT, SIGTERM or SIGHUP:
 * the handler cancels the client's acquires (dblock_client_cancel is
 * async-signal-safe; the cancel is sticky, so a signal that comes before
 * the acquire has started waiting is not lost either) and the command
 * exits 128 + the signal's number, holding nothing. */
static const int INTERRUPTS[] = {SIGINT, SIGTERM, SIGHUP};
#define NINTERRUPTS (sizeof INTERRUPTS / sizeof INTERRUPTS[0])
static dblock_client *volatile g_cancel_client;
volatile sig_atomic_t cli_caught;

/* The handler: notes the signal and cancels the client's waits. */
static void cancel_on_signal(int sig) {
  dblock_client *cl = g_cancel_client;
  cli_caught = sig;
  if (cl) dblock_client_cancel(cl);
}

void cli_interrupts(dblock_client *cl, int on) {
  static struct sigaction saved[NINTERRUPTS];
  struct sigaction sa;
  if (!on) {
    for (size_t i = 0; i < NINTERRUPTS; i++) sigaction(INTERRUPTS[i], &saved[i], NULL);
    g_cancel_client = NULL;
    return;
  }
  cli_caught = 0;
  g_cancel_client = cl;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cancel_on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < NINTERRUPTS; i++) {
    sigaction(INTERRUPTS[i], NULL, &saved[i]);
    if (saved[i].sa_handler != SIG_IGN) sigaction(INTERRUPTS[i], &sa, NULL);
  }
}

/* ---- --verbose: who holds the name while we wait ----------------------- */

/* How often a verbose wait says it is still waiting. */
#define VERBOSE_EVERY_MS 10000

/* Builds into buf the line "dblock: CMD: PREFIX, held by <holder>\n", or
 * "... PREFIX (no holder right now)\n", looking NAME's holder up. (One
 * line printed with one call: the reporter's lines never interleave with
 * the command's.) */
static void holder_line(char *buf, size_t size, dblock_client *cl, const args *a,
                        const char *name, const char *prefix) {
  dblock_lock_info info;
  char who[400];
  if (holder_phrase(who, sizeof who, cl, name, &info))
    snprintf(buf, size, "%s: %s: %s, held by %s\n", PROG, cmd_name(a), prefix, who);
  else
    snprintf(buf, size, "%s: %s: %s (no holder right now)\n", PROG, cmd_name(a), prefix);
}

/* The thread that says "still waiting" every VERBOSE_EVERY_MS while the
 * command's thread waits in dblock_lock_acquire (one wait, so its place in
 * line, its deadline and its cancel on a signal are the library's own). */
typedef struct reporter {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC */
  int done;          /* under mu: the wait is over, say nothing more */
  dblock_client *cl;
  const args *a;
  const char *name;
  int64_t t0; /* monotonic ms when the acquire began */
} reporter;

/* The reporter's loop: sleeps until the next multiple of VERBOSE_EVERY_MS
 * after t0 or until done, and says who holds the name then. */
static void *reporter_main(void *arg) {
  reporter *r = arg;
  int64_t next = r->t0 + VERBOSE_EVERY_MS;
  pthread_mutex_lock(&r->mu);
  while (!r->done) {
    struct timespec ts = {.tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000L};
    char cell[300], prefix[400], line[1200];
    if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT || r->done) continue;
    pthread_mutex_unlock(&r->mu);
    out_cell(cell, sizeof cell, r->name);
    snprintf(prefix, sizeof prefix, "still waiting for lock '%s' after %.1f s", cell,
             (double)(cli_mono_ms() - r->t0) / 1000.0);
    holder_line(line, sizeof line, r->cl, r->a, r->name, prefix);
    pthread_mutex_lock(&r->mu);
    if (r->done) break; /* (granted during the lookup: say nothing more) */
    fputs(line, stderr);
    while (next <= cli_mono_ms()) next += VERBOSE_EVERY_MS;
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* Starts r's thread (with the interrupting signals blocked in it, so they
 * reach the waiting thread's handler). Returns 0, or -1 when it cannot:
 * the wait then goes on without the periodic lines. */
static int reporter_start(reporter *r) {
  pthread_condattr_t ca;
  sigset_t block, old;
  int rc;
  r->done = 0;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  sigemptyset(&block);
  for (size_t i = 0; i < NINTERRUPTS; i++) sigaddset(&block, INTERRUPTS[i]);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  rc = pthread_create(&r->thread, NULL, reporter_main, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    return -1;
  }
  return 0;
}

/* Ends r's thread (at once, or after a lookup it is in) and frees it. */
static void reporter_stop(reporter *r) {
  pthread_mutex_lock(&r->mu);
  r->done = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->thread, NULL);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

/* The verbose acquire: one try; when busy and a wait was asked for, a
 * line naming the holder, then the wait for what is left of a->wait_ms
 * with the reporter saying who holds it every VERBOSE_EVERY_MS. Returns
 * the library's code. */
static int acquire_verbose(dblock_lock **l, dblock_client *cl, const args *a, const char *name,
                           int64_t lease_ms, int64_t t0) {
  reporter r = {.cl = cl, .a = a, .name = name, .t0 = t0};
  char cell[300], prefix[400], limit[48], line[1200];
  int64_t left = a->wait_ms;
  int rc = dblock_lock_acquire(l, cl, name, 0, lease_ms), started;
  if (rc != DBLOCK_EBUSY || a->wait_ms == 0) return rc;
  if (left > 0 && (left -= cli_mono_ms() - t0) <= 0) return DBLOCK_ETIMEOUT;
  if (a->wait_ms < 0) snprintf(limit, sizeof limit, "no time limit");
  else snprintf(limit, sizeof limit, "up to %lld ms", (long long)a->wait_ms);
  out_cell(cell, sizeof cell, name);
  snprintf(prefix, sizeof prefix, "waiting for lock '%s' (%s)", cell, limit);
  holder_line(line, sizeof line, cl, a, name, prefix);
  fputs(line, stderr);
  /* (the look at the holder took time too: what is left is counted
   * again, so the whole wait stays within --wait) */
  if (a->wait_ms > 0 && (left = a->wait_ms - (cli_mono_ms() - t0)) <= 0) return DBLOCK_ETIMEOUT;
  started = reporter_start(&r) == 0;
  rc = dblock_lock_acquire(l, cl, name, left, lease_ms);
  if (started) reporter_stop(&r);
  return rc;
}

int cli_acquire_interruptibly(dblock_lock **l, dblock_client *cl, const args *a, const char *name,
                              int64_t lease_ms) {
  int64_t t0 = cli_mono_ms();
  int rc;
  cli_interrupts(cl, 1);
  if (a->verbose) rc = acquire_verbose(l, cl, a, name, lease_ms, t0);
  else rc = dblock_lock_acquire(l, cl, name, a->wait_ms, lease_ms);
  cli_interrupts(cl, 0);
  if (rc == 0 && cli_caught) {
    dblock_lock_release(*l);
    *l = NULL;
    rc = DBLOCK_ECANCELED;
  }
  if (rc == 0 && a->verbose) {
    char cell[300];
    out_cell(cell, sizeof cell, name);
    fprintf(stderr, "%s: %s: lock '%s' granted (fence %lld) after %lld ms\n", PROG, cmd_name(a),
            cell, (long long)dblock_lock_fence(*l), (long long)(cli_mono_ms() - t0));
  }
  return rc;
}

int cli_interrupted(const args *a, const char *what, const char *name) {
  int sig = cli_caught ? (int)cli_caught : SIGINT;
  if (a->json) {
    cli_json_open();
    fputs(",\"ok\":false,\"error\":\"cancelled\",\"code\":", stdout);
    printf("%d,\"message\":\"interrupted by signal %d while waiting\"}\n", DBLOCK_ECANCELED, sig);
    fflush(stdout);
  }
  fprintf(stderr, "%s: %s: interrupted by %s while waiting for '%s'; nothing held\n", PROG, what,
          strsignal(sig), name);
  return 128 + sig;
}

/* ---- time --------------------------------------------------------------- */

int64_t cli_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_nap_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL); /* an interrupting signal just ends the nap early */
}
