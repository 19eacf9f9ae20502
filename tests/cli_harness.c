/*
 * cli_harness.c — running the dblock programs for test_cli (see
 * cli_harness.h): the per-test arena, scratch files, strict JSON through
 * json-c, command lines, processes and their results, backends, holders.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_harness.h"

const char *const STRATEGIES[] = {"insert", "optimistic", "for_update"};

static char g_dir[PATH_MAX];  /* this run's scratch folder */
static char g_host[256];      /* gethostname() */
static int g_seq;             /* file and lock name counter */
static int g_migrated[3];     /* per backend index: migrate succeeded */

const char *scratch_dir(void) { return g_dir; }
const char *host_name(void) { return g_host; }
int next_seq(void) { return ++g_seq; }

/* ---- a per-test arena: freed by the teardown, also after a failure ------ */

typedef struct anode {
  struct anode *next;
  json_object *json; /* a parsed value the node owns, or NULL */
  max_align_t data[];
} anode;
static anode *g_arena;

static anode *tnode(size_t size) {
  anode *n = calloc(1, sizeof *n + size + 1);
  if (!n) fail_msg("out of memory");
  n->next = g_arena;
  g_arena = n;
  return n;
}

void *talloc(size_t size) { return tnode(size)->data; }

/* The arena owns v from now on (json_object_put by the teardown). */
static void tkeep(json_object *v) { tnode(0)->json = v; }

static void arena_free(void) {
  while (g_arena) {
    anode *n = g_arena;
    g_arena = n->next;
    json_object_put(n->json);
    free(n);
  }
}

char *tfmt(const char *fmt, ...) {
  va_list ap;
  int n;
  char *s;
  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  s = talloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* A fresh path in the scratch folder. */
char *tpath(const char *tag) { return tfmt("%s/%s-%d", g_dir, tag, ++g_seq); }

/* A lock name unique to this process and call. */
char *tname(const char *tag) {
  return tfmt("cli-%s-%d-%d-%lld", tag, (int)getpid(), ++g_seq, (long long)tu_now_ms());
}

/* The whole file as a string (arena), or NULL if it does not exist. */
char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  size_t cap = 4096, n = 0, got;
  char *buf;
  if (!f) return NULL;
  buf = talloc(cap);
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *bigger = talloc(cap * 2);
      memcpy(bigger, buf, n);
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  buf[n] = 0;
  return buf;
}

int exists(const char *path) { return access(path, F_OK) == 0; }

void touch(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT, 0644);
  if (fd < 0) fail_msg("cannot create %s: %s", path, strerror(errno));
  close(fd);
}

int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- JSON: json-c, plus the RFC 8259 checks json-c leaves out ------------ */

/* Length of the valid UTF-8 sequence at s, 0 if invalid (overlong forms,
 * UTF-16 surrogates and code points above U+10FFFF are invalid). */
