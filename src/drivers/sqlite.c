/*
 * sqlite.c — the SQLite driver (libsqlite3), for one host.
 *
 * The database file is opened in WAL mode with synchronous=FULL unless the
 * URL says otherwise (?synchronous=normal). "Server time" is this host's
 * clock, offered to SQL as dblock_now_us() with microsecond precision.
 * Prepared statements are cached per connection.
 *
 * SQLite has no dirty reads and no session list, so a session cannot show
 * other processes what it wrote inside its open transaction the way a
 * PostgreSQL session can through application_name. The driver offers a
 * side channel for that: SQL function dblock_publish(key, info) stores
 * info, with this process's pid, in a side database
 * "<file>-dblock-holders" (WAL, synchronous=off, autocommit, best effort:
 * it never fails the statement), and dblock_published(key) reads it back
 * while that process is still alive. (What is published, and under which
 * key, is the statements' business: src/sql/sqlite.c.)
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <unistd.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"

struct dbl_conn {
  sqlite3 *db;
  uint64_t trips;
  int64_t lock_wait; /* ms, -1 = forever */
  int64_t busy_since_us;
  int broken;
  atomic_int cancelled; /* drv->cancel: stop a busy wait (lock-free: a signal handler may set it) */
  dbl_stmt_cache cache;
  char *side_path;  /* the holders side database, opened on first use */
  sqlite3 *side;
  int side_failed;  /* could not be opened: publication is off */
  /* Read-only here: the file, or its directory (where WAL creates its
   * -wal and -shm files), is not writable by this user. Reads work (list,
   * status, doctor); a write fails naming both. */
  int read_only;
  char path[4096], dir[4096];
};

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void fn_now_us(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_int64(ctx, wall_us());
}

/* Opens the side database of published holders; 0 on success. */
static int side_open(dbl_conn *c) {
  if (c->side) return 0;
  if (c->side_failed) return -1; /* e.g. a read-only folder: do not retry */
  if (sqlite3_open_v2(c->side_path, &c->side,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK ||
      sqlite3_busy_timeout(c->side, 1000) != SQLITE_OK ||
      sqlite3_exec(c->side,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; "
                   "CREATE TABLE IF NOT EXISTS holders (key TEXT PRIMARY KEY, "
                   "info TEXT NOT NULL, pid INTEGER NOT NULL)",
                   NULL, NULL, NULL) != SQLITE_OK) {
    sqlite3_close_v2(c->side);
    c->side = NULL;
    c->side_failed = 1;
    return -1;
  }
  return 0;
}

/* dblock_publish(key, info): stores info for key; returns info. */
static void fn_publish(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  dbl_conn *c = sqlite3_user_data(ctx);
  sqlite3_stmt *st = NULL;
  (void)argc;
  if (side_open(c) == 0 &&
      sqlite3_prepare_v2(c->side, "INSERT OR REPLACE INTO holders VALUES (?, ?, ?)", -1, &st,
                         NULL) == SQLITE_OK) {
    sqlite3_bind_value(st, 1, argv[0]);
    sqlite3_bind_value(st, 2, argv[1]);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)getpid());
    sqlite3_step(st);
  }
  sqlite3_finalize(st);
  sqlite3_result_value(ctx, argv[1]);
}

/* dblock_published(key): the info stored for key, or NULL when there is
 * none or the process that stored it is gone. */
static void fn_published(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  dbl_conn *c = sqlite3_user_data(ctx);
  sqlite3_stmt *st = NULL;
  (void)argc;
  sqlite3_result_null(ctx);
  if (side_open(c) == 0 &&
      sqlite3_prepare_v2(c->side, "SELECT info, pid FROM holders WHERE key = ?", -1, &st,
                         NULL) == SQLITE_OK) {
    sqlite3_bind_value(st, 1, argv[0]);
    if (sqlite3_step(st) == SQLITE_ROW) {
      pid_t pid = (pid_t)sqlite3_column_int64(st, 1);
      if (kill(pid, 0) == 0 || errno == EPERM)
        sqlite3_result_text(ctx, (const char *)sqlite3_column_text(st, 0), -1,
                            SQLITE_TRANSIENT);
    }
  }
  sqlite3_finalize(st);
}

