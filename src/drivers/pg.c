/*
 * pg.c — the PostgreSQL driver (libpq).
 *
 * Statements go through PQexecParams (parse, bind and execute in one round
 * trip) with every value as a parameter. Several statements can share one
 * round trip through libpq's pipeline mode (PostgreSQL 14+ servers; the
 * for_update strategy sends BEGIN, its lock wait and the SELECT together).
 */
#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

struct dbl_conn {
  PGconn *pg;
  dbl_stmt_cache cache; /* stmt: the statement's name, malloc'd */
  uint64_t next_name;
  char *secret;       /* password, only to scrub it out of messages */
  uint64_t trips;
  int64_t lock_wait;  /* current lock_timeout in ms, -2 = unknown */
  int64_t idle_limit; /* idle_in_transaction_session_timeout set, -2 = unknown */
  int fd;             /* our duplicate of the socket (dbl_fd_dup), or -1 */
  int dead;           /* closed by the server while idle, or left unusable
                         (a pipeline that could not be sent or ended) */
  int pooled;         /* behind a transaction-pooling proxy (PgBouncer):
                         no named prepared statements, no session settings */
};

/* Maps a SQLSTATE to a dblock code (BACKENDS.md's table). */
static int classify(const char *st) {
  static const struct { const char *state; int code; } map[] = {
      {"55P03", DBLOCK_EBUSY},   {"23505", DBLOCK_EBUSY},
      {"40001", DBLOCK_ERETRY},  {"40P01", DBLOCK_ERETRY},
      {"57014", DBLOCK_ETIMEOUT}, {"57P01", DBLOCK_ECONN},
      {"57P02", DBLOCK_ECONN},   {"57P03", DBLOCK_ECONN},
      {"25P03", DBLOCK_ECONN},   {"40003", DBLOCK_ECONN},
      {"28P01", DBLOCK_EAUTH},   {"28000", DBLOCK_EAUTH},
      {"42P01", DBLOCK_ESCHEMA}, {"3F000", DBLOCK_ESCHEMA},
      {"42883", DBLOCK_ESCHEMA}, {"42501", DBLOCK_EPERM},
      {"25006", DBLOCK_EREPLICA}, {"3D000", DBLOCK_ECONN},
      {"22021", DBLOCK_EINVAL},  {"22001", DBLOCK_EINVAL},
  };
  if (!st) return DBLOCK_EDB;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(st, map[i].state) == 0) return map[i].code;
  if (strncmp(st, "08", 2) == 0) return DBLOCK_ECONN;
  return DBLOCK_EDB;
}

/* Fills e from a failed result (or from the connection when r is NULL). */
static int fail_res(dbl_conn *c, PGresult *r, dbl_err *e) {
  const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  /* The primary message only: the full text repeats the statement. */
  const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  int code;
  if (!msg || !*msg) msg = PQerrorMessage(c->pg);
  if (PQstatus(c->pg) == CONNECTION_BAD) code = DBLOCK_ECONN;
  else code = classify(st);
  if (code == DBLOCK_ESCHEMA)
    dbl_err_set(e, code, st, 0, "%s (run `dblock migrate`)", msg);
  else if (code == DBLOCK_ECONN && !st)
    dbl_err_set(e, code, "08006", 0, "connection lost: %s", msg);
  else
    dbl_err_set(e, code, st, 0, "%s", msg);
  dbl_err_scrub(e, c->secret);
  return code;
}

/* Classifies a failed connection attempt. libpq gives no SQLSTATE for
 * these, so the message decides: authentication, unknown database, or
 * could not connect at all. */
