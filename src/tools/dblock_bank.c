/*
 * dblock-bank — the bank-withdrawal race, with and without a lock.
 *
 * One account holds 200. Two withdrawals, 100 and 150, start at the same
 * moment from two processes. Each reads the balance, "thinks" for a moment
 * (so the race is reproducible), checks the balance covers the amount and
 * writes the new balance. Without a lock both see 200, both succeed, and
 * an update is lost (or the balance goes negative). Under a dblock lock
 * exactly one succeeds per round.
 *
 * Then fencing: a holder stalls past its lease, another takes the lock and
 * writes; the stalled one wakes and writes with its old fencing token. The
 * account remembers the newest token it accepted and refuses the stale one.
 *
 * The account is the application's own data, so this program talks to it
 * through the database's client library directly (as an application
 * would: bank_account.c); dblock is used only through its public header.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bank_account.h"
#include "cli.h"
#include "dblock.h"

static const char *prog = "dblock-bank";

/* ---- One withdrawal (a child process) ---------------------------------- */

enum { W_DONE = 0, W_REFUSED = 1, W_ERROR = 2, W_STALE = 3 };

/* Sleeps ms milliseconds, whatever signals come. */
static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* One lock name per strategy: dblock refuses to mix strategies on a name
 * (a for_update row is not a lease). */
static const char *lock_name(int strategy) {
  switch (strategy) {
  case DBLOCK_STRATEGY_FOR_UPDATE: return "bank-account-1/for_update";
  case DBLOCK_STRATEGY_OPTIMISTIC: return "bank-account-1/optimistic";
  default: return "bank-account-1/insert";
  }
}

/* Withdraws amount; strategy 0 means no lock. Returns a W_ code. */
static int withdraw(const char *url, int strategy, long long amount, int think_ms,
                    int start_fd) {
  dblock_client *c = NULL;
  dblock_lock *l = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  account a;
  long long bal;
  char go;
  int rc = W_ERROR, e;
  if (acct_open(&a, url) != 0) return W_ERROR;
  if (strategy) {
    o.strategy = (dblock_strategy)strategy;
    if ((e = dblock_client_open(&c, url, &o)) != 0) {
      cli_report(prog, "open", NULL, e);
      goto out;
    }
  }
  if (read(start_fd, &go, 1) < 0) goto out; /* wait for the starting gun */
  if (c && (e = dblock_lock_acquire(&l, c, lock_name(strategy), -1, 0)) != 0) {
    cli_report(prog, "acquire", c, e);
    goto out;
  }
  if (acct_read(&a, &bal) != 0) goto out;
  sleep_ms(think_ms);
  if (bal < amount) rc = W_REFUSED;
  /* (leased locks fence their write; a for_update holder's own
   * transaction holds the lock row, and dblock_check refuses it) */
  else {
    int w = acct_write(&a, bal - amount, lock_name(strategy),
                       l && strategy != DBLOCK_STRATEGY_FOR_UPDATE ? dblock_lock_fence(l) : 0);
    rc = w == 0 ? W_DONE : w == 1 ? W_STALE : W_ERROR;
  }
out:
  if (l && dblock_lock_release(l) != 0 && rc == W_DONE) rc = W_ERROR;
  dblock_client_free(c);
  acct_close(&a);
  return rc;
}

/* ---- Rounds ------------------------------------------------------------ */

typedef struct tally {
  int rounds, done, anomalies, errors;
  int finals[8];
  long long final_vals[8];
  int nfinals;
} tally;

/* Counts one round's final balance v (up to 8 distinct values). */
static void note_final(tally *t, long long v) {
  for (int i = 0; i < t->nfinals; i++)
    if (t->final_vals[i] == v) {
      t->finals[i]++;
      return;
    }
  if (t->nfinals < 8) {
    t->final_vals[t->nfinals] = v;
    t->finals[t->nfinals++] = 1;
  }
}

/* One race: reset the account, fork two withdrawers, fire, check. */
static int round_once(const char *url, int strategy, int think_ms, tally *t) {
  static const long long amounts[2] = {100, 150};
  int fds[2], status[2];
  pid_t pid[2];
  long long bal = 0, expect = 200;
  account a;
  if (acct_reset(url) != 0) return -1;
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  for (int i = 0; i < 2; i++) {
    if ((pid[i] = fork()) < 0) return -1;
    if (pid[i] == 0) {
      close(fds[1]);
      _exit(withdraw(url, strategy, amounts[i], think_ms, fds[0]));
    }
  }
  close(fds[0]);
  sleep_ms(30); /* let both connect and block on the pipe */
  close(fds[1]); /* both read() calls return together */
  for (int i = 0; i < 2; i++) {
    waitpid(pid[i], &status[i], 0);
    status[i] = WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : W_ERROR;
    if (status[i] == W_DONE) {
      t->done++;
      expect -= amounts[i];
    }
    if (status[i] == W_ERROR) t->errors++;
  }
  if (acct_open(&a, url) != 0 || acct_read(&a, &bal) != 0) return -1;
  acct_close(&a);
  t->rounds++;
  note_final(t, bal);
  /* An anomaly: money appeared or vanished (a lost update), or the
   * balance went negative. */
  if (bal < 0 || bal != expect) t->anomalies++;
  return 0;
}

