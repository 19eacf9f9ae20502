/*
 * dblock — the command-line tool: migrate, acquire / release across shell
 * steps, run a command under a lock (a distributed flock), status, list,
 * stats, doctor, reap, force-unlock, forget. This file parses the command
 * line, holds the command table and the help, and dispatches; each command
 * is in its cmd_<name>.c, the shared plumbing in dblock_cli.c, table and
 * JSON output in out.c, run's process supervisor in supervise.c. Uses only
 * the public API (dblock.h) and cli.h.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dblock.h"
#include "dblock_cli.h"

/* ---- help --------------------------------------------------------------- */

static int cmd_help(args *a);

static const command cmd_help_def = {"help", 0, cmd_help, "help [COMMAND]",
    "Shows this help, or a command's.\n"};

/* The commands in the order help lists them. */
static const command *const COMMANDS[] = {
    &cmd_migrate_def, &cmd_acquire_def, &cmd_release_def, &cmd_run_def,
    &cmd_status_def, &cmd_list_def, &cmd_stats_def, &cmd_doctor_def,
    &cmd_reap_def, &cmd_force_unlock_def, &cmd_forget_def, &cmd_help_def};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* Every option: its bit, its name in "does not apply" errors, and its
 * help (lines of at most 79 columns; the text starts at column 31). */
static const struct option_help {
  unsigned bit;
  const char *name;
  const char *help;
} OPTION_HELP[] = {
    {O_URL, "--url",
     "  --url URL                  database URL (default: $DBLOCK_URL)\n"
     "                               postgres://user:pass@host:port/db, mysql://...,\n"
     "                               sqlite:///abs/path.db\n"},
    {O_STRATEGY, "--strategy",
     "  --strategy S               insert (default), for_update or optimistic\n"},
    {O_TABLE, "--table", "  --table NAME               lock table (default dblock_locks)\n"},
    {O_CONFLICT, "--conflict-exit-code",
     "  -E, --conflict-exit-code N exit status when busy / timed out (default 3)\n"},
    {O_QUIET, "--quiet",
     "  -q, --quiet                no warnings (such as a risky topology's at\n"
     "                               every start); errors still print\n"},
    {O_HELP, "--help", "  -h, --help                 help (COMMAND --help: that command's)\n"},
    {O_VERSION, "--version", "  -V, --version              print the version\n"},
    {O_JSON, "--json", "  --json                     JSON output (see dblock(1), JSON OUTPUT)\n"},
    {O_WAIT, "--wait",
     "  -w, --wait D               how long to wait for a busy lock, or 'forever'\n"
     "                               (default: acquire 0, run forever)\n"},
    {O_NOWAIT, "--nonblock",
     "  -n, --nonblock             fail at once if the lock is busy (--wait 0)\n"},
    {O_VERBOSE, "--verbose",
     "  -v, --verbose              on stderr: who holds the lock when the wait\n"
     "                               starts and every 10 s, and the grant\n"},
    {O_LEASE, "--lease",
     "  --lease D                  lease (acquire: fixed; run: renewed), default 30s\n"},
    {O_OWNER_HOST, "--owner-host",
     "  --owner-host H             the holder's host as recorded (default: the\n"
     "                               host name; e.g. a pod's stable name)\n"},
    {O_FAIR, "--fair",
     "  --fair                     wait in line: grants in arrival order across\n"
     "                               hosts (PostgreSQL, insert or optimistic)\n"},
    {O_KILL_AFTER, "--kill-after",
     "  --kill-after D             SIGKILL delay after SIGTERM on a lost lock (5s)\n"},
    {O_MIN_HOLD, "--min-hold",
     "  --min-hold D               hold at least D after the grant (once per\n"
     "                               schedule across hosts)\n"},
    {O_TOKEN, "--token", "  --token T                  the token printed by acquire\n"},
    {O_STATUS, "--status", "  --status                   list migrations instead of applying\n"},
    {O_BASELINE, "--baseline",
     "  --baseline                 adopt a schema applied by another tool\n"},
    {O_GRACE, "--grace",
     "  --grace D                  reap rows expired more than D ago (default 0)\n"},
    {O_BATCH, "--batch", "  --batch N                  rows per statement (default 1000)\n"},
};
#define NOPTIONS (sizeof OPTION_HELP / sizeof OPTION_HELP[0])

/* The options that take a duration, for the help's note on durations. */
#define O_DURATIONS (O_LEASE | O_WAIT | O_KILL_AFTER | O_MIN_HOLD | O_GRACE)

