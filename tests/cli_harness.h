/*
 * cli_harness.h — what test_cli needs to run the real dblock and
 * dblock-reaper binaries (from $DBLOCK_TEST_TREE, default "build"):
 * a per-test arena, scratch files, command lines, processes in their own
 * process groups with deadlines, their stdout / stderr / exit status,
 * the expectations every test shares, strict JSON through json-c, the
 * backends' URLs, and `dblock run` holders.
 *
 * Everything a test allocates (strings, parsed JSON, processes) belongs to
 * the test: cli_teardown() kills what is still running (whole process
 * groups) and frees it, also after a failure.
 */
#ifndef DBLOCK_CLI_HARNESS_H
#define DBLOCK_CLI_HARNESS_H

#include <json-c/json.h>
#include <stdint.h>
#include <sys/types.h>

#include "testutil.h"

/* The lock table of this suite: other suites never see its rows. */
#define TABLE "cli_locks"

extern const char *const STRATEGIES[];
#define NSTRATEGIES 3

/* ---- the run ------------------------------------------------------------ */

/* Called once by main(): fails the run (never skips) when a server URL is
 * missing, unsets DBLOCK_URL, ignores SIGPIPE and applies
 * DBLOCK_TEST_FILTER. Returns 0, or -1 with the reason on stderr. */
int cli_init(void);
/* The cmocka fixtures: the group's scratch folder (made, then removed with
 * this process's SQLite file) and the per-test cleanup. */
int cli_group_setup(void **state);
int cli_group_teardown(void **state);
int cli_teardown(void **state);

const char *scratch_dir(void); /* this run's scratch folder */
const char *host_name(void);   /* gethostname() */
int next_seq(void);            /* a counter for unique file and lock names */

/* ---- the per-test arena, files ------------------------------------------ */

void *talloc(size_t size);
char *tfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A fresh path in the scratch folder. */
char *tpath(const char *tag);
/* A lock name unique to this process and call. */
char *tname(const char *tag);
/* The whole file as a string, or NULL if it does not exist. */
char *slurp(const char *path);
int exists(const char *path);
void touch(const char *path);
int64_t wall_us(void);

/* ---- JSON (json-c, plus the RFC 8259 checks json-c leaves out) ----------- */

/* 0 if text is exactly one JSON value (RFC 8259; whitespace around it
 * allowed, nothing else), the value in *out (NULL for null); else -1, with
 * the reason and its byte offset. */
int json_strict_parse(const char *text, json_object **out, const char **why, size_t *where);
/* The same, failing the test (naming what) when text is not valid JSON. */
json_object *jparse(const char *text, const char *what);
/* obj[key], or NULL when obj is not an object or has no such key. */
json_object *jget(const json_object *obj, const char *key);
/* The length of an array (0 for anything else), its item k (NULL past the
 * end or for anything else). */
size_t jlen(const json_object *arr);
json_object *jat(const json_object *arr, size_t k);
/* obj[key] of the type asked for, or the test fails (naming what). */
long long jint(const json_object *obj, const char *key, const char *what);
int jbool(const json_object *obj, const char *key, const char *what);
const char *jstr(const json_object *obj, const char *key, const char *what);

/* ---- command lines ------------------------------------------------------- */

typedef struct cmdv {
  const char *v[64];
  int n;
} cmdv;

void cv_add(cmdv *c, const char *s);
/* Appends a NULL-terminated list of arguments. */
void cv_addl(cmdv *c, ...);
/* dblock --url URL --table cli_locks [--strategy S] */
cmdv dblock_cmd(const char *url, const char *strategy);
/* dblock --url URL --table T (a table other than the suite's) */
cmdv table_cmd(const tu_backend *b, const char *t);
cmdv reaper_cmd(void);
/* The command line, shell-quoted where needed, for messages. */
const char *cmdline(const cmdv *c);

/* ---- processes ---------------------------------------------------------- */

typedef struct proc {
  pid_t pid;
  const char *cmd;
  const char *out_path, *err_path;
  int64_t t0;
} proc;