static int classify(int ext, const char *msg) {
  switch (ext & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return DBLOCK_EBUSY;
  case SQLITE_CONSTRAINT:
    return (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY)
               ? DBLOCK_EBUSY
               : DBLOCK_EDB;
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_AUTH: return DBLOCK_EPERM;
  case SQLITE_CANTOPEN:
  case SQLITE_IOERR:
  case SQLITE_NOTADB:
  case SQLITE_CORRUPT: return DBLOCK_ECONN;
  case SQLITE_NOMEM: return DBLOCK_ENOMEM;
  case SQLITE_TOOBIG:
  case SQLITE_RANGE: return DBLOCK_EINVAL;
  case SQLITE_ERROR:
    if (msg && (strstr(msg, "no such table") || strstr(msg, "no such column")))
      return DBLOCK_ESCHEMA;
    return DBLOCK_EDB;
  default: return DBLOCK_EDB;
  }
}

static int fail(dbl_conn *c, dbl_err *e) {
  int ext = sqlite3_extended_errcode(c->db);
  const char *msg = sqlite3_errmsg(c->db);
  int code = classify(ext, msg);
  char st[6];
  snprintf(st, sizeof st, "%s", "");
  if ((ext & 0xff) == SQLITE_READONLY)
    return dbl_err_set(e, code, st, ext,
                       "sqlite database '%s' cannot be written by this user: the file or its "
                       "directory '%s' is read-only (%s)",
                       c->path, c->dir, msg);
  if (code == DBLOCK_ECONN) c->broken = 1;
  if (code == DBLOCK_ESCHEMA)
    return dbl_err_set(e, code, st, ext, "%s (run `dblock migrate`)", msg);
  return dbl_err_set(e, code, st, ext, "%s", msg);
}

static void finalize_stmt(void *st) { sqlite3_finalize(st); }

/* Returns the cached statement for sql, compiling it the first time. */
static sqlite3_stmt *prepare(dbl_conn *c, const char *sql, dbl_err *e) {
  sqlite3_stmt *st = dbl_cache_get(&c->cache, sql);
  void *evicted;
  if (st) return st;
  if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
    fail(c, e);
    return NULL;
  }
  if (dbl_cache_put(&c->cache, sql, st, &evicted)) {
    sqlite3_finalize(st);
    dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    return NULL;
  }
  if (evicted) sqlite3_finalize(evicted);
  return st;
}

/* Steps st to the end, collecting rows into res (if any). */
static int run(dbl_conn *c, sqlite3_stmt *st, dbl_res *res, dbl_err *e) {
  int nc = sqlite3_column_count(st), cap = 0, nr = 0, rc;
  char **vals = NULL;
  size_t *lens = NULL;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!res) continue;
    if (nr == cap) {
      int ncap = cap ? cap * 2 : 4;
      char **nv = realloc(vals, sizeof *vals * (size_t)(ncap * nc));
      size_t *nl;
      if (!nv) goto nomem;
      vals = nv;
      nl = realloc(lens, sizeof *lens * (size_t)(ncap * nc));
      if (!nl) goto nomem;
      lens = nl;
      cap = ncap;
    }
    for (int j = 0; j < nc; j++) {
      const unsigned char *t = sqlite3_column_text(st, j);
      int n = sqlite3_column_bytes(st, j);
      char **slot = &vals[nr * nc + j];
      lens[nr * nc + j] = t ? (size_t)n : 0;
      *slot = NULL;
      if (t) {
        if (!(*slot = malloc((size_t)n + 1))) {
          nr++;
          goto nomem;
        }
        memcpy(*slot, t, (size_t)n);
        (*slot)[n] = 0;
      }
    }
    nr++;
  }
  if (rc != SQLITE_DONE) {
    int code = fail(c, e);
    sqlite3_reset(st);
    for (int i = 0; i < nr * nc; i++) free(vals[i]);
    free(vals);
    free(lens);
    return code;
  }
  if (res) {
    res->nrows = nr;
    res->ncols = nc;
    res->vals = vals;
    res->lens = lens;
    res->affected = sqlite3_changes(c->db);
  }
  sqlite3_reset(st);
  return 0;
nomem:
  sqlite3_reset(st);
  for (int i = 0; i < nr * nc; i++) free(vals[i]);
  free(vals);
  free(lens);
  return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
}

static int lite_query(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                      dbl_res *res, dbl_err *e) {
  sqlite3_stmt *st;
  int rc;
  if (res) memset(res, 0, sizeof *res);
  if (!(st = prepare(c, sql, e))) return e->code;
  sqlite3_clear_bindings(st);
  for (int i = 0; i < np; i++) {
    switch (p[i].type) {
    case DBL_P_NULL: rc = sqlite3_bind_null(st, i + 1); break;
    case DBL_P_I64: rc = sqlite3_bind_int64(st, i + 1, p[i].i); break;
    default:
      rc = sqlite3_bind_text(st, i + 1, p[i].s, (int)p[i].len, SQLITE_STATIC);
      break;
    }
    if (rc != SQLITE_OK) return fail(c, e);
  }
  c->trips++;
  rc = run(c, st, res, e);
  sqlite3_clear_bindings(st);
  return rc;
}