static int fail_connect(PGconn *pg, const char *secret, dbl_err *e) {
  const char *msg = pg ? PQerrorMessage(pg) : "out of memory";
  int code = DBLOCK_ECONN;
  const char *st = "08001";
  if (strstr(msg, "password authentication failed") ||
      strstr(msg, "no password supplied") ||
      strstr(msg, "authentication failed") ||
      strstr(msg, "no pg_hba.conf entry")) {
    code = DBLOCK_EAUTH;
    st = "28P01";
  } else if (strstr(msg, "invalid connection option") ||
             strstr(msg, "invalid sslmode") ||
             strstr(msg, "missing \"=\"") || strstr(msg, "invalid ")) {
    code = DBLOCK_EINVAL;
    st = "";
  } else if (strstr(msg, "does not exist")) {
    st = "3D000";
  }
  dbl_err_set(e, code, st, 0, "%s", msg);
  dbl_err_scrub(e, secret);
  return code;
}

/* Copies rows of r into res (text form). */
static int take_rows(PGresult *r, dbl_res *res) {
  int nr = PQntuples(r), nc = PQnfields(r);
  const char *tuples = PQcmdTuples(r);
  if (dbl_res_alloc(res, nr, nc)) return DBLOCK_ENOMEM;
  res->affected = tuples && *tuples ? strtoll(tuples, NULL, 10) : 0;
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nc; j++)
      if (!PQgetisnull(r, i, j) &&
          dbl_res_set(res, i, j, PQgetvalue(r, i, j),
                      (size_t)PQgetlength(r, i, j)))
        return DBLOCK_ENOMEM;
  return 0;
}

/* Rewrites `?` placeholders (outside quotes) to $1..$n. Caller frees. */
static char *rewrite(const char *sql) {
  size_t n = strlen(sql), q = 0;
  for (size_t i = 0; i < n; i++) q += sql[i] == '?';
  char *out = malloc(n + q * 4 + 1), *o = out;
  int k = 0;
  char quote = 0;
  if (!out) return NULL;
  for (const char *p = sql; *p; p++) {
    if (quote) {
      if (*p == quote) quote = 0;
    } else if (*p == '\'' || *p == '"') {
      quote = *p;
    } else if (*p == '?') {
      o += sprintf(o, "$%d", ++k);
      continue;
    }
    *o++ = *p;
  }
  *o = 0;
  return out;
}

/* Converts params to libpq's text-format arrays. nums holds the decimal
 * forms of integers; returns 0 or ENOMEM. */
static int to_pg(const dbl_param *p, int np, const char **vals, int *lens,
                 int *fmts, char (*nums)[24]) {
  for (int i = 0; i < np; i++) {
    fmts[i] = 0;
    switch (p[i].type) {
    case DBL_P_NULL: vals[i] = NULL; lens[i] = 0; break;
    case DBL_P_I64:
      snprintf(nums[i], sizeof nums[i], "%lld", (long long)p[i].i);
      vals[i] = nums[i];
      lens[i] = (int)strlen(nums[i]);
      break;
    case DBL_P_TEXT:
      /* Text format needs a NUL-terminated value; the core only passes
       * NUL-free, terminated strings, checked by the name validation. */
      vals[i] = p[i].s;
      lens[i] = (int)p[i].len;
      break;
    }
  }
  return 0;
}

#define PG_MAX_PARAMS 48

/* Returns the name of the prepared statement for sql, preparing it (one
 * round trip) the first time: parsing and planning dblock's statements on
 * every call cost more server time than the round trip. Only statements
 * with parameters are prepared. The `?` are rewritten only then: a known
 * statement costs a cache lookup, not a pass over its text. NULL with e
 * set on failure. */
static const char *prepared(dbl_conn *c, const char *sql, int np, dbl_err *e) {
  char *name = dbl_cache_get(&c->cache, sql), *q;
  void *evicted;
  PGresult *r;
  if (name) return name;
  if (!(name = malloc(24)) || !(q = rewrite(sql))) {
    free(name);
    dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    return NULL;
  }
  snprintf(name, 24, "dbl%llu", (unsigned long long)++c->next_name);
  r = PQprepare(c->pg, name, q, np, NULL);
  free(q);
  c->trips++;
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    fail_res(c, r, e);
    PQclear(r);
    free(name);
    return NULL;
  }
  PQclear(r);
  if (dbl_cache_put(&c->cache, sql, name, &evicted)) {
    free(name);
    dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    return NULL;
  }
  free(evicted); /* an evicted statement stays on the server, unused */
  return name;
}

