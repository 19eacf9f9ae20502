/*
 * mysql.c — the MySQL / MariaDB driver (libmysqlclient; MariaDB
 * Connector/C on Debian).
 *
 * Every statement is a server-side prepared statement (values travel as
 * bound parameters, never in the SQL text). Prepared statements are cached
 * per connection, so after the first use a statement costs one round trip.
 * Auto-reconnect stays off: a silent reconnect would drop every lock the
 * old session held.
 */
#include <errmsg.h>
#include <fcntl.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "driver.h"

#define MY_MAX_PARAMS 24
#define MY_BUF 320 /* names, hosts and numbers fit; longer values are refetched */

struct dbl_conn {
  MYSQL *my;
  char *secret;
  uint64_t trips;
  int broken;
  int64_t lock_wait; /* ms currently set, -2 = unknown */
  int limit_armed;   /* max_statement_time is set for the next statement
                        only: reset it after that one */
  int64_t idle_limit; /* idle limits set by idle_guard, -2 = unknown */
  int fd;            /* our duplicate of the socket (dbl_fd_dup), or -1 */
  int autocommit;    /* 1 on (the default), 0 off, -1 unknown */
  dbl_stmt_cache cache;
};

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static void lib_init(void) { mysql_library_init(0, NULL, NULL); }

/* Maps a MySQL / MariaDB error number to a dblock code. */
static int classify(unsigned int no) {
  switch (no) {
  case 1205: case 3572: case 1062: return DBLOCK_EBUSY;
  case 1213: case 1020: return DBLOCK_ERETRY;
  case 3024: case 1969: return DBLOCK_ETIMEOUT;
  case 2006: case 2013: case 4031: case 1927: case 2002: case 2003:
  case 2005: case 2055: case 1049: case 1053: case 1152: case 1158:
  case 1159: case 1160: case 1161:
  /* Galera: a node outside the primary component (1047 "WSREP has not yet
   * prepared node") or a commit the cluster could not take (1180): another
   * node may serve, so this is a connection-level failure. */
  case 1047: case 1180: return DBLOCK_ECONN;
  case 1045: case 1698: case 1251: return DBLOCK_EAUTH;
  case 1146: case 1305: return DBLOCK_ESCHEMA;
  case 1142: case 1143: case 1044: case 1227: case 1370: case 1095: return DBLOCK_EPERM;
  case 1290: case 1792: return DBLOCK_EREPLICA;
  case 1406: case 1366: case 1300: return DBLOCK_EINVAL;
  default: return DBLOCK_EDB;
  }
}

static int fail_no(dbl_conn *c, unsigned int no, const char *state,
                   const char *msg, dbl_err *e) {
  int code = classify(no);
  if (code == DBLOCK_ECONN && no != 1049) c->broken = 1;
  if (code == DBLOCK_ESCHEMA)
    dbl_err_set(e, code, state, (int)no, "%s (run `dblock migrate`)", msg);
  else
    dbl_err_set(e, code, state, (int)no, "%s", msg);
  dbl_err_scrub(e, c->secret);
  return code;
}

static int fail_my(dbl_conn *c, dbl_err *e) {
  return fail_no(c, mysql_errno(c->my), mysql_sqlstate(c->my),
                 mysql_error(c->my), e);
}

static int fail_st(dbl_conn *c, MYSQL_STMT *st, dbl_err *e) {
  return fail_no(c, mysql_stmt_errno(st), mysql_stmt_sqlstate(st),
                 mysql_stmt_error(st), e);
}

static void close_stmt(void *st) { mysql_stmt_close(st); }

/* Returns the cached prepared statement for sql, preparing it (one round
 * trip) the first time. */
static MYSQL_STMT *prepare(dbl_conn *c, const char *sql, dbl_err *e) {
  MYSQL_STMT *st = dbl_cache_get(&c->cache, sql);
  void *evicted;
  if (st) return st;
  if (!(st = mysql_stmt_init(c->my))) {
    fail_my(c, e);
    return NULL;
  }
  c->trips++;
  if (mysql_stmt_prepare(st, sql, strlen(sql))) {
    fail_st(c, st, e);
    mysql_stmt_close(st);
    return NULL;
  }
  if (dbl_cache_put(&c->cache, sql, st, &evicted)) {
    mysql_stmt_close(st);
    dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    return NULL;
  }
  if (evicted) mysql_stmt_close(evicted);
  return st;
}

