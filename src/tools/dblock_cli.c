/*
 * dblock_cli.c — the plumbing the dblock commands share: usage errors,
 * failure reports (text and --json), opening the client, and waits for a
 * busy lock that SIGINT, SIGTERM or SIGHUP can interrupt.
 */
#include "dblock_cli.h"

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

int cli_fail(const args *a, const char *what, dblock_client *cl, int rc) {
  int code;
  if (a->json) {
    dblock_error_info ei;
    if (cl) dblock_client_last_error(cl, &ei);
    else dblock_last_error(&ei);
    fputs("{\"ok\":false,\"error\":", stdout);
    cli_json_str(stdout, dblock_strerror(rc));
    printf(",\"code\":%d,\"message\":", rc);
    cli_json_str(stdout, ei.code == rc && ei.message[0] ? ei.message : dblock_strerror(rc));
    fputs("}\n", stdout);
    fflush(stdout);
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

int cli_open_client(dblock_client **cl, args *a) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  const char *url = cli_url(a->url);
  int rc;
  if (!url) return cli_usage_error(a, "no database URL: give --url or set DBLOCK_URL");
  o.strategy = a->strategy;
  o.table = a->table;
  o.owner_host = a->owner_host;
  o.fair = a->fair;
  o.on_lost = on_lost;
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

int cli_acquire_interruptibly(dblock_lock **l, dblock_client *cl, const char *name,
                              int64_t wait_ms, int64_t lease_ms) {
  int rc;
  cli_interrupts(cl, 1);
  rc = dblock_lock_acquire(l, cl, name, wait_ms, lease_ms);
  cli_interrupts(cl, 0);
  if (rc == 0 && cli_caught) {
    dblock_lock_release(*l);
    *l = NULL;
    rc = DBLOCK_ECANCELED;
  }
  return rc;
}

int cli_interrupted(const args *a, const char *what, const char *name) {
  int sig = cli_caught ? (int)cli_caught : SIGINT;
  if (a->json) {
    fputs("{\"ok\":false,\"error\":\"cancelled\",\"code\":", stdout);
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