typedef struct result {
  int code; /* exit status (the test fails if killed by a signal) */
  const char *out, *err;
  int64_t ms; /* from start to exit, as seen by the poll loop */
} result;

/* Starts c with stdin from /dev/null and stdout / stderr to files, in a
 * process group of its own. */
proc start(const cmdv *c);
/* Has p exited? Reaps it if so (the status is kept for finish()). */
int exited(const proc *p);
/* Waits up to timeout_ms for p to exit; on timeout kills its process group
 * and fails the test. */
result finish(const proc *p, int64_t timeout_ms);
result run(const cmdv *c, int64_t timeout_ms);

void expect_code(const result *r, const cmdv *c, int want);
/* stderr is exactly one non-empty line "prog: reason", and the reason
 * mentions `mention` (if given). */
void expect_one_line(const result *r, const cmdv *c, const char *prog, const char *mention);
/* Usage error: exit 2, one line on stderr, nothing on stdout. */
void expect_usage(const cmdv *c, const char *prog, const char *mention);
/* Waits for a file the child of `by` writes once it holds the lock; fails
 * early if `by` exits first. Returns its contents. */
char *wait_file(const char *path, const proc *by, int64_t timeout_ms);

/* ---- backends ----------------------------------------------------------- */

/* The backend by name ("sqlite", "postgres", "mysql"), *index its place. */
const tu_backend *backend(const char *name, int *index);
const char *lite_url(void);
const char *env_or_fail(const char *var);
/* `dblock migrate` on cli_locks: exit 0 and "applied N migration(s)
 * (backend)"; returns N. */
int migrate(const tu_backend *b);
/* The backend, migrated once per run. */
const tu_backend *migrated(const char *name);

/* ---- holders: `dblock run NAME -- sh -c SCRIPT` ---------------------------- */

/* Holder child scripts ($1 ready file, $2 stop file, $3 TERM marker). The
 * ready file gets DBLOCK_FENCE and DBLOCK_NAME, written atomically. The
 * loop ends when the stop file appears (or after ~15 s, a safety net). */
#define READY                                                            \
  "printf '%s\\n%s\\n' \"$DBLOCK_FENCE\" \"$DBLOCK_NAME\" > \"$1.tmp\" " \
  "&& mv \"$1.tmp\" \"$1\"; "
#define LOOP "n=0; while [ ! -e \"$2\" ] && [ $n -lt 300 ]; do sleep 0.05; n=$((n+1)); done"
extern const char HOLD_SCRIPT[];
extern const char TRAP_SCRIPT[];

typedef struct holder {
  proc p;
  const char *name, *ready, *stop, *marker;
  long long fence;      /* DBLOCK_FENCE seen by the child */
  const char *env_name; /* DBLOCK_NAME seen by the child */
} holder;

/* Starts `dblock run [--lease L] [--kill-after K] NAME -- sh -c SCRIPT`
 * and waits until the child runs (holds the lock). */
holder hold(const tu_backend *b, const char *strategy, const char *name, const char *lease,
            const char *kill_after, const char *script);
/* Waits up to ms for process pid to catch signal sig (its handler is in
 * place: /proc/PID/status SigCgt); fails the test if it never does. */
void await_handler(int pid, int sig, int64_t ms);
/* Lets the holder's child finish; expects `dblock run` to exit 0. */
void unhold(holder *h);
/* `dblock run --wait WAIT NAME -- sh -c 'touch RAN'`: returns the result
 * and fails if the command ran although the exit status says busy. */
result try_run(const tu_backend *b, const char *strategy, const char *name, const char *wait,
               const char *conflict_code, cmdv *out_cmd);
void expect_busy(const tu_backend *b, const char *strategy, const char *name);

typedef struct status_info {
  long long fence, expires_us;
  int held;
  const char *strategy, *owner_host;
} status_info;

/* `dblock status NAME --json`: exit 0, one JSON object. */
status_info status_json(const tu_backend *b, const char *strategy, const char *name);

#endif