/* Reads every row of an executed statement into res. */
static int fetch_rows(dbl_conn *c, MYSQL_STMT *st, dbl_res *res, dbl_err *e) {
  MYSQL_RES *meta = mysql_stmt_result_metadata(st);
  int nc, nr, rc = 0;
  if (!meta) return 0;
  nc = (int)mysql_num_fields(meta);
  mysql_free_result(meta);
  if (mysql_stmt_store_result(st)) return fail_st(c, st, e);
  nr = (int)mysql_stmt_num_rows(st);
  MYSQL_BIND *b = calloc((size_t)nc, sizeof *b);
  char(*buf)[MY_BUF] = calloc((size_t)nc, sizeof *buf);
  unsigned long *len = calloc((size_t)nc, sizeof *len);
  my_bool *isnull = calloc((size_t)nc, sizeof *isnull);
  my_bool *err = calloc((size_t)nc, sizeof *err);
  if (!b || !buf || !len || !isnull || !err || (res && dbl_res_alloc(res, nr, nc))) {
    rc = dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    goto out;
  }
  for (int j = 0; j < nc; j++) {
    b[j].buffer_type = MYSQL_TYPE_STRING;
    b[j].buffer = buf[j];
    b[j].buffer_length = MY_BUF - 1;
    b[j].length = &len[j];
    b[j].is_null = &isnull[j];
    b[j].error = &err[j];
  }
  if (mysql_stmt_bind_result(st, b)) {
    rc = fail_st(c, st, e);
    goto out;
  }
  for (int i = 0; i < nr; i++) {
    int f = mysql_stmt_fetch(st);
    if (f == 1) {
      rc = fail_st(c, st, e);
      goto out;
    }
    if (f == MYSQL_NO_DATA) break;
    for (int j = 0; j < nc && res; j++) {
      if (isnull[j]) continue;
      if (len[j] >= MY_BUF - 1) { /* truncated: fetch the whole value */
        char *big = malloc(len[j] + 1);
        MYSQL_BIND one = {0};
        if (!big) { rc = dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory"); goto out; }
        one.buffer_type = MYSQL_TYPE_STRING;
        one.buffer = big;
        one.buffer_length = len[j] + 1;
        if (mysql_stmt_fetch_column(st, &one, (unsigned)j, 0) == 0)
          rc = dbl_res_set(res, i, j, big, len[j]);
        free(big);
      } else {
        rc = dbl_res_set(res, i, j, buf[j], len[j]);
      }
      if (rc) { dbl_err_set(e, rc, "", 0, "out of memory"); goto out; }
    }
  }
out:
  mysql_stmt_free_result(st);
  free(b);
  free(buf);
  free(len);
  free(isnull);
  free(err);
  if (rc && res) dbl_res_clear(res);
  return rc;
}

static int my_query_once(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                         dbl_res *res, dbl_err *e);

/* After a statement that ran under a statement time limit armed by a
 * sub-second lock wait (see my_set_lock_wait), takes the limit off again, so
 * that it never cuts a later statement short (a COMMIT, a ping, a reaper
 * batch) on this pooled connection. Returns rc, or the reset's error when
 * the statement itself succeeded. */
static int disarm_limit(dbl_conn *c, int rc, dbl_err *e) {
  dbl_err scratch;
  if (!c->limit_armed || c->broken) return rc;
  c->limit_armed = 0;
  c->lock_wait = -2; /* innodb_lock_wait_timeout stays; the next set resends */
  c->trips++;
  if (mysql_real_query(c->my, "SET SESSION max_statement_time = 0", 34) != 0) {
    int code = fail_my(c, &scratch);
    if (rc == 0) {
      *e = scratch;
      rc = code;
    }
  }
  return rc;
}

/* Runs one statement (then disarm_limit). */
static int my_query(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                    dbl_res *res, dbl_err *e) {
  int rc = my_query_once(c, sql, p, np, res, e), after = disarm_limit(c, rc, e);
  if (after != rc && res) dbl_res_clear(res);
  return after;
}

static int my_query_once(dbl_conn *c, const char *sql, const dbl_param *p, int np,
                         dbl_res *res, dbl_err *e) {
  MYSQL_BIND b[MY_MAX_PARAMS];
  long long ints[MY_MAX_PARAMS];
  unsigned long lens[MY_MAX_PARAMS];
  MYSQL_STMT *st;
  int rc;
  if (res) memset(res, 0, sizeof *res);
  if (c->broken)
    return dbl_err_set(e, DBLOCK_ECONN, "HY000", 2006,
                       "connection lost earlier; open a new client");
  if (np > MY_MAX_PARAMS)
    return dbl_err_set(e, DBLOCK_EINVAL, "", 0, "too many parameters");
  if (!(st = prepare(c, sql, e))) return e->code;
  if ((int)mysql_stmt_param_count(st) != np)
    return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                       "statement wants %lu parameters, got %d",
                       mysql_stmt_param_count(st), np);
  memset(b, 0, sizeof b);
  for (int i = 0; i < np; i++) {
    switch (p[i].type) {
    case DBL_P_NULL: b[i].buffer_type = MYSQL_TYPE_NULL; break;
    case DBL_P_I64:
      ints[i] = p[i].i;
      b[i].buffer_type = MYSQL_TYPE_LONGLONG;
      b[i].buffer = &ints[i];
      break;
    case DBL_P_TEXT:
      lens[i] = (unsigned long)p[i].len;
      b[i].buffer_type = MYSQL_TYPE_STRING;
      b[i].buffer = (void *)(uintptr_t)p[i].s;
      b[i].buffer_length = lens[i];
      b[i].length = &lens[i];
      break;
    }
  }
  if (np && mysql_stmt_bind_param(st, b)) return fail_st(c, st, e);
  c->trips++;
  if (mysql_stmt_execute(st)) return fail_st(c, st, e);
  if ((rc = fetch_rows(c, st, res, e)) != 0) return rc;
  if (res) {
    my_ulonglong a = mysql_stmt_affected_rows(st);
    res->affected = a == (my_ulonglong)-1 ? 0 : (int64_t)a;
    res->insert_id = (int64_t)mysql_stmt_insert_id(st);
  }
  return 0;
}