static int utf8_seq(const unsigned char *s) {
  unsigned c = s[0], cp;
  int n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  for (int k = 1; k < n; k++) {
    if ((s[k] & 0xc0) != 0x80) return 0; /* also stops at the final NUL */
    cp = (cp << 6) | (s[k] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* The 4 hex digits after a \u json-c has already checked. */
static unsigned hex4(const char *p) {
  char h[5];
  memcpy(h, p, 4);
  h[4] = 0;
  return (unsigned)strtoul(h, NULL, 16);
}

static int digit(char c) { return c >= '0' && c <= '9'; }

/* What json-c 0.16 accepts in strict mode although RFC 8259 does not:
 * NaN and Infinity; numbers such as 1. -.5 1.e5 00 -01; raw control
 * characters, unpaired UTF-16 surrogate escapes and invalid UTF-8
 * (overlong, surrogate, above U+10FFFF) in strings. Only runs on text
 * json-c has accepted, so the structure is known to be sound. Returns the
 * reason with its byte offset in *where, or NULL. */
static const char *json_c_leaves_out(const char *text, size_t *where) {
  const char *p = text, *why = NULL;
  while (*p && !why) {
    if (*p == '"') {
      for (p++; *p != '"' && !why; p++) {
        unsigned char c = (unsigned char)*p;
        unsigned cp;
        int len;
        if (c < 0x20) {
          why = "raw control character in string";
        } else if (c >= 0x80) {
          if (!(len = utf8_seq((const unsigned char *)p))) why = "invalid UTF-8 in string";
          else p += len - 1;
        } else if (c == '\\' && *++p == 'u') {
          cp = hex4(p + 1);
          p += 4;
          if (cp >= 0xdc00 && cp <= 0xdfff) {
            why = "lone low surrogate";
          } else if (cp >= 0xd800 && cp <= 0xdbff) {
            if (p[1] != '\\' || p[2] != 'u' || hex4(p + 3) < 0xdc00 || hex4(p + 3) > 0xdfff)
              why = "high surrogate without its low half";
            else p += 6;
          }
        }
      }
      if (!why) p++;
    } else if (*p == '-' || digit(*p)) {
      if (*p == '-') p++;
      if (*p == '0') p++;
      else if (digit(*p)) while (digit(*p)) p++;
      else why = "bad number";
      if (!why && digit(*p)) why = "leading zero";
      if (!why && *p == '.' && !digit(*++p)) why = "bad fraction";
      while (!why && digit(*p)) p++;
      if (!why && (*p == 'e' || *p == 'E')) {
        if (*++p == '+' || *p == '-') p++;
        if (!digit(*p)) why = "bad exponent";
        while (digit(*p)) p++;
      }
    } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
      if (strncmp(p, "true", 4) == 0) p += 4;
      else if (strncmp(p, "false", 5) == 0) p += 5;
      else if (strncmp(p, "null", 4) == 0) p += 4;
      else why = "not a JSON literal";
    } else {
      p++;
    }
  }
  *where = (size_t)(p - text);
  return why;
}

int json_strict_parse(const char *text, json_object **out, const char **why, size_t *where) {
  size_t len = strlen(text), end;
  json_tokener *tok = json_tokener_new_ex(64);
  json_object *v;
  enum json_tokener_error e;
  if (!tok) fail_msg("out of memory");
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  /* The final NUL included: a number at the very end is complete. */
  v = json_tokener_parse_ex(tok, text, (int)len + 1);
  e = json_tokener_get_error(tok);
  end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  *out = NULL;
  if (e != json_tokener_success) {
    *why = json_tokener_error_desc(e);
    *where = end;
    return -1;
  }
  tkeep(v); /* (before any failure below: freed by the teardown) */
  if (end > len || end + strspn(text + end, " \t\n\r") != len) {
    *why = "trailing characters after the value";
    *where = end;
    return -1;
  }
  if ((*why = json_c_leaves_out(text, where)) != NULL) return -1;
  *out = v;
  return 0;
}

json_object *jparse(const char *text, const char *what) {
  const char *why = NULL;
  size_t where = 0;
  json_object *v;
  if (json_strict_parse(text, &v, &why, &where) != 0)
    fail_msg("%s: output is not valid JSON (%s at byte %zu): %s", what, why, where, text);
  return v;
}

json_object *jget(const json_object *obj, const char *key) {
  json_object *v = NULL;
  return json_object_object_get_ex(obj, key, &v) ? v : NULL;
}

size_t jlen(const json_object *arr) {
  return json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
}

json_object *jat(const json_object *arr, size_t k) {
  return k < jlen(arr) ? json_object_array_get_idx(arr, k) : NULL;
}

long long jint(const json_object *obj, const char *key, const char *what) {
  json_object *v = jget(obj, key);
  /* json-c clamps integers beyond int64 (those above it are kept as
   * uint64): such a number is no integer here. */
  if (!json_object_is_type(v, json_type_int) ||
      (json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) != INT64_MAX))
    fail_msg("%s: no integer \"%s\"", what, key);
  return json_object_get_int64(v);
}

int jbool(const json_object *obj, const char *key, const char *what) {
  json_object *v = jget(obj, key);
  if (!json_object_is_type(v, json_type_boolean)) fail_msg("%s: no boolean \"%s\"", what, key);
  return json_object_get_boolean(v);
}

const char *jstr(const json_object *obj, const char *key, const char *what) {
  json_object *v = jget(obj, key);
  if (!json_object_is_type(v, json_type_string)) fail_msg("%s: no string \"%s\"", what, key);
  return json_object_get_string(v);
}

/* ---- running the programs ---------------------------------------------- */

void cv_add(cmdv *c, const char *s) {
  if (c->n >= 62) fail_msg("too many arguments");
  c->v[c->n++] = s;
  c->v[c->n] = NULL;
}

/* Appends a NULL-terminated list of arguments. */
void cv_addl(cmdv *c, ...) {
  va_list ap;
  const char *s;
  va_start(ap, c);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(c, s);
  va_end(ap);
}

/* dblock --url URL --table cli_locks [--strategy S] */
cmdv dblock_cmd(const char *url, const char *strategy) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock", tu_tree()));
  if (url) cv_addl(&c, "--url", url, NULL);
  cv_addl(&c, "--table", TABLE, NULL);
  if (strategy) cv_addl(&c, "--strategy", strategy, NULL);
  return c;
}