static int send_one(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                    int pipelined, PGresult **out, dbl_err *e) {
  const char *vals[PG_MAX_PARAMS];
  int lens[PG_MAX_PARAMS], fmts[PG_MAX_PARAMS];
  char nums[PG_MAX_PARAMS][24];
  const char *name = NULL;
  char *q = NULL;
  int ok;
  if (np > PG_MAX_PARAMS)
    return dbl_err_set(e, DBLOCK_EINVAL, "", 0, "too many parameters");
  to_pg(p, np, vals, lens, fmts, nums);
  /* In a pipeline the statement must already be prepared (pg_pipeline
   * prepares first); outside one, prepare on first use. Unprepared (no
   * parameters, or behind a pooler): sent as text, `?` rewritten. */
  if (np > 0 && !c->pooled) {
    if (!(name = prepared(c, sql, np, e))) return e->code;
  } else if (!(q = rewrite(sql))) {
    return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  }
  if (pipelined) {
    ok = name ? PQsendQueryPrepared(c->pg, name, np, vals, lens, fmts, 0)
              : PQsendQueryParams(c->pg, q, np, NULL, vals, lens, fmts, 0);
    free(q);
    return ok ? 0 : fail_res(c, NULL, e);
  }
  *out = name ? PQexecPrepared(c->pg, name, np, vals, lens, fmts, 0)
              : PQexecParams(c->pg, q, np, NULL, vals, lens, fmts, 0);
  free(q);
  c->trips++;
  return 0;
}

static int pg_query(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                    dbl_res *res, dbl_err *e) {
  PGresult *r = NULL;
  int rc;
  if (res) memset(res, 0, sizeof *res);
  if ((rc = send_one(c, sql, p, np, 0, &r, e)) != 0) return rc;
  switch (PQresultStatus(r)) {
  case PGRES_TUPLES_OK:
  case PGRES_COMMAND_OK:
    rc = res ? take_rows(r, res) : 0;
    if (rc) dbl_err_set(e, rc, "", 0, "out of memory");
    break;
  default: rc = fail_res(c, r, e); break;
  }
  PQclear(r);
  return rc;
}

/* Sends all statements and one Sync in a single round trip, then reads
 * every result. The first error wins; later statements are skipped by the
 * server (PGRES_PIPELINE_ABORTED). */