/* MySQL has no pipelining through prepared statements: one by one. */
static int my_pipeline(dbl_conn *c, const dbl_stmt *s, int n, dbl_res *res,
                       dbl_err *e) {
  for (int i = 0; i < n; i++) {
    int rc = my_query(c, s[i].sql, s[i].params, s[i].nparams,
                      i == n - 1 ? res : NULL, e);
    if (rc) {
      e->stmt = i;
      return rc;
    }
  }
  return 0;
}

/* Runs a multi-statement script through the text protocol (no values in
 * it: migrations only) and drains every result. */
static int my_script(dbl_conn *c, const char *sql, dbl_err *e) {
  int st;
  c->trips++;
  if (mysql_real_query(c->my, sql, strlen(sql))) return fail_my(c, e);
  do {
    MYSQL_RES *r = mysql_store_result(c->my);
    if (r) mysql_free_result(r);
    else if (mysql_field_count(c->my) != 0) return fail_my(c, e);
    st = mysql_next_result(c->my);
    if (st > 0) return fail_my(c, e);
  } while (st == 0);
  return 0;
}

static int my_simple(dbl_conn *c, const char *sql, dbl_err *e) {
  int rc = 0;
  c->trips++;
  if (mysql_real_query(c->my, sql, strlen(sql))) rc = fail_my(c, e);
  return disarm_limit(c, rc, e);
}
static int my_begin(dbl_conn *c, dbl_err *e) {
  return my_simple(c, "START TRANSACTION", e);
}
static int my_commit(dbl_conn *c, dbl_err *e) { return my_simple(c, "COMMIT", e); }
static int my_rollback(dbl_conn *c, dbl_err *e) {
  return my_simple(c, "ROLLBACK", e);
}

static int my_now_us(dbl_conn *c, int64_t *out, dbl_err *e) {
  dbl_res r;
  int rc = my_query(c,
                    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', "
                    "UTC_TIMESTAMP(6))",
                    NULL, 0, &r, e);
  if (rc == 0) *out = dbl_res_i64(&r, 0, 0);
  dbl_res_clear(&r);
  return rc;
}

/* InnoDB's lock wait takes whole seconds (0: do not wait at all). A try
 * waits 0 and a wait of a second or more waits its whole seconds (the
 * caller's wait loop asks again for the rest): neither has a statement
 * time limit, which would also cut a slow but unblocked statement on a
 * loaded server and call a free name busy. Only a wait under a second
 * needs max_statement_time (error 1969); it is armed for the next
 * statement only (see my_query). */
