/*
 * test_cli.c — runs the real dblock and dblock-reaper binaries (from
 * $DBLOCK_TEST_TREE, default "build") against SQLite, PostgreSQL and
 * MariaDB and checks what issue 5 asks them to show, plus the reaper's exit
 * codes (issue 4):
 *
 *   - migrate; two (three) `dblock run` on one name never overlap; with
 *     --wait 0 the second exits at once with 3 (or the -E code);
 *   - a child running 3x the lease keeps the lock, and its DBLOCK_FENCE is
 *     the fence `dblock status --json` shows (for_update on PostgreSQL and
 *     SQLite: only a positive fence, as a held for_update row is invisible
 *     to other sessions there);
 *   - force-unlock from another process: the child gets SIGTERM and
 *     `dblock run` exits 4 (for_update: not on SQLite, where the
 *     force-unlock is refused with 1 and the holder keeps the lock);
 *   - `list --json` is valid JSON (checked by the small parser below) and
 *     names the holder (host, pid, fence);
 *   - every usage error exits 2 with one line on stderr;
 *   - dblock-reaper: --once, bad URL, closed port, missing table, read-only
 *     role, no mode, --every stopping within 1 s of SIGTERM, and a pass with
 *     a for_update lock held among expired rows (kept; the others deleted).
 *
 * Every process runs in its own process group with a deadline; the per-test
 * teardown kills whatever a failed test left behind. The lock table is
 * cli_locks, so other suites never see these rows. DBLOCK_TEST_FILTER=GLOB
 * runs only the matching tests.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define TABLE "cli_locks"

static const char *const STRATEGIES[] = {"insert", "optimistic", "for_update"};
#define NSTRATEGIES 3

static char g_dir[PATH_MAX];  /* this run's scratch folder */
static char g_host[256];      /* gethostname() */
static int g_seq;             /* file and lock name counter */
static int g_migrated[3];     /* per backend index: migrate succeeded */

/* ---- a per-test arena: freed by the teardown, also after a failure ------ */

typedef struct anode {
  struct anode *next;
  max_align_t data[];
} anode;
static anode *g_arena;

static void *talloc(size_t size) {
  anode *n = calloc(1, sizeof *n + size + 1);
  if (!n) fail_msg("out of memory");
  n->next = g_arena;
  g_arena = n;
  return n->data;
}

static void arena_free(void) {
  while (g_arena) {
    anode *n = g_arena;
    g_arena = n->next;
    free(n);
  }
}

static char *tfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *tfmt(const char *fmt, ...) {
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
static char *tpath(const char *tag) { return tfmt("%s/%s-%d", g_dir, tag, ++g_seq); }

/* A lock name unique to this process and call. */
static char *tname(const char *tag) {
  return tfmt("cli-%s-%d-%d-%lld", tag, (int)getpid(), ++g_seq, (long long)tu_now_ms());
}

/* The whole file as a string (arena), or NULL if it does not exist. */
static char *slurp(const char *path) {
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

static int exists(const char *path) { return access(path, F_OK) == 0; }

static void touch(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT, 0644);
  if (fd < 0) fail_msg("cannot create %s: %s", path, strerror(errno));
  close(fd);
}

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- a tiny JSON parser (RFC 8259), strict: used as the syntax check ---- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
  int type;
  int b;              /* J_BOOL */
  int is_int;         /* J_NUM without fraction or exponent, fits long long */
  long long i;        /* J_NUM, when is_int */
  double d;           /* J_NUM */
  char *s;            /* J_STR: decoded UTF-8 */
  size_t n;           /* J_ARR, J_OBJ: number of items */
  struct jv *items;   /* J_ARR, J_OBJ */
  char **keys;        /* J_OBJ */
} jv;

typedef struct jparser {
  const char *p, *end;
  const char *why;
  size_t where;
  const char *start;
  int depth;
} jparser;

static int jfail(jparser *q, const char *why) {
  if (!q->why) {
    q->why = why;
    q->where = (size_t)(q->p - q->start);
  }
  return -1;
}

static void jws(jparser *q) {
  while (q->p < q->end && (*q->p == ' ' || *q->p == '\t' || *q->p == '\n' || *q->p == '\r'))
    q->p++;
}