static const char EXIT_HELP[] =
    "Exit status:\n"
    "  0  success\n"
    "  1  database error (connection, authentication, missing schema, permission)\n"
    "  2  usage error (bad option, argument or URL)\n"
    "  3  lock busy, or the wait timed out (change with -E)\n"
    "  4  lock lost (run), or not held by the token (release)\n"
    "  5  doctor: an unsafe finding\n"
    "  128+N  acquire/run: interrupted by signal N while waiting (nothing held)\n"
    "  run: otherwise the command's status\n";

/* Every option command c accepts. */
static unsigned accepted(const command *c) { return O_GLOBAL | c->extra; }

/* Writes into out the commands that accept bit, e.g. "acquire and run",
 * "every command but run", or "" when every command does. */
static void accepting(char *out, size_t size, unsigned bit) {
  const char *yes[NCOMMANDS], *no[NCOMMANDS], **list;
  size_t nyes = 0, nno = 0, n, len = 0;
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(COMMANDS[i]->name, "help") != 0) {
      if (accepted(COMMANDS[i]) & bit) yes[nyes++] = COMMANDS[i]->name;
      else no[nno++] = COMMANDS[i]->name;
    }
  out[0] = 0;
  if (!nno) return;
  if (nno < nyes) len = (size_t)snprintf(out, size, "every command but ");
  list = nno < nyes ? no : yes;
  n = nno < nyes ? nno : nyes;
  for (size_t i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(out + len, size - len, "%s%s",
                            i == 0 ? "" : i + 1 == n ? " and " : ", ", list[i]);
}

/* Prints the options part of the help: the common options, then the
 * command options — all of them under headings naming the commands that
 * take them (c = NULL), or only c's. Then durations (when c takes one)
 * and exit status. */
static void print_options(const command *c) {
  char tag[400], last[400] = "";
  printf("Common options (before or after COMMAND):\n");
  for (size_t i = 0; i < NOPTIONS; i++)
    if (OPTION_HELP[i].bit & O_GLOBAL) fputs(OPTION_HELP[i].help, stdout);
  for (size_t i = 0; i < NOPTIONS; i++) {
    unsigned bit = OPTION_HELP[i].bit;
    if ((bit & O_GLOBAL) || (c && !(c->extra & bit))) continue;
    if (c) snprintf(tag, sizeof tag, "%s", c->name);
    else accepting(tag, sizeof tag, bit);
    if (strcmp(tag, last) != 0) printf("\nOptions of %s:\n", tag);
    snprintf(last, sizeof last, "%s", tag);
    fputs(OPTION_HELP[i].help, stdout);
  }
  if (!c || (accepted(c) & O_DURATIONS))
    printf("\nDurations: digits with an optional fraction and unit ms, s, m or h (250ms,\n"
           "30s, 1.5m, 2h; no unit: seconds)%s.\n",
           !c || (accepted(c) & O_WAIT) ? "; --wait also takes 'forever'" : "");
  printf("\n%s", EXIT_HELP);
}

/* Prints the help to stdout: the overview (c = NULL) or command c's. */
static void print_help(const command *c) {
  if (!c) {
    printf("Usage: %s [OPTIONS] COMMAND [ARGS...]\n\n"
           "Distributed locks kept in PostgreSQL, MySQL/MariaDB or SQLite.\n\nCommands:\n",
           PROG);
    for (size_t i = 0; i < NCOMMANDS; i++) printf("  %s %s\n", PROG, COMMANDS[i]->synopsis);
    printf("\n");
    print_options(NULL);
    return;
  }
  printf("Usage: %s %s\n\n%s\n", PROG, c->synopsis, c->help);
  print_options(c);
}

/* The command called name, or NULL. */
static const command *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(COMMANDS[i]->name, name) == 0) return COMMANDS[i];
  return NULL;
}

/* dblock help [COMMAND]: the overview or COMMAND's help; exit 0, or 2 for
 * an unknown command. */
static int cmd_help(args *a) {
  const command *c = NULL;
  if (a->npos > 1) return cli_usage_error(a, "unexpected argument '%s'", a->pos[1]);
  if (a->npos == 1 && !(c = find_command(a->pos[0])))
    return cli_usage_error(a, "unknown command '%s'", a->pos[0]);
  print_help(c);
  return CLI_OK;
}

/* ---- main --------------------------------------------------------------- */