static int pg_pipeline(dbl_conn *c, const dbl_stmt *s, int n, dbl_res *res,
                       dbl_err *e) {
  int rc = 0, i;
  PGresult *r;
  if (res) memset(res, 0, sizeof *res);
  /* Prepare what is not yet prepared, before the pipeline (first use on
   * this connection only). */
  for (i = 0; i < n && !c->pooled; i++)
    if (s[i].nparams > 0 && !prepared(c, s[i].sql, s[i].nparams, e)) return e->code;
  if (!PQenterPipelineMode(c->pg)) return fail_res(c, NULL, e);
  for (i = 0; i < n && rc == 0; i++)
    rc = send_one(c, s[i].sql, s[i].params, s[i].nparams, 1, NULL, e);
  if (rc == 0 && !PQpipelineSync(c->pg)) rc = fail_res(c, NULL, e);
  c->trips++;
  if (rc) {
    /* No Sync went out, so nothing committed, but a statement that
     * reached the server may have started (a session lock it takes would
     * outlive it), and libpq stays in pipeline mode: the connection is of
     * no further use, and closing it ends whatever started. */
    PQexitPipelineMode(c->pg);
    c->dead = 1;
    e->stmt = 0;
    return rc;
  }
  for (i = 0; i < n; i++) {
    while ((r = PQgetResult(c->pg)) != NULL) {
      ExecStatusType st = PQresultStatus(r);
      if (rc == 0 && st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK &&
          st != PGRES_PIPELINE_ABORTED) {
        rc = fail_res(c, r, e);
        e->stmt = i;
      } else if (rc == 0 && i == n - 1 && res &&
                 (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) && take_rows(r, res)) {
        rc = dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
        e->stmt = i;
      }
      PQclear(r);
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
      if (rc == 0) {
        rc = fail_res(c, NULL, e);
        e->stmt = i; /* (it may or may not have run) */
      }
      break;
    }
  }
  /* The Sync's own result. An error before it is the commit's (a NULL
   * follows it, then the Sync's result); two NULLs in a row: nothing more
   * is coming. Every statement answered, so such an error is the last
   * one's. */
  for (int nulls = 0; nulls < 2 && PQstatus(c->pg) != CONNECTION_BAD;) {
    ExecStatusType st;
    if ((r = PQgetResult(c->pg)) == NULL) {
      nulls++;
      continue;
    }
    nulls = 0;
    st = PQresultStatus(r);
    if (rc == 0 && st == PGRES_FATAL_ERROR) {
      rc = fail_res(c, r, e);
      e->stmt = n - 1;
    }
    PQclear(r);
    if (st == PGRES_PIPELINE_SYNC) break;
  }
  if (!PQexitPipelineMode(c->pg) || PQstatus(c->pg) == CONNECTION_BAD) {
    c->dead = 1; /* (still in pipeline mode, or lost: of no further use) */
    if (rc == 0) {
      rc = fail_res(c, NULL, e);
      e->stmt = n - 1;
    }
  }
  if (rc && res) dbl_res_clear(res);
  return rc;
}

static int pg_script(dbl_conn *c, const char *sql, dbl_err *e) {
  PGresult *r = PQexec(c->pg, sql);
  int rc = 0;
  c->trips++;
  if (PQresultStatus(r) != PGRES_COMMAND_OK &&
      PQresultStatus(r) != PGRES_TUPLES_OK)
    rc = fail_res(c, r, e);
  PQclear(r);
  return rc;
}

static int pg_simple(dbl_conn *c, const char *sql, dbl_err *e) {
  return pg_query(c, sql, NULL, 0, NULL, e);
}
static int pg_begin(dbl_conn *c, dbl_err *e) { return pg_simple(c, "BEGIN", e); }
static int pg_commit(dbl_conn *c, dbl_err *e) { return pg_simple(c, "COMMIT", e); }
static int pg_rollback(dbl_conn *c, dbl_err *e) {
  return pg_simple(c, "ROLLBACK", e);
}

static int pg_now_us(dbl_conn *c, int64_t *out, dbl_err *e) {
  dbl_res r;
  int rc = pg_query(c,
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
                    NULL, 0, &r, e);
  if (rc == 0) *out = dbl_res_i64(&r, 0, 0);
  dbl_res_clear(&r);
  return rc;
}

/* The topology guard's questions (driver.h). A standby in recovery and a
 * session whose transactions are read-only both refuse writes. */