static int my_set_lock_wait(dbl_conn *c, int64_t ms, dbl_err *e) {
  dbl_param p[2];
  int64_t eff = ms < 0 ? -1 : ms;
  char secs[32];
  int rc, armed = 0;
  if (c->lock_wait == eff) return 0; /* (never true for an armed limit) */
  if (eff < 0) {
    p[0] = DBL_I64(1073741824);
    p[1] = DBL_STR("0");
  } else if (eff == 0 || eff >= 1000) {
    p[0] = DBL_I64(eff / 1000);
    p[1] = DBL_STR("0");
  } else {
    p[0] = DBL_I64(1);
    snprintf(secs, sizeof secs, "0.%03lld", (long long)eff);
    p[1] = DBL_STR(secs);
    armed = 1;
  }
  rc = my_query_once(c,
                     "SET SESSION innodb_lock_wait_timeout = ?, "
                     "max_statement_time = CAST(? AS DECIMAL(12,3))",
                     p, 2, NULL, e);
  c->lock_wait = rc == 0 && !armed ? eff : -2;
  c->limit_armed = rc == 0 && armed;
  return rc;
}

/* MariaDB: the idle-transaction limits (10.3+) and wait_timeout of this
 * session, in whole seconds (rounded up). MySQL has no idle-transaction
 * limits (error 1193): there only wait_timeout is set. */
static int my_idle_guard(dbl_conn *c, int64_t limit_ms, dbl_err *e) {
  int64_t s = (limit_ms + 999) / 1000;
  dbl_param p[4] = {DBL_I64(s), DBL_I64(s), DBL_I64(s), DBL_I64(s)};
  int rc;
  if (c->idle_limit == limit_ms) return 0;
  rc = my_query(c,
                "SET SESSION idle_transaction_timeout = ?, idle_write_transaction_timeout = ?, "
                "idle_readonly_transaction_timeout = ?, wait_timeout = ?",
                p, 4, NULL, e);
  if (rc != 0 && e->native == 1193)
    rc = my_query(c, "SET SESSION wait_timeout = ?", p, 1, NULL, e);
  c->idle_limit = rc == 0 ? limit_ms : -2;
  return rc;
}

/* Connector/C then fails the call with 2013. */
static void my_interrupt(dbl_conn *c) { dbl_fd_cut(c->fd); }

static int my_set_autocommit(dbl_conn *c, int on, dbl_err *e) {
  if (c->autocommit == (on ? 1 : 0)) return 0;
  c->trips++;
  if (mysql_autocommit(c->my, on ? 1 : 0)) {
    c->autocommit = -1;
    return fail_my(c, e);
  }
  c->autocommit = on ? 1 : 0;
  return 0;
}

static int my_broken(dbl_conn *c) { return c->broken; }

/* MariaDB sends nothing to an idle connection except its last words
 * (an error packet before closing it, or just the close). */
static int my_idle_alive(dbl_conn *c) {
  if (!c->broken && dbl_fd_readable((int)mysql_get_socket(c->my))) c->broken = 1;
  return !c->broken;
}
static uint64_t my_trips(dbl_conn *c) { return c->trips; }

static void my_close(dbl_conn *c) {
  if (!c) return;
  dbl_cache_clear(&c->cache, close_stmt);
  if (c->my) mysql_close(c->my);
  dbl_fd_close(c->fd);
  if (c->secret) {
    memset(c->secret, 0, strlen(c->secret));
    free(c->secret);
  }
  free(c);
}

/* One value of information_schema.GLOBAL_STATUS (Galera's wsrep_*), as a
 * scalar subquery. */
#define MY_STATUS(name) \
  "(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '" name "')"

/* The topology guard's questions (driver.h). read_only is the server's
 * state: a user with SUPER (or ALL PRIVILEGES) could still write there. */