static int lite_pipeline(dbl_conn *c, const dbl_stmt *s, int n, dbl_res *res,
                         dbl_err *e) {
  for (int i = 0; i < n; i++) {
    int rc = lite_query(c, s[i].sql, s[i].params, s[i].nparams,
                        i == n - 1 ? res : NULL, e);
    if (rc) {
      e->stmt = i;
      return rc;
    }
  }
  return 0;
}

static int lite_script(dbl_conn *c, const char *sql, dbl_err *e) {
  c->trips++;
  if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK) return fail(c, e);
  return 0;
}

/* Write transactions take the write lock up front (BEGIN IMMEDIATE): a
 * deferred one that writes later can fail with SQLITE_BUSY_SNAPSHOT, which
 * skips the busy handler. */
static int lite_begin(dbl_conn *c, dbl_err *e) {
  return lite_query(c, "BEGIN IMMEDIATE", NULL, 0, NULL, e);
}
static int lite_commit(dbl_conn *c, dbl_err *e) {
  return lite_query(c, "COMMIT", NULL, 0, NULL, e);
}
static int lite_rollback(dbl_conn *c, dbl_err *e) {
  if (sqlite3_get_autocommit(c->db)) return 0; /* nothing open */
  return lite_query(c, "ROLLBACK", NULL, 0, NULL, e);
}

static int lite_now_us(dbl_conn *c, int64_t *out, dbl_err *e) {
  (void)c;
  (void)e;
  *out = wall_us();
  return 0;
}

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Busy handler: SQLite's own sleeps in steps growing to 100 ms, so a
 * waiter could sleep long after the lock was freed, and a timed wait could
 * overrun its deadline by as much. This one polls every 0.25-2 ms and stops
 * exactly at the deadline. */
static int on_busy(void *arg, int count) {
  dbl_conn *c = arg;
  int64_t now = mono_us(), step;
  struct timespec ts;
  if (count == 0) c->busy_since_us = now;
  if (atomic_load(&c->cancelled)) return 0;
  if (c->lock_wait >= 0 && now - c->busy_since_us >= c->lock_wait * 1000) return 0;
  step = count < 8 ? 250 : count < 40 ? 1000 : 2000;
  if (c->lock_wait >= 0 && c->busy_since_us + c->lock_wait * 1000 - now < step)
    step = c->busy_since_us + c->lock_wait * 1000 - now;
  ts.tv_sec = 0;
  ts.tv_nsec = (long)(step > 0 ? step : 1) * 1000;
  nanosleep(&ts, NULL);
  return 1;
}

static int lite_set_lock_wait(dbl_conn *c, int64_t ms, dbl_err *e) {
  (void)e;
  c->lock_wait = ms < 0 ? -1 : ms;
  return 0;
}

static int lite_broken(dbl_conn *c) { return c->broken || atomic_load(&c->cancelled); }
/* The busy handler looks at the flag between its naps (at most 2 ms). */
static void lite_cancel(dbl_conn *c) { atomic_store(&c->cancelled, 1); }
static uint64_t lite_trips(dbl_conn *c) { return c->trips; }

static void lite_close(dbl_conn *c) {
  if (!c) return;
  dbl_cache_clear(&c->cache, finalize_stmt);
  sqlite3_close_v2(c->db);
  sqlite3_close_v2(c->side);
  free(c->side_path);
  free(c);
}

/* Sets c->dir to path's directory; 1 if this user may create files in
 * it (WAL's -wal and -shm). */
static int dir_writable(dbl_conn *c, const char *path) {
  char *s;
  snprintf(c->path, sizeof c->path, "%s", path);
  snprintf(c->dir, sizeof c->dir, "%s", path);
  if (!(s = strrchr(c->dir, '/'))) snprintf(c->dir, sizeof c->dir, ".");
  else if (s == c->dir) s[1] = 0;
  else *s = 0;
  return access(c->dir, W_OK) == 0;
}

/* Opens path read-only and immutable (file: URI, path percent-encoded):
 * how a WAL database is read where its -shm file cannot be made. */