cmdv reaper_cmd(void) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock-reaper", tu_tree()));
  return c;
}

/* `dblock` on table t instead of the suite's. */
cmdv table_cmd(const tu_backend *b, const char *t) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock", tu_tree()));
  cv_addl(&c, "--url", b->url, "--table", t, NULL);
  return c;
}

/* The command line, shell-quoted where needed, for messages. */
const char *cmdline(const cmdv *c) {
  size_t len = 1;
  char *s, *o;
  for (int k = 0; k < c->n; k++) len += 4 * strlen(c->v[k]) + 3;
  o = s = talloc(len);
  for (int k = 0; k < c->n; k++) {
    const char *a = c->v[k];
    int plain = *a != 0;
    for (const char *p = a; *p; p++)
      if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,", *p))
        plain = 0;
    if (k) *o++ = ' ';
    if (plain) {
      o += sprintf(o, "%s", a);
    } else {
      *o++ = '\'';
      for (const char *p = a; *p; p++) {
        if (*p == '\'') o += sprintf(o, "'\\''");
        else *o++ = *p;
      }
      *o++ = '\'';
    }
  }
  *o = 0;
  return s;
}

/* Processes started by the running test: killed (whole process group) by
 * the teardown if still there. */
typedef struct child {
  pid_t pid;
  int reaped, status;
} child;
static child g_kids[64];
static int g_nkids;

static child *kid(pid_t pid) {
  for (int k = 0; k < g_nkids; k++)
    if (g_kids[k].pid == pid) return &g_kids[k];
  return NULL;
}

/* Starts c with stdin from /dev/null and stdout / stderr to files, in a
 * process group of its own. */