static int pg_probe(dbl_conn *c, dbl_topology *t, int full, dbl_err *e) {
  dbl_res r;
  int rc;
  memset(t, 0, sizeof *t);
  if (!full) {
    rc = pg_query(c, "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
                  NULL, 0, &r, e);
    if (rc == 0) t->read_only = dbl_res_get(&r, 0, 0) && *dbl_res_get(&r, 0, 0) == 't';
    dbl_res_clear(&r);
    return rc;
  }
  /* pg_stat_replication shows every walsender to any role; only sync_state
   * needs pg_read_all_stats (else NULL: unknown). */
  rc = pg_query(c,
                "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on', "
                "'PostgreSQL ' || current_setting('server_version'), "
                "(SELECT count(*) FROM pg_stat_replication), "
                "(SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) "
                "FROM pg_stat_replication), "
                "(SELECT count(*) FILTER (WHERE sync_state IS NULL) FROM pg_stat_replication)",
                NULL, 0, &r, e);
  if (rc) return rc;
  t->read_only = dbl_res_get(&r, 0, 0) && *dbl_res_get(&r, 0, 0) == 't';
  snprintf(t->server, sizeof t->server, "%s", dbl_res_get(&r, 0, 1) ? dbl_res_get(&r, 0, 1) : "");
  t->standbys = (int)dbl_res_i64(&r, 0, 2);
  t->sync_standbys = dbl_res_i64(&r, 0, 4) > 0 ? -1 : (int)dbl_res_i64(&r, 0, 3);
  dbl_res_clear(&r);
  rc = pg_query(c,
                "SELECT name, current_setting(name) FROM pg_settings WHERE name IN "
                "('fsync', 'synchronous_commit', 'synchronous_standby_names', "
                "'idle_in_transaction_session_timeout', 'statement_timeout', "
                "'idle_session_timeout', 'lock_timeout', 'default_transaction_read_only') "
                "ORDER BY name",
                NULL, 0, &r, e);
  if (rc == 0) dbl_topology_settings(t, &r);
  dbl_res_clear(&r);
  return rc;
}

static int pg_set_lock_wait(dbl_conn *c, int64_t ms, dbl_err *e) {
  char v[32];
  int rc;
  /* lock_timeout 0 means "wait forever" in PostgreSQL, so a try uses 1 ms. */
  int64_t eff = ms < 0 ? 0 : ms == 0 ? 1 : ms;
  dbl_param p;
  if (c->lock_wait == eff || c->pooled) return 0; /* (pooled: see pg_connect) */
  snprintf(v, sizeof v, "%lldms", (long long)eff);
  p = DBL_STR(v);
  /* With it (once per connection), READ COMMITTED, which the statements
   * are written for, whatever a role or database default says: each
   * statement sees what committed before it, and one that finds a row
   * changed since its snapshot re-reads it instead of failing. */
  rc = pg_query(c,
                "SELECT set_config('lock_timeout', ?, false), "
                "set_config('default_transaction_isolation', 'read committed', false)",
                &p, 1, NULL, e);
  c->lock_wait = rc == 0 ? eff : -2;
  return rc;
}

static int pg_broken(dbl_conn *c) { return c->dead || PQstatus(c->pg) == CONNECTION_BAD; }

/* An idle dblock connection never LISTENs, so anything the server sends
 * unasked is its goodbye (or, rarely, a parameter change after a reload:
 * then one reconnect is the price). */
static int pg_idle_alive(dbl_conn *c) {
  if (!c->dead && dbl_fd_readable(PQsocket(c->pg))) c->dead = 1;
  return !pg_broken(c);
}
static uint64_t pg_trips(dbl_conn *c) { return c->trips; }

static void pg_close(dbl_conn *c) {
  if (!c) return;
  dbl_cache_clear(&c->cache, free);
  if (c->pg) PQfinish(c->pg);
  dbl_fd_close(c->fd);
  if (c->secret) {
    memset(c->secret, 0, strlen(c->secret));
    free(c->secret);
  }
  free(c);
}

