/*
 * dblock — the command-line tool: migrate, acquire / release across shell
 * steps, run a command under a lock (a distributed flock), status, list,
 * reap, force-unlock. Uses only the public API (dblock.h) and cli.h.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "dblock.h"

extern char **environ;

static const char *const PROG = "dblock";

/* ---- options ----------------------------------------------------------- */

enum {
  O_URL = 1 << 0,
  O_STRATEGY = 1 << 1,
  O_LEASE = 1 << 2,
  O_WAIT = 1 << 3,
  O_TABLE = 1 << 4,
  O_CONFLICT = 1 << 5,
  O_JSON = 1 << 6,
  O_STATUS = 1 << 7,
  O_TOKEN = 1 << 8,
  O_GRACE = 1 << 9,
  O_BATCH = 1 << 10,
  O_KILL_AFTER = 1 << 11,
  O_HELP = 1 << 12,
  O_VERSION = 1 << 13,
  O_MIN_HOLD = 1 << 14,
  O_BASELINE = 1 << 15,
  O_OWNER_HOST = 1 << 16,
};

/* Options every command accepts (some are simply unused by a command). */
#define O_GLOBAL (O_URL | O_STRATEGY | O_LEASE | O_WAIT | O_TABLE | O_CONFLICT | O_JSON | O_HELP | \
                  O_VERSION | O_OWNER_HOST)

typedef struct args {
  unsigned seen;
  const char *url, *table, *token, *owner_host;
  dblock_strategy strategy;
  int64_t lease_ms, wait_ms, grace_ms, kill_after_ms, min_hold_ms;
  int batch;
  int conflict_code;
  int json, migrate_status, baseline;
  const struct command *cmd;
  char **pos; /* positional arguments after the command name */
  int npos;
  char **child; /* run: the command after "--" */
  int nchild;
  int dashdash; /* "--" was given */
} args;

typedef struct command {
  const char *name;
  unsigned extra; /* command-specific options it accepts */
  int (*fn)(args *a);
  const char *synopsis;
  const char *help;
} command;

/* ---- output helpers ----------------------------------------------------- */

static const char *cmd_name(const args *a) { return a && a->cmd ? a->cmd->name : NULL; }

/* One-line usage error: "dblock: [cmd: ]reason (try 'dblock [cmd ]--help')". */
static int usage_error(const args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const args *a, const char *fmt, ...) {
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

/* Reports a library failure; busy / timeout use the -E exit code. */
/* Reports a failed call on stderr; with --json also one object on stdout,
 * {"ok":false,"error":"<dblock_strerror>","code":<DBLOCK_E...>,"message":...},
 * so a script parsing stdout never gets nothing. Returns the exit code. */
static int report(const args *a, const char *what, dblock_client *cl, int rc) {
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

/* Display width of a UTF-8 string (code points; good enough for tables). */
static size_t text_width(const char *s) {
  size_t w = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p & 0xc0) != 0x80) w++;
  return w;
}

/* Copies s into out for a table cell: control characters become \xNN. */
static void cell(char *out, size_t size, const char *s) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < size; p++) {
    if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(out + n, size - n, "\\x%02x", *p);
    else out[n++] = (char)*p;
  }
  out[n] = 0;
}

static void print_padded(const char *s, size_t width, int last) {
  size_t w = text_width(s);
  fputs(s, stdout);
  if (!last)
    for (; w < width + 2; w++) putchar(' ');
}

/* ---- the client --------------------------------------------------------- */

static atomic_int g_lost; /* set by the on_lost callback (another thread) */

static void on_lost(const char *name, int64_t fence, int reason, void *arg) {
  (void)name, (void)fence, (void)reason, (void)arg;
  atomic_store(&g_lost, 1);
}

static int open_client(dblock_client **cl, args *a) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  const char *url = cli_url(a->url);
  int rc;
  if (!url) return usage_error(a, "no database URL: give --url or set DBLOCK_URL");
  o.strategy = a->strategy;
  o.table = a->table;
  o.owner_host = a->owner_host;
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
  if ((rc = dblock_client_open(cl, url, &o)) != 0) return report(a, "cannot open the database", NULL, rc);
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
static volatile sig_atomic_t g_interrupted;

static void cancel_on_signal(int sig) {
  dblock_client *cl = g_cancel_client;
  g_interrupted = sig;
  if (cl) dblock_client_cancel(cl);
}

/* Installs (on = 1) or restores (on = 0) the handlers above for cl,
 * leaving alone a signal the caller ignores (nohup). */
static void interrupts(dblock_client *cl, int on) {
  static struct sigaction saved[NINTERRUPTS];
  struct sigaction sa;
  if (!on) {
    for (size_t i = 0; i < NINTERRUPTS; i++) sigaction(INTERRUPTS[i], &saved[i], NULL);
    g_cancel_client = NULL;
    return;
  }
  g_interrupted = 0;
  g_cancel_client = cl;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cancel_on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < NINTERRUPTS; i++) {
    sigaction(INTERRUPTS[i], NULL, &saved[i]);
    if (saved[i].sa_handler != SIG_IGN) sigaction(INTERRUPTS[i], &sa, NULL);
  }
}

/* dblock_lock_acquire that a signal can interrupt. Returns the library's
 * code, or DBLOCK_ECANCELED when a signal came (a lock granted just before
 * it is released again: the user asked to stop). */
static int acquire_interruptibly(dblock_lock **l, dblock_client *cl, const char *name,
                                 int64_t wait_ms, int64_t lease_ms) {
  int rc;
  interrupts(cl, 1);
  rc = dblock_lock_acquire(l, cl, name, wait_ms, lease_ms);
  interrupts(cl, 0);
  if (rc == 0 && g_interrupted) {
    dblock_lock_release(*l);
    *l = NULL;
    rc = DBLOCK_ECANCELED;
  }
  return rc;
}

/* The exit status and message of an interrupted wait. */
static int interrupted(const args *a, const char *what, const char *name) {
  int sig = g_interrupted ? (int)g_interrupted : SIGINT;
  if (a->json) {
    fputs("{\"ok\":false,\"error\":\"cancelled\",\"code\":", stdout);
    printf("%d,\"message\":\"interrupted by signal %d while waiting\"}\n", DBLOCK_ECANCELED, sig);
    fflush(stdout);
  }
  fprintf(stderr, "%s: %s: interrupted by %s while waiting for '%s'; nothing held\n", PROG, what,
          strsignal(sig), name);
  return 128 + sig;
}

/* ---- migrate ------------------------------------------------------------ */