static int open_immutable(dbl_conn *c, const char *path) {
  char uri[3 * sizeof c->path + 32];
  size_t o = (size_t)snprintf(uri, sizeof uri, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p && o + 4 < sizeof uri; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("/._-~", *p))
      uri[o++] = (char)*p;
    else
      o += (size_t)snprintf(uri + o, sizeof uri - o, "%%%02X", *p);
  }
  snprintf(uri + o, sizeof uri - o, "?immutable=1");
  sqlite3_close_v2(c->db);
  c->db = NULL;
  return sqlite3_open_v2(uri, &c->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                         NULL);
}

static int lite_connect(dbl_conn **out, const dbl_url *u, int64_t timeout_ms,
                        dbl_err *e) {
  static const char *const sync_modes[] = {"off", "normal", "full", "extra"};
  const char *sync = "full";
  char pragma[96];
  dbl_conn *c;
  int rc;
  (void)timeout_ms;
  *out = NULL;
  for (int i = 0; i < u->nparams; i++) {
    int ok = 0;
    if (strcmp(u->keys[i], "synchronous") != 0)
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                         "unknown sqlite URL parameter '%s' (known: synchronous)",
                         u->keys[i]);
    for (size_t k = 0; k < 4; k++)
      if (strcmp(u->vals[i], sync_modes[k]) == 0) sync = sync_modes[k], ok = 1;
    if (!ok)
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                         "bad synchronous=%s (off, normal, full, extra)",
                         u->vals[i]);
  }
  if (!(c = calloc(1, sizeof *c)) ||
      !(c->side_path = malloc(strlen(u->path) + sizeof "-dblock-holders"))) {
    free(c);
    return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  }
  strcpy(c->side_path, u->path);
  strcat(c->side_path, "-dblock-holders");
  rc = sqlite3_open_v2(u->path, &c->db,
                       SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                           SQLITE_OPEN_NOMUTEX,
                       NULL);
  if (rc != SQLITE_OK) {
    rc = c->db ? fail(c, e) : dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    if (rc == DBLOCK_ECONN)
      dbl_err_set(e, rc, "", e->native, "cannot open sqlite database '%s': %s",
                  u->path, sqlite3_errmsg(c->db));
    lite_close(c);
    return rc;
  }
  /* (READWRITE opens a write-protected file read-only) */
  c->read_only = !dir_writable(c, u->path) || sqlite3_db_readonly(c->db, "main") == 1;
  if (c->read_only && access(c->dir, W_OK) != 0) {
    char shm[sizeof c->path + 8];
    snprintf(shm, sizeof shm, "%s-shm", u->path);
    if (access(shm, F_OK) != 0 && open_immutable(c, u->path) != SQLITE_OK) {
      rc = fail(c, e);
      lite_close(c);
      return rc;
    }
  }
  sqlite3_extended_result_codes(c->db, 1);
  c->lock_wait = 5000;
  sqlite3_busy_handler(c->db, on_busy, c);
  /* sync is one of four fixed words, never caller text. A read-only file
   * keeps the journal mode it has. */
  snprintf(pragma, sizeof pragma, "%sPRAGMA synchronous=%s;",
           c->read_only ? "" : "PRAGMA journal_mode=WAL; ", sync);
  if (sqlite3_create_function(c->db, "dblock_now_us", 0, SQLITE_UTF8, NULL,
                              fn_now_us, NULL, NULL) != SQLITE_OK ||
      sqlite3_create_function(c->db, "dblock_publish", 2, SQLITE_UTF8, c, fn_publish, NULL,
                              NULL) != SQLITE_OK ||
      sqlite3_create_function(c->db, "dblock_published", 1, SQLITE_UTF8, c, fn_published,
                              NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(c->db, pragma, NULL, NULL, NULL) != SQLITE_OK) {
    rc = fail(c, e);
    if (rc == DBLOCK_EDB || rc == DBLOCK_ECONN)
      dbl_err_set(e, DBLOCK_ECONN, "", e->native,
                  "cannot use sqlite database '%s': %s", u->path, e->msg);
    lite_close(c);
    return e->code;
  }
  *out = c;
  return 0;
}

/* Transactions are opened explicitly (pipelined BEGIN / in-process), so
 * autocommit never needs changing here. */
static int lite_set_autocommit(dbl_conn *c, int on, dbl_err *e) {
  (void)c;
  (void)on;
  (void)e;
  return 0;
}