static int my_probe(dbl_conn *c, dbl_topology *t, int full, dbl_err *e) {
  dbl_res r;
  int rc;
  memset(t, 0, sizeof *t);
  rc = my_query(c, "SELECT @@global.read_only, @@global.wsrep_on, VERSION()", NULL, 0, &r, e);
  if (rc == DBLOCK_EDB && e->native == 1193) /* not built with wsrep (MySQL) */
    rc = my_query(c, "SELECT @@global.read_only, 0, VERSION()", NULL, 0, &r, e);
  if (rc) return rc;
  t->read_only = dbl_res_i64(&r, 0, 0) != 0;
  t->galera = dbl_res_i64(&r, 0, 1) != 0;
  snprintf(t->server, sizeof t->server, "MariaDB/MySQL %s", dbl_res_get(&r, 0, 2) ? dbl_res_get(&r, 0, 2) : "");
  dbl_res_clear(&r);
  t->standbys = t->sync_standbys = -1;
  if (t->galera) {
    rc = my_query(c,
                  "SELECT " MY_STATUS("WSREP_READY") ", " MY_STATUS("WSREP_LOCAL_STATE") ", "
                  MY_STATUS("WSREP_CLUSTER_SIZE") ", " MY_STATUS("WSREP_CLUSTER_STATUS") ", "
                  "@@global.wsrep_reject_queries",
                  NULL, 0, &r, e);
    if (rc) return rc;
    /* Ready, Synced (4), in the Primary component, and not drained by an
     * operator (wsrep_reject_queries answers clients 1047): it may grant. */
    t->galera_ready = dbl_res_get(&r, 0, 0) && strcasecmp(dbl_res_get(&r, 0, 0), "ON") == 0 &&
                      dbl_res_i64(&r, 0, 1) == 4 && dbl_res_get(&r, 0, 3) &&
                      strcasecmp(dbl_res_get(&r, 0, 3), "Primary") == 0 &&
                      dbl_res_get(&r, 0, 4) && strcasecmp(dbl_res_get(&r, 0, 4), "NONE") == 0;
    t->cluster_size = (int)dbl_res_i64(&r, 0, 2);
    dbl_res_clear(&r);
  }
  if (!full) return 0;
  rc = my_query(c, "SELECT COUNT(*) FROM information_schema.GLOBAL_STATUS "
                   "WHERE VARIABLE_NAME = 'SLAVE_RUNNING' AND VARIABLE_VALUE = 'ON'",
                NULL, 0, &r, e);
  if (rc) return rc;
  t->replica_of = dbl_res_i64(&r, 0, 0) > 0;
  dbl_res_clear(&r);
  rc = my_query(c,
                "SELECT LOWER(VARIABLE_NAME), VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES "
                "WHERE VARIABLE_NAME IN ('INNODB_FLUSH_LOG_AT_TRX_COMMIT', 'SYNC_BINLOG', "
                "'WAIT_TIMEOUT', 'IDLE_TRANSACTION_TIMEOUT', 'IDLE_WRITE_TRANSACTION_TIMEOUT', "
                "'MAX_STATEMENT_TIME', 'INNODB_LOCK_WAIT_TIMEOUT', 'WSREP_SYNC_WAIT', "
                "'RPL_SEMI_SYNC_MASTER_ENABLED', 'LOG_BIN') ORDER BY 1",
                NULL, 0, &r, e);
  if (rc == 0) dbl_topology_settings(t, &r);
  dbl_res_clear(&r);
  return rc;
}

static void my_interrupt(dbl_conn *c);
static void cut_conn(void *c) { my_interrupt(c); }

/* Connects to one host of the URL's list (NULL host: 127.0.0.1). */
static int my_connect_one(dbl_conn **out, const dbl_url *u, const char *host, int port,
                          int64_t timeout_ms, dbl_err *e);

/* Connects to the first host of the list that can take writes: one that is
 * not read-only and, on Galera, synced in the primary component. With a
 * single host the core's guard judges (and words the error); with several,
 * a node that cannot serve is passed over for the next. */
static int my_connect(dbl_conn **out, const dbl_url *u, int64_t timeout_ms, dbl_err *e) {
  int rc = DBLOCK_ECONN;
  *out = NULL;
  if (u->nhosts <= 1)
    return my_connect_one(out, u, u->host, u->port, timeout_ms, e);
  for (int i = 0; i < u->nhosts; i++) {
    dbl_conn *c;
    dbl_topology t;
    if ((rc = my_connect_one(&c, u, u->hosts[i], u->ports[i], timeout_ms, e)) != 0) {
      if (rc == DBLOCK_EAUTH || rc == DBLOCK_EINVAL || rc == DBLOCK_ENOMEM) return rc;
      continue;
    }
    {
      /* Not yet in a call window: bound the probe here (a node that
       * accepted and then stalls must not hold the whole list). */
      dbl_timer tm;
      dbl_timer_start(&tm, timeout_ms > 0 ? timeout_ms : 5000, cut_conn, c);
      rc = my_probe(c, &t, 0, e);
      if (dbl_timer_stop(&tm) && rc == 0)
        rc = dbl_err_set(e, DBLOCK_ECONN, "08S01", 0, "no answer from %s:%d in time",
                         u->hosts[i] ? u->hosts[i] : "127.0.0.1", u->ports[i]);
    }
    if (rc == 0) {
      if (!t.read_only && (!t.galera || t.galera_ready)) {
        *out = c;
        return 0;
      }
      rc = t.read_only ? dbl_err_set(e, DBLOCK_EREPLICA, "HY000", 1290,
                                     "%s:%d is read-only (no host of the list takes writes)",
                                     u->hosts[i] ? u->hosts[i] : "127.0.0.1", u->ports[i])
                       : dbl_err_set(e, DBLOCK_ECONN, "08S01", 1047,
                                     "%s:%d is a Galera node that is not synced in the primary "
                                     "component (no host of the list can serve)",
                                     u->hosts[i] ? u->hosts[i] : "127.0.0.1", u->ports[i]);
    }
    my_close(c);
  }
  return rc;
}

