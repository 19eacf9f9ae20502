#!/usr/bin/env python3
"""A worker pool whose jobs are fenced writes.

Worker threads take jobs from a queue; each job adds 1 to an account's
balance in the application's own database (PostgreSQL through psycopg2,
MariaDB through PyMySQL), under the lock "account:<id>", and the write is
checked by the database itself: lock.check(cursor) runs dblock_check in
the same transaction, which refuses it (SQLSTATE DBL01) unless this grant
still holds the lock. At the end a holder whose lock was taken from it
(force-unlocked, as if it had been paused past its lease) tries its write
and is refused, and the balances are checked: no update lost, none twice.

    DBLOCK_URL=postgres://app@db/app python3 worker_pool.py [jobs] [workers]
"""
import os
import queue
import sys
import threading
from urllib.parse import unquote, urlparse

import dblock

ACCOUNTS = 4


def connect(url):
    """The application's own connection to the database dblock uses."""
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg2
        return psycopg2.connect(url)
    if url.startswith(("mysql://", "mariadb://")):
        import pymysql
        u = urlparse(url)
        return pymysql.connect(host=u.hostname, port=u.port or 3306, user=unquote(u.username or ""),
                               password=unquote(u.password or ""), database=u.path.lstrip("/"))
    sys.exit("worker_pool: PostgreSQL or MariaDB only (SQLite's check is registered through "
             "the C API: examples/fenced_write.c)")


def refused(e):
    """Whether the database refused the write as fenced (dblock_check)."""
    if getattr(e, "pgcode", None) == "DBL01":  # psycopg2
        return True
    # PyMySQL exposes the error number (1644: a SIGNAL), not the SQLSTATE
    return bool(e.args) and e.args[0] == 1644 and "dblock_check" in str(e.args[-1])


def fenced_add(conn, lock, account):
    """Adds 1 to the account, in one transaction checked by the lock's fence."""
    try:
        with conn.cursor() as cur:
            lock.check(cur)
            cur.execute("UPDATE py_accounts SET balance = balance + 1, last_fence = %s WHERE id = %s",
                        (lock.fence, account))
        conn.commit()
        return True
    except Exception as e:
        conn.rollback()
        if refused(e):
            return False
        raise


def worker(client, url, jobs, counts):
    conn = connect(url)
    while True:
        try:
            account = jobs.get_nowait()
        except queue.Empty:
            break
        with client.lock("account:%d" % account, wait=30) as lock:
            counts[fenced_add(conn, lock, account)] += 1
    conn.close()


def main():
    url = os.environ.get("DBLOCK_URL", "")
    njobs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    nworkers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    conn = connect(url)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS py_accounts "
                    "(id INT PRIMARY KEY, balance BIGINT NOT NULL, last_fence BIGINT)")
        cur.execute("DELETE FROM py_accounts")
        for a in range(ACCOUNTS):
            cur.execute("INSERT INTO py_accounts VALUES (%s, 0, NULL)", (a,))
    conn.commit()
    client = dblock.Client(url)  # insert strategy: fenced writes need a leased one
    client.migrate()
    jobs = queue.Queue()
    for i in range(njobs):
        jobs.put(i % ACCOUNTS)
    counts = {True: 0, False: 0}  # written, refused
    threads = [threading.Thread(target=worker, args=(client, url, jobs, counts))
               for _ in range(nworkers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("%d jobs by %d workers: %d written, %d refused" % (njobs, nworkers, counts[True], counts[False]))

    # A holder that lost its lock: its late write must be refused.
    admin = dblock.Client(url)
    lock = client.lock("account:0")
    lock.acquire()
    admin.force_unlock("account:0")
    stale = fenced_add(conn, lock, 0)
    print("stale write by fence %d: %s" % (lock.fence, "ACCEPTED (bug)" if stale else "REFUSED by the database"))
    try:
        lock.release()
    except dblock.Lost:
        pass
    with conn.cursor() as cur:
        cur.execute("SELECT SUM(balance) FROM py_accounts")
        total = int(cur.fetchone()[0])
    conn.close()
    admin.close()
    client.close()
    ok = total == counts[True] == njobs and not stale
    print("balance %d for %d jobs: %s" % (total, njobs, "no update lost or doubled" if ok else "WRONG"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