static void quiet_notice(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* Completes a PQconnectStart* connection, giving each host timeout_ms
 * (< 0: no limit, as libpq's connect_timeout=0) — the clock restarts when
 * libpq moves on to the next host's socket — with server notices silenced
 * first: a server shutting down sends a WARNING to connections still
 * starting, which libpq's default processor would print on the caller's
 * stderr. Returns 1 when connected, 0 when libpq failed (PQerrorMessage
 * says why), -1 on the timeout. */
static int connect_poll(PGconn *pg, int64_t timeout_ms) {
  struct timespec t0 = {0, 0}, now;
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  int fd = -1;
  /* Server notices (e.g. "already exists, skipping") are not errors and
   * must not reach the caller's stderr either. */
  PQsetNoticeProcessor(pg, quiet_notice, NULL);
  for (;;) {
    struct pollfd p = {.fd = PQsocket(pg)};
    int64_t left = -1;
    if (st == PGRES_POLLING_OK) return 1;
    if (st == PGRES_POLLING_FAILED) return 0;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (p.fd != fd) { /* a new host: its own timeout */
      fd = p.fd;
      t0 = now;
    }
    if (timeout_ms >= 0) {
      left = timeout_ms - ((now.tv_sec - t0.tv_sec) * 1000 +
                           (now.tv_nsec - t0.tv_nsec) / 1000000);
      if (left <= 0) return -1;
      if (left > 60000) left = 60000; /* poll takes an int; loop instead */
    }
    p.events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    if (poll(&p, 1, (int)left) == 0 && timeout_ms >= 0 && left < 60000) return -1;
    st = PQconnectPoll(pg);
  }
}

/* Connects with keyword arrays built from the URL (or the keyword string
 * expanded by libpq), adding a connect timeout and TCP keepalives so a dead
 * server is noticed, unless the caller chose their own. */
static int pg_connect(dbl_conn **out, const dbl_url *u, int64_t timeout_ms,
                      dbl_err *e) {
  const char *keys[DBL_URL_MAX_PARAMS + 16], *vals[DBL_URL_MAX_PARAMS + 16];
  char hosts[2048] = "", ports[128] = "", tmo[24];
  int n = 0, polled = 0;
  dbl_conn *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c) return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  c->lock_wait = -2;
  c->idle_limit = -2;
  c->fd = -1;
  /* ?pooler=transaction: the URL names a transaction-pooling proxy
   * (PgBouncer < 1.21), where consecutive statements may run on different
   * server sessions: statements are sent unnamed (parsed each time), and
   * session settings are left alone (they would leak to other clients'
   * sessions); for_update sets its lock wait inside its transaction. */
  if (dbl_url_param(u, "pooler")) {
    if (strcmp(dbl_url_param(u, "pooler"), "transaction") != 0) {
      free(c);
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                         "pooler=%s: the only value is 'transaction'", dbl_url_param(u, "pooler"));
    }
    c->pooled = 1;
  }
  if (u->pg_keywords) {
    PQconninfoOption *opts = PQconninfoParse(u->pg_keywords, NULL);
    if (!opts) {
      free(c);
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                         "bad PostgreSQL connection string '%s'", u->redacted);
    }
    for (PQconninfoOption *o = opts; o->keyword; o++)
      if (strcmp(o->keyword, "password") == 0 && o->val)
        c->secret = strdup(o->val);
    PQconninfoFree(opts);
    keys[n] = "dbname"; vals[n++] = u->pg_keywords;
  } else {
    /* libpq's own lists: "h1,h2" and "p1,p2" (an empty item: its default). */
    for (int i = 0; i < u->nhosts; i++) {
      size_t hl = strlen(hosts), pl = strlen(ports);
      snprintf(hosts + hl, sizeof hosts - hl, "%s%s", i ? "," : "", u->hosts[i] ? u->hosts[i] : "");
      if (u->ports[i]) snprintf(ports + pl, sizeof ports - pl, "%s%d", i ? "," : "", u->ports[i]);
      else snprintf(ports + pl, sizeof ports - pl, "%s", i ? "," : "");
    }
    if (u->nhosts && strlen(hosts) + 1 >= sizeof hosts) {
      free(c);
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0, "host list too long in '%s'", u->redacted);
    }
    if (u->nhosts > 1 || u->host) { keys[n] = "host"; vals[n++] = hosts; }
    if (strspn(ports, ",") != strlen(ports)) { keys[n] = "port"; vals[n++] = ports; }
    /* A lock needs the primary: with several hosts, take the first that
     * accepts writes unless the URL says otherwise (libpq's default is
     * "any", which could pick a standby). */
    if (u->nhosts > 1 && !dbl_url_param(u, "target_session_attrs")) {
      keys[n] = "target_session_attrs"; vals[n++] = "read-write";
    }
    if (u->user) { keys[n] = "user"; vals[n++] = u->user; }
    if (u->password) {
      keys[n] = "password"; vals[n++] = u->password;
      c->secret = strdup(u->password);
    }
    if (u->dbname) { keys[n] = "dbname"; vals[n++] = u->dbname; }
    for (int i = 0; i < u->nparams; i++) {
      if (strcmp(u->keys[i], "pooler") == 0) continue; /* dblock's own */
      keys[n] = u->keys[i]; vals[n++] = u->vals[i];
    }
  }
  /* Later keywords win in libpq, so defaults go first only if absent. */
  snprintf(tmo, sizeof tmo, "%lld",
           (long long)(timeout_ms > 0 ? (timeout_ms + 999) / 1000 : 5));
  if (!dbl_url_param(u, "connect_timeout")) {
    keys[n] = "connect_timeout"; vals[n++] = tmo;
  }
  if (!dbl_url_param(u, "application_name")) {
    keys[n] = "application_name"; vals[n++] = "dblock";
  }
  if (!dbl_url_param(u, "keepalives_idle")) {
    keys[n] = "keepalives_idle"; vals[n++] = "10";
    keys[n] = "keepalives_interval"; vals[n++] = "5";
    keys[n] = "keepalives_count"; vals[n++] = "3";
  }
  keys[n] = NULL;
  vals[n] = NULL;
  /* The URL's connect_timeout wins, in libpq's terms (0: no limit). */
  if (dbl_url_param(u, "connect_timeout")) {
    timeout_ms = atoll(dbl_url_param(u, "connect_timeout")) * 1000;
    if (timeout_ms <= 0) timeout_ms = -1;
  } else if (timeout_ms <= 0) {
    timeout_ms = 5000;
  }
  /* connect_timeout is per host in libpq: each host of a list gets it. */
  if (timeout_ms > 0 && u->nhosts > 1) timeout_ms *= u->nhosts;
  c->pg = PQconnectStartParams(keys, vals, 1);
  if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD || (polled = connect_poll(c->pg, timeout_ms)) != 1) {
    int rc = polled < 0 ? dbl_err_set(e, DBLOCK_ECONN, "08001", 0,
                                      "connection to %s timed out after %lld ms",
                                      u->host ? u->host : "server", (long long)timeout_ms)
                        : fail_connect(c->pg, c->secret, e);
    pg_close(c);
    return rc;
  }
  c->trips++;
  c->fd = dbl_fd_dup(PQsocket(c->pg));
  *out = c;
  return 0;
}