/* BEGIN IMMEDIATE takes the file's write lock (waiting up to wait_ms). */
static int lite_lock_begin(dbl_conn *c, int64_t wait_ms, const dbl_stmt *s, dbl_res *res,
                           dbl_err *e) {
  int rc;
  if ((rc = lite_set_lock_wait(c, wait_ms, e)) != 0) return rc;
  if ((rc = lite_begin(c, e)) != 0) return rc;
  return lite_query(c, s->sql, s->params, s->nparams, res, e);
}

/* The wake board sits next to the database file, named from its real
 * path, so that every process that opens the file — under any path —
 * shares it. */
static int lite_board_path(const dbl_url *u, char *out, size_t n) {
  char real[PATH_MAX];
  if (!u->path || !realpath(u->path, real)) return -1;
  return (size_t)snprintf(out, n, "%s-dblock-wake", real) < n ? 0 : -1;
}

const dbl_driver dbl_driver_sqlite = {
    .version = DBL_DRIVER_VERSION,
    .name = "sqlite",
    .dialect = DBL_LITE,
    .connect = lite_connect,
    .close = lite_close,
    .query = lite_query,
    .pipeline = lite_pipeline,
    .script = lite_script,
    .begin = lite_begin,
    .commit = lite_commit,
    .rollback = lite_rollback,
    .now_us = lite_now_us,
    .broken = lite_broken,
    .cancel = lite_cancel,
    .lock_begin = lite_lock_begin,
    .round_trips = lite_trips,
    .set_lock_wait = lite_set_lock_wait,
    .set_autocommit = lite_set_autocommit,
    .board_path = lite_board_path,
};

/* ---- dblock_sqlite_check_register: fenced writes (dblock.h) ---------- */

/* The check of one registration: its statements, on the application's
 * connection, with the lock table's schema and name written in. */
typedef struct check_fn {
  char *kind_sql, *claim_sql, *row_sql;
  char *path;     /* the lock file (NULL: in memory, or a temp database) */
  sqlite3 *peek;  /* a read-only connection of the check's own to it */
} check_fn;

static void check_fn_free(void *p) {
  check_fn *k = p;
  if (!k) return;
  if (k->peek) sqlite3_close(k->peek);
  free(k->path);
  free(k->kind_sql);
  free(k->claim_sql);
  free(k->row_sql);
  free(k);
}

/* A lowercase SQL identifier of at most max bytes. */
static int plain_ident(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n == 0 || n > max || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
  return 1;
}

static char *fmt_sql(const char *f, const char *schema, const char *table) {
  size_t n = strlen(f) + strlen(schema) + strlen(table) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, f, schema, table);
  return s;
}

/* Runs sql with name bound (?1) on db: SQLITE_ROW with *st left to read
 * (the caller finalizes it), SQLITE_DONE, or an error. */
static int check_step(sqlite3 *db, const char *sql, sqlite3_value *name, sqlite3_stmt **st) {
  int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
  if (rc != SQLITE_OK) return rc;
  if (name) sqlite3_bind_value(*st, 1, name);
  return sqlite3_step(*st);
}

