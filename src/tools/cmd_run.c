/*
 * cmd_run.c — dblock run: a distributed flock. Acquires a lock, runs a
 * command under it (supervise.c does the processes), renews the lease
 * meanwhile, stops the command if the lock is lost, releases at the end.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "dblock_cli.h"
#include "supervise.h"

/* run --min-hold: the command has ended (with status code) before the
 * lock's minimum hold; keep holding (renewed by the watchdog) until
 * `until` (monotonic ms), so a copy of the job scheduled on another host a
 * little later finds the name busy and the job runs once per schedule
 * (ShedLock's lockAtLeastFor). SIGINT/SIGTERM/SIGHUP end the wait early
 * (exit 128 + N). A loss meanwhile is told on stderr and sets
 * g_lost_in_min_hold: the command itself ran under the lock, so its status
 * stands. */
static int g_lost_in_min_hold;

static int min_hold(const args *a, dblock_client *cl, dblock_lock *l, const char *name,
                    int64_t until, int code) {
  int64_t now;
  (void)a;
  cli_interrupts(cl, 1);
  while ((now = cli_mono_ms()) < until && !cli_caught) {
    if (atomic_load(&cli_lost) || dblock_lock_is_lost(l)) {
      g_lost_in_min_hold = 1;
      fprintf(stderr, "%s: run: lock '%s' was lost during --min-hold, after the command ended\n",
              PROG, name);
      break;
    }
    cli_nap_ms(until - now < 100 ? (long)(until - now) : 100);
  }
  cli_interrupts(cl, 0);
  if (cli_caught) {
    fprintf(stderr, "%s: run: interrupted by %s during --min-hold; releasing '%s'\n", PROG,
            strsignal(cli_caught), name);
    code = 128 + cli_caught;
  }
  return code;
}


/* DBLOCK_CHECK_SQL: the statement that checks this grant's fence in the
 * command's own transaction (docs/fenced-writes.md), with the name in a
 * form no server setting can misread: hex bytes on PostgreSQL (through
 * decode: standard_conforming_strings off would make a backslash in a
 * quoted name an escape) and MariaDB (X'..': its quoting depends on
 * sql_mode), doubled quotes on SQLite (which has no escapes). On
 * PostgreSQL the function is schema-qualified (dblock's schema is public):
 * no search_path can swap it. NULL: out of memory. */
/* Appends name's bytes to s at *o as hex digits. */
static void put_hex(char *s, size_t cap, size_t *o, const char *name) {
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    *o += (size_t)snprintf(s + *o, cap - *o, "%02x", *p);
}

static char *check_sql(const dblock_client *cl, const char *table, const char *name,
                       int64_t fence) {
  const char *be = dblock_client_backend(cl);
  size_t n = strlen(name), cap = 2 * n + 192, o;
  char *s = malloc(cap), fn[64];
  if (!s) return NULL;
  if (!table || strcmp(table, "dblock_locks") == 0) snprintf(fn, sizeof fn, "dblock_check");
  else snprintf(fn, sizeof fn, "%s_check", table);
  if (strcmp(be, "postgres") == 0) {
    o = (size_t)snprintf(s, cap, "DBLOCK_CHECK_SQL=SELECT public.%s(convert_from(decode('", fn);
    put_hex(s, cap, &o, name);
    snprintf(s + o, cap - o, "', 'hex'), 'UTF8'), %lld)", (long long)fence);
  } else if (strcmp(be, "mysql") == 0) {
    o = (size_t)snprintf(s, cap, "DBLOCK_CHECK_SQL=SELECT %s(X'", fn);
    put_hex(s, cap, &o, name);
    snprintf(s + o, cap - o, "', %lld)", (long long)fence);
  } else {
    o = (size_t)snprintf(s, cap, "DBLOCK_CHECK_SQL=SELECT %s('", fn);
    for (size_t i = 0; i < n; i++) {
      if (name[i] == '\'') s[o++] = '\'';
      s[o++] = name[i];
    }
    snprintf(s + o, cap - o, "', %lld)", (long long)fence);
  }
  return s;
}

/* Runs the command after "--" under NAME and exits with its status (4
 * when the lock was lost while it ran; 126/127 when it cannot be started;
 * 128 + N when signal N interrupted the wait for the lock). */