static int cmd_migrate(args *a) {
  dblock_client *cl;
  int rc, applied = 0;
  if (a->npos) return usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = open_client(&cl, a)) != 0) return rc;
  if (a->migrate_status) {
    dblock_migration_info *mi;
    size_t n;
    if ((rc = dblock_migrate_status(&mi, &n, cl)) != 0) {
      rc = report(a, "migrate --status", cl, rc);
      dblock_client_free(cl);
      return rc;
    }
    if (a->json) {
      char t[40];
      fputs("[", stdout);
      for (size_t i = 0; i < n; i++) {
        printf("%s{\"version\":%d,\"name\":", i ? "," : "", mi[i].version);
        cli_json_str(stdout, mi[i].name);
        printf(",\"applied\":%s,\"applied_at\":", mi[i].applied ? "true" : "false");
        if (mi[i].applied_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, mi[i].applied_at_us, 6));
        else fputs("null", stdout);
        printf(",\"checksum_ok\":%s}", mi[i].applied ? (mi[i].checksum_ok ? "true" : "false") : "null");
      }
      fputs("]\n", stdout);
    } else {
      size_t wname = 4;
      char t[40];
      for (size_t i = 0; i < n; i++)
        if (text_width(mi[i].name) > wname) wname = text_width(mi[i].name);
      printf("%-7s  ", "VERSION");
      print_padded("NAME", wname, 0);
      printf("%-7s  %-27s  %s\n", "STATUS", "APPLIED AT", "CHECKSUM");
      for (size_t i = 0; i < n; i++) {
        printf("%-7d  ", mi[i].version);
        print_padded(mi[i].name, wname, 0);
        printf("%-7s  %-27s  %s\n", mi[i].applied ? "applied" : "pending",
               mi[i].applied ? cli_iso8601(t, sizeof t, mi[i].applied_at_us, 6) : "-",
               !mi[i].applied ? "-" : mi[i].checksum_ok ? "ok" : "MISMATCH");
      }
    }
    dblock_migration_info_free(mi, n);
    dblock_client_free(cl);
    return CLI_OK;
  }
  if (a->baseline) {
    if (a->migrate_status) {
      dblock_client_free(cl);
      return usage_error(a, "--baseline and --status do not go together");
    }
    if ((rc = dblock_migrate_baseline(cl, &applied)) != 0) {
      rc = report(a, "migrate --baseline", cl, rc);
      dblock_client_free(cl);
      return rc;
    }
    if (a->json) printf("{\"recorded\":%d,\"backend\":\"%s\"}\n", applied, dblock_client_backend(cl));
    else
      printf("recorded %d migration%s as applied by another tool (%s); "
             "'dblock migrate' applies the rest\n",
             applied, applied == 1 ? "" : "s", dblock_client_backend(cl));
    dblock_client_free(cl);
    return CLI_OK;
  }
  if ((rc = dblock_migrate(cl, &applied)) != 0) {
    rc = report(a, "migrate", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) printf("{\"applied\":%d,\"backend\":\"%s\"}\n", applied, dblock_client_backend(cl));
  else printf("applied %d migration%s (%s)\n", applied, applied == 1 ? "" : "s", dblock_client_backend(cl));
  dblock_client_free(cl);
  return CLI_OK;
}

/* ---- acquire / release -------------------------------------------------- */

/*
 * The owner token printed by `acquire` is OWNERTOKEN:THREAD:FENCE — the
 * row's owner_token (32 hex digits, random per client), owner_thread and
 * fencing token. `release` frees the lock only if the row still shows all
 * three and at least one hold: a lock that expired and was taken over,
 * force-unlocked or already released no longer matches.
 */
static int need_name(args *a, const char **name) {
  if (a->npos < 1) return usage_error(a, "missing lock NAME");
  if (a->npos > 1) return usage_error(a, "unexpected argument '%s'", a->pos[1]);
  *name = a->pos[0];
  return 0;
}

/* Handles deliberately left unreleased (acquire keeps its lock; run drops a
 * lost one): kept reachable so leak checkers do not flag them. */
static dblock_lock *volatile g_kept;

