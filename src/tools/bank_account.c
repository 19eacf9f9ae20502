/*
 * bank_account.c — the dblock-bank demo's account: a tiny data layer over
 * the three client libraries (bank_account.h).
 */
#include "bank_account.h"

#include "dblock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The schema scripts from sql/<backend>/bank.sql (embedded at build). */
extern const char bank_sql_postgres[], bank_sql_mysql[], bank_sql_sqlite[];

/* The program's name in messages (as in dblock_bank.c). */
static const char *const prog = "dblock-bank";

#if DBLOCK_WITH_MYSQL

/* Splits mysql://user:pass@host:port/db?socket=... (the application's own
 * connection; dblock parses the same URL for the lock client). */
static int my_open(account *a, const char *url) {
  char buf[1024], *s, *at, *slash, *q, *colon;
  char localhost[] = "127.0.0.1";
  char *user = NULL, *pass = NULL, *host = localhost, *db = NULL, *sock = NULL;
  unsigned port = 0;
  snprintf(buf, sizeof buf, "%s", strstr(url, "://") + 3);
  s = buf;
  if ((q = strchr(s, '?')) != NULL) {
    *q++ = 0;
    if (strncmp(q, "socket=", 7) == 0) sock = q + 7;
  }
  if ((slash = strchr(s, '/')) != NULL) {
    *slash = 0;
    db = slash + 1;
  }
  if ((at = strrchr(s, '@')) != NULL) {
    *at = 0;
    user = s;
    if ((colon = strchr(user, ':')) != NULL) {
      *colon = 0;
      pass = colon + 1;
    }
    s = at + 1;
  }
  if ((colon = strchr(s, ':')) != NULL) {
    *colon = 0;
    port = (unsigned)atoi(colon + 1);
  }
  if (*s) host = s;
  a->my = mysql_init(NULL);
  if (!a->my || !mysql_real_connect(a->my, host, user, pass, db, port, sock,
                                    CLIENT_MULTI_STATEMENTS)) {
    fprintf(stderr, "%s: account connection failed: %s\n", prog,
            a->my ? mysql_error(a->my) : "out of memory");
    return -1;
  }
  return 0;
}
#endif

#if DBLOCK_WITH_PG
/* The account connection's notice processor: the schema script's notices
 * (e.g. "table does not exist, skipping") are no news. */
static void quiet(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}
#endif

#if !DBLOCK_WITH_PG || !DBLOCK_WITH_MYSQL || !DBLOCK_WITH_SQLITE
/* "this demo was built without BACKEND" (make WITH_...=0). */
static int not_built(const char *backend) {
  fprintf(stderr, "%s: built without %s support (rebuild with its client library)\n", prog,
          backend);
  return -1;
}
#endif

int acct_open(account *a, const char *lock_url) {
  const char *url = acct_url(lock_url);
  memset(a, 0, sizeof *a);
  if (strncmp(url, "sqlite://", 9) == 0) {
    a->kind = 's';
#if DBLOCK_WITH_SQLITE
    char attach[1200];
    if (sqlite3_open(url + 9, &a->lite) != SQLITE_OK) {
      fprintf(stderr, "%s: cannot open %s\n", prog, url + 9);
      return -1;
    }
    sqlite3_busy_timeout(a->lite, 10000);
    /* The account is a file of its own: the lock file is attached, and
     * dblock_check registered for its table, so that one transaction
     * checks the lock and writes the account. */
    sqlite3_snprintf(sizeof attach, attach, "ATTACH DATABASE %Q AS locks", lock_url + 9);
    if (sqlite3_exec(a->lite, attach, NULL, NULL, NULL) != SQLITE_OK ||
        dblock_sqlite_check_register(a->lite, "locks", NULL) != 0) {
      fprintf(stderr, "%s: cannot attach the lock file %s: %s\n", prog, lock_url + 9,
              sqlite3_errmsg(a->lite));
      return -1;
    }
    return 0;
#else
    return not_built("SQLite");
#endif
  }
  if (strncmp(url, "mysql://", 8) == 0 || strncmp(url, "mariadb://", 10) == 0) {
    a->kind = 'm';
#if DBLOCK_WITH_MYSQL
    return my_open(a, url);
#else
    return not_built("MySQL/MariaDB");
#endif
  }
  a->kind = 'p';
#if DBLOCK_WITH_PG
  a->pg = PQconnectdb(url);
  if (PQstatus(a->pg) != CONNECTION_OK) {
    fprintf(stderr, "%s: account connection failed: %s", prog, PQerrorMessage(a->pg));
    return -1;
  }
  PQsetNoticeProcessor(a->pg, quiet, NULL);
  return 0;
#else
  return not_built("PostgreSQL");
#endif
}

void acct_close(account *a) {
#if DBLOCK_WITH_PG
  if (a->pg) PQfinish(a->pg);
#endif
#if DBLOCK_WITH_MYSQL
  if (a->my) mysql_close(a->my);
#endif
#if DBLOCK_WITH_SQLITE
  if (a->lite) sqlite3_close(a->lite);
#endif
  (void)a;
}