/* Parses option opt's duration v into *out (ms): 'forever' (-1) only with
 * allow_forever, at least min_ms otherwise. Returns 0 or a usage error. */
static int parse_duration(args *a, const char *opt, const char *v, int64_t *out, int allow_forever,
                          int64_t min_ms) {
  if (cli_duration(v, out) != 0 || (*out < 0 && !allow_forever))
    return cli_usage_error(a, "bad duration for %s: '%s' (%s%s)", opt, v, CLI_DURATION_FORMS,
                           allow_forever ? "; or 'forever'" : "");
  if (*out >= 0 && *out < min_ms)
    return cli_usage_error(a, "%s must be at least %lldms", opt, (long long)min_ms);
  return 0;
}

/* Parses option opt's integer v, lo..hi, into *out. Returns 0 or a usage
 * error. */
static int parse_int(args *a, const char *opt, const char *v, long lo, long hi, int *out) {
  char *end;
  long x;
  errno = 0;
  x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return cli_usage_error(a, "bad value for %s: '%s' (an integer from %ld to %ld)", opt, v, lo, hi);
  *out = (int)x;
  return 0;
}

/* Parses the options (anywhere up to "--"), finds the command, checks the
 * options apply to it, and runs it: its result is the exit status. */
int main(int argc, char **argv) {
  enum { L_URL = 1000, L_STRATEGY, L_LEASE, L_TABLE, L_JSON, L_STATUS, L_TOKEN, L_GRACE,
         L_BATCH, L_KILL_AFTER, L_MIN_HOLD, L_BASELINE, L_OWNER_HOST, L_FAIR };
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
      {"fair", no_argument, NULL, L_FAIR},
      {"nonblock", no_argument, NULL, 'n'},
      {"verbose", no_argument, NULL, 'v'},
      {"quiet", no_argument, NULL, 'q'},
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
  while ((opt = getopt_long(split, argv, ":hVw:E:nvq", longopts, NULL)) != -1) {
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
        return cli_usage_error(NULL, "bad value for --owner-host: 1 to 255 bytes");
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
    case L_FAIR: a.seen |= O_FAIR; a.fair = 1; break;
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
    case 'n': a.seen |= O_NOWAIT; break;
    case 'v': a.seen |= O_VERBOSE; a.verbose = 1; break;
    case 'q': a.seen |= O_QUIET; a.quiet = 1; break;
    case 'h': a.seen |= O_HELP; break;
    case 'V': a.seen |= O_VERSION; break;
    case ':': return cli_usage_error(NULL, "option '%s' needs a value", optname);
    default:
      if (optopt) return cli_usage_error(NULL, "unknown option '-%c'", optopt);
      return cli_usage_error(NULL, "unknown option '%s'", optname);
    }
  }
  if (a.seen & O_VERSION) {
    printf("%s %s\n", PROG, DBLOCK_VERSION_STRING);
    return CLI_OK;
  }
  /* argv[optind..split) are the non-options, in order. */
  if (optind < split) {
    if (!(a.cmd = find_command(argv[optind])))
      return cli_usage_error(NULL, "unknown command '%s'", argv[optind]);
    a.pos = argv + optind + 1;
    a.npos = split - optind - 1;
  }
  if (a.seen & O_HELP) {
    print_help(a.cmd && strcmp(a.cmd->name, "help") != 0 ? a.cmd : NULL);
    return CLI_OK;
  }
  if (!a.cmd) return cli_usage_error(NULL, a.dashdash ? "missing command before '--'" : "missing command");
  /* An option a command does not take is refused, not ignored (--json
   * too: run and help print no result). */
  for (size_t i = 0; i < NOPTIONS; i++)
    if ((a.seen & OPTION_HELP[i].bit) && !(accepted(a.cmd) & OPTION_HELP[i].bit))
      return cli_usage_error(&a, "option %s does not apply to '%s'", OPTION_HELP[i].name,
                             a.cmd->name);
  if ((a.seen & O_NOWAIT) && wait_given)
    return cli_usage_error(&a, "-n (--nonblock) is --wait 0: give one or the other");
  if (strategy_arg && dblock_strategy_parse(&a.strategy, strategy_arg) != 0)
    return cli_usage_error(&a, "unknown strategy '%s' (insert, for_update, optimistic)", strategy_arg);
  if (a.seen & O_NOWAIT) a.wait_ms = 0;
  else if (!wait_given) a.wait_ms = strcmp(a.cmd->name, "run") == 0 ? -1 : 0;
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