/* ---- Fencing ----------------------------------------------------------- */

/* The log hook of the fencing round: A loses its lock there on purpose
 * (that is the demonstration), and the table says what happened; the
 * library's "lock lost" warning would only interrupt the output. */
static void quiet_log(int level, const char *msg, void *arg) {
  (void)level, (void)msg, (void)arg;
}

/* A holds with a short explicit lease and stalls past it; B takes over and
 * writes with its token; A wakes and writes with its old token. Returns 1
 * if the account refused A's stale write, 0 if it accepted it, -1 on
 * error. */
static int fencing(const char *url, int strategy, long long *fa, long long *fb) {
  dblock_client *ca = NULL, *cb = NULL;
  dblock_lock *la = NULL, *lb = NULL;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  account a;
  long long bal;
  int res = -1, w;
  o.strategy = (dblock_strategy)strategy;
  o.log = quiet_log;
  if (acct_reset(url) != 0 || acct_open(&a, url) != 0) return -1;
  if ((w = dblock_client_open(&ca, url, &o)) != 0 || (w = dblock_client_open(&cb, url, &o)) != 0) {
    cli_report(prog, "open", NULL, w);
    goto out;
  }
  if ((w = dblock_lock_acquire(&la, ca, lock_name(strategy), -1, 1000)) != 0) {
    cli_report(prog, "fencing: acquire", ca, w);
    goto out;
  }
  *fa = dblock_lock_fence(la);
  if (acct_read(&a, &bal)) goto out;
  /* A stalls (a GC pause, a swapped-out VM...) past its 1 s lease (long
   * enough for the acquire to answer before its loss deadline, 900 ms on,
   * on a loaded host). */
  if ((w = dblock_lock_acquire(&lb, cb, lock_name(strategy), 5000, 0)) != 0) {
    cli_report(prog, "fencing: takeover", cb, w);
    goto out;
  }
  *fb = dblock_lock_fence(lb);
  if (acct_write(&a, bal - 150, lock_name(strategy), *fb) != 0) goto out;
  dblock_lock_release(lb);
  lb = NULL;
  /* A wakes up and, unaware, writes with its old token. */
  w = acct_write(&a, bal - 100, lock_name(strategy), *fa);
  res = w == 1 ? 1 : w == 0 ? 0 : -1;
out:
  if (la) dblock_lock_release(la);
  if (lb) dblock_lock_release(lb);
  dblock_client_free(ca);
  dblock_client_free(cb);
  acct_close(&a);
  return res;
}

/* Prints the usage and options to f. */
static void usage(FILE *f) {
  fprintf(f,
          "usage: dblock-bank [--url URL] [--rounds N] [--strategy S|all] [--think MS]\n"
          "Replays the bank-withdrawal race (balance 200, withdrawals of 100 and 150\n"
          "at once) without a lock and under each dblock strategy, and shows a\n"
          "fenced write refusing a stale lock holder.\n"
          "  --url URL        database (default: a temporary SQLite file; DBLOCK_URL)\n"
          "  --rounds N       races per mode (default 20)\n"
          "  --strategy S     insert, for_update, optimistic or all (default all)\n"
          "  --think MS       pause between read and write (default 30)\n"
          "exit: 0 no anomaly under any lock, 5 a locked mode showed an anomaly,\n"
          "      1 database error, 2 usage error\n");
}

/* Migrates the lock table, runs the rounds of each mode and the fencing
 * round, prints the table and the verdict; exit 0, 5 (CLI_ANOMALY) when a
 * locked mode showed an anomaly, 1 on a database error, 2 on bad usage. */
