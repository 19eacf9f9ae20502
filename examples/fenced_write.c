/*
 * fenced_write.c — why a fencing token goes with every write.
 *
 * Holder A takes the lock "account-42" with a 1 s lease that is not
 * renewed, then stalls for 1.5 s (a GC pause, a frozen VM, SIGSTOP). Its
 * lease runs out, B takes the lock — with a greater fence — and writes.
 * When A wakes up it still believes it holds the lock and writes too: the
 * account refuses, because the write carries A's fence in its WHERE clause
 * and the account has already seen B's greater one.
 *
 * The account lives in a SQLite file of its own (the application's data),
 * written with libsqlite3 directly; the lock can be in any database dblock
 * supports.
 *
 *   fenced_write [LOCK-URL [ACCOUNT-FILE]]
 *     LOCK-URL      default $DBLOCK_URL (a leased strategy: insert, the
 *                   default, or optimistic; for_update has no lease to run out)
 *     ACCOUNT-FILE  default /tmp/dblock-example-account.db (made afresh)
 */
#define _POSIX_C_SOURCE 200809L
#include <dblock.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <time.h>

static sqlite3 *db;

/* The application's write: balance and the fence it was made under, only
 * if no greater fence has written this row before. 1 = accepted. */
static int write_balance(int64_t balance, int64_t fence) {
  sqlite3_stmt *st;
  int changed;
  if (sqlite3_prepare_v2(db, "UPDATE account SET balance = ?1, fence = ?2 "
                             "WHERE id = 42 AND fence <= ?2", -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(st, 1, balance);
  sqlite3_bind_int64(st, 2, fence);
  changed = sqlite3_step(st) == SQLITE_DONE ? sqlite3_changes(db) : -1;
  sqlite3_finalize(st);
  return changed;
}

static void show_account(void) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT balance, fence FROM account WHERE id = 42", -1, &st,
                         NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    printf("account 42: balance %" PRId64 ", last written under fence %" PRId64 "\n",
           (int64_t)sqlite3_column_int64(st, 0), (int64_t)sqlite3_column_int64(st, 1));
  sqlite3_finalize(st);
}

static int fail(const char *what, dblock_client *c, int rc) {
  dblock_error_info e;
  if (c) dblock_client_last_error(c, &e);
  else dblock_last_error(&e);
  fprintf(stderr, "%s: %s: %s\n", what, dblock_strerror(rc), e.message);
  return 1;
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : NULL;
  const char *file = argc > 2 ? argv[2] : "/tmp/dblock-example-account.db";
  dblock_client *a = NULL, *b = NULL;
  dblock_lock *la, *lb;
  int64_t fa, fb;
  int rc, ok;

  setvbuf(stdout, NULL, _IOLBF, 0); /* (lines in order with dblock's warnings on stderr) */
  if (sqlite3_open(file, &db) != SQLITE_OK ||
      sqlite3_exec(db, "DROP TABLE IF EXISTS account;"
                       "CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER, fence INTEGER);"
                       "INSERT INTO account VALUES (42, 200, 0);", NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "%s: %s\n", file, sqlite3_errmsg(db));
    return 1;
  }
  /* Two clients: two owners, as two processes would be. */
  if ((rc = dblock_client_open(&a, url, NULL)) != 0) return fail("open A", NULL, rc);
  if ((rc = dblock_client_open(&b, url, NULL)) != 0) return fail("open B", NULL, rc);
  if ((rc = dblock_migrate(a, NULL)) != 0) return fail("migrate", a, rc);
  show_account();

  /* lease 1000 ms, explicit: not renewed (a stalled holder renews nothing either) */
  if ((rc = dblock_lock_acquire(&la, a, "account-42", 0, 1000)) != 0) return fail("A acquire", a, rc);
  fa = dblock_lock_fence(la);
  printf("A: granted, fence %" PRId64 "; A stalls for 1.5 s, past its 1 s lease\n", fa);
  nanosleep(&(struct timespec){1, 500000000}, NULL);

  if ((rc = dblock_lock_acquire(&lb, b, "account-42", 2000, 0)) != 0) return fail("B acquire", b, rc);
  fb = dblock_lock_fence(lb);
  ok = write_balance(100, fb);
  printf("B: granted, fence %" PRId64 " (greater); B writes balance 100: %s\n", fb,
         ok == 1 ? "accepted" : "REFUSED");

  ok = write_balance(50, fa);
  printf("A: wakes up and writes balance 50 with fence %" PRId64 ": %s\n", fa,
         ok == 1 ? "accepted" : ok == 0 ? "REFUSED (the account has seen a greater fence)" : "error");
  rc = dblock_lock_release(la);
  printf("A: release: %s\n", rc == 0 ? "ok" : dblock_strerror(rc));
  rc = dblock_lock_release(lb);
  printf("B: release: %s\n", rc == 0 ? "ok" : dblock_strerror(rc));
  show_account();

  dblock_client_free(a);
  dblock_client_free(b);
  sqlite3_close(db);
  return ok == 0 ? 0 : 1; /* 0: the stale write was refused, as it must be */
}