static int cmd_acquire(args *a) {
  dblock_client *cl;
  dblock_lock *l;
  dblock_lock_info info;
  const char *name = NULL;
  int rc;
  int64_t lease = (a->seen & O_LEASE) ? a->lease_ms : 30000;
  if ((rc = need_name(a, &name)) != 0) return rc;
  if (a->strategy == DBLOCK_STRATEGY_FOR_UPDATE)
    return usage_error(a, "the for_update strategy holds a lock only while its session "
                          "lives; use 'dblock run', or the insert or optimistic strategy");
  if ((rc = open_client(&cl, a)) != 0) return rc;
  if ((rc = acquire_interruptibly(&l, cl, name, a->wait_ms, lease)) != 0) {
    rc = rc == DBLOCK_ECANCELED ? interrupted(a, "acquire", name) : report(a, "acquire", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if ((rc = dblock_lock_inspect(&info, cl, name)) != 0 || !info.owner_token[0] ||
      info.fence != dblock_lock_fence(l)) {
    if (rc) rc = report(a, "acquire: cannot read back the owner", cl, rc);
    else {
      fprintf(stderr, "%s: acquire: the lock row does not show this owner after the grant\n", PROG);
      rc = CLI_LOST;
    }
    dblock_lock_release(l);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    char t[40], tok[80];
    snprintf(tok, sizeof tok, "%s:%lld:%lld", info.owner_token, (long long)info.owner_thread,
             (long long)info.fence);
    fputs("{\"ok\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"fence\":%lld,\"token\":\"%s\",\"expires_at\":", (long long)info.fence, tok);
    cli_json_str(stdout, cli_iso8601(t, sizeof t, dblock_lock_expires_at(l), 6));
    fputs("}\n", stdout);
  } else {
    printf("fence=%lld\ntoken=%s:%lld:%lld\n", (long long)info.fence, info.owner_token,
           (long long)info.owner_thread, (long long)info.fence);
  }
  fflush(stdout);
  g_kept = l;
  /* Deliberately not released: the lease keeps it until `dblock release`
   * or expiry. dblock_client_free releases nothing. */
  dblock_client_free(cl);
  return CLI_OK;
}

static int parse_token(const char *t, char owner[33], long long *thread, long long *fence) {
  const char *c1 = strchr(t, ':'), *c2;
  char *end;
  if (!c1 || c1 - t != 32) return -1;
  for (int i = 0; i < 32; i++) {
    char ch = t[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return -1;
  }
  memcpy(owner, t, 32);
  owner[32] = 0;
  if (!(c2 = strchr(c1 + 1, ':'))) return -1;
  errno = 0;
  *thread = strtoll(c1 + 1, &end, 10);
  if (end != c2 || end == c1 + 1 || errno) return -1;
  *fence = strtoll(c2 + 1, &end, 10);
  if (*end || end == c2 + 1 || errno || *fence <= 0) return -1;
  return 0;
}

static int cmd_release(args *a) {
  dblock_client *cl;
  dblock_lock_info info;
  const char *name = NULL;
  char owner[33];
  long long thread, fence;
  int rc;
  if ((rc = need_name(a, &name)) != 0) return rc;
  if (!a->token) return usage_error(a, "missing --token (the token printed by 'dblock acquire')");
  if (parse_token(a->token, owner, &thread, &fence) != 0)
    return usage_error(a, "malformed --token (expected the token=... value printed by 'dblock acquire')");
  if ((rc = open_client(&cl, a)) != 0) return rc;
  /* Informational only: say when the lease had already run out. The
   * release itself is one owner-checked statement. */
  if (dblock_lock_inspect(&info, cl, name) == 0 && !info.held &&
      strcmp(info.owner_token, owner) == 0 && info.fence == fence)
    fprintf(stderr, "%s: release: warning: the lease of '%s' had expired (nobody took it over)\n",
            PROG, name);
  rc = dblock_release_grant(cl, name, owner, (int64_t)thread, (int64_t)fence);
  if (rc == DBLOCK_ENOTHELD) {
    fprintf(stderr, "%s: release: %s\n", PROG, "lock is not held by this token (it expired and "
                    "was reaped or taken over, was force-unlocked, or was already released)");
    if (a->json) puts("{\"ok\":false,\"released\":false,\"error\":\"not held by this token\"}");
    rc = CLI_LOST;
  } else if (rc != 0) {
    rc = report(a, "release", cl, rc);
  } else if (a->json) {
    fputs("{\"ok\":true,\"released\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    puts("}");
  }
  dblock_client_free(cl);
  return rc;
}

/* ---- run ---------------------------------------------------------------- */

static const int FORWARDED[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof FORWARDED / sizeof FORWARDED[0])

/* The command's process group once it runs (0 before and after). A
 * signal that arrives before (or races with) its start is kept in
 * g_pending, one bit per signal number, and sent on by the wait loop.
 * Signal handlers may run in any thread, including the library's, so both
 * are atomics. Signals go to the whole group: a pipeline `a | b` run by a
 * shell is stopped as a whole. */
static atomic_int g_group;
static atomic_uint g_pending;

static void forward_signal(int sig) {
  int saved = errno;
  pid_t pg = (pid_t)atomic_load(&g_group);
  if (pg > 0) kill(-pg, sig);
  else atomic_fetch_or(&g_pending, 1u << sig);
  errno = saved;
}

static void forward_pending(pid_t pg) {
  unsigned bits = atomic_exchange(&g_pending, 0);
  for (int sig = 1; bits && sig < 32; sig++)
    if (bits & (1u << sig)) kill(-pg, sig);
}

/* Starts the guardian: a small process that leads the command's own
 * process group and holds the read end of a pipe whose only write end is
 * ours (close-on-exec, so the command never has it). When dblock dies for
 * any reason — SIGKILL, the OOM killer — the pipe reads end-of-file and the
 * guardian SIGKILLs the whole group, itself included: no part of the
 * command outlives its supervisor (and its lock). It ignores the signals
 * dblock forwards to the group. Returns its pid (= the group id) and the
 * write end in *wfd, or -1 with errno set. */
static pid_t start_guardian(int *wfd) {
  int p[2];
  pid_t g;
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  g = fork();
  if (g == 0) {
    /* A fork of a threaded process: async-signal-safe calls only. */
    struct sigaction ign;
    char b;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    setpgid(0, 0);
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &ign, NULL);
    /* Keep nothing but the pipe: no database socket, no terminal. */
    if (dup2(p[0], 0) < 0) _exit(1);
    if (syscall(SYS_close_range, 1u, ~0u, 0u) != 0)
      for (int fd = 1; fd < 1024; fd++) close(fd);
    while (read(0, &b, 1) < 0 && errno == EINTR) {
    }
    kill(0, SIGKILL);
    _exit(0);
  }
  close(p[0]);
  if (g < 0) {
    close(p[1]);
    return -1;
  }
  setpgid(g, g); /* also here, so the group exists before the spawn */
  *wfd = p[1];
  return g;
}

/* Gives the terminal to process group pg when dblock runs in the
 * terminal's foreground (so an interactive command reads it and gets ^C
 * itself), or back to dblock's own group (pg = 0). While the command has
 * it, dblock ignores SIGTTOU, so a message it writes (with `stty tostop`)
 * never stops it. Returns 1 if it moved the terminal (either way). */
static int hand_terminal(pid_t pg) {
  static int moved;
  static struct sigaction old_ttou;
  struct sigaction ign;
  sigset_t ttou, old;
  if (pg > 0 && (!isatty(STDIN_FILENO) || tcgetpgrp(STDIN_FILENO) != getpgrp())) return moved = 0;
  if (pg == 0 && !moved) return 0;
  /* A background group changing the terminal's group gets SIGTTOU. */
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  pthread_sigmask(SIG_BLOCK, &ttou, &old);
  if (tcsetpgrp(STDIN_FILENO, pg > 0 ? pg : getpgrp()) == 0) {
    if (pg > 0 && !moved) {
      memset(&ign, 0, sizeof ign);
      ign.sa_handler = SIG_IGN;
      sigaction(SIGTTOU, &ign, &old_ttou);
    } else if (pg == 0) {
      sigaction(SIGTTOU, &old_ttou, NULL);
    }
    moved = pg > 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return 0;
}

/* Job control for an interactive command (^Z): when it stops, dblock takes
 * the terminal back and stops too, so the shell sees its job stopped; when
 * the shell continues dblock (fg, bg), the command is continued (with the
 * terminal again for fg). The lock stays held and renewed meanwhile. */
static void follow_stop(pid_t pid, pid_t group) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)pid, &si, WSTOPPED | WNOHANG) != 0 || si.si_pid != pid) return;
  if (!hand_terminal(0)) return; /* not interactive: a stop is someone's choice */
  kill(getpid(), SIGSTOP);
  hand_terminal(group);
  kill(-group, SIGCONT);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL); /* an interrupting signal just ends the nap early */
}

/* environ without DBLOCK_NAME / DBLOCK_FENCE, plus ours. */
static char **child_env(const char *name, int64_t fence) {
  size_t n = 0, k = 0;
  char **env, *nv, *fv;
  for (char **e = environ; e && *e; e++) n++;
  if (!(env = calloc(n + 3, sizeof *env))) return NULL;
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, "DBLOCK_NAME=", 12) != 0 && strncmp(*e, "DBLOCK_FENCE=", 13) != 0)
      env[k++] = *e;
  nv = malloc(strlen(name) + 13);
  fv = malloc(32);
  if (!nv || !fv) {
    free(nv), free(fv), free(env);
    return NULL;
  }
  sprintf(nv, "DBLOCK_NAME=%s", name);
  snprintf(fv, 32, "DBLOCK_FENCE=%lld", (long long)fence);
  env[k++] = nv;
  env[k++] = fv;
  env[k] = NULL;
  return env;
}

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
  interrupts(cl, 1);
  while ((now = mono_ms()) < until && !g_interrupted) {
    if (atomic_load(&g_lost) || dblock_lock_is_lost(l)) {
      g_lost_in_min_hold = 1;
      fprintf(stderr, "%s: run: lock '%s' was lost during --min-hold, after the command ended\n",
              PROG, name);
      break;
    }
    nap_ms(until - now < 100 ? (long)(until - now) : 100);
  }
  interrupts(cl, 0);
  if (g_interrupted) {
    fprintf(stderr, "%s: run: interrupted by %s during --min-hold; releasing '%s'\n", PROG,
            strsignal(g_interrupted), name);
    code = 128 + g_interrupted;
  }
  return code;
}

