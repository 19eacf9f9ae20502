/*
 * dblock_cli.h — what the files of the dblock command share (and only
 * they: dblock-reaper and dblock-bank use cli.h alone): the parsed
 * command line, the command table's entry type, one entry per command
 * (each defined in its cmd_<name>.c), and the plumbing every command uses
 * (usage errors, failure reports, opening the client, waits a signal can
 * interrupt). Uses only the public header.
 */
#ifndef DBLOCK_TOOLS_DBLOCK_CLI_H
#define DBLOCK_TOOLS_DBLOCK_CLI_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cli.h"
#include "dblock.h"

/* The program's name in every message. */
extern const char *const PROG;

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
  O_FAIR = 1 << 17,
  O_NOWAIT = 1 << 18,
  O_VERBOSE = 1 << 19,
  O_QUIET = 1 << 20,
};

/* Options every command accepts: where the locks are, the busy exit
 * status, warnings off, help and version. */
#define O_GLOBAL (O_URL | O_STRATEGY | O_TABLE | O_CONFLICT | O_QUIET | O_HELP | O_VERSION)

/* The options of the commands that take a lock (acquire, run). */
#define O_LOCKING (O_LEASE | O_WAIT | O_NOWAIT | O_VERBOSE | O_OWNER_HOST | O_FAIR)

typedef struct args {
  unsigned seen;
  const char *url, *table, *token, *owner_host;
  dblock_strategy strategy;
  int64_t lease_ms, wait_ms, grace_ms, kill_after_ms, min_hold_ms;
  int batch;
  int conflict_code;
  int json, migrate_status, baseline, fair;
  int verbose, quiet; /* -v: say while waiting; -q: no warnings */
  const struct command *cmd;
  char **pos; /* positional arguments after the command name */
  int npos;
  char **child; /* run: the command after "--" */
  int nchild;
  int dashdash; /* "--" was given */
} args;

/* One command: its name, the command-specific options it accepts (O_*
 * bits beyond O_GLOBAL: these and O_GLOBAL are all it accepts, and all its
 * --help lists), the function that runs it (returns the exit status), and
 * its help: the usage line and the text under it. */
typedef struct command {
  const char *name;
  unsigned extra; /* command-specific options it accepts (O_JSON too) */
  int (*fn)(args *a);
  const char *synopsis;
  const char *help;
} command;

/* The commands, each defined beside its function in cmd_<name>.c (help's
 * in dblock.c, which lists them in this order). */
extern const command cmd_migrate_def, cmd_acquire_def, cmd_release_def, cmd_run_def,
    cmd_status_def, cmd_list_def, cmd_stats_def, cmd_doctor_def, cmd_reap_def,
    cmd_force_unlock_def, cmd_forget_def;

/* ---- plumbing (dblock_cli.c) -------------------------------------------- */

/* One-line usage error: "dblock: [cmd: ]reason (try 'dblock [cmd ]--help')".
 * a may be NULL (before a command is known). Returns CLI_USAGE. */
int cli_usage_error(const args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts a --json object on stdout: '{"version":"<DBLOCK_VERSION_STRING>"',
 * the first key of every object the dblock command prints at the top
 * level; the caller goes on with ',"key":...' and closes it. */
void cli_json_open(void);

/* Reports a failed call on stderr; with --json also one object on stdout,
 * {"version":..,"ok":false,"error":"<dblock_strerror>","code":<DBLOCK_E...>,
 * "message":...}, so a script parsing stdout never gets nothing. Returns
 * the exit code (busy / timeout: the -E code). */
int cli_fail(const args *a, const char *what, dblock_client *cl, int rc);

/* cli_fail for a call on lock NAME: when rc is busy or timed out and the
 * row shows who holds the name, the message names the holder (host, pid,
 * fence, until when) and the JSON object has a "holder" object; else as
 * cli_fail. A timeout is told as a wait of a->wait_ms. */
int cli_fail_lock(const args *a, const char *what, dblock_client *cl, int rc, const char *name);

/* Opens the client for the command in a (URL, strategy, table, owner
 * host; read-only for the commands that only read; run's loss margin).
 * Returns 0, or the exit code after reporting why not. */
int cli_open_client(dblock_client **cl, args *a);

/* The single positional NAME of a command, or a usage error (its code). */
int cli_need_name(args *a, const char **name);

/* Set by the client's on_lost callback (another thread): a held lock was
 * lost. run clears it before acquiring. */
extern atomic_int cli_lost;

/* Handles deliberately left unreleased (acquire keeps its lock; run drops a
 * lost one): kept reachable so leak checkers do not flag them. */
extern dblock_lock *volatile cli_kept;

/* The signal (SIGINT, SIGTERM or SIGHUP) that came while cli_interrupts
 * was on, 0 if none. */
extern volatile sig_atomic_t cli_caught;

/* Installs (on = 1) or restores (on = 0) handlers for SIGINT, SIGTERM and
 * SIGHUP that cancel cl's acquires and set cli_caught, leaving alone a
 * signal the caller ignores (nohup). */
void cli_interrupts(dblock_client *cl, int on);

/* dblock_lock_acquire of NAME, waiting a->wait_ms, that a signal can
 * interrupt. With a->verbose it says on stderr who holds the name when the
 * wait starts, again every 10 s while it lasts, and the fence and wait when
 * granted (the wait's deadline stays a->wait_ms from the call). Returns the
 * library's code, or DBLOCK_ECANCELED when a signal came (a lock granted
 * just before it is released again: the user asked to stop). */
int cli_acquire_interruptibly(dblock_lock **l, dblock_client *cl, const args *a, const char *name,
                              int64_t lease_ms);

/* The exit status (128 + the signal) and message of an interrupted wait. */
int cli_interrupted(const args *a, const char *what, const char *name);

/* Monotonic clock in milliseconds (for elapsed times and deadlines). */
int64_t cli_mono_ms(void);

/* Sleeps ms milliseconds; a signal just ends the nap early. */
void cli_nap_ms(long ms);

#endif