/* Runs a constant script (the schema from sql/). Returns 0 or -1. */
static int acct_script(account *a, const char *sql) {
#if DBLOCK_WITH_SQLITE
  if (a->kind == 's') return sqlite3_exec(a->lite, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
#endif
#if DBLOCK_WITH_MYSQL
  if (a->kind == 'm') {
    int st;
    if (mysql_real_query(a->my, sql, strlen(sql))) return -1;
    do {
      MYSQL_RES *r = mysql_store_result(a->my);
      if (r) mysql_free_result(r);
      st = mysql_next_result(a->my);
    } while (st == 0);
    return st > 0 ? -1 : 0;
  }
#endif
#if DBLOCK_WITH_PG
  if (a->kind == 'p') {
    PGresult *r = PQexec(a->pg, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? 0 : -1;
  }
#endif
  (void)sql;
  return -1;
}

/* (Values here are integers the program made, so the text forms below
 * carry no outside input.) */
int acct_read(account *a, long long *balance) {
  const char *sql = "SELECT balance FROM dblock_bank_account WHERE id = 1";
#if DBLOCK_WITH_SQLITE
  if (a->kind == 's') {
    sqlite3_stmt *st;
    int ok = 0;
    if (sqlite3_prepare_v2(a->lite, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
      *balance = sqlite3_column_int64(st, 0);
      ok = 1;
    }
    sqlite3_finalize(st);
    return ok ? 0 : -1;
  }
#endif
#if DBLOCK_WITH_MYSQL
  if (a->kind == 'm') {
    MYSQL_RES *r;
    MYSQL_ROW row;
    if (mysql_real_query(a->my, sql, strlen(sql)) || !(r = mysql_store_result(a->my))) return -1;
    row = mysql_fetch_row(r);
    if (row) *balance = atoll(row[0]);
    mysql_free_result(r);
    return row ? 0 : -1;
  }
#endif
#if DBLOCK_WITH_PG
  if (a->kind == 'p') {
    PGresult *r = PQexec(a->pg, sql);
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (ok) *balance = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return ok ? 0 : -1;
  }
#endif
  (void)sql;
  (void)balance;
  return -1;
}

/* The last error on the account's connection. */
static const char *acct_error(account *a) {
#if DBLOCK_WITH_SQLITE
  if (a->kind == 's') return sqlite3_errmsg(a->lite);
#endif
#if DBLOCK_WITH_MYSQL
  if (a->kind == 'm') return mysql_error(a->my);
#endif
#if DBLOCK_WITH_PG
  if (a->kind == 'p') return PQerrorMessage(a->pg);
#endif
  return "unknown error";
}

/* Runs one statement (its result, if any, is dropped): 0, or -1 with the
 * error's SQLSTATE in state (SQLite: the one a dblock_check message
 * names, "dblock_check (DBL01): ...", else ""). */
static int acct_step(account *a, const char *sql, char state[6]) {
  state[0] = 0;
#if DBLOCK_WITH_SQLITE
  if (a->kind == 's') {
    const char *m;
    if (sqlite3_exec(a->lite, sql, NULL, NULL, NULL) == SQLITE_OK) return 0;
    if ((m = strstr(sqlite3_errmsg(a->lite), "dblock_check (")) != NULL)
      snprintf(state, 6, "%s", m + 14);
    return -1;
  }
#endif
#if DBLOCK_WITH_MYSQL
  if (a->kind == 'm') {
    MYSQL_RES *r;
    if (mysql_real_query(a->my, sql, strlen(sql))) {
      snprintf(state, 6, "%s", mysql_sqlstate(a->my));
      return -1;
    }
    /* (a function's error may come with the rows, after the query was
     * accepted) */
    if ((r = mysql_store_result(a->my)) != NULL) mysql_free_result(r);
    else if (mysql_errno(a->my)) {
      snprintf(state, 6, "%s", mysql_sqlstate(a->my));
      return -1;
    }
    return 0;
  }
#endif
#if DBLOCK_WITH_PG
  if (a->kind == 'p') {
    PGresult *r = PQexec(a->pg, sql);
    int st = PQresultStatus(r), ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (!ok && s) snprintf(state, 6, "%s", s);
    PQclear(r);
    return ok ? 0 : -1;
  }
#endif
  (void)sql;
  return -1;
}

int acct_write(account *a, long long balance, const char *name, long long fence) {
  char upd[128], check[512], state[6];
  snprintf(upd, sizeof upd, "UPDATE dblock_bank_account SET balance = %lld WHERE id = 1", balance);
  if (fence <= 0) return acct_step(a, upd, state) == 0 ? 0 : -1;
  /* (the name is the program's own, never outside input) */
  snprintf(check, sizeof check, "SELECT dblock_check('%s', %lld)", name, fence);
  if (acct_step(a, "BEGIN", state) != 0) return -1;
  if (acct_step(a, check, state) != 0) {
    int refused = strcmp(state, "DBL01") == 0;
    if (!refused) fprintf(stderr, "%s: the fence check failed: %s\n", prog, acct_error(a));
    acct_step(a, "ROLLBACK", state);
    return refused ? 1 : -1;
  }
  if (acct_step(a, upd, state) != 0 || acct_step(a, "COMMIT", state) != 0) {
    fprintf(stderr, "%s: the account write failed: %s\n", prog, acct_error(a));
    acct_step(a, "ROLLBACK", state);
    return -1;
  }
  return 0;
}

const char *acct_url(const char *url) {
  static char buf[1100];
  if (strncmp(url, "sqlite://", 9) != 0) return url;
  snprintf(buf, sizeof buf, "%s-account", url);
  return buf;
}

int acct_reset(const char *url) {
  account a;
  int rc;
  if (acct_open(&a, url) != 0) return -1;
  rc = acct_script(&a, a.kind == 's' ? bank_sql_sqlite
                       : a.kind == 'm' ? bank_sql_mysql : bank_sql_postgres);
  if (rc) fprintf(stderr, "%s: cannot create the demo account table\n", prog);
  acct_close(&a);
  return rc;
}