static int cmd_run(args *a) {
  dblock_client *cl;
  dblock_lock *l;
  const char *name = NULL;
  char **env;
  sigset_t fwd, old;
  struct sigaction sa, saved[NFORWARDED];
  posix_spawnattr_t attr;
  pid_t pid, group;
  siginfo_t si;
  int rc, status = 0, lost = 0, killed = 0, code, guard_fd = -1;
  int64_t kill_at = 0, granted;

  if (a->npos < 1) return usage_error(a, "missing lock NAME");
  if (!a->dashdash)
    return usage_error(a, "missing '--' before the command (dblock run NAME -- CMD ARGS...)");
  if (a->npos > 1)
    return usage_error(a, "unexpected argument '%s' before '--' (put the command after '--')",
                       a->pos[1]);
  if (a->nchild < 1) return usage_error(a, "missing command after '--'");
  name = a->pos[0];
  if ((rc = open_client(&cl, a)) != 0) return rc;
  atomic_store(&g_lost, 0);
  /* lease 0: the client's lease (--lease), renewed by the watchdog. */
  if ((rc = acquire_interruptibly(&l, cl, name, a->wait_ms, 0)) != 0) {
    rc = rc == DBLOCK_ECANCELED ? interrupted(a, "run", name) : report(a, "run", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  granted = mono_ms();

  /* From here the forwarded signals go to the child. Block them until it
   * exists, so none is lost or acted on by us in between. */
  sigemptyset(&fwd);
  for (size_t i = 0; i < NFORWARDED; i++) sigaddset(&fwd, FORWARDED[i]);
  pthread_sigmask(SIG_BLOCK, &fwd, &old);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  /* A signal our caller ignores (nohup, background jobs) stays ignored,
   * for us and for the child, as shells do. */
  for (size_t i = 0; i < NFORWARDED; i++) {
    sigaction(FORWARDED[i], NULL, &saved[i]);
    if (saved[i].sa_handler != SIG_IGN) sigaction(FORWARDED[i], &sa, NULL);
  }

  env = child_env(name, dblock_lock_fence(l));
  if ((group = start_guardian(&guard_fd)) < 0) {
    fprintf(stderr, "%s: run: cannot start the process-group guardian: %s\n", PROG,
            strerror(errno));
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &saved[i], NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (env) {
      for (char **e = env; *e; e++)
        if (strncmp(*e, "DBLOCK_NAME=", 12) == 0 || strncmp(*e, "DBLOCK_FENCE=", 13) == 0) free(*e);
      free(env);
    }
    dblock_lock_release(l);
    dblock_client_free(cl);
    return 126;
  }
  posix_spawnattr_init(&attr);
  {
    sigset_t def;
    sigemptyset(&def);
    for (size_t i = 0; i < NFORWARDED; i++)
      if (saved[i].sa_handler != SIG_IGN) sigaddset(&def, FORWARDED[i]);
    sigaddset(&def, SIGTTOU); /* (dblock may ignore it: the command must not) */
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setsigmask(&attr, &old);
    /* The command runs in the guardian's process group (see above). */
    posix_spawnattr_setpgroup(&attr, group);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETPGROUP);
  }
  hand_terminal(group);
  rc = env ? posix_spawnp(&pid, a->child[0], NULL, &attr, a->child, env) : ENOMEM;
  posix_spawnattr_destroy(&attr);
  if (env) {
    for (char **e = env; *e; e++)
      if (strncmp(*e, "DBLOCK_NAME=", 12) == 0 || strncmp(*e, "DBLOCK_FENCE=", 13) == 0) free(*e);
    free(env);
  }
  if (rc != 0) {
    fprintf(stderr, "%s: run: cannot run '%s': %s\n", PROG, a->child[0], strerror(rc));
    hand_terminal(0);
    kill(-group, SIGKILL);
    close(guard_fd);
    while (waitpid(group, NULL, 0) < 0 && errno == EINTR) {
    }
    for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &saved[i], NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    dblock_lock_release(l);
    dblock_client_free(cl);
    return rc == ENOENT ? 127 : 126;
  }
  atomic_store(&g_group, group);
  pthread_sigmask(SIG_SETMASK, &old, NULL);

  /* Wait for the child without reaping it (WNOWAIT), so a forwarded signal
   * can never hit a recycled pid; watch for a lost lock meanwhile. */
  for (;;) {
    int w;
    forward_pending(group);
    follow_stop(pid, group);
    memset(&si, 0, sizeof si);
    w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && si.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (!lost && (atomic_load(&g_lost) || dblock_lock_is_lost(l))) {
      lost = 1;
      kill(-group, SIGTERM); /* (before any message: act first) */
      fprintf(stderr, "%s: run: lock '%s' was lost; sent SIGTERM to process group %ld\n",
              PROG, name, (long)group);
      kill_at = mono_ms() + a->kill_after_ms;
    }
    if (lost && !killed && mono_ms() >= kill_at) {
      kill(-group, SIGKILL);
      fprintf(stderr, "%s: run: pid %ld still running after %lld ms; sent SIGKILL to its group\n",
              PROG, (long)pid, (long long)a->kill_after_ms);
      killed = 1;
    }
    nap_ms(50);
  }
  atomic_store(&g_group, 0);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  /* The command is done: what it left running in its group (background
   * jobs) must not go on outside the lock, and the guardian's work is over. */
  hand_terminal(0);
  kill(-group, SIGKILL);
  close(guard_fd);
  while (waitpid(group, NULL, 0) < 0 && errno == EINTR) {
  }
  /* The child is gone: signals act on us again as before (e.g. SIGTERM
   * during the release ends dblock; the lease then runs out). */
  for (size_t i = 0; i < NFORWARDED; i++) sigaction(FORWARDED[i], &saved[i], NULL);
  atomic_store(&g_pending, 0);

  code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
  if (!lost && (atomic_load(&g_lost) || dblock_lock_is_lost(l))) lost = 1;
  if (!lost && a->min_hold_ms > 0) code = min_hold(a, cl, l, name, granted + a->min_hold_ms, code);
  if (!lost && g_lost_in_min_hold) {
    g_kept = l; /* lost during --min-hold: the command had it throughout */
    dblock_client_free(cl);
    return code;
  }
  /* A handle known lost is not released: there is nothing to free in the
   * database, and dblock_client_free drops it. (This also sidesteps a
   * self-deadlock in dblock_lock_release on a lost for_update lock.) */
  if (lost) g_kept = l;
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

/* ---- status / list ------------------------------------------------------ */

static void json_info(const dblock_lock_info *i) {
  char t[40];
  fputs("{\"name\":", stdout);
  cli_json_str(stdout, i->name);
  fputs(",\"row\":true", stdout);
  fputs(",\"strategy\":", stdout);
  cli_json_str(stdout, i->strategy);
  printf(",\"held\":%s,\"owner_host\":", i->held ? "true" : "false");
  cli_json_str(stdout, i->owner_host);
  printf(",\"owner_pid\":%lld,\"owner_thread\":%lld,\"hold_count\":%d,\"fence\":%lld,",
         (long long)i->owner_pid, (long long)i->owner_thread, i->hold_count, (long long)i->fence);
  fputs("\"acquired_at\":", stdout);
  if (i->acquired_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, i->acquired_at_us, 6));
  else fputs("null", stdout);
  fputs(",\"expires_at\":", stdout);
  if (i->expires_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, i->expires_at_us, 6));
  else fputs("null", stdout);
  printf(",\"acquired_at_us\":%lld,\"expires_at_us\":%lld}", (long long)i->acquired_at_us,
         (long long)i->expires_at_us);
}