static int cmd_run(args *a) {
  dblock_client *cl;
  dblock_lock *l;
  const char *name = NULL;
  sup_child child;
  int rc, status, lost = 0, killed = 0, code;
  int64_t kill_at = 0, granted;

  if (a->npos < 1) return cli_usage_error(a, "missing lock NAME");
  if (!a->dashdash)
    return cli_usage_error(a, "missing '--' before the command (dblock run NAME -- CMD ARGS...)");
  if (a->npos > 1)
    return cli_usage_error(a, "unexpected argument '%s' before '--' (put the command after '--')",
                           a->pos[1]);
  if (a->nchild < 1) return cli_usage_error(a, "missing command after '--'");
  name = a->pos[0];
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  atomic_store(&cli_lost, 0);
  /* lease 0: the client's lease (--lease), renewed by the watchdog. */
  if ((rc = cli_acquire_interruptibly(&l, cl, a, name, 0)) != 0) {
    rc = rc == DBLOCK_ECANCELED ? cli_interrupted(a, "run", name)
                                : cli_fail_lock(a, "run", cl, rc, name);
    dblock_client_free(cl);
    return rc;
  }
  granted = cli_mono_ms();

  {
    char nv[DBLOCK_NAME_MAX + 16], fv[40], *cv = check_sql(cl, a->table, name, dblock_lock_fence(l));
    char *vars[] = {nv, fv, cv, NULL};
    snprintf(nv, sizeof nv, "DBLOCK_NAME=%s", name);
    snprintf(fv, sizeof fv, "DBLOCK_FENCE=%lld", (long long)dblock_lock_fence(l));
    rc = cv ? sup_start(&child, a->child, vars) : 126;
    if (!cv) fprintf(stderr, "%s: run: out of memory\n", PROG);
    free(cv);
  }
  if (rc != 0) {
    dblock_lock_release(l);
    dblock_client_free(cl);
    return rc;
  }
  /* Wait for the child (sup_exited leaves it unreaped); watch for a lost
   * lock meanwhile. */
  while (!sup_exited(&child)) {
    if (!lost && (atomic_load(&cli_lost) || dblock_lock_is_lost(l))) {
      lost = 1;
      kill(-child.group, SIGTERM); /* (before any message: act first) */
      fprintf(stderr, "%s: run: lock '%s' was lost; sent SIGTERM to process group %ld\n",
              PROG, name, (long)child.group);
      kill_at = cli_mono_ms() + a->kill_after_ms;
    }
    if (lost && !killed && cli_mono_ms() >= kill_at) {
      kill(-child.group, SIGKILL);
      fprintf(stderr, "%s: run: pid %ld still running after %lld ms; sent SIGKILL to its group\n",
              PROG, (long)child.pid, (long long)a->kill_after_ms);
      killed = 1;
    }
    cli_nap_ms(50);
  }
  status = sup_finish(&child);

  code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
  if (!lost && (atomic_load(&cli_lost) || dblock_lock_is_lost(l))) lost = 1;
  if (!lost && a->min_hold_ms > 0) code = min_hold(a, cl, l, name, granted + a->min_hold_ms, code);
  if (!lost && g_lost_in_min_hold) {
    cli_kept = l; /* lost during --min-hold: the command had it throughout */
    dblock_client_free(cl);
    return code;
  }
  /* A handle known lost is not released: there is nothing to free in the
   * database, and dblock_client_free drops it. (This also sidesteps a
   * self-deadlock in dblock_lock_release on a lost for_update lock.) */
  if (lost) cli_kept = l;
  rc = lost ? DBLOCK_ELOST : dblock_lock_release(l);
  if (rc == DBLOCK_ELOST || lost) {
    if (!lost)
      fprintf(stderr, "%s: run: lock '%s' was lost before the command ended\n", PROG, name);
    code = CLI_LOST;
  } else if (rc != 0) {
    cli_report(PROG, "run: release", cl, rc); /* the lease will run out */
  }
  dblock_client_free(cl);
  return code;
}

const command cmd_run_def = {"run", O_LOCKING | O_KILL_AFTER | O_MIN_HOLD, cmd_run,
    "run NAME [--wait D | -n] [-v] [--lease D] [--kill-after D] [--min-hold D] [--fair] "
    "-- CMD [ARGS...]",
    "Acquires NAME (waiting --wait, default forever), runs CMD with DBLOCK_NAME\n"
    "and DBLOCK_FENCE in its environment, renews the lease (--lease, default\n"
    "30s) in the background while CMD runs, releases the lock when CMD exits and\n"
    "exits with CMD's status (128+N if killed by signal N; 127/126 if CMD cannot\n"
    "be started). SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are\n"
    "forwarded to CMD. If the lock is lost, CMD gets SIGTERM, then SIGKILL after\n"
    "--kill-after (default 5s), and the exit status is 4. With --min-hold D the\n"
    "lock stays held (renewed) until D after the grant even when CMD ends\n"
    "sooner, so the same job started by cron on several hosts runs once per\n"
    "schedule. SIGINT, SIGTERM or SIGHUP while waiting for the lock: exit\n"
    "128+N, nothing held. With --fair, waiters get the lock in the order they\n"
    "asked, across hosts (PostgreSQL with insert or optimistic; elsewhere it is\n"
    "refused, exit 2). -n is --wait 0, as in flock(1). When the lock is busy or\n"
    "the wait runs out, the message names the holder (host, pid, fence, until\n"
    "when); with -v the wait says so when it starts and every 10 s, and the\n"
    "grant gives its fence and how long it waited.\n"};