int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"url", required_argument, NULL, 'u'},    {"rounds", required_argument, NULL, 'r'},
      {"strategy", required_argument, NULL, 's'}, {"think", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  const char *url = NULL, *only = "all";
  char tmpdir[] = "/tmp/dblock-bank.XXXXXX", tmpurl[128];
  int rounds = 20, think = 30, ch, bad_locked = 0, failed = 0;
  int modes[4] = {0, DBLOCK_STRATEGY_INSERT, DBLOCK_STRATEGY_FOR_UPDATE,
                  DBLOCK_STRATEGY_OPTIMISTIC};
  tally t[4];
  dblock_client *c;
  while ((ch = getopt_long(argc, argv, "u:r:s:t:hV", opts, NULL)) != -1) {
    switch (ch) {
    case 'u': url = optarg; break;
    case 'r': rounds = atoi(optarg); break;
    case 's': only = optarg; break;
    case 't': think = atoi(optarg); break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("dblock-bank %s\n", DBLOCK_VERSION_STRING); return 0;
    default: usage(stderr); return CLI_USAGE;
    }
  }
  if (optind < argc || rounds < 1 || think < 0 || think > 10000) {
    fprintf(stderr, "%s: bad arguments (rounds >= 1, 0 <= think <= 10000)\n", prog);
    return CLI_USAGE;
  }
  if (strcmp(only, "all") != 0) {
    dblock_strategy s;
    if (dblock_strategy_parse(&s, only) != 0) {
      fprintf(stderr, "%s: unknown strategy '%s'\n", prog, only);
      return CLI_USAGE;
    }
    for (int i = 1; i < 4; i++)
      if (modes[i] != (int)s) modes[i] = -1;
  }
  url = cli_url(url);
  if (!url) {
    if (!mkdtemp(tmpdir)) return CLI_DBERR;
    snprintf(tmpurl, sizeof tmpurl, "sqlite://%s/bank.db", tmpdir);
    url = tmpurl;
  }
  if (dblock_client_open(&c, url, NULL) != 0) return cli_report(prog, "open", NULL, DBLOCK_ECONN);
  if (dblock_migrate(c, NULL) != 0) {
    int rc = cli_report(prog, "migrate", c, DBLOCK_EDB);
    dblock_client_free(c);
    return rc;
  }
  dblock_client_free(c);

  memset(t, 0, sizeof t);
  printf("dblock-bank: balance 200, withdrawals of 100 and 150 at the same moment, "
         "%d rounds per mode\n\n", rounds);
  printf("%-12s %7s %12s  %-24s %9s\n", "mode", "rounds", "withdrawals", "final balances",
         "anomalies");
  for (int m = 0; m < 4; m++) {
    char finals[64] = "";
    size_t o = 0;
    if (modes[m] < 0) continue;
    for (int r = 0; r < rounds; r++)
      if (round_once(url, modes[m], think, &t[m]) != 0) {
        fprintf(stderr, "%s: round failed (database error)\n", prog);
        failed = 1;
        break;
      }
    for (int i = 0; i < t[m].nfinals && o < sizeof finals - 16; i++)
      o += (size_t)snprintf(finals + o, sizeof finals - o, "%s%lld x%d", i ? ", " : "",
                            t[m].final_vals[i], t[m].finals[i]);
    printf("%-12s %7d %12d  %-24s %9d\n",
           m == 0 ? "no lock" : dblock_strategy_name((dblock_strategy)modes[m]), t[m].rounds,
           t[m].done, finals, t[m].anomalies);
    if (m > 0 && (t[m].anomalies > 0 || t[m].errors > 0)) bad_locked = 1;
  }
  printf("\nfencing (holder A stalls past its 1 s lease, B takes over and writes):\n");
  for (int m = 1; m < 4; m++) {
    long long fa = 0, fb = 0;
    int f;
    if (modes[m] < 0) continue;
    if (modes[m] == DBLOCK_STRATEGY_FOR_UPDATE) {
      printf("  %-11s n/a: the lock is a transaction, it cannot expire while held\n",
             "for_update");
      continue;
    }
    f = fencing(url, modes[m], &fa, &fb);
    printf("  %-11s A token %lld, B token %lld: A's stale write %s\n",
           dblock_strategy_name((dblock_strategy)modes[m]), fa, fb,
           f == 1 ? "REFUSED by the database (dblock_check)" : f == 0 ? "ACCEPTED (bug!)" : "error");
    if (f != 1) bad_locked = 1;
  }
  printf("\nverdict: %s\n",
         failed ? "a round failed with a database error"
         : bad_locked ? "a locked mode showed an anomaly (this is a bug)"
         : modes[0] == 0 && t[0].anomalies > 0
             ? "without a lock the race corrupts the balance; under every dblock strategy it never does"
             : "no anomaly under any lock");
  if (url == tmpurl) {
    static const char *const files[] = {
        "bank.db", "bank.db-wal", "bank.db-shm", "bank.db-account",
        /* where a for_update holder publishes itself (see sqlite.c) */
        "bank.db-dblock-holders", "bank.db-dblock-holders-wal", "bank.db-dblock-holders-shm"};
    char path[160];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      snprintf(path, sizeof path, "%s/%s", tmpdir, files[i]);
      unlink(path);
    }
    rmdir(tmpdir);
  }
  return failed ? CLI_DBERR : bad_locked ? CLI_ANOMALY : CLI_OK;
}