static void holder_text(char *out, size_t size, const dblock_lock_info *i) {
  char host[300];
  if (!i->held || (!i->owner_host[0] && !i->owner_pid)) {
    snprintf(out, size, "-");
    return;
  }
  cell(host, sizeof host, i->owner_host);
  snprintf(out, size, "%s pid %lld thread %lld", host, (long long)i->owner_pid,
           (long long)i->owner_thread);
}

static int cmd_status(args *a) {
  dblock_client *cl;
  dblock_lock_info i;
  const char *name = NULL;
  char buf[400], t[40];
  int rc;
  if ((rc = need_name(a, &name)) != 0) return rc;
  if ((rc = open_client(&cl, a)) != 0) return rc;
  rc = dblock_lock_inspect(&i, cl, name);
  if (rc == DBLOCK_ENOTHELD) {
    /* No row: never used, or reaped. The name is free — an answer, not an
     * error (exit 0); "row": false tells it from a free row. */
    dblock_client_free(cl);
    if (a->json) {
      fputs("{\"name\":", stdout);
      cli_json_str(stdout, name);
      puts(",\"row\":false,\"held\":false}");
    } else {
      cell(buf, sizeof buf, name);
      printf("name:       %s\nheld:       no (no lock row: never taken, or reaped)\n", buf);
    }
    return CLI_OK;
  }
  if (rc != 0) {
    rc = report(a, "status", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    json_info(&i);
    putchar('\n');
  } else {
    cell(buf, sizeof buf, i.name);
    printf("name:       %s\n", buf);
    printf("strategy:   %s\n", i.strategy);
    printf("held:       %s\n", i.held ? "yes" : "no");
    holder_text(buf, sizeof buf, &i);
    printf("holder:     %s\n", buf);
    printf("fence:      %lld\n", (long long)i.fence);
    printf("holds:      %d\n", i.hold_count);
    printf("acquired:   %s\n", cli_iso8601(t, sizeof t, i.acquired_at_us, 6));
    printf("expires:    %s\n", cli_iso8601(t, sizeof t, i.expires_at_us, 6));
  }
  dblock_client_free(cl);
  return CLI_OK;
}

enum { C_NAME, C_STRAT, C_HELD, C_HOLDER, C_FENCE, C_HOLDS, C_ACQ, C_EXP, NCOL };

/* Formats column c of row i into buf (a table cell). */
static const char *list_cell(char *buf, size_t size, const dblock_lock_info *i, int c) {
  switch (c) {
  case C_NAME: cell(buf, size, i->name); break;
  case C_STRAT: snprintf(buf, size, "%s", i->strategy); break;
  case C_HELD: snprintf(buf, size, "%s", i->held ? "yes" : "no"); break;
  case C_HOLDER: holder_text(buf, size, i); break;
  case C_FENCE: snprintf(buf, size, "%lld", (long long)i->fence); break;
  case C_HOLDS: snprintf(buf, size, "%d", i->hold_count); break;
  case C_ACQ: cli_iso8601(buf, size, i->acquired_at_us, 3); break;
  default: cli_iso8601(buf, size, i->expires_at_us, 3); break;
  }
  return buf;
}

static int cmd_list(args *a) {
  static const char *const head[NCOL] = {"NAME", "STRATEGY", "HELD", "HOLDER",
                                         "FENCE", "HOLDS", "ACQUIRED", "EXPIRES"};
  dblock_client *cl;
  dblock_lock_info *v;
  size_t n, w[NCOL];
  char buf[1200];
  int rc;
  if (a->npos) return usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_lock_list(&v, &n, cl, 0)) != 0) {
    rc = report(a, "list", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  if (a->json) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
      if (i) putchar(',');
      json_info(&v[i]);
    }
    puts("]");
    free(v);
    return CLI_OK;
  }
  /* Two passes (widths, then rows), so a long list needs no extra memory. */
  for (int c = 0; c < NCOL; c++) w[c] = strlen(head[c]);
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < NCOL; c++) {
      size_t cw = text_width(list_cell(buf, sizeof buf, &v[i], c));
      if (cw > w[c]) w[c] = cw;
    }
  for (int c = 0; c < NCOL; c++) print_padded(head[c], w[c], c == NCOL - 1);
  putchar('\n');
  for (size_t i = 0; i < n; i++) {
    for (int c = 0; c < NCOL; c++)
      print_padded(list_cell(buf, sizeof buf, &v[i], c), w[c], c == NCOL - 1);
    putchar('\n');
  }
  free(v);
  return CLI_OK;
}

/* ---- stats --------------------------------------------------------------- */

/* What the lock table holds right now, as gauges for monitoring (a cron
 * job writing node_exporter's textfile collector, or --json): rows by
 * strategy and state, the age of the oldest held lock, the highest fence.
 * (A one-shot process has no counters worth showing; an application reads
 * its own with dblock_client_stats / dblock_stats_openmetrics.) */