static int my_connect_one(dbl_conn **out, const dbl_url *u, const char *host, int port,
                          int64_t timeout_ms, dbl_err *e) {
  dbl_conn *c = calloc(1, sizeof *c);
  unsigned int tmo = (unsigned int)(timeout_ms > 0 ? (timeout_ms + 999) / 1000 : 5);
  my_bool off = 0;
  const char *socket = dbl_url_param(u, "socket");
  *out = NULL;
  pthread_once(&lib_once, lib_init);
  if (!c) return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  c->lock_wait = -2;
  c->idle_limit = -2;
  c->fd = -1;
  c->autocommit = 1;
  for (int i = 0; i < u->nparams; i++)
    if (strcmp(u->keys[i], "socket") != 0) {
      free(c);
      return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                         "unknown MySQL URL parameter '%s' (known: socket)",
                         u->keys[i]);
    }
  if (u->password && !(c->secret = strdup(u->password))) {
    free(c);
    return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  }
  if (!(c->my = mysql_init(NULL))) {
    my_close(c);
    return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  }
  mysql_thread_init();
  mysql_options(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &tmo);
  mysql_options(c->my, MYSQL_OPT_RECONNECT, &off);
  mysql_options(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  mysql_options(c->my, MYSQL_INIT_COMMAND, "SET time_zone = '+00:00'");
  if (!mysql_real_connect(c->my, host ? host : "127.0.0.1", u->user,
                          u->password, u->dbname, (unsigned)port, socket,
                          CLIENT_MULTI_STATEMENTS)) {
    int rc = fail_my(c, e);
    if (rc == DBLOCK_EDB) rc = dbl_err_set(e, DBLOCK_ECONN, e->sqlstate, e->native, "%s", e->msg);
    my_close(c);
    return rc;
  }
  c->trips++;
  /* Connector/C does not open its socket close-on-exec: without this a
   * program run under the lock (dblock run) would inherit the session. */
  {
    int fd = (int)mysql_get_socket(c->my);
    if (fd >= 0) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    c->fd = dbl_fd_dup(fd);
  }
  *out = c;
  return 0;
}

/* Lock connections keep autocommit off: s itself opens the transaction,
 * no BEGIN round trip. */
static int my_lock_begin(dbl_conn *c, int64_t wait_ms, const dbl_stmt *s, dbl_res *res,
                         dbl_err *e) {
  int rc;
  if ((rc = my_set_lock_wait(c, wait_ms, e)) != 0) return rc;
  if ((rc = my_set_autocommit(c, 0, e)) != 0) return rc;
  return my_query(c, s->sql, s->params, s->nparams, res, e);
}

const dbl_driver dbl_driver_mysql = {
    .version = DBL_DRIVER_VERSION,
    .name = "mysql",
    .dialect = DBL_MY,
    .connect = my_connect,
    .close = my_close,
    .query = my_query,
    .pipeline = my_pipeline,
    .script = my_script,
    .begin = my_begin,
    .commit = my_commit,
    .rollback = my_rollback,
    .now_us = my_now_us,
    .broken = my_broken,
    .idle_alive = my_idle_alive,
    .round_trips = my_trips,
    .set_lock_wait = my_set_lock_wait,
    .set_autocommit = my_set_autocommit,
    .interrupt = my_interrupt,
    .cancel = my_interrupt, /* shutdown(2): async-signal-safe */
    .lock_begin = my_lock_begin,
    .lock_manual_commit = 1,
    .idle_guard = my_idle_guard,
    .probe = my_probe,
};