proc start(const cmdv *c) {
  proc p;
  pid_t pid;
  int in, out, err;
  p.cmd = cmdline(c);
  p.out_path = tpath("out");
  p.err_path = tpath("err");
  if (g_nkids >= (int)(sizeof g_kids / sizeof g_kids[0]))
    fail_msg("too many processes in one test");
  in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  out = open(p.out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  err = open(p.err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || out < 0 || err < 0)
    fail_msg("cannot open files for %s: %s", p.cmd, strerror(errno));
  fflush(stdout);
  fflush(stderr);
  p.t0 = tu_now_ms();
  pid = fork();
  if (pid < 0) fail_msg("fork: %s", strerror(errno));
  if (pid == 0) {
    sigset_t none;
    setpgid(0, 0);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execv(c->v[0], (char *const *)c->v);
    dprintf(2, "exec %s: %s\n", c->v[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no race with a kill(-pid) right after */
  close(in);
  close(out);
  close(err);
  g_kids[g_nkids++] = (child){pid, 0, 0};
  p.pid = pid;
  return p;
}

/* Has p exited? Reaps it if so (the status is kept for finish()). */
int exited(const proc *p) {
  child *k = kid(p->pid);
  int st;
  if (!k) fail_msg("unknown process %ld", (long)p->pid);
  if (k->reaped) return 1;
  if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
    k->reaped = 1;
    k->status = st;
    return 1;
  }
  return 0;
}

/* Waits up to timeout_ms for p to exit; on timeout kills its process group
 * and fails the test. */
result finish(const proc *p, int64_t timeout_ms) {
  result r;
  int64_t deadline = tu_now_ms() + timeout_ms;
  child *k = kid(p->pid);
  while (!exited(p)) {
    if (tu_now_ms() > deadline) {
      kill(-p->pid, SIGKILL);
      kill(p->pid, SIGKILL);
      fail_msg("`%s` did not exit within %lld ms (killed); stderr: %s", p->cmd,
               (long long)timeout_ms, slurp(p->err_path));
    }
    tu_sleep_ms(5);
  }
  r.ms = tu_now_ms() - p->t0;
  r.out = slurp(p->out_path);
  r.err = slurp(p->err_path);
  if (!r.out) r.out = "";
  if (!r.err) r.err = "";
  if (WIFSIGNALED(k->status))
    fail_msg("`%s` was killed by signal %d; stderr: %s", p->cmd, WTERMSIG(k->status), r.err);
  r.code = WEXITSTATUS(k->status);
  return r;
}

result run(const cmdv *c, int64_t timeout_ms) {
  proc p = start(c);
  return finish(&p, timeout_ms);
}

void expect_code(const result *r, const cmdv *c, int want) {
  if (r->code != want)
    fail_msg("`%s`: expected exit status %d, got %d\n  stdout: %s\n  stderr: %s", cmdline(c), want,
             r->code, r->out, r->err);
}

/* stderr is exactly one non-empty line "prog: reason", stdout is empty, and
 * the reason mentions `mention` (if given). */
void expect_one_line(const result *r, const cmdv *c, const char *prog, const char *mention) {
  size_t n = strlen(r->err), pl = strlen(prog);
  const char *nl = strchr(r->err, '\n');
  if (n == 0 || !nl || nl != r->err + n - 1)
    fail_msg("`%s`: expected exactly one line on stderr, got %zu bytes: [%s]", cmdline(c), n,
             r->err);
  if (strncmp(r->err, prog, pl) != 0 || strncmp(r->err + pl, ": ", 2) != 0 || n < pl + 2 + 4)
    fail_msg("`%s`: stderr should be '%s: <reason>', got: %s", cmdline(c), prog, r->err);
  if (mention && !strstr(r->err, mention))
    fail_msg("`%s`: the reason should mention '%s', got: %s", cmdline(c), mention, r->err);
}

/* Usage error: exit 2, one line on stderr, nothing on stdout. */
void expect_usage(const cmdv *c, const char *prog, const char *mention) {
  result r = run(c, 10000);
  expect_code(&r, c, 2);
  expect_one_line(&r, c, prog, mention);
  if (*r.out) fail_msg("`%s`: a usage error printed on stdout: %s", cmdline(c), r.out);
}

/* Waits for a file the child writes once it holds the lock; fails early if
 * the holder exits first. Returns its contents. */
char *wait_file(const char *path, const proc *by, int64_t timeout_ms) {
  int64_t deadline = tu_now_ms() + timeout_ms;
  for (;;) {
    char *s = exists(path) ? slurp(path) : NULL;
    if (s) return s;
    if (by && exited(by)) {
      if (exists(path)) continue;
      fail_msg("`%s` exited before its child reported the lock; stderr: %s", by->cmd,
               slurp(by->err_path));
    }
    if (tu_now_ms() > deadline)
      fail_msg("no %s after %lld ms from `%s`; stderr: %s", path, (long long)timeout_ms,
               by ? by->cmd : "?", by ? slurp(by->err_path) : "");
    tu_sleep_ms(10);
  }
}

/* ---- backends ----------------------------------------------------------- */

const tu_backend *backend(const char *name, int *index) {
  int n;
  const tu_backend *b = tu_backends(&n);
  for (int k = 0; k < n; k++)
    if (strcmp(b[k].name, name) == 0) {
      if (!b[k].url) fail_msg("no URL for %s", name);
      if (index) *index = k;
      return &b[k];
    }
  fail_msg("unknown backend %s", name);
  return NULL;
}

const char *lite_url(void) { return backend("sqlite", NULL)->url; }

const char *env_or_fail(const char *var) {
  const char *v = getenv(var);
  if (!v || !*v) fail_msg("%s is not set: run through tests/with-servers.sh", var);
  return v;
}

/* `dblock migrate` on cli_locks: exit 0 and "applied N migration(s) (backend)".
 * A success is remembered for migrated(). */
int migrate(const tu_backend *b) {
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  int applied = -1, k = 0;
  char be[32] = "";
  cv_add(&c, "migrate");
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (sscanf(r.out, "applied %d migration%*[s] (%31[a-z])", &applied, be) < 2 &&
      sscanf(r.out, "applied %d migration (%31[a-z])", &applied, be) < 2)
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  if (strcmp(be, b->name) != 0)
    fail_msg("`%s`: says backend '%s', expected '%s'", cmdline(&c), be, b->name);
  if (applied < 0) fail_msg("`%s`: negative count: %s", cmdline(&c), r.out);
  backend(b->name, &k);
  g_migrated[k] = 1;
  return applied;
}

const tu_backend *migrated(const char *name) {
  int k = 0;
  const tu_backend *b = backend(name, &k);
  if (!g_migrated[k]) migrate(b);
  return b;
}

const char HOLD_SCRIPT[] = READY LOOP;
const char TRAP_SCRIPT[] = "trap 'echo TERM > \"$3\"; exit 0' TERM; " READY LOOP;

holder hold(const tu_backend *b, const char *strategy, const char *name, const char *lease,
            const char *kill_after, const char *script) {
  holder h;
  cmdv c = dblock_cmd(b->url, strategy);
  char *ready, *nl;
  h.name = name;
  h.ready = tpath("ready");
  h.stop = tpath("stop");
  h.marker = tpath("marker");
  cv_addl(&c, "run", name, NULL);
  if (lease) cv_addl(&c, "--lease", lease, NULL);
  if (kill_after) cv_addl(&c, "--kill-after", kill_after, NULL);
  cv_addl(&c, "--", "sh", "-c", script, "sh", h.ready, h.stop, h.marker, NULL);
  h.p = start(&c);
  ready = wait_file(h.ready, &h.p, 20000);
  if (!(nl = strchr(ready, '\n'))) fail_msg("bad ready file: %s", ready);
  *nl = 0;
  h.env_name = nl + 1;
  if ((nl = strchr(nl + 1, '\n'))) *nl = 0;
  {
    char *end;
    errno = 0;
    h.fence = strtoll(ready, &end, 10);
    if (end == ready || *end || errno)
      fail_msg("`%s`: DBLOCK_FENCE is not a number: '%s'", h.p.cmd, ready);
  }
  if (h.fence <= 0) fail_msg("`%s`: DBLOCK_FENCE=%lld is not positive", h.p.cmd, h.fence);
  if (strcmp(h.env_name, name) != 0)
    fail_msg("`%s`: DBLOCK_NAME='%s', expected '%s'", h.p.cmd, h.env_name, name);
  return h;
}

void await_handler(int pid, int sig, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  unsigned long long mask = 0;
  do {
    char path[64], line[256];
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if ((f = fopen(path, "r"))) {
      while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigCgt:", 7) == 0) mask = strtoull(line + 7, NULL, 16);
      fclose(f);
    }
    if (mask & (1ULL << (sig - 1))) return;
    tu_sleep_ms(10);
  } while (tu_now_ms() < end);
  fail_msg("process %d never set a handler for signal %d", pid, sig);
}

/* Lets the holder's child finish; expects `dblock run` to exit 0. */
void unhold(holder *h) {
  result r;
  touch(h->stop);
  r = finish(&h->p, 15000);
  if (r.code != 0)
    fail_msg("`%s`: expected exit 0 after its child ended, got %d; stderr: %s", h->p.cmd, r.code,
             r.err);
}

/* `dblock run --wait 0 NAME -- sh -c 'touch RAN'`: returns the result and
 * fails if the command ran although the exit status says busy. */
result try_run(const tu_backend *b, const char *strategy, const char *name, const char *wait,
               const char *conflict_code, cmdv *out_cmd) {
  cmdv c = dblock_cmd(b->url, strategy);
  const char *ran = tpath("ran");
  result r;
  if (conflict_code) cv_addl(&c, "-E", conflict_code, NULL);
  cv_addl(&c, "run", name, "--wait", wait, "--", "sh", "-c", "touch \"$1\"", "sh", ran, NULL);
  r = run(&c, 15000);
  if (r.code != 0 && exists(ran))
    fail_msg("`%s` exited %d but ran its command", cmdline(&c), r.code);
  if (r.code == 0 && !exists(ran))
    fail_msg("`%s` exited 0 but did not run its command", cmdline(&c));
  if (out_cmd) *out_cmd = c;
  return r;
}

void expect_busy(const tu_backend *b, const char *strategy, const char *name) {
  cmdv c;
  result r = try_run(b, strategy, name, "0", NULL, &c);
  expect_code(&r, &c, 3);
}

/* `dblock status NAME --json`: exit 0, one JSON object. */
status_info status_json(const tu_backend *b, const char *strategy, const char *name) {
  cmdv c = dblock_cmd(b->url, strategy);
  result r;
  json_object *v;
  status_info s;
  cv_addl(&c, "status", name, "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = jparse(r.out, cmdline(&c));
  if (!json_object_is_type(v, json_type_object)) fail_msg("`%s`: not a JSON object: %s", cmdline(&c), r.out);
  if (strcmp(jstr(v, "name", r.out), name) != 0)
    fail_msg("`%s`: wrong name in %s", cmdline(&c), r.out);
  s.fence = jint(v, "fence", r.out);
  s.held = jbool(v, "held", r.out);
  s.expires_us = jint(v, "expires_at_us", r.out);
  s.strategy = jstr(v, "strategy", r.out);
  s.owner_host = jstr(v, "owner_host", r.out);
  return s;
}

/* ---- the run ------------------------------------------------------------ */

int cli_init(void) {
  int n;
  /* Fails the run (never skips) when a server URL is missing. */
  tu_backends(&n);
  /* The no-URL cases need it unset; every other command gets --url. */
  unsetenv("DBLOCK_URL");
  if (gethostname(g_host, sizeof g_host - 1) != 0) {
    perror("gethostname");
    return -1;
  }
  signal(SIGPIPE, SIG_IGN);
  /* DBLOCK_TEST_FILTER=pattern runs only the matching tests (e.g. "*mysql*"). */
  if (getenv("DBLOCK_TEST_FILTER")) cmocka_set_test_filter(getenv("DBLOCK_TEST_FILTER"));
  return 0;
}

/* Kills whatever the test left running (whole process groups) and frees
 * its memory. */
int cli_teardown(void **st) {
  (void)st;
  for (int k = 0; k < g_nkids; k++) {
    kill(-g_kids[k].pid, SIGKILL);
    if (!g_kids[k].reaped) {
      kill(g_kids[k].pid, SIGKILL);
      waitpid(g_kids[k].pid, NULL, 0);
    }
  }
  g_nkids = 0;
  arena_free();
  return 0;
}

int cli_group_setup(void **st) {
  const char *base = getenv("DBLOCK_TEST_TMP");
  (void)st;
  snprintf(g_dir, sizeof g_dir, "%s/dblock-cli-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
    return -1;
  }
  return 0;
}

int cli_group_teardown(void **st) {
  int n;
  const tu_backend *b = tu_backends(&n);
  char cmd[PATH_MAX + 32];
  (void)st;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  /* The SQLite file tu_backends() named for this process. */
  if (strncmp(b[0].url, "sqlite://", 9) == 0) {
    const char *path = b[0].url + 9;
    char side[PATH_MAX + 8];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
  }
  return 0;
}