static int cmd_stats(args *a) {
  static const char *const strat[] = {"insert", "for_update", "optimistic"};
  dblock_client *cl;
  dblock_lock_info *v;
  size_t n, count[3][2] = {{0}};
  int64_t oldest = 0, max_fence = 0, now_us;
  const char *table = a->table ? a->table : "dblock_locks";
  struct timespec ts;
  int rc;
  if (a->npos) return usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_lock_list(&v, &n, cl, 0)) != 0) {
    rc = report(a, "stats", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  clock_gettime(CLOCK_REALTIME, &ts);
  now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  for (size_t i = 0; i < n; i++) {
    int k = strcmp(v[i].strategy, "for_update") == 0 ? 1 : strcmp(v[i].strategy, "optimistic") == 0 ? 2 : 0;
    count[k][v[i].held ? 1 : 0]++;
    if (v[i].held && v[i].acquired_at_us && (!oldest || v[i].acquired_at_us < oldest))
      oldest = v[i].acquired_at_us;
    if (v[i].fence > max_fence) max_fence = v[i].fence;
  }
  free(v);
  /* (server-clock acquisition against this host's clock: as close as the
   * two clocks are; never negative) */
  double age = oldest && now_us > oldest ? (double)(now_us - oldest) / 1e6 : 0.0;
  if (a->json) {
    size_t held = count[0][1] + count[1][1] + count[2][1];
    fputs("{\"table\":", stdout);
    cli_json_str(stdout, table);
    printf(",\"rows\":%zu,\"held\":%zu,\"free\":%zu,\"by_strategy\":{", n, held, n - held);
    for (int k = 0; k < 3; k++)
      printf("%s\"%s\":{\"held\":%zu,\"free\":%zu}", k ? "," : "", strat[k], count[k][1],
             count[k][0]);
    printf("},\"oldest_held_seconds\":%.3f,\"max_fence\":%lld}\n", age, (long long)max_fence);
    return CLI_OK;
  }
  printf("# TYPE dblock_locks gauge\n"
         "# HELP dblock_locks Lock rows by strategy and state (held, or free: released or "
         "expired, kept for its fence).\n");
  for (int k = 0; k < 3; k++)
    for (int held = 1; held >= 0; held--)
      printf("dblock_locks{table=\"%s\",strategy=\"%s\",state=\"%s\"} %zu\n", table, strat[k],
             held ? "held" : "free", count[k][held]);
  printf("# TYPE dblock_locks_oldest_held_seconds gauge\n"
         "# HELP dblock_locks_oldest_held_seconds Age of the longest-held lock (0: none held).\n"
         "dblock_locks_oldest_held_seconds{table=\"%s\"} %.3f\n"
         "# TYPE dblock_locks_max_fence gauge\n"
         "# HELP dblock_locks_max_fence Highest fencing token in the table.\n"
         "dblock_locks_max_fence{table=\"%s\"} %lld\n# EOF\n",
         table, age, table, (long long)max_fence);
  return CLI_OK;
}

/* ---- doctor -------------------------------------------------------------- */

static const char *const SEV_NAMES[] = {"ok", "info", "warn", "UNSAFE"};

/* Exit status: CLI_UNSAFE when any finding is unsafe, else 0. */
static int cmd_doctor(args *a) {
  dblock_client *cl;
  dblock_finding *f;
  size_t n;
  int rc, unsafe = 0;
  if (a->npos) return usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_doctor(&f, &n, cl)) != 0) {
    rc = report(a, "doctor", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  for (size_t i = 0; i < n; i++) unsafe |= f[i].severity == DBLOCK_SEV_UNSAFE;
  if (a->json) {
    printf("{\"ok\":%s,\"findings\":[", unsafe ? "false" : "true");
    for (size_t i = 0; i < n; i++) {
      printf("%s{\"severity\":", i ? "," : "");
      cli_json_str(stdout, SEV_NAMES[f[i].severity & 3]);
      fputs(",\"topic\":", stdout);
      cli_json_str(stdout, f[i].topic);
      fputs(",\"text\":", stdout);
      cli_json_str(stdout, f[i].text);
      fputs(",\"advice\":", stdout);
      cli_json_str(stdout, f[i].advice);
      putchar('}');
    }
    puts("]}");
  } else {
    for (size_t i = 0; i < n; i++) {
      printf("%-6s %-10s %s\n", SEV_NAMES[f[i].severity & 3], f[i].topic, f[i].text);
      if (f[i].advice[0]) printf("%-17s -> %s\n", "", f[i].advice);
    }
    printf("%s\n", unsafe ? "verdict: UNSAFE — dblock's promises can break here (see above)"
                          : "verdict: ok");
  }
  free(f);
  return unsafe ? CLI_UNSAFE : CLI_OK;
}

/* ---- reap / force-unlock ------------------------------------------------ */

static int cmd_reap(args *a) {
  dblock_client *cl;
  int64_t deleted = 0, t0;
  double secs;
  int rc;
  if (a->npos) return usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = open_client(&cl, a)) != 0) return rc;
  t0 = mono_ms();
  rc = dblock_reap(cl, a->grace_ms, a->batch, &deleted);
  secs = (double)(mono_ms() - t0) / 1000.0;
  if (rc != 0) {
    if (a->json) {
      dblock_error_info ei;
      dblock_client_last_error(cl, &ei);
      printf("{\"deleted\":%lld,\"seconds\":%.3f,\"ok\":false,\"error\":", (long long)deleted, secs);
      cli_json_str(stdout, ei.message[0] ? ei.message : dblock_strerror(rc));
      puts("}");
    }
    {
      args quiet = *a; /* the JSON above is the one object on stdout */
      quiet.json = 0;
      rc = report(&quiet, "reap", cl, rc);
    }
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) printf("{\"deleted\":%lld,\"seconds\":%.3f,\"ok\":true}\n", (long long)deleted, secs);
  else printf("deleted %lld expired lock row%s in %.3f s\n", (long long)deleted,
              deleted == 1 ? "" : "s", secs);
  dblock_client_free(cl);
  return CLI_OK;
}