static void check_fail(sqlite3_context *ctx, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check_fail(sqlite3_context *ctx, const char *code, const char *fmt, ...) {
  char msg[600];
  int n;
  va_list ap;
  n = snprintf(msg, sizeof msg, "dblock_check (%s): ", code);
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  sqlite3_result_error(ctx, msg, -1);
}

/* dblock_check(name, fence): the fence if the name is held, now by this
 * host's clock, by the grant with that fence; else an error. Takes the
 * file's write lock first (a write statement that changes nothing), so
 * that what it reads stays true until the caller's transaction ends. */
static void fn_check(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  check_fn *k = sqlite3_user_data(ctx);
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  sqlite3_stmt *st = NULL;
  const char *name;
  int64_t fence, row_fence, ends;
  int rc, state;
  char kind[16] = "";
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL || sqlite3_value_type(argv[1]) == SQLITE_NULL)
    return check_fail(ctx, "22004", "the lock name and the fence must not be NULL");
  name = (const char *)sqlite3_value_text(argv[0]);
  fence = sqlite3_value_int64(argv[1]);
  if (sqlite3_get_autocommit(db))
    return check_fail(ctx, "DBL04",
                      "call it inside the transaction that writes (BEGIN ... COMMIT): outside "
                      "one, nothing holds lock \"%s\" until the write",
                      name);
  /* A for_update holder holds the file's write lock, which the claim
   * below would wait for: its name is looked up first, on the check's own
   * connection, so that this transaction reads nothing before its claim
   * (a read would pin a snapshot that any commit meanwhile — a renewal —
   * makes too old to write: SQLITE_BUSY_SNAPSHOT). */
  if (!k->peek && k->path &&
      sqlite3_open_v2(k->path, &k->peek, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL) !=
          SQLITE_OK) {
    sqlite3_close(k->peek);
    k->peek = NULL;
  }
  if (k->peek) sqlite3_busy_timeout(k->peek, 5000);
  rc = check_step(k->peek ? k->peek : db, k->kind_sql, argv[0], &st);
  if (rc == SQLITE_ROW) snprintf(kind, sizeof kind, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sqlite3_result_error_code(ctx, rc);
  if (kind[0] && strcmp(kind, "insert") != 0 && strcmp(kind, "optimistic") != 0)
    return check_fail(ctx, "DBL02",
                      "lock \"%s\" is a %s lock, whose holder holds the file's write lock: "
                      "take it with the insert or optimistic strategy for fenced writes",
                      name, kind);
  rc = check_step(db, k->claim_sql, NULL, &st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    /* (busy, or this transaction's snapshot is older than a commit: the
     * caller retries its transaction) */
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  rc = check_step(db, k->row_sql, argv[0], &st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return sqlite3_result_error_code(ctx, rc);
    return check_fail(ctx, "DBL01", "lock \"%s\" does not exist: fence %lld holds nothing",
                      name, (long long)fence);
  }
  snprintf(kind, sizeof kind, "%s", (const char *)sqlite3_column_text(st, 0));
  state = sqlite3_column_int(st, 1);
  row_fence = sqlite3_column_int64(st, 2);
  /* (no expiry: never taken as a live lease) */
  ends = sqlite3_column_type(st, 3) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 3);
  sqlite3_finalize(st);
  if (strcmp(kind, "insert") != 0 && strcmp(kind, "optimistic") != 0)
    return check_fail(ctx, "DBL02",
                      "lock \"%s\" is a %s lock: take it with the insert or optimistic "
                      "strategy for fenced writes",
                      name, kind);
  if (state != 1)
    return check_fail(ctx, "DBL01",
                      "lock \"%s\" is not held (released, force-unlocked or reaped): fence "
                      "%lld is stale",
                      name, (long long)fence);
  if (row_fence != fence)
    return check_fail(ctx, "DBL01", "lock \"%s\" is held by another grant, not by fence %lld",
                      name, (long long)fence);
  if (ends <= wall_us())
    return check_fail(ctx, "DBL01", "the lease of lock \"%s\" (fence %lld) ended %lld ms ago",
                      name, (long long)fence, (long long)((wall_us() - ends) / 1000));
  sqlite3_result_int64(ctx, fence);
}

int dblock_sqlite_check_register(struct sqlite3 *db, const char *schema, const char *table) {
  check_fn *k;
  char fname[64];
  if (!schema) schema = "main";
  if (!table) table = "dblock_locks";
  if (!db || !plain_ident(schema, 63) || !plain_ident(table, 47)) return DBLOCK_EINVAL;
  if (!(k = calloc(1, sizeof *k))) return DBLOCK_ENOMEM;
  /* (the peek connection knows the file as its main database) */
  {
    const char *f = sqlite3_db_filename(db, schema);
    if (f && *f && !(k->path = strdup(f))) {
      check_fn_free(k);
      return DBLOCK_ENOMEM;
    }
  }
  k->kind_sql = fmt_sql("SELECT strategy FROM \"%s\".\"%s\" WHERE name = ?1 AND name <> ''",
                        k->path ? "main" : schema, table);
  /* (changes nothing, but makes this a write transaction on the file) */
  k->claim_sql = fmt_sql("UPDATE \"%s\".\"%s\" SET version = version WHERE 0", schema, table);
  k->row_sql = fmt_sql("SELECT strategy, state, fence, expires_at FROM \"%s\".\"%s\" "
                       "WHERE name = ?1 AND name <> ''",
                       schema, table);
  if (!k->kind_sql || !k->claim_sql || !k->row_sql) {
    check_fn_free(k);
    return DBLOCK_ENOMEM;
  }
  if (strcmp(table, "dblock_locks") == 0) snprintf(fname, sizeof fname, "dblock_check");
  else snprintf(fname, sizeof fname, "%s_check", table);
  /* (on failure SQLite calls the destructor itself) */
  if (sqlite3_create_function_v2(db, fname, 2, SQLITE_UTF8, k, fn_check, NULL, NULL,
                                 check_fn_free) != SQLITE_OK)
    return DBLOCK_EDB;
  return 0;
}