/* libpq then reports the connection lost. */
static void pg_interrupt(dbl_conn *c) { dbl_fd_cut(c->fd); }

/* The session's idle-in-transaction limit (a user may set it: USERSET).
 * A role or server value shorter than the lock's pings would end the lock
 * transaction silently; 0 (none) would keep a vanished holder's lock. */
static int pg_idle_guard(dbl_conn *c, int64_t limit_ms, dbl_err *e) {
  char v[32];
  dbl_param p;
  int rc;
  if (c->idle_limit == limit_ms || c->pooled) return 0;
  snprintf(v, sizeof v, "%lldms", (long long)limit_ms);
  p = DBL_STR(v);
  rc = pg_query(c, "SELECT set_config('idle_in_transaction_session_timeout', ?, false)", &p, 1,
                NULL, e);
  c->idle_limit = rc == 0 ? limit_ms : -2;
  return rc;
}

/* Transactions are opened explicitly (pipelined BEGIN / in-process), so
 * autocommit never needs changing here. */
static int pg_set_autocommit(dbl_conn *c, int on, dbl_err *e) {
  (void)c;
  (void)on;
  (void)e;
  return 0;
}

/* BEGIN, the lock wait, synchronous_commit off and s, pipelined: one
 * round trip. Only a row lock and values that die with a crash anyway (the
 * epoch protects fences) are written: the commit need not wait for a
 * flush. (lock_timeout 0 would mean "forever", so a try waits 1 ms.) */