static int cmd_force_unlock(args *a) {
  dblock_client *cl;
  const char *name = NULL;
  int64_t fence = 0;
  int rc;
  if ((rc = need_name(a, &name)) != 0) return rc;
  if ((rc = open_client(&cl, a)) != 0) return rc;
  rc = dblock_force_unlock(cl, name, &fence);
  if (rc == DBLOCK_ENOTHELD) {
    fprintf(stderr, "%s: force-unlock: no lock named '%s'\n", PROG, name);
    dblock_client_free(cl);
    return CLI_DBERR;
  }
  if (rc != 0) {
    rc = report(a, "force-unlock", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    fputs("{\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"fence\":%lld}\n", (long long)fence);
  } else {
    printf("fence=%lld\n", (long long)fence);
  }
  dblock_client_free(cl);
  return CLI_OK;
}

/* Deletes a free name's row (dblock_forget), so another strategy can use
 * the name. Busy (exit 3) when it is held: nothing is deleted. */
static int cmd_forget(args *a) {
  dblock_client *cl;
  const char *name = NULL;
  int rc;
  if ((rc = need_name(a, &name)) != 0) return rc;
  if ((rc = open_client(&cl, a)) != 0) return rc;
  rc = dblock_forget(cl, name);
  if (rc != 0) {
    rc = report(a, "forget", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    fputs("{\"ok\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    puts(",\"forgotten\":true}");
  } else {
    printf("forgot '%s' (its row is deleted; the next acquire, with any strategy, creates it)\n",
           name);
  }
  dblock_client_free(cl);
  return CLI_OK;
}

/* ---- help --------------------------------------------------------------- */

static int cmd_help(args *a);

static const command COMMANDS[] = {
    {"migrate", O_STATUS | O_BASELINE, cmd_migrate, "migrate [--status | --baseline]",
     "Creates or upgrades the lock table (applies pending migrations and prints\n"
     "how many). With --status, lists each migration: version, name,\n"
     "applied/pending, when it was applied and whether its checksum matches.\n"
     "With --baseline, adopts a schema another tool (Flyway, golang-migrate)\n"
     "applied from dblock's migrations: records those whose objects are there\n"
     "as applied, runs nothing; a later 'dblock migrate' applies the rest.\n"},
    {"acquire", 0, cmd_acquire, "acquire NAME [--lease D] [--wait D]",
     "Acquires NAME with an explicit lease (default 30s) that is NOT renewed and\n"
     "outlives this process, so a lock can be held across shell steps. Prints\n"
     "  fence=N      the fencing token\n"
     "  token=T      the owner token for 'dblock release NAME --token T'\n"
     "In a script: lock=$(dblock acquire NAME --lease 5m) || exit; eval \"$lock\"\n"
     "sets $fence and $token (a bare eval \"$(...)\" would go on when busy).\n"
     "--wait defaults to 0 (try once). Not available with --strategy for_update,\n"
     "whose lock ends with the session.\n"},
    {"release", O_TOKEN, cmd_release, "release NAME --token T",
     "Releases a lock taken with 'dblock acquire', if the token still owns it.\n"
     "A lock that expired and was taken over, was force-unlocked or was already\n"
     "released is left alone and the exit status is 4.\n"},
    {"run", O_KILL_AFTER | O_MIN_HOLD, cmd_run,
     "run NAME [--wait D] [--lease D] [--kill-after D] [--min-hold D] -- CMD [ARGS...]",
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
     "128+N, nothing held.\n"},
    {"status", 0, cmd_status, "status NAME",
     "Shows what the database knows about NAME: strategy, held, holder host, pid\n"
     "and thread, fence, hold count, acquired and expiry times (UTC). --json\n"
     "prints one JSON object. A name with no row is free: held no, exit 0\n"
     "(JSON \"row\":false).\n"},
    {"list", 0, cmd_list, "list",
     "Lists every lock row as a table, or as one JSON array with --json.\n"},
    {"stats", 0, cmd_stats, "stats",
     "Prints what the lock table holds right now as OpenMetrics text (for a\n"
     "monitoring textfile collector): rows by strategy and state (held/free),\n"
     "the age of the oldest held lock, the highest fence. --json prints one\n"
     "object with the same figures.\n"},
    {"doctor", 0, cmd_doctor, "doctor",
     "Tells whether the database keeps dblock's promises: server and version,\n"
     "topology (stand-alone, primary with synchronous / asynchronous standbys,\n"
     "replica, Galera node), durability settings, settings that can end a lock\n"
     "or a wait early, the server's clock against this host's, whether the\n"
     "--strategy works there, migration status. One finding per line (ok, info,\n"
     "warn, UNSAFE) with advice; --json prints {\"ok\":..,\"findings\":[..]}.\n"
     "Exit status 5 if anything is unsafe. Works on a replica.\n"},
    {"reap", O_GRACE | O_BATCH, cmd_reap, "reap [--grace D] [--batch N]",
     "One reaper pass (like dblock-reaper --once): deletes rows whose lease\n"
     "expired more than --grace (default 0) ago, --batch rows (default 1000) per\n"
     "statement, and prints how many it deleted and how long it took.\n"},
    {"force-unlock", 0, cmd_force_unlock, "force-unlock NAME",
     "Frees NAME whoever holds it and advances its fencing token; prints\n"
     "fence=N (the new token). The old holder's handle reports the lock lost.\n"
     "A held for_update lock can only be force-unlocked on PostgreSQL.\n"},
    {"forget", 0, cmd_forget, "forget NAME",
     "Deletes the row of NAME while nobody holds it, so the name can be used with\n"
     "another strategy (an acquire with the wrong --strategy exits 2 and says\n"
     "so). A held name is left alone and the exit status is 3. Fencing tokens\n"
     "stay increasing.\n"},
    {"help", 0, cmd_help, "help [COMMAND]", "Shows this help, or a command's.\n"},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static const char OPTIONS_HELP[] =
    "Options (before or after COMMAND):\n"
    "  --url URL                  database URL (default: $DBLOCK_URL)\n"
    "                               postgres://user:pass@host:port/db, mysql://...,\n"
    "                               sqlite:///abs/path.db\n"
    "  --strategy S               insert (default), for_update or optimistic\n"
    "  --lease D                  lease (acquire: fixed; run: renewed), default 30s\n"
    "  -w, --wait D               how long to wait for a busy lock (acquire: 0,\n"
    "                               run: forever)\n"
    "  --table NAME               lock table (default dblock_locks)\n"
    "  --owner-host H             the holder's host as recorded (default: the\n"
    "                               host name; e.g. a pod's stable name)\n"
    "  -E, --conflict-exit-code N exit status when busy / timed out (default 3)\n"
    "  --json                     JSON output (every command but run and help)\n"
    "  --token T                  release: the token printed by acquire\n"
    "  --status                   migrate: list migrations instead of applying\n"
    "  --baseline                 migrate: adopt a schema applied by another tool\n"
    "  --kill-after D             run: SIGKILL delay after SIGTERM on a lost lock\n"
    "  --min-hold D               run: hold at least D after the grant (once per\n"
    "                               schedule across hosts)\n"
    "  --grace D, --batch N       reap: grace after expiry, rows per statement\n"
    "  -h, --help                 help (COMMAND --help: that command's)\n"
    "  -V, --version              print the version\n"
    "\n"
    "Durations: 250ms, 30s, 5m, 1h, 1.5 (seconds); --wait also takes 'forever'.\n"
    "\n"
    "Exit status:\n"
    "  0  success\n"
    "  1  database error (connection, authentication, missing schema, permission)\n"
    "  2  usage error (bad option, argument or URL)\n"
    "  3  lock busy, or the wait timed out (change with -E)\n"
    "  4  lock lost (run), or not held by the token (release)\n"
    "  5  doctor: an unsafe finding\n"
    "  128+N  acquire/run: interrupted by signal N while waiting (nothing held)\n"
    "  run: otherwise the command's status\n";

static void print_help(const command *c) {
  if (!c) {
    printf("Usage: %s [OPTIONS] COMMAND [ARGS...]\n\n"
           "Distributed locks kept in PostgreSQL, MySQL/MariaDB or SQLite.\n\nCommands:\n",
           PROG);
    for (size_t i = 0; i < NCOMMANDS; i++) printf("  %s %s\n", PROG, COMMANDS[i].synopsis);
    printf("\n%s", OPTIONS_HELP);
    return;
  }
  printf("Usage: %s %s\n\n%s\n%s", PROG, c->synopsis, c->help, OPTIONS_HELP);
}

static const command *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
  return NULL;
}

static int cmd_help(args *a) {
  const command *c = NULL;
  if (a->npos > 1) return usage_error(a, "unexpected argument '%s'", a->pos[1]);
  if (a->npos == 1 && !(c = find_command(a->pos[0])))
    return usage_error(a, "unknown command '%s'", a->pos[0]);
  print_help(c);
  return CLI_OK;
}

/* ---- main --------------------------------------------------------------- */

static const struct {
  const char *name;
  unsigned bit;
} OPT_NAMES[] = {{"--status", O_STATUS}, {"--token", O_TOKEN}, {"--grace", O_GRACE},
                 {"--batch", O_BATCH}, {"--kill-after", O_KILL_AFTER},
                 {"--min-hold", O_MIN_HOLD}, {"--baseline", O_BASELINE}};

static int parse_duration(args *a, const char *opt, const char *v, int64_t *out, int allow_forever,
                          int64_t min_ms) {
  if (cli_duration(v, out) != 0)
    return usage_error(a, "bad duration for %s: '%s' (examples: 250ms, 30s, 5m)", opt, v);
  if (*out < 0 && !allow_forever)
    return usage_error(a, "bad duration for %s: '%s' (it cannot be negative or 'forever')", opt, v);
  if (*out >= 0 && *out < min_ms)
    return usage_error(a, "%s must be at least %lldms", opt, (long long)min_ms);
  return 0;
}

static int parse_int(args *a, const char *opt, const char *v, long lo, long hi, int *out) {
  char *end;
  long x;
  errno = 0;
  x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return usage_error(a, "bad value for %s: '%s' (an integer from %ld to %ld)", opt, v, lo, hi);
  *out = (int)x;
  return 0;
}

int main(int argc, char **argv) {
  enum { L_URL = 1000, L_STRATEGY, L_LEASE, L_TABLE, L_JSON, L_STATUS, L_TOKEN, L_GRACE,
         L_BATCH, L_KILL_AFTER, L_MIN_HOLD, L_BASELINE, L_OWNER_HOST };
  static const struct option longopts[] = {
      {"url", required_argument, NULL, L_URL},
      {"strategy", required_argument, NULL, L_STRATEGY},
      {"lease", required_argument, NULL, L_LEASE},
      {"wait", required_argument, NULL, 'w'},
      {"table", required_argument, NULL, L_TABLE},
      {"conflict-exit-code", required_argument, NULL, 'E'},
      {"json", no_argument, NULL, L_JSON},
      {"status", no_argument, NULL, L_STATUS},
      {"token", required_argument, NULL, L_TOKEN},
      {"grace", required_argument, NULL, L_GRACE},
      {"batch", required_argument, NULL, L_BATCH},
      {"kill-after", required_argument, NULL, L_KILL_AFTER},
      {"min-hold", required_argument, NULL, L_MIN_HOLD},
      {"baseline", no_argument, NULL, L_BASELINE},
      {"owner-host", required_argument, NULL, L_OWNER_HOST},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  args a;
  int split = argc, opt, rc, wait_given = 0;
  const char *strategy_arg = NULL;

  memset(&a, 0, sizeof a);
  a.conflict_code = CLI_BUSY;
  a.kill_after_ms = 5000;
  /* Options are parsed up to the first "--" only: what follows is run's
   * command (or, for other commands, plain arguments such as a NAME that
   * starts with '-'). */
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) {
      split = i;
      a.dashdash = 1;
      break;
    }
  opterr = 0;
  while ((opt = getopt_long(split, argv, ":hVw:E:", longopts, NULL)) != -1) {
    const char *optname = argv[optind - 1];
    switch (opt) {
    case L_URL: a.seen |= O_URL; a.url = optarg; break;
    case L_STRATEGY: a.seen |= O_STRATEGY; strategy_arg = optarg; break;
    case L_LEASE:
      a.seen |= O_LEASE;
      if ((rc = parse_duration(&a, "--lease", optarg, &a.lease_ms, 0, 100)) != 0) return rc;
      break;
    case 'w':
      a.seen |= O_WAIT;
      wait_given = 1;
      if ((rc = parse_duration(&a, "--wait", optarg, &a.wait_ms, 1, 0)) != 0) return rc;
      break;
    case L_TABLE: a.seen |= O_TABLE; a.table = optarg; break;
    case L_OWNER_HOST:
      a.seen |= O_OWNER_HOST;
      if (!*optarg || strlen(optarg) > 255)
        return usage_error(NULL, "bad value for --owner-host: 1 to 255 bytes");
      a.owner_host = optarg;
      break;
    case 'E':
      a.seen |= O_CONFLICT;
      if ((rc = parse_int(&a, "--conflict-exit-code", optarg, 0, 255, &a.conflict_code)) != 0)
        return rc;
      break;
    case L_JSON: a.seen |= O_JSON; a.json = 1; break;
    case L_STATUS: a.seen |= O_STATUS; a.migrate_status = 1; break;
    case L_BASELINE: a.seen |= O_BASELINE; a.baseline = 1; break;
    case L_TOKEN: a.seen |= O_TOKEN; a.token = optarg; break;
    case L_GRACE:
      a.seen |= O_GRACE;
      if ((rc = parse_duration(&a, "--grace", optarg, &a.grace_ms, 0, 0)) != 0) return rc;
      break;
    case L_BATCH:
      a.seen |= O_BATCH;
      if ((rc = parse_int(&a, "--batch", optarg, 1, 1000000000L, &a.batch)) != 0) return rc;
      break;
    case L_KILL_AFTER:
      a.seen |= O_KILL_AFTER;
      if ((rc = parse_duration(&a, "--kill-after", optarg, &a.kill_after_ms, 0, 0)) != 0)
        return rc;
      break;
    case L_MIN_HOLD:
      a.seen |= O_MIN_HOLD;
      if ((rc = parse_duration(&a, "--min-hold", optarg, &a.min_hold_ms, 0, 0)) != 0) return rc;
      break;
    case 'h': a.seen |= O_HELP; break;
    case 'V': a.seen |= O_VERSION; break;
    case ':': return usage_error(NULL, "option '%s' needs a value", optname);
    default:
      if (optopt) return usage_error(NULL, "unknown option '-%c'", optopt);
      return usage_error(NULL, "unknown option '%s'", optname);
    }
  }
  if (a.seen & O_VERSION) {
    printf("%s %s\n", PROG, DBLOCK_VERSION_STRING);
    return CLI_OK;
  }
  /* argv[optind..split) are the non-options, in order. */
  if (optind < split) {
    if (!(a.cmd = find_command(argv[optind])))
      return usage_error(NULL, "unknown command '%s'", argv[optind]);
    a.pos = argv + optind + 1;
    a.npos = split - optind - 1;
  }
  if (a.seen & O_HELP) {
    print_help(a.cmd && strcmp(a.cmd->name, "help") != 0 ? a.cmd : NULL);
    return CLI_OK;
  }
  if (!a.cmd) return usage_error(NULL, a.dashdash ? "missing command before '--'" : "missing command");
  for (size_t i = 0; i < sizeof OPT_NAMES / sizeof OPT_NAMES[0]; i++)
    if ((a.seen & OPT_NAMES[i].bit) && !(a.cmd->extra & OPT_NAMES[i].bit))
      return usage_error(&a, "option %s does not apply to '%s'", OPT_NAMES[i].name, a.cmd->name);
  /* --json is honoured by every command that prints a result; refuse it
   * where it would silently mean nothing. */
  if (a.json && (strcmp(a.cmd->name, "run") == 0 || strcmp(a.cmd->name, "help") == 0))
    return usage_error(&a, "--json does not apply to '%s'", a.cmd->name);
  if (strategy_arg && dblock_strategy_parse(&a.strategy, strategy_arg) != 0)
    return usage_error(&a, "unknown strategy '%s' (insert, for_update, optimistic)", strategy_arg);
  if (!wait_given) a.wait_ms = strcmp(a.cmd->name, "run") == 0 ? -1 : 0;
  if (a.dashdash) {
    char **rest = argv + split + 1;
    int nrest = argc - split - 1;
    if (strcmp(a.cmd->name, "run") == 0) {
      a.child = rest;
      a.nchild = nrest;
    } else if (nrest > 0) {
      /* Plain arguments after "--": they follow the ones before it. */
      char **all = calloc((size_t)(a.npos + nrest + 1), sizeof *all);
      if (!all) return CLI_DBERR;
      memcpy(all, a.pos, (size_t)a.npos * sizeof *all);
      memcpy(all + a.npos, rest, (size_t)nrest * sizeof *all);
      a.pos = all;
      a.npos += nrest;
    }
  }
  rc = a.cmd->fn(&a);
  fflush(stdout);
  return rc;
}