/* Length of the valid UTF-8 sequence at s (before end), 0 if invalid. */
static int utf8_seq(const unsigned char *s, const unsigned char *end) {
  unsigned c = s[0], cp;
  int n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  if (end - s < n) return 0;
  for (int k = 1; k < n; k++) {
    if ((s[k] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[k] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

static int hex4(jparser *q, unsigned *out) {
  unsigned v = 0;
  if (q->end - q->p < 4) return jfail(q, "short \\u escape");
  for (int k = 0; k < 4; k++) {
    char c = q->p[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return jfail(q, "bad hex digit in \\u escape");
  }
  q->p += 4;
  *out = v;
  return 0;
}

static int jstring(jparser *q, char **out) {
  const char *scan = q->p + 1;
  char *o;
  size_t n = 0;
  /* The decoded text is never longer than the raw one. */
  while (scan < q->end && *scan != '"') scan += (*scan == '\\' && scan + 1 < q->end) ? 2 : 1;
  if (scan >= q->end) return jfail(q, "unterminated string");
  o = talloc((size_t)(scan - q->p) + 1);
  q->p++;
  for (;;) {
    unsigned char c;
    if (q->p >= q->end) return jfail(q, "unterminated string");
    c = (unsigned char)*q->p;
    if (c == '"') {
      q->p++;
      break;
    }
    if (c < 0x20) return jfail(q, "raw control character in string");
    if (c == '\\') {
      unsigned cp;
      q->p++;
      if (q->p >= q->end) return jfail(q, "unterminated escape");
      switch (*q->p++) {
      case '"': o[n++] = '"'; break;
      case '\\': o[n++] = '\\'; break;
      case '/': o[n++] = '/'; break;
      case 'b': o[n++] = '\b'; break;
      case 'f': o[n++] = '\f'; break;
      case 'n': o[n++] = '\n'; break;
      case 'r': o[n++] = '\r'; break;
      case 't': o[n++] = '\t'; break;
      case 'u':
        if (hex4(q, &cp) != 0) return -1;
        if (cp >= 0xdc00 && cp <= 0xdfff) return jfail(q, "lone low surrogate");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          unsigned lo;
          if (q->end - q->p < 2 || q->p[0] != '\\' || q->p[1] != 'u')
            return jfail(q, "high surrogate without its low half");
          q->p += 2;
          if (hex4(q, &lo) != 0) return -1;
          if (lo < 0xdc00 || lo > 0xdfff) return jfail(q, "bad low surrogate");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        n += put_utf8(o + n, cp);
        break;
      default: return jfail(q, "unknown escape");
      }
      continue;
    }
    {
      int len = utf8_seq((const unsigned char *)q->p, (const unsigned char *)q->end);
      if (!len) return jfail(q, "invalid UTF-8 in string");
      memcpy(o + n, q->p, (size_t)len);
      n += (size_t)len;
      q->p += len;
    }
  }
  o[n] = 0;
  *out = o;
  return 0;
}

static int jnumber(jparser *q, jv *v) {
  const char *s = q->p;
  int frac = 0;
  char *tmp;
  if (q->p < q->end && *q->p == '-') q->p++;
  if (q->p >= q->end) return jfail(q, "bad number");
  if (*q->p == '0') q->p++;
  else if (*q->p >= '1' && *q->p <= '9')
    while (q->p < q->end && *q->p >= '0' && *q->p <= '9') q->p++;
  else return jfail(q, "bad number");
  if (q->p < q->end && *q->p == '.') {
    frac = 1;
    q->p++;
    if (q->p >= q->end || *q->p < '0' || *q->p > '9') return jfail(q, "bad fraction");
    while (q->p < q->end && *q->p >= '0' && *q->p <= '9') q->p++;
  }
  if (q->p < q->end && (*q->p == 'e' || *q->p == 'E')) {
    frac = 1;
    q->p++;
    if (q->p < q->end && (*q->p == '+' || *q->p == '-')) q->p++;
    if (q->p >= q->end || *q->p < '0' || *q->p > '9') return jfail(q, "bad exponent");
    while (q->p < q->end && *q->p >= '0' && *q->p <= '9') q->p++;
  }
  tmp = talloc((size_t)(q->p - s) + 1);
  memcpy(tmp, s, (size_t)(q->p - s));
  v->type = J_NUM;
  v->d = strtod(tmp, NULL);
  if (!frac) {
    errno = 0;
    v->i = strtoll(tmp, NULL, 10);
    v->is_int = errno == 0;
  }
  return 0;
}

static int jvalue(jparser *q, jv *v);

static int jcontainer(jparser *q, jv *v, int obj) {
  size_t cap = 8;
  char close = obj ? '}' : ']';
  if (++q->depth > 64) return jfail(q, "nested too deeply");
  v->type = obj ? J_OBJ : J_ARR;
  v->items = talloc(cap * sizeof *v->items);
  if (obj) v->keys = talloc(cap * sizeof *v->keys);
  q->p++;
  jws(q);
  if (q->p < q->end && *q->p == close) {
    q->p++;
    q->depth--;
    return 0;
  }
  for (;;) {
    if (v->n == cap) {
      jv *items = talloc(cap * 2 * sizeof *items);
      memcpy(items, v->items, cap * sizeof *items);
      v->items = items;
      if (obj) {
        char **keys = talloc(cap * 2 * sizeof *keys);
        memcpy(keys, v->keys, cap * sizeof *keys);
        v->keys = keys;
      }
      cap *= 2;
    }
    jws(q);
    if (obj) {
      if (q->p >= q->end || *q->p != '"') return jfail(q, "object key must be a string");
      if (jstring(q, &v->keys[v->n]) != 0) return -1;
      jws(q);
      if (q->p >= q->end || *q->p != ':') return jfail(q, "missing ':' after key");
      q->p++;
    }
    if (jvalue(q, &v->items[v->n]) != 0) return -1;
    v->n++;
    jws(q);
    if (q->p < q->end && *q->p == ',') {
      q->p++;
      continue;
    }
    if (q->p < q->end && *q->p == close) {
      q->p++;
      q->depth--;
      return 0;
    }
    return jfail(q, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int jliteral(jparser *q, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(q->end - q->p) < n || memcmp(q->p, word, n) != 0) return jfail(q, "bad literal");
  q->p += n;
  return 0;
}

static int jvalue(jparser *q, jv *v) {
  memset(v, 0, sizeof *v);
  jws(q);
  if (q->p >= q->end) return jfail(q, "unexpected end of input");
  switch (*q->p) {
  case '{': return jcontainer(q, v, 1);
  case '[': return jcontainer(q, v, 0);
  case '"': v->type = J_STR; return jstring(q, &v->s);
  case 't': v->type = J_BOOL; v->b = 1; return jliteral(q, "true");
  case 'f': v->type = J_BOOL; return jliteral(q, "false");
  case 'n': v->type = J_NULL; return jliteral(q, "null");
  default:
    if (*q->p == '-' || (*q->p >= '0' && *q->p <= '9')) return jnumber(q, v);
    return jfail(q, "unexpected character");
  }
}

/* Parses text as exactly one JSON value (surrounding whitespace allowed).
 * Returns the value, or NULL with *why set. */
static jv *json_parse(const char *text, size_t len, const char **why, size_t *where) {
  jparser q = {text, text + len, NULL, 0, text, 0};
  jv *v = talloc(sizeof *v);
  if (jvalue(&q, v) == 0) {
    jws(&q);
    if (q.p != q.end) jfail(&q, "trailing characters after the value");
  }
  if (q.why) {
    *why = q.why;
    *where = q.where;
    return NULL;
  }
  return v;
}

static jv *json_parse_or_fail(const char *text, const char *what) {
  const char *why = NULL;
  size_t where = 0;
  jv *v = json_parse(text, strlen(text), &why, &where);
  if (!v) fail_msg("%s: output is not valid JSON (%s at byte %zu): %s", what, why, where, text);
  return v;
}

static const jv *jget(const jv *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  for (size_t k = 0; k < obj->n; k++)
    if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
  return NULL;
}

static long long jint(const jv *obj, const char *key, const char *what) {
  const jv *v = jget(obj, key);
  if (!v || v->type != J_NUM || !v->is_int) fail_msg("%s: no integer \"%s\"", what, key);
  return v->i;
}

static int jbool(const jv *obj, const char *key, const char *what) {
  const jv *v = jget(obj, key);
  if (!v || v->type != J_BOOL) fail_msg("%s: no boolean \"%s\"", what, key);
  return v->b;
}

static const char *jstr(const jv *obj, const char *key, const char *what) {
  const jv *v = jget(obj, key);
  if (!v || v->type != J_STR) fail_msg("%s: no string \"%s\"", what, key);
  return v->s;
}

/* ---- running the programs ---------------------------------------------- */

typedef struct cmdv {
  const char *v[64];
  int n;
} cmdv;

static void cv_add(cmdv *c, const char *s) {
  if (c->n >= 62) fail_msg("too many arguments");
  c->v[c->n++] = s;
  c->v[c->n] = NULL;
}

/* Appends a NULL-terminated list of arguments. */
static void cv_addl(cmdv *c, ...) {
  va_list ap;
  const char *s;
  va_start(ap, c);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(c, s);
  va_end(ap);
}

static const char *tree(void) {
  const char *t = getenv("DBLOCK_TEST_TREE");
  return t && *t ? t : "build";
}

/* dblock --url URL --table cli_locks [--strategy S] */
static cmdv dblock_cmd(const char *url, const char *strategy) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock", tree()));
  if (url) cv_addl(&c, "--url", url, NULL);
  cv_addl(&c, "--table", TABLE, NULL);
  if (strategy) cv_addl(&c, "--strategy", strategy, NULL);
  return c;
}

static cmdv reaper_cmd(void) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock-reaper", tree()));
  return c;
}

/* The command line, shell-quoted where needed, for messages. */
static const char *cmdline(const cmdv *c) {
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

typedef struct proc {
  pid_t pid;
  const char *cmd;
  const char *out_path, *err_path;
  int64_t t0;
} proc;

typedef struct result {
  int code;        /* exit status (the test fails if killed by a signal) */
  const char *out, *err;
  int64_t ms;      /* from start to exit, as seen by the poll loop */
} result;

static child *kid(pid_t pid) {
  for (int k = 0; k < g_nkids; k++)
    if (g_kids[k].pid == pid) return &g_kids[k];
  return NULL;
}

/* Starts c with stdin from /dev/null and stdout / stderr to files, in a
 * process group of its own. */
static proc start(const cmdv *c) {
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
static int exited(const proc *p) {
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
static result finish(const proc *p, int64_t timeout_ms) {
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

static result run(const cmdv *c, int64_t timeout_ms) {
  proc p = start(c);
  return finish(&p, timeout_ms);
}

static void expect_code(const result *r, const cmdv *c, int want) {
  if (r->code != want)
    fail_msg("`%s`: expected exit status %d, got %d\n  stdout: %s\n  stderr: %s", cmdline(c), want,
             r->code, r->out, r->err);
}

/* stderr is exactly one non-empty line "prog: reason", stdout is empty, and
 * the reason mentions `mention` (if given). */
static void expect_one_line(const result *r, const cmdv *c, const char *prog, const char *mention) {
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
static void expect_usage(const cmdv *c, const char *prog, const char *mention) {
  result r = run(c, 10000);
  expect_code(&r, c, 2);
  expect_one_line(&r, c, prog, mention);
  if (*r.out) fail_msg("`%s`: a usage error printed on stdout: %s", cmdline(c), r.out);
}

/* Waits for a file the child writes once it holds the lock; fails early if
 * the holder exits first. Returns its contents. */
static char *wait_file(const char *path, const proc *holder, int64_t timeout_ms) {
  int64_t deadline = tu_now_ms() + timeout_ms;
  for (;;) {
    char *s = exists(path) ? slurp(path) : NULL;
    if (s) return s;
    if (holder && exited(holder)) {
      if (exists(path)) continue;
      fail_msg("`%s` exited before its child reported the lock; stderr: %s", holder->cmd,
               slurp(holder->err_path));
    }
    if (tu_now_ms() > deadline)
      fail_msg("no %s after %lld ms from `%s`; stderr: %s", path, (long long)timeout_ms,
               holder ? holder->cmd : "?", holder ? slurp(holder->err_path) : "");
    tu_sleep_ms(10);
  }
}

/* ---- backends ----------------------------------------------------------- */

static const tu_backend *backend(const char *name, int *index) {
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

static const char *env_or_fail(const char *var) {
  const char *v = getenv(var);
  if (!v || !*v) fail_msg("%s is not set: run through tests/with-servers.sh", var);
  return v;
}

/* `dblock migrate` on cli_locks: exit 0 and "applied N migration(s) (backend)". */
static int migrate(const tu_backend *b) {
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  int applied = -1;
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
  return applied;
}

static const tu_backend *migrated(const char *name) {
  int k = 0;
  const tu_backend *b = backend(name, &k);
  if (!g_migrated[k]) {
    migrate(b);
    g_migrated[k] = 1;
  }
  return b;
}

/* Holder child scripts ($1 ready file, $2 stop file, $3 TERM marker). The
 * ready file gets DBLOCK_FENCE and DBLOCK_NAME, written atomically. The
 * loop ends when the stop file appears (or after ~15 s, a safety net). */
#define READY                                                      \
  "printf '%s\\n%s\\n' \"$DBLOCK_FENCE\" \"$DBLOCK_NAME\" > \"$1.tmp\" " \
  "&& mv \"$1.tmp\" \"$1\"; "
#define LOOP "n=0; while [ ! -e \"$2\" ] && [ $n -lt 300 ]; do sleep 0.05; n=$((n+1)); done"
static const char HOLD_SCRIPT[] = READY LOOP;
static const char TRAP_SCRIPT[] = "trap 'echo TERM > \"$3\"; exit 0' TERM; " READY LOOP;

typedef struct holder {
  proc p;
  const char *name, *ready, *stop, *marker;
  long long fence;       /* DBLOCK_FENCE seen by the child */
  const char *env_name;  /* DBLOCK_NAME seen by the child */
} holder;

/* Starts `dblock run [--lease L] NAME -- sh -c SCRIPT` and waits until the
 * child runs (holds the lock). */
static holder hold(const tu_backend *b, const char *strategy, const char *name,
                   const char *lease, const char *script) {
  holder h;
  cmdv c = dblock_cmd(b->url, strategy);
  char *ready, *nl;
  h.name = name;
  h.ready = tpath("ready");
  h.stop = tpath("stop");
  h.marker = tpath("marker");
  cv_addl(&c, "run", name, NULL);
  if (lease) cv_addl(&c, "--lease", lease, NULL);
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

/* Lets the holder's child finish; expects `dblock run` to exit 0. */
static void unhold(holder *h) {
  result r;
  touch(h->stop);
  r = finish(&h->p, 15000);
  if (r.code != 0)
    fail_msg("`%s`: expected exit 0 after its child ended, got %d; stderr: %s", h->p.cmd, r.code,
             r.err);
}

/* `dblock run --wait 0 NAME -- sh -c 'touch RAN'`: returns the result and
 * fails if the command ran although the exit status says busy. */
static result try_run(const tu_backend *b, const char *strategy, const char *name,
                      const char *wait, const char *conflict_code, cmdv *out_cmd) {
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

static void expect_busy(const tu_backend *b, const char *strategy, const char *name) {
  cmdv c;
  result r = try_run(b, strategy, name, "0", NULL, &c);
  expect_code(&r, &c, 3);
}

typedef struct status_info {
  long long fence, expires_us;
  int held;
  const char *strategy, *owner_host;
} status_info;

/* `dblock status NAME --json`: exit 0, one JSON object. */
static status_info status_json(const tu_backend *b, const char *strategy, const char *name) {
  cmdv c = dblock_cmd(b->url, strategy);
  result r;
  jv *v;
  status_info s;
  cv_addl(&c, "status", name, "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (v->type != J_OBJ) fail_msg("`%s`: not a JSON object: %s", cmdline(&c), r.out);
  if (strcmp(jstr(v, "name", r.out), name) != 0)
    fail_msg("`%s`: wrong name in %s", cmdline(&c), r.out);
  s.fence = jint(v, "fence", r.out);
  s.held = jbool(v, "held", r.out);
  s.expires_us = jint(v, "expires_at_us", r.out);
  s.strategy = jstr(v, "strategy", r.out);
  s.owner_host = jstr(v, "owner_host", r.out);
  return s;
}

/* ---- tests: migrate ----------------------------------------------------- */

static void t_migrate(const char *be) {
  int k = 0;
  const tu_backend *b = backend(be, &k);
  migrate(b);
  g_migrated[k] = 1;
  /* Again: nothing left to apply. */
  if (migrate(b) != 0) fail_msg("a second `dblock migrate` applied migrations again");
}

/* ---- tests: two runs never overlap; --wait 0 is busy at once ------------ */

#define OVERLAP_RUNS 3

/* Starts OVERLAP_RUNS `dblock run NAME -- sh -c '...'` at once; each child
 * appends "start NS PID" and "end NS PID" to one file around a 200 ms nap.
 * The file must show the intervals one after the other. */
static void t_no_overlap(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("overlap"), *log = tpath("overlap");
    proc p[OVERLAP_RUNS];
    long long last_end = 0, start_pid = 0;
    char *text, *line, *save = NULL;
    int lines = 0;
    for (int k = 0; k < OVERLAP_RUNS; k++) {
      cmdv c = dblock_cmd(b->url, st);
      cv_addl(&c, "run", name, "--",  "sh", "-c",
              "echo \"start $(date +%s%N) $$\" >> \"$1\"; sleep 0.2; "
              "echo \"end $(date +%s%N) $$\" >> \"$1\"",
              "sh", log, NULL);
      p[k] = start(&c);
    }
    for (int k = 0; k < OVERLAP_RUNS; k++) {
      result r = finish(&p[k], 30000);
      if (r.code != 0)
        fail_msg("[%s %s] `%s` exited %d; stderr: %s", be, st, p[k].cmd, r.code, r.err);
    }
    if (!(text = slurp(log))) fail_msg("[%s %s] the children wrote nothing", be, st);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
      char what[8];
      long long ns, pid;
      if (sscanf(line, "%7s %lld %lld", what, &ns, &pid) != 3)
        fail_msg("[%s %s] bad line '%s' in %s", be, st, line, slurp(log));
      if (strcmp(what, lines % 2 == 0 ? "start" : "end") != 0)
        fail_msg("[%s %s] two runs overlapped: '%s' at line %d:\n%s", be, st, line, lines + 1,
                 slurp(log));
      if (lines % 2 == 0) {
        if (ns < last_end)
          fail_msg("[%s %s] a run started (%lld) before the previous one ended (%lld):\n%s", be,
                   st, ns, last_end, slurp(log));
        start_pid = pid;
      } else {
        if (pid != start_pid) fail_msg("[%s %s] interleaved runs:\n%s", be, st, slurp(log));
        last_end = ns;
      }
    }
    if (lines != 2 * OVERLAP_RUNS)
      fail_msg("[%s %s] expected %d lines, got %d:\n%s", be, st, 2 * OVERLAP_RUNS, lines,
               slurp(log));
  }
}

/* While a `dblock run` holds NAME: --wait 0 exits 3 at once without
 * running its command, -E 9 makes it 9, --wait 500ms times out with 3. */
static void t_busy(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("busy");
    holder h = hold(b, st, name, NULL, HOLD_SCRIPT);
    cmdv c;
    result r = try_run(b, st, name, "0", NULL, &c);
    expect_code(&r, &c, 3);
    expect_one_line(&r, &c, "dblock", NULL);
    if (r.ms > 3000) fail_msg("[%s %s] `%s` took %lld ms: not at once", be, st, cmdline(&c),
                              (long long)r.ms);
    r = try_run(b, st, name, "0", "9", &c);
    expect_code(&r, &c, 9);
    r = try_run(b, st, name, "500ms", NULL, &c);
    expect_code(&r, &c, 3);
    if (r.ms < 450 || r.ms > 5000)
      fail_msg("[%s %s] `%s` gave up after %lld ms", be, st, cmdline(&c), (long long)r.ms);
    unhold(&h);
    /* Free again: a try-once run gets it. */
    r = try_run(b, st, name, "0", NULL, &c);
    expect_code(&r, &c, 0);
  }
}

/* dblock(1)'s shell idiom for a lock across steps: when the name is busy
 * the script stops (exit 3) and the step after it never runs; when free it
 * runs with $fence set. (A bare eval "$(dblock acquire ...)" evaluated an
 * empty string and went on, also under set -e.) */
static const char *IDIOM =
    "lock=$(\"$1\" --url \"$2\" --table \"$4\" acquire \"$3\" --lease 5s) || exit 3\n"
    "eval \"$lock\"\n"
    "echo \"ran with fence $fence\"\n";

static void t_acquire_idiom(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("idiom");
  cmdv c = dblock_cmd(b->url, NULL), sh = {{NULL}, 0};
  result r, held;
  cv_addl(&c, "acquire", name, "--lease", "10s", NULL);
  held = run(&c, 15000);
  expect_code(&held, &c, 0);
  cv_addl(&sh, "/bin/sh", "-ec", IDIOM, "sh", tfmt("%s/dblock", tree()), b->url, name, TABLE, NULL);
  r = run(&sh, 15000);
  {
    /* Busy with --json: one object on stdout, ok false, exit 3. */
    cmdv j = dblock_cmd(b->url, NULL);
    result jr;
    jv *v;
    cv_addl(&j, "acquire", name, "--lease", "5s", "--json", NULL);
    jr = run(&j, 15000);
    expect_code(&jr, &j, 3);
    v = json_parse_or_fail(jr.out, cmdline(&j));
    if (jbool(v, "ok", jr.out) || !strstr(jstr(v, "message", jr.out), "held by another owner"))
      fail_msg("`%s`: expected ok false and the reason: %s", cmdline(&j), jr.out);
  }
  if (r.code != 3 || strstr(r.out, "ran with") || !strstr(r.err, "held by another owner"))
    fail_msg("[%s] the idiom on a busy name: exit %d, stdout '%s', stderr '%s' (expected busy, "
             "exit 3, no step)", be, r.code, r.out, r.err);
  {
    /* Released: the idiom takes it and the step runs with the fence. */
    cmdv rel = dblock_cmd(b->url, NULL);
    const char *tok = strstr(held.out, "token=");
    char token[200];
    if (!tok) fail_msg("no token in: %s", held.out);
    snprintf(token, sizeof token, "%.*s", (int)strcspn(tok + 6, "\n"), tok + 6);
    cv_addl(&rel, "release", name, "--token", token, NULL);
    r = run(&rel, 15000);
    expect_code(&r, &rel, 0);
  }
  /* (tfmt's buffers rotate: build the command again.) */
  sh.n = 0;
  cv_addl(&sh, "/bin/sh", "-ec", IDIOM, "sh", tfmt("%s/dblock", tree()), b->url, name, TABLE, NULL);
  r = run(&sh, 15000);
  if (r.code != 0 || !strstr(r.out, "ran with fence ") || strstr(r.out, "ran with fence \n"))
    fail_msg("[%s] the idiom on a free name: exit %d, stdout '%s', stderr '%s'", be, r.code, r.out, r.err);
}

/* ---- tests: a child running 3x the lease keeps the lock ----------------- */

static void t_keeps_lock(const char *be, const char *st) {
  const tu_backend *b = migrated(be);
  const char *name = tname("keep");

  int fu_any = strcmp(st, "for_update") == 0;
  holder h = hold(b, st, name, "1s",
                  READY "sleep 3.5");
  int64_t t_ready = tu_now_ms();
  long long last_expiry = 0;
  result r;
  cmdv c;
  for (int check = 0; check < 3; check++) {
    int64_t now_us;
    status_info si;
    /* Right away, then after ~1.2 and ~2.4 leases. */
    if (check) {
      int64_t at = t_ready + 1200 * check;
      if (tu_now_ms() < at) tu_sleep_ms(at - tu_now_ms());
    }
    if (exited(&h.p))
      fail_msg("[%s %s] `%s` ended early; stderr: %s", be, st, h.p.cmd, slurp(h.p.err_path));
    now_us = wall_us();
    si = status_json(b, st, name);
    if (!si.held) fail_msg("[%s %s] status says not held after %lld ms", be, st,
                           (long long)(tu_now_ms() - t_ready));
    if (strcmp(si.strategy, st) != 0)
      fail_msg("[%s %s] status shows strategy %s", be, st, si.strategy);
    if (si.fence != h.fence)
      fail_msg("[%s %s] DBLOCK_FENCE=%lld but `dblock status` shows fence %lld", be, st,
               h.fence, si.fence);
    if (!fu_any) {
      if (si.expires_us <= now_us)
        fail_msg("[%s %s] status shows the lease expired (%lld us <= now %lld us)", be, st,
                 si.expires_us, (long long)now_us);
      if (check && si.expires_us <= last_expiry)
        fail_msg("[%s %s] the lease was not renewed: expires_at_us %lld then %lld", be, st,
                 last_expiry, si.expires_us);
      last_expiry = si.expires_us;
    }
    expect_busy(b, st, name);
  }
  r = finish(&h.p, 15000);
  if (r.code != 0)
    fail_msg("[%s %s] `%s` exited %d (expected 0: the child kept the lock); stderr: %s", be, st,
             h.p.cmd, r.code, r.err);
  if (r.ms < 3000) fail_msg("[%s %s] the child ran only %lld ms", be, st, (long long)r.ms);
  /* Released at the end. */
  r = try_run(b, st, name, "0", NULL, &c);
  expect_code(&r, &c, 0);
}

/* ---- tests: force-unlock while `dblock run` holds the lock -------------- */

static void t_force_unlock(const char *be, const char *st) {
  const tu_backend *b = migrated(be);
  const char *name = tname("force");
  int refused = strcmp(st, "for_update") == 0 && strcmp(be, "sqlite") == 0;
  holder h = hold(b, st, name, "1s", TRAP_SCRIPT);
  cmdv c = dblock_cmd(b->url, st);
  result r;
  cv_addl(&c, "force-unlock", name, NULL);
  r = run(&c, 15000);
  if (refused) {
    /* Documented: a held for_update lock cannot be force-unlocked on
     * SQLite. Refused with 1, and the holder keeps its lock. */
    expect_code(&r, &c, 1);
    expect_one_line(&r, &c, "dblock", NULL);
    tu_sleep_ms(700);
    if (exists(h.marker))
      fail_msg("[%s %s] the child got SIGTERM although force-unlock was refused", be, st);
    if (exited(&h.p))
      fail_msg("[%s %s] `%s` ended although force-unlock was refused; stderr: %s", be, st,
               h.p.cmd, slurp(h.p.err_path));
    expect_busy(b, st, name);
    unhold(&h);
    return;
  }
  expect_code(&r, &c, 0);
  {
    long long nf = 0;
    int len = 0;
    if (sscanf(r.out, "fence=%lld\n%n", &nf, &len) != 1 || (size_t)len != strlen(r.out))
      fail_msg("`%s`: expected 'fence=N', got: %s", cmdline(&c), r.out);
    if (nf <= h.fence)
      fail_msg("[%s %s] force-unlock gave fence %lld, not above the holder's %lld", be, st, nf,
               h.fence);
    r = finish(&h.p, 10000);
    if (r.code != 4)
      fail_msg("[%s %s] `%s`: expected exit 4 (lock lost) after force-unlock, got %d; stderr: %s",
               be, st, h.p.cmd, r.code, r.err);
    {
      char *m = slurp(h.marker);
      if (!m || strcmp(m, "TERM\n") != 0)
        fail_msg("[%s %s] the child did not get SIGTERM (marker: %s)", be, st, m ? m : "none");
    }
    /* The name is free; the next grant's fence is above the forced one. */
    h = hold(b, st, name, NULL, HOLD_SCRIPT);
    if (h.fence <= nf)
      fail_msg("[%s %s] fence after force-unlock %lld is not above %lld", be, st, h.fence, nf);
    unhold(&h);
  }
}

/* ---- tests: `dblock run` supervises a process group ---------------------- */

/* The child records its process group ($1.pg), then runs a pipeline whose
 * members are not the shell itself: the case where signalling only the
 * shell leaves work running outside the lock. */
#define PGREC "cut -d' ' -f5 /proc/$$/stat > \"$1.pg\"; "
static const char GROUP_SCRIPT[] = PGREC READY "sleep 100 | cat";

/* Live (not zombie) processes whose process group is pg. */
static int group_members(long pg) {
  DIR *d = opendir("/proc");
  struct dirent *de;
  int n = 0;
  if (!d) fail_msg("cannot read /proc");
  while ((de = readdir(d)) != NULL) {
    char path[300], buf[512], *rp, state;
    long pgrp;
    FILE *f;
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fgets(buf, sizeof buf, f) && (rp = strrchr(buf, ')')) &&
        sscanf(rp + 2, "%c %*d %ld", &state, &pgrp) == 2 && pgrp == pg && state != 'Z')
      n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* Waits up to ms for process group pg to be empty; returns what is left. */
static int group_gone_within(long pg, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  int n;
  while ((n = group_members(pg)) > 0 && tu_now_ms() < end) tu_sleep_ms(20);
  return n;
}

/* The command's process group, once its pipeline runs (sh, sleep, cat:
 * at least 3 members besides the guardian that leads it). */
static long holder_group(const holder *h) {
  char *s = wait_file(tfmt("%s.pg", h->ready), &h->p, 5000);
  long pg = strtol(s, NULL, 10);
  int64_t end = tu_now_ms() + 5000;
  if (pg <= 1) fail_msg("bad process group '%s'", s);
  while (group_members(pg) < 3 && tu_now_ms() < end) tu_sleep_ms(10);
  if (group_members(pg) < 3) fail_msg("expected sh, sleep and cat in group %ld", pg);
  return pg;
}

/* The lock is lost (force-unlock) while `dblock run` runs a pipeline: the
 * whole process group gets SIGTERM, so no member survives (exit 4). */
static void t_run_group_lost(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("group");
  holder h = hold(b, "insert", name, "1s", GROUP_SCRIPT);
  long pg = holder_group(&h);
  cmdv c = dblock_cmd(b->url, "insert");
  result r;
  int left;
  cv_addl(&c, "force-unlock", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = finish(&h.p, 10000);
  if (r.code != 4) fail_msg("`%s`: expected exit 4 (lost), got %d; stderr: %s", h.p.cmd, r.code, r.err);
  if ((left = group_gone_within(pg, 1000)) != 0)
    fail_msg("[%s] %d process(es) of the command's group still run after the lock was lost", be, left);
}

/* `dblock run` itself is SIGKILLed (OOM killer): every process of its
 * command is gone within 1 s. for_update, where the name is free the
 * moment the supervisor's session dies: another run gets it, and by then
 * nothing of the first command may still run. */
static void t_run_supervisor_killed(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("orphan");
  holder h = hold(b, "for_update", name, NULL, GROUP_SCRIPT);
  long pg = holder_group(&h);
  int left;
  cmdv c;
  result r;
  kill(h.p.pid, SIGKILL);
  if ((left = group_gone_within(pg, 1000)) != 0)
    fail_msg("[%s] %d process(es) of the command outlived `dblock run` by 1 s", be, left);
  c = dblock_cmd(b->url, "for_update");
  cv_addl(&c, "run", "--wait", "5s", name, "--", "true", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
}

/* A `dblock run --wait forever` waiting for a busy name ends on SIGINT
 * (exit 130) and SIGTERM (exit 143) within a second, without running its
 * command and without taking the name from its holder: polling (insert)
 * and waiting in the server (for_update). (It used to die by the signal,
 * leaving nothing to tell the caller it held nothing.) */
static void t_run_wait_interrupted(const char *be) {
  static const char *const st[] = {"insert", "for_update"};
  static const int sigs[] = {SIGINT, SIGTERM};
  const tu_backend *b = migrated(be);
  for (int k = 0; k < 2; k++) {
    const char *name = tname("intr");
    holder h = hold(b, st[k], name, NULL, HOLD_SCRIPT);
    for (int i = 0; i < 2; i++) {
      const char *ran = tpath("ran");
      cmdv c = dblock_cmd(b->url, st[k]);
      proc p;
      result r;
      int64_t t0;
      cv_addl(&c, "run", name, "--wait", "forever", "--", "sh", "-c", "touch \"$1\"", "sh", ran,
              NULL);
      p = start(&c);
      tu_sleep_ms(700); /* connected and waiting */
      if (exited(&p)) fail_msg("[%s %s] `%s` ended before the signal", be, st[k], p.cmd);
      t0 = tu_now_ms();
      kill(p.pid, sigs[i]);
      r = finish(&p, 5000);
      expect_code(&r, &c, 128 + sigs[i]);
      if (tu_now_ms() - t0 > 1000)
        fail_msg("[%s %s] `%s` took %lld ms to end after signal %d", be, st[k], p.cmd,
                 (long long)(tu_now_ms() - t0), sigs[i]);
      if (exists(ran)) fail_msg("[%s %s] `%s` ran its command after the signal", be, st[k], p.cmd);
      if (!strstr(r.err, "interrupted"))
        fail_msg("[%s %s] `%s`: stderr does not say it was interrupted: %s", be, st[k], p.cmd, r.err);
    }
    unhold(&h); /* the holder kept the name throughout */
  }
}

/* `run --min-hold`: host A's job ends at once but keeps the name for the
 * minimum hold, so host B's copy of the job scheduled a moment later
 * (--wait 0, as cron jobs on several hosts) is busy and does not run;
 * after the hold B's runs. A exits with its command's status, no sooner
 * than the hold. (Without --min-hold B ran the job a second time.) */
static void t_min_hold(const char *be) {
  const tu_backend *b = migrated(be);
  for (int s = 0; s < NSTRATEGIES; s++) {
    const char *st = STRATEGIES[s], *name = tname("once"), *ran = tpath("ranA");
    cmdv c = dblock_cmd(b->url, st);
    proc pa;
    result r;
    cmdv cb = dblock_cmd(b->url, st);
    const char *ranb = tpath("ranB");
    result rb;
    cv_addl(&c, "--owner-host", "host-a", "run", name, "--wait", "0", "--min-hold", "2s", "--",
            "sh", "-c", "touch \"$1\"; exit 7", "sh", ran, NULL);
    pa = start(&c);
    wait_file(ran, &pa, 15000);
    tu_sleep_ms(200); /* A's command has ended */
    /* host B's copy of the job, a moment later: busy, does not run */
    cv_addl(&cb, "--owner-host", "host-b", "run", name, "--wait", "0", "--", "sh", "-c",
            "touch \"$1\"", "sh", ranb, NULL);
    rb = run(&cb, 15000);
    expect_code(&rb, &cb, 3);
    if (exists(ranb)) fail_msg("[%s %s] host B ran the job during A's minimum hold", be, st);
    {
      status_info si = status_json(b, st, name);
      if (!si.held || strcmp(si.owner_host, "host-a") != 0)
        fail_msg("[%s %s] during A's minimum hold: held %d by '%s' (want host-a)", be, st, si.held,
                 si.owner_host);
    }
    r = finish(&pa, 15000);
    expect_code(&r, &c, 7);
    if (r.ms < 2000) fail_msg("[%s %s] `%s` ended after %lld ms, before its 2 s minimum hold", be, st,
                              pa.cmd, (long long)r.ms);
    {
      cmdv c2;
      result r2 = try_run(b, st, name, "0", NULL, &c2);
      expect_code(&r2, &c2, 0);
    }
  }
}

/* `dblock stats`: a held lock shows in the gauges, as JSON and as
 * OpenMetrics text (the held line for its strategy, "# EOF" last). */
static void t_stats(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("stats");
  holder h = hold(b, "optimistic", name, NULL, HOLD_SCRIPT);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  jv *v;
  const jv *bys, *opt;
  long long held, rows;
  char *line, *end;
  cv_addl(&c, "stats", "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  rows = jint(v, "rows", r.out);
  held = jint(v, "held", r.out);
  if (held < 1 || rows < held || jint(v, "free", r.out) != rows - held)
    fail_msg("`%s`: inconsistent counts: %s", cmdline(&c), r.out);
  if (!(bys = jget(v, "by_strategy")) || !(opt = jget(bys, "optimistic")) ||
      jint(opt, "held", r.out) < 1)
    fail_msg("`%s`: the held optimistic lock is not counted: %s", cmdline(&c), r.out);
  if (jint(v, "max_fence", r.out) < h.fence) fail_msg("`%s`: max_fence below %lld", cmdline(&c), h.fence);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "stats", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  line = strstr(r.out, "dblock_locks{table=\"" TABLE "\",strategy=\"optimistic\",state=\"held\"} ");
  if (!line || strtoll(strchr(line, '}') + 2, &end, 10) < 1 || *end != '\n')
    fail_msg("`%s`: no held optimistic gauge >= 1 in:\n%s", cmdline(&c), r.out);
  if (strlen(r.out) < 6 || strcmp(r.out + strlen(r.out) - 6, "# EOF\n") != 0)
    fail_msg("`%s`: OpenMetrics text must end with # EOF:\n%s", cmdline(&c), r.out);
  unhold(&h);
}

/* `dblock` on table t instead of the suite's. */
static cmdv table_cmd(const tu_backend *b, const char *t) {
  cmdv c = {{NULL}, 0};
  cv_add(&c, tfmt("%s/dblock", tree()));
  cv_addl(&c, "--url", b->url, "--table", t, NULL);
  return c;
}

/* Applies golang-migrate file dir/NNNNNN_*.<dir_suffix>.sql through the
 * test's own connection: what another migration tool would do. */
static void apply_file(const tu_backend *b, const char *dir, int version, const char *kind) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char prefix[16], suffix[16];
  const char *path = NULL;
  snprintf(prefix, sizeof prefix, "%06d_", version);
  snprintf(suffix, sizeof suffix, ".%s.sql", kind);
  if (!d) fail_msg("cannot open %s", dir);
  while ((de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 && n > strlen(suffix) &&
        strcmp(de->d_name + n - strlen(suffix), suffix) == 0)
      path = tfmt("%s/%s", dir, de->d_name);
  }
  closedir(d);
  if (!path) fail_msg("no %s%s in %s", prefix, suffix, dir);
  tu_sql(b->url, slurp(path), NULL);
}

/* Another tool applied dblock's migrations (the golang-migrate layout,
 * written for this table by tools/export-migrations.sh, as `make` does for
 * the default one): `migrate --baseline` adopts what is there without
 * running it, `migrate` applies the rest, and locks work. On an empty
 * database --baseline refuses (exit 1) and creates nothing. The downs undo
 * everything. (Before, `dblock migrate` failed on such a schema: "table
 * already exists".) */
static void t_baseline(const char *be) {
  const tu_backend *b = backend(be, NULL);
  const char *t = tfmt("bl_%d_%d", (int)getpid(), ++g_seq), *dir = tpath("mig");
  const char *gm = tfmt("%s/golang-migrate/%s", dir, be);
  cmdv c;
  result r;
  jv *v;
  int rc;
  rc = system(tfmt("sh tools/export-migrations.sh migrations '%s' '%s' >/dev/null", dir, t));
  if (rc != 0) fail_msg("tools/export-migrations.sh failed (%d)", rc);
  if (!exists(tfmt("%s/flyway/%s/V1__lock_table.sql", dir, be)))
    fail_msg("no Flyway layout under %s", dir);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--baseline", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  if (!strstr(r.err, "dblock migrate")) fail_msg("`%s`: unclear error: %s", cmdline(&c), r.err);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--status", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strstr(r.out, "true")) fail_msg("`%s`: a refused baseline recorded something: %s", cmdline(&c), r.out);

  apply_file(b, gm, 1, "up");
  apply_file(b, gm, 2, "up");
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--baseline", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, "recorded 2 migrations", 21) != 0)
    fail_msg("`%s`: expected 2 recorded: %s", cmdline(&c), r.out);
  c = table_cmd(b, t);
  cv_addl(&c, "migrate", "--status", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (v->type != J_ARR || v->n != 3 || !jbool(&v->items[0], "applied", r.out) ||
      !jbool(&v->items[1], "applied", r.out) || jbool(&v->items[2], "applied", r.out) ||
      !jbool(&v->items[0], "checksum_ok", r.out))
    fail_msg("`%s`: expected 1, 2 applied (checksums ok) and 3 pending: %s", cmdline(&c), r.out);
  c = table_cmd(b, t);
  cv_add(&c, "migrate");
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, "applied 1 migration", 19) != 0)
    fail_msg("`%s`: expected the one pending migration applied: %s", cmdline(&c), r.out);
  c = table_cmd(b, t);
  cv_addl(&c, "run", "--wait", "0", "baseline-job", "--", "true", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  /* the downs, newest first, leave no lock table */
  for (int k = 3; k >= 1; k--) apply_file(b, gm, k, "down");
  c = table_cmd(b, t);
  cv_addl(&c, "status", "baseline-job", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  if (!strstr(r.err, "migrate")) fail_msg("`%s`: after the downs: %s", cmdline(&c), r.err);
  tu_sql(b->url, tfmt("DROP TABLE %s_migrations", t), NULL);
}

/* A name used with for_update, then wanted with insert: the wrong
 * --strategy exits 2 (a usage problem, not a database error) and the
 * message says `dblock forget`; forget hands the free name over, and a
 * held one is refused with 3. (It used to exit 1, with no way out but
 * deleting the row by hand.) */
static void t_forget(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("handover");
  cmdv c = dblock_cmd(b->url, "for_update");
  result r;
  holder h;
  cv_addl(&c, "run", name, "--", "true", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = try_run(b, "insert", name, "0", NULL, &c);
  expect_code(&r, &c, 2);
  if (!strstr(r.err, "dblock forget")) fail_msg("`%s`: no hint: %s", cmdline(&c), r.err);
  h = hold(b, "for_update", name, NULL, HOLD_SCRIPT);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "forget", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 3);
  unhold(&h);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  r = try_run(b, "insert", name, "0", NULL, &c);
  expect_code(&r, &c, 0);
}

/* No database connection of the supervisor leaks into the command. */
static void t_run_no_socket(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("fds");
  const char *out = tpath("fds");
  cmdv c = dblock_cmd(b->url, "for_update");
  result r;
  char *fds;
  cv_addl(&c, "run", name, "--", "sh", "-c", "ls -l /proc/$$/fd/ > \"$1\"", "sh", out, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  fds = slurp(out);
  if (!fds) fail_msg("no fd list from the child");
  if (strstr(fds, "socket:"))
    fail_msg("[%s] the command inherited a socket from dblock run:\n%s", be, fds);
}

/* ---- tests: list --json ------------------------------------------------- */

/* dblock doctor --json on a stand-alone test server: valid JSON, ok, and
 * the findings an operator needs: topology ok, the schema fully applied.
 * The replicated topologies' findings are in test_topology. */
static void t_doctor(const char *be) {
  const tu_backend *b = migrated(be);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  jv *v;
  const jv *f;
  int topo = 0, schema = 0;
  cv_addl(&c, "doctor", "--json", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (!jbool(v, "ok", r.out)) fail_msg("`%s`: not ok: %s", cmdline(&c), r.out);
  if (!(f = jget(v, "findings")) || f->type != J_ARR || f->n < 4)
    fail_msg("`%s`: no findings array: %s", cmdline(&c), r.out);
  for (size_t k = 0; k < f->n; k++) {
    const char *topic = jstr(&f->items[k], "topic", r.out), *sev = jstr(&f->items[k], "severity", r.out);
    topo |= strcmp(topic, "topology") == 0 && strcmp(sev, "ok") == 0;
    schema |= strcmp(topic, "schema") == 0 && strcmp(sev, "ok") == 0 &&
              strstr(jstr(&f->items[k], "text", r.out), "migrations applied") != NULL;
  }
  if (!topo || !schema)
    fail_msg("`%s`: expected an ok topology and an ok schema finding: %s", cmdline(&c), r.out);
}

static void t_list_json(const char *be) {
  const tu_backend *b = migrated(be);
  /* Quote, backslash, tab and non-ASCII: the JSON must escape them. */
  const char *name = tfmt("%s \"q\" \\b\\\t\xc3\xa9\xe2\x9c\x93", tname("list"));
  holder h = hold(b, NULL, name, NULL, HOLD_SCRIPT);
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  jv *v;
  const jv *mine = NULL;
  cv_addl(&c, "list", "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (v->type != J_ARR) fail_msg("`%s`: not a JSON array: %s", cmdline(&c), r.out);
  for (size_t k = 0; k < v->n; k++) {
    const jv *row = &v->items[k], *nm = jget(row, "name");
    if (row->type != J_OBJ) fail_msg("`%s`: item %zu is not an object", cmdline(&c), k);
    if (nm && nm->type == J_STR && strcmp(nm->s, name) == 0) mine = row;
  }
  if (!mine) fail_msg("`%s`: the held lock '%s' is not listed: %s", cmdline(&c), name, r.out);
  if (!jbool(mine, "held", "list"))
    fail_msg("`%s`: the held lock is listed as not held", cmdline(&c));
  if (strcmp(jstr(mine, "owner_host", "list"), g_host) != 0)
    fail_msg("`%s`: owner_host '%s', expected '%s'", cmdline(&c), jstr(mine, "owner_host", "list"),
             g_host);
  if (jint(mine, "owner_pid", "list") != (long long)h.p.pid)
    fail_msg("`%s`: owner_pid %lld, expected %ld (the dblock run process)", cmdline(&c),
             jint(mine, "owner_pid", "list"), (long)h.p.pid);
  if (jint(mine, "fence", "list") != h.fence)
    fail_msg("`%s`: fence %lld, expected DBLOCK_FENCE %lld", cmdline(&c),
             jint(mine, "fence", "list"), h.fence);
  if (strcmp(jstr(mine, "strategy", "list"), "insert") != 0)
    fail_msg("`%s`: strategy %s", cmdline(&c), jstr(mine, "strategy", "list"));
  if (jint(mine, "hold_count", "list") != 1)
    fail_msg("`%s`: hold_count %lld", cmdline(&c), jint(mine, "hold_count", "list"));
  /* status --json of the same name parses too. */
  status_json(b, NULL, name);
  unhold(&h);
}

/* ---- tests: usage errors ------------------------------------------------ */

static const char *lite_url(void) { return backend("sqlite", NULL)->url; }

/* dblock ARGS... (after --url sqlite... when url) must be a usage error. */
static void usage_case(int with_url, const char *mention, ...) {
  cmdv c = {{NULL}, 0};
  va_list ap;
  const char *s;
  cv_add(&c, tfmt("%s/dblock", tree()));
  if (with_url) cv_addl(&c, "--url", lite_url(), NULL);
  va_start(ap, mention);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(&c, s);
  va_end(ap);
  expect_usage(&c, "dblock", mention);
}

static void test_usage_unknown_command(void **st) {
  (void)st;
  usage_case(1, "frobnicate", "frobnicate", NULL);
  usage_case(1, "frobnicate", "frobnicate", "NAME", NULL);
  usage_case(1, "frobnicate", "help", "frobnicate", NULL);
  usage_case(1, NULL, NULL); /* no command at all */
}

static void test_usage_unknown_option(void **st) {
  (void)st;
  usage_case(1, "--frobnicate", "--frobnicate", "list", NULL);
  usage_case(1, "--frobnicate", "list", "--frobnicate", NULL);
  usage_case(1, "-x", "-x", "status", "n", NULL);
  usage_case(1, "--frobnicate", "run", "n", "--frobnicate", "--", "true", NULL);
  usage_case(1, "--token", "list", "--token", "x", NULL); /* not an option of list */
  usage_case(0, "--url", "list", "--url", NULL);          /* needs a value */
  usage_case(1, "abc", "-E", "abc", "run", "n", "--", "true", NULL);
}

static void test_usage_missing_name(void **st) {
  (void)st;
  usage_case(1, NULL, "status", NULL);
  usage_case(1, NULL, "force-unlock", NULL);
  usage_case(1, NULL, "acquire", NULL);
  usage_case(1, NULL, "run", "--", "sh", "-c", "exit 0", NULL);
}

static void test_usage_run_without_dashdash(void **st) {
  (void)st;
  const char *ran = tpath("ran");
  usage_case(1, "--", "run", "n", "touch", ran, NULL);
  usage_case(1, "--", "run", "n", NULL);
  usage_case(1, NULL, "run", "n", "--", NULL); /* nothing after "--" */
  if (exists(ran)) fail_msg("a usage error ran the command");
}

static void test_usage_bad_duration(void **st) {
  (void)st;
  usage_case(1, "10parsecs", "--lease", "10parsecs", "run", "n", "--", "true", NULL);
  usage_case(1, "abc", "run", "n", "--wait", "abc", "--", "true", NULL);
  usage_case(1, "--wait", "acquire", "n", "--wait", "", NULL);
  usage_case(1, "--lease", "acquire", "n", "--lease", "-5", NULL);
  usage_case(1, "--lease", "run", "n", "--lease", "50ms", "--", "true", NULL); /* < 100ms */
  usage_case(1, "xyz", "run", "n", "--kill-after", "xyz", "--", "true", NULL);
}

static void test_usage_bad_strategy(void **st) {
  (void)st;
  usage_case(1, "mutex", "--strategy", "mutex", "run", "n", "--", "true", NULL);
  usage_case(1, "mutex", "status", "n", "--strategy", "mutex", NULL);
  usage_case(1, "strategy", "--strategy", "", "list", NULL);
}

static void test_usage_no_url(void **st) {
  (void)st;
  const char *ran = tpath("ran");
  if (getenv("DBLOCK_URL")) fail_msg("DBLOCK_URL should have been unset by main()");
  usage_case(0, "URL", "list", NULL);
  usage_case(0, "URL", "migrate", NULL);
  usage_case(0, "URL", "status", "n", NULL);
  usage_case(0, "URL", "run", "n", "--", "touch", ran, NULL);
  usage_case(0, "URL", "--url", "", "list", NULL);
  if (exists(ran)) fail_msg("run without a URL ran the command");
}

static void test_usage_bad_url(void **st) {
  (void)st;
  usage_case(0, "bogus", "--url", "bogus://x", "list", NULL);
  usage_case(0, "port", "--url", "postgres://u:pw@127.0.0.1:notaport/db", "list", NULL);
  usage_case(0, "port", "--url", "mysql://u@127.0.0.1:99999/db", "status", "n", NULL);
}

/* ---- tests: dblock-reaper ---------------------------------------------- */

/* Parses "deleted N expired lock row(s) in X.XXX s\n". */
static long long reaper_count(const result *r, const cmdv *c) {
  long long n = -1;
  double secs = -1;
  int len = 0;
  if (sscanf(r->out, "deleted %lld expired lock row%*[s] in %lf s\n%n", &n, &secs, &len) != 2 &&
      sscanf(r->out, "deleted %lld expired lock row in %lf s\n%n", &n, &secs, &len) != 2)
    fail_msg("`%s`: expected 'deleted N expired lock rows in X s', got: %s", cmdline(c), r->out);
  if ((size_t)len != strlen(r->out) || n < 0 || secs < 0)
    fail_msg("`%s`: unexpected output: %s", cmdline(c), r->out);
  return n;
}

static void t_reaper_once(const char *be) {
  const tu_backend *b = migrated(be);
  const char *name = tname("reap");
  cmdv c = dblock_cmd(b->url, NULL);
  result r;
  jv *v;
  /* An expired row: acquired with a short lease that is never renewed. */
  cv_addl(&c, "acquire", name, "--lease", "300ms", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  if (strncmp(r.out, "fence=", 6) != 0 || !strstr(r.out, "\ntoken="))
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  tu_sleep_ms(600);

  c = reaper_cmd();
  cv_addl(&c, "--once", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (reaper_count(&r, &c) < 1) fail_msg("`%s` deleted nothing: %s", cmdline(&c), r.out);
  if (*r.err) fail_msg("`%s`: unexpected stderr: %s", cmdline(&c), r.err);

  /* The row is gone: the name is free. status answers (exit 0), and with
   * --json says there is no row. */
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "status", name, NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  if (!strstr(r.out, "held:       no (no lock row"))
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  c = dblock_cmd(b->url, NULL);
  cv_addl(&c, "status", name, "--json", NULL);
  r = run(&c, 15000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (jbool(v, "row", r.out) || jbool(v, "held", r.out))
    fail_msg("`%s`: expected row false, held false: %s", cmdline(&c), r.out);

  /* --json: one object per pass; --quiet: nothing on stdout. */
  c = reaper_cmd();
  cv_addl(&c, "--once", "--json", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  v = json_parse_or_fail(r.out, cmdline(&c));
  if (!jbool(v, "ok", r.out) || jint(v, "deleted", r.out) < 0)
    fail_msg("`%s`: unexpected output: %s", cmdline(&c), r.out);
  c = reaper_cmd();
  cv_addl(&c, "--once", "--quiet", "--url", b->url, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  if (*r.out) fail_msg("`%s` printed: %s", cmdline(&c), r.out);
}

/* A held for_update lock is never reaped, and must not stop the reaper from
 * deleting the expired rows around it. A table of its own, so that expired
 * rows are most of it (as after a crash of many holders): on MariaDB that
 * makes the DELETE scan the whole table, locked for_update row included. */
#define EXPIRED_ROWS 20
static void t_reaper_for_update_held(const char *be) {
  const tu_backend *b = backend(be, NULL);
  const char *table = "cli_reap_fu", *name = tname("reapfu");
  cmdv c = {{NULL}, 0};
  proc p[EXPIRED_ROWS];
  holder h;
  result r;
  long long n;
  cv_add(&c, tfmt("%s/dblock", tree()));
  cv_addl(&c, "--url", b->url, "--table", table, "migrate", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 0);
  for (int k = 0; k < EXPIRED_ROWS; k++) {
    cmdv a = {{NULL}, 0};
    cv_add(&a, c.v[0]);
    cv_addl(&a, "--url", b->url, "--table", table, "acquire", tfmt("%s-exp%d", name, k),
            "--lease", "1s", NULL);
    p[k] = start(&a);
  }
  for (int k = 0; k < EXPIRED_ROWS; k++) {
    r = finish(&p[k], 30000);
    if (r.code != 0) fail_msg("`%s` exited %d; stderr: %s", p[k].cmd, r.code, r.err);
  }
  {
    /* The holder, in the same table. */
    cmdv hc = {{NULL}, 0};
    h.ready = tpath("ready");
    h.stop = tpath("stop");
    cv_add(&hc, c.v[0]);
    cv_addl(&hc, "--url", b->url, "--table", table, "--strategy", "for_update", "run", name, "--",
            "sh", "-c", HOLD_SCRIPT, "sh", h.ready, h.stop, tpath("marker"), NULL);
    h.p = start(&hc);
    wait_file(h.ready, &h.p, 20000);
  }
  tu_sleep_ms(1200); /* the 1 s leases are over */
  c = reaper_cmd();
  cv_addl(&c, "--once", "--url", b->url, "--table", table, NULL);
  r = run(&c, 30000);
  if (r.code != 0)
    fail_msg("[%s] `%s` with a for_update lock held and %d expired rows: expected exit 0 "
             "(expired rows deleted, the held row kept), got %d after %lld ms\n  stdout: %s\n"
             "  stderr: %s",
             be, cmdline(&c), EXPIRED_ROWS, r.code, (long long)r.ms, r.out, r.err);
  n = reaper_count(&r, &c);
  if (n < EXPIRED_ROWS)
    fail_msg("[%s] `%s` deleted %lld rows, expected at least %d", be, cmdline(&c), n,
             EXPIRED_ROWS);
  if (exited(&h.p))
    fail_msg("[%s] the for_update holder ended during the reap; stderr: %s", be,
             slurp(h.p.err_path));
  {
    cmdv t = {{NULL}, 0};
    cv_add(&t, tfmt("%s/dblock", tree()));
    cv_addl(&t, "--url", b->url, "--table", table, "--strategy", "for_update", "run", name,
            "--wait", "0", "--", "true", NULL);
    r = run(&t, 15000);
    expect_code(&r, &t, 3); /* still held */
  }
  unhold(&h);
}

static void t_reaper_missing_schema(const char *be) {
  const tu_backend *b = backend(be, NULL);
  cmdv c = reaper_cmd();
  result r;
  cv_addl(&c, "--once", "--url", b->url, "--table", "never_made", NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", "never_made");
}

/* A TCP port on 127.0.0.1 that refuses connections: bound (so nobody else
 * takes it meanwhile) but not listening. */
static int closed_port(int *fd) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*fd < 0 || bind(*fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(*fd, (struct sockaddr *)&a, &len) != 0)
    fail_msg("cannot bind a socket: %s", strerror(errno));
  return ntohs(a.sin_port);
}

static void t_reaper_unreachable(const char *be) {
  cmdv c = reaper_cmd();
  result r;
  int fd = -1;
  if (strcmp(be, "sqlite") == 0) {
    cv_addl(&c, "--once", "--url", tfmt("sqlite://%s/no-such-dir/x.db", g_dir), NULL);
  } else {
    int port = closed_port(&fd);
    cv_addl(&c, "--once", "--url",
            tfmt("%s://dblock:secret-pw@127.0.0.1:%d/dblock",
                 strcmp(be, "postgres") == 0 ? "postgres" : "mysql", port),
            NULL);
  }
  r = run(&c, 30000);
  if (fd >= 0) close(fd);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", NULL);
}

static void t_reaper_permission(const char *be, const char *ro_var) {
  const tu_backend *b = migrated(be);
  const char *ro = env_or_fail(ro_var);
  cmdv c = reaper_cmd();
  result r;
  (void)b;
  cv_addl(&c, "--once", "--url", ro, "--table", TABLE, NULL);
  r = run(&c, 30000);
  expect_code(&r, &c, 1);
  expect_one_line(&r, &c, "dblock-reaper", NULL);
}

static void reaper_usage(const char *mention, ...) {
  cmdv c = reaper_cmd();
  va_list ap;
  const char *s;
  va_start(ap, mention);
  while ((s = va_arg(ap, const char *)) != NULL) cv_add(&c, s);
  va_end(ap);
  expect_usage(&c, "dblock-reaper", mention);
}

static void test_reaper_bad_url(void **st) {
  (void)st;
  reaper_usage("bogus", "--once", "--url", "bogus://x", NULL);
  reaper_usage("port", "--once", "--url", "postgres://u:pw@127.0.0.1:notaport/db", NULL);
  reaper_usage("port", "--once", "--url", "mysql://u@127.0.0.1:99999/db", NULL);
  reaper_usage(NULL, "--once", "--url", "not a url", NULL);
  reaper_usage("URL", "--once", NULL); /* none at all (DBLOCK_URL unset) */
}

static void test_reaper_needs_once_or_every(void **st) {
  (void)st;
  const char *url = lite_url();
  reaper_usage(NULL, "--url", url, NULL);
  reaper_usage(NULL, "--url", url, "--once", "--every", "1s", NULL);
  reaper_usage("0", "--url", url, "--every", "0", NULL);
  reaper_usage("abc", "--url", url, "--every", "abc", NULL);
  reaper_usage("--frobnicate", "--url", url, "--once", "--frobnicate", NULL);
}

/* --every 1s: stops within 1 s of the signal, with exit 0. */
static void t_reaper_every_stops(const char *be, int sig) {
  const tu_backend *b = migrated(be);
  cmdv c = reaper_cmd();
  proc p;
  result r;
  int64_t t0, deadline;
  char *out;
  cv_addl(&c, "--every", "1s", "--url", b->url, "--table", TABLE, NULL);
  p = start(&c);
  deadline = tu_now_ms() + 20000;
  /* Wait for the first pass, then signal it mid-sleep. */
  while (!(out = slurp(p.out_path)) || !strstr(out, "deleted ")) {
    if (exited(&p)) fail_msg("`%s` exited early; stderr: %s", p.cmd, slurp(p.err_path));
    if (tu_now_ms() > deadline) fail_msg("`%s`: no pass reported in 20 s", p.cmd);
    tu_sleep_ms(10);
  }
  tu_sleep_ms(300);
  t0 = tu_now_ms();
  kill(p.pid, sig);
  r = finish(&p, 10000);
  expect_code(&r, &c, 0);
  if (tu_now_ms() - t0 > 1000)
    fail_msg("`%s` took %lld ms to stop after signal %d", p.cmd, (long long)(tu_now_ms() - t0),
             sig);
  if (*r.err) fail_msg("`%s`: unexpected stderr: %s", p.cmd, r.err);
}

/* ---- the JSON checker checks itself ------------------------------------- */

static void test_json_checker(void **st) {
  static const char *const good[] = {
      "{}", "[]", " [ ] ", "0", "-0.5e+3", "\"\"", "null", "true",
      "[1,-2,3.25,1e9,true,false,null,\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"]",
      "{\"a\":{\"b\":[{}]},\"c\":\"\xc3\xa9\"}",
  };
  static const char *const bad[] = {
      "", "{", "[1,]", "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "{a:1}", "01", "1.", "-",
      "+1", ".5", "1e", "nul", "True", "'x'", "\"\x01\"", "\"\\x\"", "\"\\ud800\"",
      "\"\\udc00\"", "\"\xff\"", "\"\xc3\"", "{} x", "[] []", "\"abc", "[\"a\"\n",
  };
  (void)st;
  for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
    const char *why = NULL;
    size_t where = 0;
    if (!json_parse(good[k], strlen(good[k]), &why, &where))
      fail_msg("JSON checker rejected valid %s: %s", good[k], why);
  }
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    const char *why = NULL;
    size_t where = 0;
    if (json_parse(bad[k], strlen(bad[k]), &why, &where))
      fail_msg("JSON checker accepted invalid [%s]", bad[k]);
  }
  {
    jv *v = json_parse_or_fail("{\"s\":\"a\\u00e9\\ud83d\\ude00\",\"n\":1795299847430286}", "self");
    if (strcmp(jstr(v, "s", "self"), "a\xc3\xa9\xf0\x9f\x98\x80") != 0) fail_msg("bad decoding");
    if (jint(v, "n", "self") != 1795299847430286LL) fail_msg("bad integer");
  }
}

/* ---- the test list ------------------------------------------------------ */

#define PER_BACKEND(fn)                                                  \
  static void test_##fn##_sqlite(void **s) { (void)s; t_##fn("sqlite"); }     \
  static void test_##fn##_postgres(void **s) { (void)s; t_##fn("postgres"); } \
  static void test_##fn##_mysql(void **s) { (void)s; t_##fn("mysql"); }

#define PER_BACKEND_STRATEGY(fn, be)                                                  \
  static void test_##fn##_##be##_insert(void **s) { (void)s; t_##fn(#be, "insert"); }         \
  static void test_##fn##_##be##_optimistic(void **s) { (void)s; t_##fn(#be, "optimistic"); } \
  static void test_##fn##_##be##_for_update(void **s) { (void)s; t_##fn(#be, "for_update"); }

PER_BACKEND(migrate)
PER_BACKEND(no_overlap)
PER_BACKEND(busy)
PER_BACKEND(list_json)
PER_BACKEND(doctor)
PER_BACKEND(acquire_idiom)
PER_BACKEND_STRATEGY(keeps_lock, sqlite)
PER_BACKEND_STRATEGY(keeps_lock, postgres)
PER_BACKEND_STRATEGY(keeps_lock, mysql)
PER_BACKEND_STRATEGY(force_unlock, sqlite)
PER_BACKEND_STRATEGY(force_unlock, postgres)
PER_BACKEND_STRATEGY(force_unlock, mysql)
PER_BACKEND(run_group_lost)
PER_BACKEND(run_supervisor_killed)
PER_BACKEND(run_wait_interrupted)
PER_BACKEND(min_hold)
PER_BACKEND(stats)
PER_BACKEND(baseline)
PER_BACKEND(forget)
static void test_run_no_socket_postgres(void **s) {
  (void)s;
  t_run_no_socket("postgres");
}
static void test_run_no_socket_mysql(void **s) {
  (void)s;
  t_run_no_socket("mysql");
}
PER_BACKEND(reaper_once)
PER_BACKEND(reaper_missing_schema)
PER_BACKEND(reaper_unreachable)

static void test_reaper_permission_postgres(void **s) {
  (void)s;
  t_reaper_permission("postgres", "DBLOCK_TEST_PG_RO_URL");
}
static void test_reaper_permission_mysql(void **s) {
  (void)s;
  t_reaper_permission("mysql", "DBLOCK_TEST_MY_RO_URL");
}
static void test_reaper_for_update_held_postgres(void **s) {
  (void)s;
  t_reaper_for_update_held("postgres");
}
static void test_reaper_for_update_held_mysql(void **s) {
  (void)s;
  t_reaper_for_update_held("mysql");
}
#define EVERY_STOPS(be, sig)                                  \
  static void test_reaper_every_##sig##_##be(void **s) {      \
    (void)s;                                                  \
    t_reaper_every_stops(#be, sig);                           \
  }
EVERY_STOPS(sqlite, SIGTERM)
EVERY_STOPS(postgres, SIGTERM)
EVERY_STOPS(mysql, SIGTERM)
EVERY_STOPS(sqlite, SIGINT)

/* Kills whatever the test left running (whole process groups) and frees
 * its memory. */
static int teardown(void **st) {
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

static int group_setup(void **st) {
  const char *base = getenv("DBLOCK_TEST_TMP");
  (void)st;
  snprintf(g_dir, sizeof g_dir, "%s/dblock-cli-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
    return -1;
  }
  return 0;
}

static int group_teardown(void **st) {
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

#define T(f) cmocka_unit_test_teardown(f, teardown)

int main(void) {
  int n;
  const struct CMUnitTest tests[] = {
      T(test_json_checker),
      T(test_migrate_sqlite),
      T(test_migrate_postgres),
      T(test_migrate_mysql),
      T(test_no_overlap_sqlite),
      T(test_no_overlap_postgres),
      T(test_no_overlap_mysql),
      T(test_busy_sqlite),
      T(test_busy_postgres),
      T(test_busy_mysql),
      T(test_keeps_lock_sqlite_insert),
      T(test_keeps_lock_sqlite_optimistic),
      T(test_keeps_lock_sqlite_for_update),
      T(test_keeps_lock_postgres_insert),
      T(test_keeps_lock_postgres_optimistic),
      T(test_keeps_lock_postgres_for_update),
      T(test_keeps_lock_mysql_insert),
      T(test_keeps_lock_mysql_optimistic),
      T(test_keeps_lock_mysql_for_update),
      T(test_force_unlock_sqlite_insert),
      T(test_force_unlock_sqlite_optimistic),
      T(test_force_unlock_sqlite_for_update),
      T(test_force_unlock_postgres_insert),
      T(test_force_unlock_postgres_optimistic),
      T(test_force_unlock_postgres_for_update),
      T(test_force_unlock_mysql_insert),
      T(test_force_unlock_mysql_optimistic),
      T(test_force_unlock_mysql_for_update),
      T(test_run_group_lost_sqlite),
      T(test_run_group_lost_postgres),
      T(test_run_group_lost_mysql),
      T(test_run_supervisor_killed_sqlite),
      T(test_run_supervisor_killed_postgres),
      T(test_run_supervisor_killed_mysql),
      T(test_run_wait_interrupted_sqlite),
      T(test_run_wait_interrupted_postgres),
      T(test_run_wait_interrupted_mysql),
      T(test_min_hold_sqlite),
      T(test_min_hold_postgres),
      T(test_min_hold_mysql),
      T(test_stats_sqlite),
      T(test_stats_postgres),
      T(test_stats_mysql),
      T(test_baseline_sqlite),
      T(test_baseline_postgres),
      T(test_baseline_mysql),
      T(test_forget_sqlite),
      T(test_forget_postgres),
      T(test_forget_mysql),
      T(test_run_no_socket_postgres),
      T(test_run_no_socket_mysql),
      T(test_list_json_sqlite),
      T(test_list_json_postgres),
      T(test_list_json_mysql),
      T(test_doctor_sqlite),
      T(test_doctor_postgres),
      T(test_doctor_mysql),
      T(test_acquire_idiom_sqlite),
      T(test_acquire_idiom_postgres),
      T(test_acquire_idiom_mysql),
      T(test_usage_unknown_command),
      T(test_usage_unknown_option),
      T(test_usage_missing_name),
      T(test_usage_run_without_dashdash),
      T(test_usage_bad_duration),
      T(test_usage_bad_strategy),
      T(test_usage_no_url),
      T(test_usage_bad_url),
      T(test_reaper_once_sqlite),
      T(test_reaper_once_postgres),
      T(test_reaper_once_mysql),
      T(test_reaper_for_update_held_postgres),
      T(test_reaper_for_update_held_mysql),
      T(test_reaper_missing_schema_sqlite),
      T(test_reaper_missing_schema_postgres),
      T(test_reaper_missing_schema_mysql),
      T(test_reaper_unreachable_sqlite),
      T(test_reaper_unreachable_postgres),
      T(test_reaper_unreachable_mysql),
      T(test_reaper_permission_postgres),
      T(test_reaper_permission_mysql),
      T(test_reaper_bad_url),
      T(test_reaper_needs_once_or_every),
      T(test_reaper_every_SIGTERM_sqlite),
      T(test_reaper_every_SIGTERM_postgres),
      T(test_reaper_every_SIGTERM_mysql),
      T(test_reaper_every_SIGINT_sqlite),
  };
  /* Fails the run (never skips) when a server URL is missing. */
  tu_backends(&n);
  /* The no-URL cases need it unset; every other command gets --url. */
  unsetenv("DBLOCK_URL");
  if (gethostname(g_host, sizeof g_host - 1) != 0) {
    perror("gethostname");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  /* DBLOCK_TEST_FILTER=pattern runs only the matching tests (e.g. "*mysql*"). */
  if (getenv("DBLOCK_TEST_FILTER")) cmocka_set_test_filter(getenv("DBLOCK_TEST_FILTER"));
  return cmocka_run_group_tests_name("cli", tests, group_setup, group_teardown);
}