static int pg_lock_begin(dbl_conn *c, int64_t wait_ms, const dbl_stmt *st, dbl_res *res,
                         dbl_err *e) {
  char tmo[32];
  dbl_param wp;
  dbl_stmt s[4];
  snprintf(tmo, sizeof tmo, "%lldms", (long long)(wait_ms < 0 ? 0 : wait_ms == 0 ? 1 : wait_ms));
  wp = DBL_STR(tmo);
  s[0] = (dbl_stmt){"BEGIN", NULL, 0};
  s[1] = (dbl_stmt){"SELECT set_config('lock_timeout', ?, true)", &wp, 1};
  s[2] = (dbl_stmt){"SET LOCAL synchronous_commit = off", NULL, 0};
  s[3] = *st;
  return pg_pipeline(c, s, 4, res, e);
}

/* LISTEN on a connection of its own (queue.c): the channel is made by the
 * core from [a-z0-9_] only, so quoting it is enough. */
static int pg_listen(dbl_conn *c, const char *channel, dbl_err *e) {
  char sql[96];
  for (const char *s = channel; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0, "bad notification channel");
  if (strlen(channel) > 63)
    return dbl_err_set(e, DBLOCK_EINVAL, "", 0, "notification channel too long");
  snprintf(sql, sizeof sql, "LISTEN \"%s\"", channel);
  return pg_script(c, sql, e);
}

/* Hands every notification libpq has read to got. */
static int drain_notifies(dbl_conn *c, void (*got)(const char *, void *), void *arg) {
  PGnotify *n;
  int k = 0;
  while ((n = PQnotifies(c->pg)) != NULL) {
    got(n->extra, arg);
    PQfreemem(n);
    k++;
  }
  return k;
}

static int pg_await_notify(dbl_conn *c, int64_t timeout_ms,
                           void (*got)(const char *payload, void *arg), void *arg,
                           dbl_err *e) {
  struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
  int n;
  if (p.fd < 0 || pg_broken(c))
    return dbl_err_set(e, DBLOCK_ECONN, "08006", 0, "listener connection is closed");
  if (drain_notifies(c, got, arg) > 0) return 0;
  n = poll(&p, 1, (int)timeout_ms);
  if (n < 0) return errno == EINTR ? 0 : dbl_err_set(e, DBLOCK_ECONN, "08006", 0, "poll failed");
  if (n == 0) return 0;
  /* Readable: notifications, or the end of the connection. */
  if (!PQconsumeInput(c->pg) || PQstatus(c->pg) == CONNECTION_BAD) {
    c->dead = 1;
    return dbl_err_set(e, DBLOCK_ECONN, "08006", 0, "listener connection lost: %s",
                       PQerrorMessage(c->pg));
  }
  drain_notifies(c, got, arg);
  return 0;
}

const dbl_driver dbl_driver_pg = {
    .version = DBL_DRIVER_VERSION,
    .name = "postgres",
    .dialect = DBL_PG,
    .connect = pg_connect,
    .close = pg_close,
    .query = pg_query,
    .pipeline = pg_pipeline,
    .script = pg_script,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .now_us = pg_now_us,
    .broken = pg_broken,
    .idle_alive = pg_idle_alive,
    .round_trips = pg_trips,
    .set_lock_wait = pg_set_lock_wait,
    .set_autocommit = pg_set_autocommit,
    .interrupt = pg_interrupt,
    .cancel = pg_interrupt, /* shutdown(2): async-signal-safe */
    .lock_begin = pg_lock_begin,
    .idle_guard = pg_idle_guard,
    .probe = pg_probe,
    .listen = pg_listen,
    .await_notify = pg_await_notify,
};
