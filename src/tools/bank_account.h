/*
 * bank_account.h — the account of the dblock-bank demo: one row (a balance
 * and the newest fencing token it accepted) kept in the application's own
 * table, reached through the database's client library directly, as an
 * application would (dblock is not involved). bank_account.c.
 */
#ifndef DBLOCK_TOOLS_BANK_ACCOUNT_H
#define DBLOCK_TOOLS_BANK_ACCOUNT_H

/* Each client library only when its backend is built (make WITH_PG=0 ...). */
#if DBLOCK_WITH_PG
#include <libpq-fe.h>
#endif
#if DBLOCK_WITH_MYSQL
#include <mysql.h>
#endif
#if DBLOCK_WITH_SQLITE
#include <sqlite3.h>
#endif

/* A connection to the account's database. */
typedef struct account {
  int kind; /* 'p', 'm', 's' */
#if DBLOCK_WITH_PG
  PGconn *pg;
#endif
#if DBLOCK_WITH_MYSQL
  MYSQL *my;
#endif
#if DBLOCK_WITH_SQLITE
  sqlite3 *lite;
#endif
} account;

/* Where the account lives: the same database as the locks, except on
 * SQLite, where a for_update lock holds the whole file's write lock and
 * the account therefore needs a file of its own (see docs/limits.md).
 * Returns url or a static buffer (the next call overwrites it). */
const char *acct_url(const char *url);

/* Connects to the account's database for the locks' lock_url (postgres://,
 * mysql:// or mariadb://: the same database; sqlite://: a file of its own,
 * acct_url, with the lock file attached). Returns 0, or -1 after a message
 * on stderr (also for a backend not built in). */
int acct_open(account *a, const char *lock_url);

/* Closes what acct_open opened (also after a failed acct_open). */
void acct_close(account *a);

/* (Re)creates the account table for the locks' url, balance 200 and no
 * fence accepted yet. Returns 0, or -1 after a message on stderr. */
int acct_reset(const char *url);

/* Reads the balance into *balance. Returns 0 or -1. */
int acct_read(account *a, long long *balance);

/* Writes the balance. With fence > 0 the write is fenced: one transaction
 * checks that lock name is held by the grant with that fence
 * (dblock_check) and writes; the database refuses it (returns 1) when it
 * is not. Returns 0 when written, -1 on error. */
int acct_write(account *a, long long balance, const char *name, long long fence);

#endif
