/*
 * test_faults.c — issue #7's faults against the real servers, one group
 * per backend x strategy (faults/<backend>/<strategy>):
 *   paused     a holder stopped with SIGSTOP past its lease
 *   restart    the server restarted (pg_ctl -m immediate / mariadbd -9)
 *              while locks are held
 *   cut        every connection of the holder cut by a proxy
 *   skew       the other side runs under faketime +/-30 s
 *   ambiguous  a renewal or release whose request or reply is lost
 *   privilege  a role with only SELECT/INSERT/UPDATE/DELETE on the tables
 *   stalled    a relay that stops passing bytes but keeps every socket open
 *              (all connections, or one), also under `dblock run`
 *   idle limit server idle-in-transaction limits below the ping interval
 *   crash      a fence handed out just before a crash (PostgreSQL: one backend
 *              SIGKILLed, the postmaster reinitializes; MariaDB: kill -9)
 *   relstall   a release stalled by the network, then a re-acquire
 * plus, on PostgreSQL only, a frozen backend racing a grant, a frozen
 * for_update holder whose force-unlock queues behind a waiter, clients
 * that find the fencing epoch lost together (backends frozen in turn), the
 * server's refusal to change a vouched epoch, and PgBouncer across a
 * restart; on MariaDB, unusual global sql_modes; on
 * SQLite, clocks stepped with faketime.
 * A holder SIGKILLed mid-section is test_holder_killed in test_conformance.
 *
 * The network faults go through a small TCP proxy in this file rather than
 * socat: it can drop exactly one reply (between request and reply), which
 * a byte pump driven from outside cannot time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drivers/driver.h"
#include "pairs.h" /* (cur, leased, is, group_setup) */
#include "testutil.h"


/* A forked holder still around when a test fails (it may be stopped and
 * holding a lock): the teardown kills it so the next test starts clean. */
static pid_t child;
/* A server backend a test froze with SIGSTOP: teardown lets it go on
 * (SIGCONT) even when the test failed before it did. */
static pid_t frozen;
/* A grandchild (test_fork_child_outlives_killed_holder's), killed by the
 * teardown: it is not ours to reap. */
static pid_t orphan;
/* A connection of the test's own holding a row lock: teardown closes it
 * (which ends its transaction) when the test failed before it did. */
static struct dbl_conn *held_conn;
static const struct dbl_driver *held_drv;


/* ---------------------------------------------------------------- proxy */

enum { PX_PASS, PX_DROP_REPLY, PX_DROP_REQUEST, PX_CUT, PX_STALL, PX_STALL_ONE };
#define PX_MAX 64

/* A TCP proxy on a free loopback port in front of the server. In PASS it
 * relays bytes. DROP_REPLY: the next connection that sends a request has
 * the server's reply thrown away and both sides closed (the statement ran;
 * the client cannot know). DROP_REQUEST: the next request is thrown away
 * and both sides closed (the statement never ran). CUT: every connection is
 * closed and new ones are refused until PASS again. STALL: nothing passes
 * any more, on any connection, old or new, but every socket stays open (a
 * stalled proxy, a one-sided partition, a firewall that drops): the
 * client's kernel even acknowledges what it sends. STALL_ONE: the next
 * request is swallowed and that one connection stalls for good; the others
 * keep passing. */
typedef struct proxy {
  int lfd, port, upstream;
  pthread_t th;
  atomic_int mode, stop, dropped, stalls;
  int cfd[PX_MAX], sfd[PX_MAX], victim[PX_MAX], stalled[PX_MAX];
} proxy;

static void px_close_pair(proxy *p, int i) {
  if (p->cfd[i] >= 0) close(p->cfd[i]);
  if (p->sfd[i] >= 0) close(p->sfd[i]);
  p->cfd[i] = p->sfd[i] = -1;
  p->victim[i] = 0;
  p->stalled[i] = 0;
}

static int px_connect_upstream(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Moves one chunk from connection i's side `from` to the other side,
 * applying the mode. */
static void px_pump(proxy *p, int i, int from_client) {
  char buf[65536];
  int from = from_client ? p->cfd[i] : p->sfd[i], to = from_client ? p->sfd[i] : p->cfd[i];
  ssize_t n = read(from, buf, sizeof buf);
  int mode = atomic_load(&p->mode);
  if (n <= 0) {
    px_close_pair(p, i);
    return;
  }
  if (from_client && mode == PX_DROP_REQUEST) {
    atomic_store(&p->mode, PX_PASS);
    atomic_fetch_add(&p->dropped, 1);
    px_close_pair(p, i);
    return;
  }
  if (from_client && mode == PX_STALL_ONE) {
    atomic_store(&p->mode, PX_PASS);
    atomic_fetch_add(&p->stalls, 1);
    p->stalled[i] = 1; /* the request is swallowed; nothing more passes */
    return;
  }
  if (from_client && mode == PX_DROP_REPLY) {
    atomic_store(&p->mode, PX_PASS);
    p->victim[i] = 1;
  }
  if (!from_client && p->victim[i]) {
    atomic_fetch_add(&p->dropped, 1);
    px_close_pair(p, i);
    return;
  }
  for (ssize_t off = 0; off < n;) {
    ssize_t w = write(to, buf + off, (size_t)(n - off));
    if (w <= 0) {
      px_close_pair(p, i);
      return;
    }
    off += w;
  }
}

static void *px_main(void *arg) {
  proxy *p = arg;
  while (!atomic_load(&p->stop)) {
    struct pollfd fds[1 + 2 * PX_MAX];
    int idx[1 + 2 * PX_MAX], nf = 0;
    if (atomic_load(&p->mode) == PX_CUT)
      for (int i = 0; i < PX_MAX; i++) px_close_pair(p, i);
    fds[nf].fd = p->lfd;
    fds[nf++].events = POLLIN;
    for (int i = 0; i < PX_MAX; i++)
      if (p->cfd[i] >= 0 && !p->stalled[i] && atomic_load(&p->mode) != PX_STALL) {
        idx[nf] = i;
        fds[nf].fd = p->cfd[i];
        fds[nf++].events = POLLIN;
        idx[nf] = -1 - i;
        fds[nf].fd = p->sfd[i];
        fds[nf++].events = POLLIN;
      }
    if (poll(fds, (nfds_t)nf, 20) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      int c = accept(p->lfd, NULL, NULL), slot = -1;
      for (int i = 0; i < PX_MAX && c >= 0; i++)
        if (p->cfd[i] < 0) {
          slot = i;
          break;
        }
      if (c >= 0 && (slot < 0 || atomic_load(&p->mode) == PX_CUT)) {
        close(c);
      } else if (c >= 0) {
        p->sfd[slot] = px_connect_upstream(p->upstream);
        if (p->sfd[slot] < 0) close(c);
        else p->cfd[slot] = c;
        if (p->sfd[slot] >= 0 && atomic_load(&p->mode) == PX_STALL) p->stalled[slot] = 1;
      }
    }
    for (int k = 1; k < nf; k++) {
      int i = idx[k] >= 0 ? idx[k] : -1 - idx[k];
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[k].fd != (idx[k] >= 0 ? p->cfd[i] : p->sfd[i])) continue; /* closed meanwhile */
      px_pump(p, i, idx[k] >= 0);
    }
  }
  for (int i = 0; i < PX_MAX; i++) px_close_pair(p, i);
  close(p->lfd);
  return NULL;
}

/* The proxies running now: a test that fails leaves its proxy running
 * (cmocka jumps out of the test), and teardown stops it. */
static proxy *px_running[4];

static void px_start(proxy *p, int upstream) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  memset(p, 0, sizeof *p);
  for (int i = 0; i < PX_MAX; i++) p->cfd[i] = p->sfd[i] = -1;
  p->upstream = upstream;
  p->lfd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(p->lfd >= 0);
  assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(p->lfd, 64), 0);
  /* (a connection reset between poll and accept must not block the
   * proxy's thread: px_stop could never join it) */
  assert_int_equal(fcntl(p->lfd, F_SETFL, O_NONBLOCK), 0);
  assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
  p->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&p->th, NULL, px_main, p), 0);
  for (size_t i = 0; i < sizeof px_running / sizeof px_running[0]; i++)
    if (!px_running[i]) {
      px_running[i] = p;
      return;
    }
  fail_msg("more than 4 proxies at once");
}

static void px_stop(proxy *p) {
  for (size_t i = 0; i < sizeof px_running / sizeof px_running[0]; i++)
    if (px_running[i] == p) {
      px_running[i] = NULL;
      atomic_store(&p->stop, 1);
      pthread_join(p->th, NULL);
    }
}

/* Stops every proxy still running (teardown). */
static void px_stop_all(void) {
  for (size_t i = 0; i < sizeof px_running / sizeof px_running[0]; i++)
    if (px_running[i]) px_stop(px_running[i]);
}

/* The current backend's URL with its port replaced by the proxy's. */
static void px_url(char *out, size_t n, const proxy *p) {
  const char *at = strrchr(cur.url, '@'), *colon = strchr(at, ':'), *slash = strchr(colon, '/');
  snprintf(out, n, "%.*s:%d%s", (int)(colon - cur.url), cur.url, p->port, slash);
}

static int server_port(void) {
  return atoi(getenv(is("postgres") ? "DBLOCK_TEST_PG_PORT" : "DBLOCK_TEST_MY_PORT"));
}

/* ---------------------------------------------------------------- helpers */


static dblock_client *open_on(const char *url, int64_t lease_ms) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  o.strategy = cur.strategy;
  o.table = cur.table;
  o.lease_ms = lease_ms;
  o.on_lost = tu_on_lost;
  o.connect_timeout_ms = 2000;
  return tu_open_opts(url, &o);
}



/* An on_lost callback that records when it first ran (monotonic ms). */
static atomic_llong lost_time;
static void on_lost_timed(const char *name, int64_t fence, int reason, void *arg) {
  long long zero = 0;
  (void)name, (void)fence, (void)reason, (void)arg;
  atomic_fetch_add(&tu_lost_calls, 1); /* (first: whoever sees the time sees the count) */
  atomic_compare_exchange_strong(&lost_time, &zero, (long long)tu_now_ms());
}

/* Waits up to ms for the handle to know it is lost. */
static int wait_lost(const dblock_lock *l, int64_t ms) {
  int64_t end = tu_now_ms() + ms;
  while (!dblock_lock_is_lost(l) && tu_now_ms() < end) tu_sleep_ms(20);
  return dblock_lock_is_lost(l);
}

/* A resource that checks fencing tokens: one row remembering the highest
 * token that wrote to it, and who wrote last. */
static void resource_reset(void) {
  tu_sql(cur.url, "DROP TABLE IF EXISTS fault_resource", NULL);
  tu_sql(cur.url,
         "CREATE TABLE fault_resource (id INT PRIMARY KEY, last_fence BIGINT NOT NULL, "
         "writer VARCHAR(16) NOT NULL)",
         NULL);
  tu_sql(cur.url, "INSERT INTO fault_resource VALUES (1, 0, 'nobody')", NULL);
}

/* Writes as `who` guarded by fence: the resource refuses a token lower
 * than one it has seen. Returns 1 if this writer's write is the last one. */
static int resource_write(const char *who, int64_t fence) {
  char sql[256];
  int64_t n = 0;
  snprintf(sql, sizeof sql,
           "UPDATE fault_resource SET last_fence = %lld, writer = '%s' "
           "WHERE id = 1 AND last_fence <= %lld",
           (long long)fence, who, (long long)fence);
  tu_sql(cur.url, sql, NULL);
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM fault_resource WHERE writer = '%s'", who);
  tu_sql(cur.url, sql, &n);
  return n == 1;
}

/* ---------------------------------------------------------------- paused */

/* A holder stopped with SIGSTOP past its lease. Leased: another client
 * takes over; after SIGCONT the old holder's handle reports lost on its
 * next call (its callback fired) and its write with the old token is
 * refused by the resource. for_update: the stopped session still holds
 * the row lock, so nobody else gets the name while it sleeps; after
 * SIGCONT it still holds and releases normally. */
static void test_paused_holder(void **s) {
  const char *name = tu_name("paused");
  int up[2], down[2], st;
  int64_t fa = 0, fb;
  pid_t pid;
  dblock_client *b = open_on(cur.url, 0);
  dblock_lock *lb;
  char go = 'g';
  (void)s;
  if (leased()) resource_reset(); /* (SQLite for_update holds the whole file) */
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  if ((pid = fork()) == 0) {
    dblock_client *a = NULL;
    dblock_options o = DBLOCK_OPTIONS_INIT;
    dblock_lock *la = NULL;
    int64_t f;
    int rc, bits = 0;
    o.strategy = cur.strategy;
    o.table = cur.table;
    /* (for_update: a lease of 30 s pings every 5 s, each bounded by 5 s,
     * so the 1.3 s stop cannot outlast a ping caught in flight — its cut
     * would end the session) */
    o.lease_ms = leased() ? 1000 : 30000;
    o.on_lost = tu_on_lost;
    atomic_store(&tu_lost_calls, 0);
    if (dblock_client_open(&a, cur.url, &o) || dblock_lock_acquire(&la, a, name, 0, 0)) _exit(99);
    f = dblock_lock_fence(la);
    if (write(up[1], &f, sizeof f) != sizeof f) _exit(99);
    if (read(down[0], &go, 1) != 1) _exit(99);
    /* Woken up: what does the handle say on its next call? */
    rc = dblock_lock_renew(la);
    if (leased()) {
      bits |= rc == DBLOCK_ELOST ? 1 : 0;
      bits |= dblock_lock_is_lost(la) ? 2 : 0;
      bits |= atomic_load(&tu_lost_calls) == 1 ? 4 : 0;
      bits |= dblock_lock_release(la) == DBLOCK_ELOST ? 8 : 0;
    } else {
      bits |= rc == 0 ? 1 : 0;
      bits |= !dblock_lock_is_lost(la) ? 2 : 0;
      bits |= atomic_load(&tu_lost_calls) == 0 ? 4 : 0;
      bits |= dblock_lock_release(la) == 0 ? 8 : 0;
    }
    dblock_client_free(a);
    _exit(bits);
  }
  child = pid;
  close(up[1]);
  close(down[0]);
  assert_int_equal(read(up[0], &fa, sizeof fa), (ssize_t)sizeof fa);
  if (leased()) assert_true(resource_write("A", fa));
  /* (SQLite, leased: not inside a renewal; a for_update holder keeps the
   * file's write lock for its whole hold) */
  if (leased()) tu_stop_between_writes(pid, cur.url);
  else kill(pid, SIGSTOP);
  tu_sleep_ms(1300); /* past the 1 s lease, which nobody renews */
  if (leased()) {
    lb = tu_acquire(b, name, 3000, 0);
    fb = dblock_lock_fence(lb);
    assert_true(fb > fa);
    assert_true(resource_write("B", fb));
  } else {
    assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
    lb = NULL;
  }
  kill(pid, SIGCONT);
  assert_int_equal(write(down[1], &go, 1), 1);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  child = 0;
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) != 15) fail_msg("old holder after SIGCONT: check bits %d, want 15", WEXITSTATUS(st));
  if (leased()) {
    /* The old holder, awake, tries its write with its old token. */
    assert_false(resource_write("A", fa));
    assert_int_equal(dblock_lock_release(lb), 0);
  } else {
    assert_int_equal(tu_try(b, name), 0);
  }
  close(up[0]);
  close(down[1]);
  dblock_client_free(b);
}

/* ---------------------------------------------------------------- restart */

typedef struct hammer {
  dblock_client *c;
  const char *name;
  atomic_int stop;
  int bad_rc, ok, conn_errors;
} hammer;

/* Acquires and releases one name in a loop while the server restarts:
 * every call must come back with a code (no crash, no hang), and only
 * with success, busy or a connection error. */
static void *hammer_main(void *arg) {
  hammer *hm = arg;
  while (!atomic_load(&hm->stop)) {
    dblock_lock *l = NULL;
    int rc = dblock_lock_acquire(&l, hm->c, hm->name, 0, 0);
    if (rc == 0) rc = dblock_lock_release(l);
    if (rc == 0) hm->ok++;
    else if (rc == DBLOCK_ECONN) hm->conn_errors++;
    else if (rc != DBLOCK_EBUSY && rc != DBLOCK_ELOST && rc != DBLOCK_ETIMEOUT) hm->bad_rc = rc;
    tu_sleep_ms(5);
  }
  return NULL;
}

/* A log hook that keeps what it was told (level and text), for
 * asserting on it. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static void log_keep(int level, const char *msg, void *arg) {
  size_t n;
  (void)arg;
  pthread_mutex_lock(&log_mu);
  n = strlen(log_text);
  snprintf(log_text + n, sizeof log_text - n, "%d %s\n", level, msg);
  pthread_mutex_unlock(&log_mu);
}
static int logged(int level, const char *part) {
  char want[64], *p;
  int found = 0;
  snprintf(want, sizeof want, "%d ", level);
  pthread_mutex_lock(&log_mu);
  for (p = log_text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)len, p);
    if (strncmp(line, want, strlen(want)) == 0 && strstr(line, part)) found = 1;
  }
  pthread_mutex_unlock(&log_mu);
  return found;
}

static void restart_server(void) {
  const char *cmd = getenv(is("postgres") ? "DBLOCK_TEST_PG_RESTART" : "DBLOCK_TEST_MY_RESTART");
  assert_non_null(cmd);
  if (system(cmd) != 0) fail_msg("restart failed: %s", cmd);
}

/* The server restarts while A holds a lock. Leased: the row is durable,
 * A's watchdog renews through the restart on fresh connections, nobody
 * else gets the name, and A releases it normally. for_update: the lock
 * ended with A's session; B gets the name, A is told it lost the lock
 * (callback, ELOST on release) and never takes it back. Either way every
 * fence after the restart is above every fence before it, and the clients
 * work again without being reopened. */
static void test_server_restart(void **s) {
  const char *name = tu_name("restart"), *other = tu_name("restart-other");
  dblock_client *a, *b = open_on(cur.url, 10000);
  dblock_lock *la, *lb, *lo;
  int64_t max_before = 0;
  hammer hm = {.c = NULL};
  pthread_t th;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_stats st;
  (void)s;
  /* A logs at INFO into log_text: the restart must show up there as a
   * lost connection and a reconnect (and, for_update, as the loss). */
  o.strategy = cur.strategy;
  o.table = cur.table;
  o.lease_ms = 10000;
  o.on_lost = tu_on_lost;
  o.connect_timeout_ms = 2000;
  o.log = log_keep;
  o.log_level = DBLOCK_LOG_INFO;
  log_text[0] = 0;
  a = tu_open_opts(cur.url, &o);
  atomic_store(&tu_lost_calls, 0);
  for (int i = 0; i < 3; i++) { /* a few grants to have fences before */
    dblock_lock *t = tu_acquire(b, tu_name("before"), 0, 0);
    if (dblock_lock_fence(t) > max_before) max_before = dblock_lock_fence(t);
    assert_int_equal(dblock_lock_release(t), 0);
  }
  la = tu_acquire(a, name, 0, 0);
  if (dblock_lock_fence(la) > max_before) max_before = dblock_lock_fence(la);
  /* (no callback: a hammer release cut by the restart is a loss of its
   * own, which must not count as A's) */
  hm.c = tu_open(cur.url, cur.strategy, cur.table, 10000);
  hm.name = tu_name("restart-hammer");
  assert_int_equal(pthread_create(&th, NULL, hammer_main, &hm), 0);
  restart_server();
  tu_sleep_ms(300);
  atomic_store(&hm.stop, 1);
  pthread_join(th, NULL);
  if (hm.bad_rc) fail_msg("a call during the restart returned %d", hm.bad_rc);

  if (leased()) {
    assert_int_equal(dblock_lock_renew(la), 0); /* the row survived the restart */
    assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
    assert_false(dblock_lock_is_lost(la));
    assert_int_equal(dblock_lock_release(la), 0);
    lb = tu_acquire(b, name, 0, 0);
  } else {
    lb = tu_acquire(b, name, 5000, 0);
    assert_true(wait_lost(la, 5000));
    assert_int_equal(tu_await_lost_calls(1, 2000), 1);
    assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
    assert_int_equal(tu_try(a, name), DBLOCK_EBUSY); /* not silently re-taken */
  }
  if (dblock_lock_fence(lb) <= max_before)
    fail_msg("fence after restart %lld <= %lld before", (long long)dblock_lock_fence(lb),
             (long long)max_before);
  lo = tu_acquire(a, other, 0, 0); /* A works again, same client */
  assert_true(dblock_lock_fence(lo) > max_before);
  assert_int_equal(dblock_lock_release(lo), 0);
  /* What A's log hook and counters saw of the restart. */
  if (!logged(DBLOCK_LOG_INFO, "was lost or cut") || !logged(DBLOCK_LOG_INFO, "reconnected to"))
    fail_msg("A's log hook did not see the connection lost and the reconnect:\n%s", log_text);
  {
    /* the URL's password (postgres://user:PASSWORD@host...) is nowhere */
    const char *at = strchr(cur.url, '@'), *colon = strchr(cur.url + strlen("mysql://"), ':');
    char pw[128];
    assert_true(at && colon && colon < at);
    snprintf(pw, sizeof pw, "%.*s", (int)(at - colon - 1), colon + 1);
    if (strlen(pw) >= 6 && strstr(log_text, pw))
      fail_msg("a log message shows the password:\n%s", log_text);
  }
  if (!leased() && !logged(DBLOCK_LOG_WARNING, "lost"))
    fail_msg("A's log hook was not told of the lost lock:\n%s", log_text);
  assert_int_equal(dblock_client_stats(a, &st, sizeof st), 0);
  if (st.disconnects < 1 || st.connects < 2 || st.grants < 2)
    fail_msg("A's counters: %llu connects, %llu disconnects, %llu grants",
             (unsigned long long)st.connects, (unsigned long long)st.disconnects,
             (unsigned long long)st.grants);
  assert_int_equal(st.losses, leased() ? 0 : 1);
  assert_int_equal(dblock_lock_release(lb), 0);
  /* the hammer's client recovers too (on a new name: a release cut by the
   * restart may have left hm.name held until its lease ends) */
  assert_int_equal(tu_try(hm.c, tu_name("restart-after")), 0);
  dblock_client_free(hm.c);
  dblock_client_free(a);
  dblock_client_free(b);
}

/* ---------------------------------------------------------------- cut */

/* Every connection of the holder is cut (and new ones refused) while it
 * holds the lock. The holder is told it lost the lock (callback, is_lost)
 * — leased: once its lease is over by its own clock; for_update: when its
 * session is found gone — B gets the name, and when the network is back
 * the old holder's calls say lost: it never silently takes the name back. */
static void test_connection_cut(void **s) {
  const char *name = tu_name("cut");
  static proxy px; /* static: a failed test's teardown still stops it */
  char url[512];
  dblock_client *a, *b = open_on(cur.url, 0), *c = open_on(cur.url, 0);
  dblock_lock *la, *lb;
  int64_t t0;
  (void)s;
  px_start(&px, server_port());
  px_url(url, sizeof url, &px);
  a = open_on(url, 1200);
  atomic_store(&tu_lost_calls, 0);
  /* (timed from before the acquire is sent: the loss is due 1,100 ms after
   * the send at the earliest, whatever delays the acquire's answer) */
  t0 = tu_now_ms();
  la = tu_acquire(a, name, 0, 0);
  atomic_store(&px.mode, PX_CUT);
  assert_true(wait_lost(la, 4000));
  if (leased() && tu_now_ms() - t0 < 1000)
    fail_msg("leased holder declared lost %lld ms after its acquire was sent, before its "
             "lease could end",
             (long long)(tu_now_ms() - t0));
  assert_int_equal(tu_await_lost_calls(1, 2000), 1);
  lb = tu_acquire(b, name, 3000, 0);
  atomic_store(&px.mode, PX_PASS);
  assert_int_equal(dblock_lock_renew(la), DBLOCK_ELOST);
  assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  tu_sleep_ms(500); /* give a wrong re-acquire time to happen */
  assert_int_equal(tu_try(c, name), DBLOCK_EBUSY);
  assert_int_equal(dblock_lock_renew(lb), 0);
  assert_int_equal(dblock_lock_release(lb), 0);
  dblock_client_free(a);
  dblock_client_free(b);
  dblock_client_free(c);
  px_stop(&px);
}

/* ---------------------------------------------------------------- stall */

/* Starts a proxy in front of the server and opens a client through it:
 * lease lease_ms, loss margin margin_ms (0: the default), connect timeout
 * 1 s, lost callback cb (tu_lost_calls reset). */
static dblock_client *open_stalling(proxy *px, dblock_lost_fn cb, int64_t lease_ms,
                                    int64_t margin_ms) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  char url[512];
  px_start(px, server_port());
  px_url(url, sizeof url, px);
  o.strategy = cur.strategy;
  o.table = cur.table;
  o.lease_ms = lease_ms;
  o.loss_margin_ms = margin_ms;
  o.on_lost = cb;
  o.connect_timeout_ms = 1000;
  atomic_store(&tu_lost_calls, 0);
  return tu_open_opts(url, &o);
}

/* A's path to the server stalls: the proxy passes nothing any more but
 * keeps every socket open (no FIN, no RST), so A's calls hang rather than
 * fail. Leased: B, direct, waits for the name; A must be told (on_lost) by
 * its own clock before B is granted, although its renewal is stuck; and A's
 * release and client_free come back within their bound. for_update: the
 * server still sees A's session and its row lock, so B stays out; A is
 * told within a ping interval plus the ping's bound (lease 2 s: pings
 * every 667 ms, bounded by 1 s). The loss margin is 800 ms, not the
 * default 100: the callback runs on a worker thread after the flag is set,
 * and the margin is all the slack there is between A told and B granted
 * (with 800 ms: A told at +965 ms, B granted at +1,772 on MariaDB; with
 * 400 ms a loaded host had 400 ms to run A's watchdog and worker); the
 * margin is the option a user sizes for exactly that. That A's flag is
 * set when B is granted is checked on its own. */
static void test_stalled_network(void **s) {
  const char *name = tu_name("stall");
  static proxy px; /* static: a failed test's teardown still stops it */
  dblock_client *a, *b = open_on(cur.url, 0);
  dblock_lock *la, *lb = NULL;
  int64_t t_stall, t_grant = 0, t_told, t0;
  (void)s;
  atomic_store(&lost_time, 0);
  a = open_stalling(&px, on_lost_timed, 2000, 800);
  la = tu_acquire(a, name, 0, 0);
  tu_sleep_ms(900); /* one renewal (or ping) went through the proxy */
  atomic_store(&px.mode, PX_STALL);
  t_stall = tu_now_ms();
  if (leased()) {
    lb = tu_acquire(b, name, 10000, 0);
    t_grant = tu_now_ms();
    if (dblock_lock_is_lost(la) != 1) fail_msg("B was granted while A's lock was not marked lost");
  } else {
    assert_true(wait_lost(la, 4000));
    /* The server still has A's session: nobody else gets the name. */
    assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
    /* (the flag comes first; a worker runs the callback soon after) */
    for (int i = 0; i < 400 && !atomic_load(&lost_time); i++) tu_sleep_ms(5);
  }
  t_told = (int64_t)atomic_load(&lost_time);
  if (t_told == 0) fail_msg("A was never told it lost the lock (stall at %lld)", (long long)t_stall);
  print_message("stall %s/%s: A told at +%lld ms, B granted at %s%lld ms\n", cur.backend,
                dblock_strategy_name(cur.strategy), (long long)(t_told - t_stall),
                leased() ? "+" : "(busy) ", (long long)(leased() ? t_grant - t_stall : 0));
  /* (the last renewal confirmed was sent before the stall: the deadline
   * came at most 1.2 s after it; 1.3 s more (2.3 s in the sanitizer trees)
   * for the watchdog and worker — a tell held up by the stuck call would
   * come at its 10 s limit) */
  if (leased() && t_told - t_stall > tu_bound(TB_LOSS_TOLD))
    fail_msg("A told %lld ms after the stall: its loss deadline was at most 1,200 ms on",
             (long long)(t_told - t_stall));
  if (leased() && t_told >= t_grant)
    fail_msg("A told at +%lld ms, after B was granted at +%lld ms", (long long)(t_told - t_stall),
             (long long)(t_grant - t_stall));
  if (!leased() && t_told - t_stall > 2500)
    fail_msg("for_update holder told only %lld ms after the stall", (long long)(t_told - t_stall));
  assert_int_equal(dblock_lock_is_lost(la), 1);
  assert_int_equal(atomic_load(&tu_lost_calls), 1);
  t0 = tu_now_ms();
  assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  dblock_client_free(a);
  if (tu_now_ms() - t0 > 2000)
    fail_msg("release + client_free took %lld ms with the network stalled", (long long)(tu_now_ms() - t0));
  assert_int_equal(atomic_load(&tu_lost_calls), 1);
  px_stop(&px); /* closes the stalled sockets: A's session ends (the server
                   may take a moment to notice: B waits for it) */
  if (!lb) lb = tu_acquire(b, name, 5000, 0);
  assert_int_equal(dblock_lock_release(lb), 0);
  dblock_client_free(b);
}

/* An acquire with an explicit 1 s lease whose answer never comes (the
 * path stalls after the client's connection is up): it is cut at the
 * lease's loss deadline, 900 ms after it was sent — a grant answered later
 * would be lost at once — not after the 10 s call limit, and says which
 * bound cut it. (for_update has no lease: its acquire has the call limit.) */
static void test_acquire_cut_at_loss_deadline(void **s) {
  const char *name = tu_name("born-lost");
  static proxy px; /* static: a failed test's teardown still stops it */
  dblock_client *a;
  dblock_lock *l = NULL;
  int64_t t0, el;
  int rc;
  (void)s;
  if (!leased()) skip();
  a = open_stalling(&px, NULL, 0, 0);
  /* (the connection is opened and its statements prepared first) */
  assert_int_equal(dblock_lock_release(tu_acquire(a, name, 0, 1000)), 0);
  atomic_store(&px.mode, PX_STALL);
  t0 = tu_now_ms();
  rc = dblock_lock_acquire(&l, a, name, 0, 1000);
  el = tu_now_ms() - t0;
  print_message("born lost %s/%s: cut after %lld ms: %s\n", cur.backend,
                dblock_strategy_name(cur.strategy), (long long)el, tu_errmsg(a));
  if (rc != DBLOCK_ECONN) fail_msg("acquire on a stalled path returned %d, not ECONN", rc);
  if (el < 900 || el > 3000)
    fail_msg("acquire with a 1 s lease cut after %lld ms (its deadline: 900 ms)", (long long)el);
  if (!strstr(tu_errmsg(a), "lease leaves before its loss deadline"))
    fail_msg("the cut does not name the lease's deadline: %s", tu_errmsg(a));
  dblock_client_free(a);
  px_stop(&px);
}

/* Is pid gone (or a zombie)? */
static int pid_dead(long pid) {
  char path[64], buf[256], *rp;
  FILE *f;
  int dead = 1;
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if ((f = fopen(path, "r")) != NULL) {
    if (fgets(buf, sizeof buf, f) && (rp = strrchr(buf, ')')) && rp[1] && rp[2] != 'Z') dead = 0;
    fclose(f);
  }
  return dead;
}

typedef struct taker {
  dblock_client *b;
  const char *name;
  atomic_llong granted_at;
  dblock_lock *l;
} taker;

static void *taker_main(void *arg) {
  taker *t = arg;
  if (dblock_lock_acquire(&t->l, t->b, t->name, 15000, 0) == 0)
    atomic_store(&t->granted_at, (long long)tu_now_ms());
  return NULL;
}

/* `dblock run` through a proxy that stalls: its command (a process that
 * dies on SIGTERM) must be stopped before B, direct, is granted the name
 * and could start its own (lease 2 s). for_update: the server keeps A's
 * session, so B stays out; A's command must be stopped within a ping and
 * its bound (under 3 s); then the proxy is closed, A's session ends and
 * B gets the name. */
static void test_stalled_run(void **s) {
  const char *name = tu_name("stallrun");
  char url[512], cmd[2048], pidfile[256];
  static proxy px; /* static: a failed test's teardown still stops it */
  taker t = {.name = name};
  pthread_t th;
  long apid = 0;
  int64_t t_stall, t_dead = 0, st;
  int px_open = 1;
  FILE *f;
  (void)s;
  px_start(&px, server_port());
  px_url(url, sizeof url, &px);
  snprintf(pidfile, sizeof pidfile, "/tmp/dblock-stallrun-%d", (int)getpid());
  unlink(pidfile);
  snprintf(cmd, sizeof cmd,
           "exec %s/dblock --url '%s' --strategy %s --table %s run --lease 2s %s -- "
           "sh -c 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 100' >/dev/null 2>&1",
           tu_tree(), url,
           dblock_strategy_name(cur.strategy), cur.table, name, pidfile, pidfile, pidfile);
  if ((child = fork()) == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500 && !apid; i++) {
    if ((f = fopen(pidfile, "r")) != NULL) {
      if (fscanf(f, "%ld", &apid) != 1) apid = 0;
      fclose(f);
    }
    if (!apid) tu_sleep_ms(20);
  }
  if (!apid) fail_msg("`dblock run` through the proxy never started its command");
  tu_sleep_ms(800); /* a renewal went through */
  t.b = open_on(cur.url, 0);
  atomic_store(&px.mode, PX_STALL);
  t_stall = tu_now_ms();
  assert_int_equal(pthread_create(&th, NULL, taker_main, &t), 0);
  while (tu_now_ms() - t_stall < 15000 && (!t_dead || !atomic_load(&t.granted_at))) {
    if (!t_dead && pid_dead(apid)) t_dead = tu_now_ms();
    if (t_dead && px_open && !leased()) {
      assert_int_equal(atomic_load(&t.granted_at), 0);
      if (t_dead - t_stall > 3000)
        fail_msg("for_update: A's command stopped only %lld ms after the stall",
                 (long long)(t_dead - t_stall));
      px_stop(&px);
      px_open = 0;
    }
    tu_sleep_ms(2);
  }
  pthread_join(th, NULL);
  if (!t_dead) fail_msg("A's command still runs 15 s after the stall");
  if (!atomic_load(&t.granted_at)) fail_msg("B was never granted the name");
  print_message("stall run %s/%s: A's command stopped at +%lld ms, B granted at +%lld ms\n",
                cur.backend, dblock_strategy_name(cur.strategy), (long long)(t_dead - t_stall),
                (long long)(atomic_load(&t.granted_at) - t_stall));
  if (t_dead >= atomic_load(&t.granted_at))
    fail_msg("A's command ran until +%lld ms, B was granted at +%lld ms",
             (long long)(t_dead - t_stall), (long long)(atomic_load(&t.granted_at) - t_stall));
  st = 0;
  {
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    st = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    child = 0;
  }
  assert_int_equal(st, 4); /* dblock run: lock lost */
  assert_int_equal(dblock_lock_release(t.l), 0);
  dblock_client_free(t.b);
  if (px_open) px_stop(&px);
  unlink(pidfile);
}

/* One client holds two locks; the connection one renewal runs on stalls
 * (and only that one). Neither lock may be lost or left to expire: the
 * stalled renewal is cut at half the time left and asked again on a fresh
 * connection, and the other lock's renewal never waits behind it. Checked
 * from another client: both rows are still held, and A was never told
 * otherwise. for_update: the stalled lock's session is cut (that lock is
 * lost, once) while the other one keeps its pings and stays held. Lease
 * 3 s, watched for two: with 1.5 s the stalled renewal's second ask had
 * 450 ms, too little for a fresh connection's set-up on a loaded host. */
static void test_one_connection_stalled(void **s) {
  const char *n1 = tu_name("stall1"), *n2 = tu_name("stall2");
  static proxy px; /* static: a failed test's teardown still stops it */
  dblock_client *a, *b = open_on(cur.url, 0);
  dblock_lock *l1, *l2;
  dblock_lock_info i1, i2;
  int lost1, lost2;
  (void)s;
  a = open_stalling(&px, tu_on_lost, 3000, 0);
  l1 = tu_acquire(a, n1, 0, 0);
  l2 = tu_acquire(a, n2, 0, 0);
  atomic_store(&px.mode, PX_STALL_ONE);
  tu_sleep_ms(6000); /* two leases */
  assert_int_equal(atomic_load(&px.stalls), 1);
  assert_int_equal(dblock_lock_inspect(&i1, b, n1), 0);
  assert_int_equal(dblock_lock_inspect(&i2, b, n2), 0);
  lost1 = dblock_lock_is_lost(l1);
  lost2 = dblock_lock_is_lost(l2);
  if (leased()) {
    if (!i1.held || !i2.held) fail_msg("held after the stall: %s %d, %s %d", n1, i1.held, n2, i2.held);
    assert_int_equal(lost1 + lost2, 0);
    assert_int_equal(atomic_load(&tu_lost_calls), 0);
    assert_int_equal(dblock_lock_release(l1), 0);
    assert_int_equal(dblock_lock_release(l2), 0);
  } else {
    /* exactly one lock lost (the stalled one); the other held and pinged */
    assert_int_equal(lost1 + lost2, 1);
    assert_int_equal(atomic_load(&tu_lost_calls), 1);
    assert_int_equal(lost1 ? i2.held : i1.held, 1);
    assert_int_equal(dblock_lock_release(lost1 ? l2 : l1), 0);
    assert_int_equal(dblock_lock_release(lost1 ? l1 : l2), DBLOCK_ELOST);
  }
  dblock_client_free(a);
  px_stop(&px);
  dblock_client_free(b);
}

static void my_admin(const char *sql) { tu_admin_sql("mysql", sql); }
static void pg_admin(const char *sql) { tu_admin_sql("postgres", sql); }

/* A server idle limit shorter than the lock's pings must not end a held
 * for_update transaction silently: PostgreSQL's role setting
 * idle_in_transaction_session_timeout = 2s, MariaDB's global
 * idle_transaction_timeout = 2 (both inherited by new sessions). The
 * holder keeps the name past 4 s, nobody else gets it, and it releases
 * normally. (Leased strategies hold nothing open between calls.) */
static void test_server_idle_limit(void **s) {
  const char *name = tu_name("idle");
  dblock_client *a, *b = open_on(cur.url, 0);
  dblock_lock *la;
  int busy;
  (void)s;
  if (is("postgres")) {
    tu_sql(cur.url, "ALTER ROLE CURRENT_USER SET idle_in_transaction_session_timeout = '2s'", NULL);
  } else {
    my_admin("SET GLOBAL idle_transaction_timeout = 2, GLOBAL wait_timeout = 2");
  }
  a = open_on(cur.url, 30000); /* pings every 5 s: longer than the limit */
  atomic_store(&tu_lost_calls, 0);
  la = tu_acquire(a, name, 0, 0);
  tu_sleep_ms(4000);
  busy = tu_try(b, name);
  if (is("postgres"))
    tu_sql(cur.url, "ALTER ROLE CURRENT_USER RESET idle_in_transaction_session_timeout", NULL);
  else
    my_admin("SET GLOBAL idle_transaction_timeout = 0, GLOBAL wait_timeout = 28800");
  if (leased()) {
    assert_int_equal(busy, DBLOCK_EBUSY);
    assert_int_equal(dblock_lock_release(la), 0);
  } else {
    if (busy != DBLOCK_EBUSY) fail_msg("another owner got the name (rc %d) while A held it", busy);
    assert_int_equal(dblock_lock_is_lost(la), 0);
    assert_int_equal(atomic_load(&tu_lost_calls), 0);
    assert_int_equal(dblock_lock_release(la), 0);
  }
  dblock_client_free(a);
  dblock_client_free(b);
}

/* ------------------------------------------------------------ sql_mode */

/* The global sql_mode a MariaDB server may run with must not change what
 * a grant hands out: each mode below (new sessions inherit it) once broke
 * or could break a token expression — a NULL fence stored as 0 by a
 * non-strict UPDATE ('' is NULL under EMPTY_STRING_IS_NULL), a check that
 * reads a column assigned earlier in the same UPDATE (SIMULTANEOUS_
 * ASSIGNMENT makes it read the old value), an error that non-strict mode
 * turns into a warning. Under each: three grants with positive,
 * increasing tokens; a held for_update lock shown with its token; and a
 * row whose fence is ahead of the sequence still gets a token above it. */
static const char *const unusual_modes[] = {
    "''",
    "'EMPTY_STRING_IS_NULL'",
    "'STRICT_TRANS_TABLES,EMPTY_STRING_IS_NULL,SIMULTANEOUS_ASSIGNMENT'",
    "'ANSI,NO_BACKSLASH_ESCAPES'",
};

static int restore_sql_mode(void **state) {
  (void)state;
  my_admin("SET GLOBAL sql_mode = DEFAULT");
  return 0;
}

static void grants_under_mode(const char *mode) {
  char sql[256];
  const char *name = tu_name("mode");
  dblock_client *a, *b;
  dblock_lock *l;
  dblock_lock_info info;
  int64_t prev = 0;
  snprintf(sql, sizeof sql, "SET GLOBAL sql_mode = %s", mode);
  my_admin(sql);
  a = open_on(cur.url, 0);
  b = open_on(cur.url, 0);
  for (int i = 0; i < 4; i++) {
    if (i == 3) { /* the row ahead of the sequence */
      snprintf(sql, sizeof sql, "UPDATE %s SET fence = %lld WHERE name = '%s'", cur.table,
               (long long)(prev + (INT64_C(1) << 50)), name);
      tu_sql(cur.url, sql, NULL);
      prev += INT64_C(1) << 50;
    }
    l = tu_acquire(a, name, 0, 0);
    if (dblock_lock_fence(l) <= prev)
      fail_msg("sql_mode %s, grant %d: fence %lld not above %lld", mode, i,
               (long long)dblock_lock_fence(l), (long long)prev);
    prev = dblock_lock_fence(l);
    assert_int_equal(dblock_lock_inspect(&info, b, name), 0);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.fence, prev);
    assert_int_equal(dblock_lock_release(l), 0);
  }
  dblock_client_free(a);
  dblock_client_free(b);
}

static void test_unusual_sql_modes(void **s) {
  (void)s;
  for (size_t i = 0; i < sizeof unusual_modes / sizeof unusual_modes[0]; i++)
    grants_under_mode(unusual_modes[i]);
}

/* ---------------------------------------------------------------- skew */

/* Runs `dblock ARGS` (the normal build: libfaketime and the sanitizer
 * runtimes do not mix) under faketime with the given clock offset, on the
 * current backend, strategy and table. In the background when bg is set
 * (its pid goes to `child`); otherwise returns its exit status. */
static int skewed(const char *offset, int bg, const char *args) {
  char cmd[1024];
  int st;
  pid_t pid;
  snprintf(cmd, sizeof cmd,
           "exec faketime -f '%s' build/dblock --url '%s' --strategy %s --table %s %s "
           ">/dev/null 2>&1",
           offset, cur.url, dblock_strategy_name(cur.strategy), cur.table, args);
  if ((pid = fork()) == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  assert_true(pid > 0);
  if (bg) {
    child = pid;
    return 0;
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The other side's clock is 30 s ahead or behind. Leases follow the
 * server's clock: a lock taken by a skewed client is neither free early
 * nor held too long, and a skewed client cannot take a live lock but can
 * take an expired one at once. for_update has no lease: a skewed holder
 * (`dblock run`, renewing by session pings on its monotonic clock) keeps
 * the name exactly as long as it runs, and a skewed taker gets busy. */
static void test_clock_skew(void **s) {
  static const char *const offsets[] = {"+30s", "-30s"};
  dblock_client *b = open_on(cur.url, 0);
  char args[256];
  (void)s;
  for (int k = 0; k < 2; k++) {
    const char *name = tu_name("skew-held");
    int64_t t0;
    dblock_lock *lb;
    int st;
    if (leased()) {
      /* Read off the server's own clock (not timed here: the skewed
       * command's start-up under faketime is part of any timing taken
       * outside): its lease is 1.5 s long by the server's clock, and b
       * is granted only once it has ended. */
      dblock_lock_info si, bi;
      snprintf(args, sizeof args, "acquire '%s' --lease 1500ms --wait 0", name);
      assert_int_equal(skewed(offsets[k], 0, args), 0);
      assert_int_equal(dblock_lock_inspect(&si, b, name), 0);
      if (si.expires_at_us - si.acquired_at_us != 1500000)
        fail_msg("a client at %s got a lease of %lld us by the server's clock", offsets[k],
                 (long long)(si.expires_at_us - si.acquired_at_us));
      assert_int_equal(tu_try(b, name), DBLOCK_EBUSY); /* not early */
      lb = tu_acquire(b, name, 5000, 0);
      assert_int_equal(dblock_lock_inspect(&bi, b, name), 0);
      if (bi.acquired_at_us < si.expires_at_us)
        fail_msg("a lease taken by a client at %s was taken over %lld us before its end",
                 offsets[k], (long long)(si.expires_at_us - bi.acquired_at_us));
    } else {
      dblock_lock_info si;
      snprintf(args, sizeof args, "run '%s' --lease 600ms -- sleep 1.5", name);
      skewed(offsets[k], 1, args);
      /* (held by the skewed run: looked at, not slept on) */
      for (int i = 0; i < 250; i++) {
        if (dblock_lock_inspect(&si, b, name) == 0 && si.held) break;
        tu_sleep_ms(20);
      }
      assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
      tu_sleep_ms(700); /* two of the holder's 200 ms pings later */
      assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
      assert_int_equal(waitpid(child, &st, 0), child);
      child = 0;
      assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      lb = tu_acquire(b, name, 0, 0);
    }
    assert_int_equal(dblock_lock_release(lb), 0);

    /* The skewed client as the one trying to take a live lock. */
    name = tu_name("skew-taker");
    lb = tu_acquire(b, name, 0, leased() ? 1500 : 0);
    t0 = tu_now_ms(); /* (the lease ends 1.5 s after the grant, before this) */
    snprintf(args, sizeof args, leased() ? "acquire '%s' --lease 1s --wait 0"
                                         : "run '%s' --wait 0 -- true", name);
    assert_int_equal(skewed(offsets[k], 0, args), 3); /* busy */
    if (leased()) {
      tu_sleep_ms(1700 - (tu_now_ms() - t0));
      assert_int_equal(skewed(offsets[k], 0, args), 0);
      assert_int_equal(dblock_lock_release(lb), DBLOCK_ELOST);
    } else {
      assert_int_equal(dblock_lock_release(lb), 0);
      assert_int_equal(skewed(offsets[k], 0, args), 0);
    }
  }
  dblock_client_free(b);
}

/* ---------------------------------------------------------------- ambiguous */

/* A force-unlock run by another client at the moment a release, whose
 * reply was lost, is about to ask again (the library logs that it asks
 * again just before it does). */
struct reask_race {
  dblock_client *other;
  const char *name;
  int drop; /* 0: force-unlock; 1: release of the grant by its token */
  atomic_int forced;
};
static void *force_unlock_main(void *arg) {
  struct reask_race *r = arg;
  dblock_lock_info i;
  if (r->drop) {
    if (dblock_lock_inspect(&i, r->other, r->name) == 0 &&
        dblock_release_grant(r->other, r->name, i.owner_token, i.owner_thread, i.fence) == 0)
      atomic_store(&r->forced, 1);
  } else if (dblock_force_unlock(r->other, r->name, NULL) == 0) {
    atomic_store(&r->forced, 1);
  }
  return NULL;
}
static void force_on_reask(int level, const char *msg, void *arg) {
  struct reask_race *r = arg;
  pthread_t th;
  (void)level;
  /* (in a thread of its own: a dblock call from inside a log hook is
   * refused with DBLOCK_EDEADLK) */
  if (strstr(msg, "asking again") && !atomic_load(&r->forced) &&
      pthread_create(&th, NULL, force_unlock_main, r) == 0)
    pthread_join(th, NULL);
}

/* One renewal or release whose reply (or request) is lost on the way: the
 * library asks again by owner token on a fresh connection and reports the
 * true state. */
static void test_ambiguous_outcome(void **s) {
  static proxy px; /* static: a failed test's teardown still stops it */
  char url[512];
  dblock_client *a, *b = open_on(cur.url, 0);
  dblock_lock *la, *lb;
  dblock_lock_info info;
  const char *name = tu_name("ambig");
  (void)s;
  px_start(&px, server_port());
  px_url(url, sizeof url, &px);
  a = open_on(url, 0);
  atomic_store(&tu_lost_calls, 0);

  /* renewal: reply lost, then request lost — both renewed */
  for (int mode = PX_DROP_REPLY; mode <= PX_DROP_REQUEST; mode++) {
    la = tu_acquire(a, name, 0, leased() ? 30000 : 0);
    atomic_store(&px.mode, mode);
    if (leased()) {
      int64_t before = dblock_lock_expires_at(la);
      tu_sleep_ms(20);
      if (dblock_lock_renew(la) != 0) fail_msg("renew, mode %d: %s", mode, tu_errmsg(a));
      assert_true(dblock_lock_expires_at(la) > before);
      assert_int_equal(dblock_lock_inspect(&info, b, name), 0);
      assert_int_equal(info.held, 1);
      assert_int_equal(info.fence, dblock_lock_fence(la));
      assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
      /* release: the same loss; the name ends up free either way */
      atomic_store(&px.mode, mode);
      if (dblock_lock_release(la) != 0) fail_msg("release, mode %d: %s", mode, tu_errmsg(a));
    } else {
      /* for_update: losing the session ends the transaction, which is
       * the lock: a renewal (session ping) reports lost... */
      assert_int_equal(dblock_lock_renew(la), DBLOCK_ELOST);
      assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
      /* ...and a release whose COMMIT (or its reply) is lost has freed
       * the name either way, but says lost: whether the session died
       * before the COMMIT or after it nobody can tell, and "lost" is the
       * answer that never overstates what the lock protected. */
      la = tu_acquire(a, name, 0, 0);
      atomic_store(&px.mode, mode);
      assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
    }
    assert_true(atomic_load(&px.dropped) >= 1);
    atomic_store(&px.dropped, 0);
    lb = tu_acquire(b, name, 2000, 0);
    assert_int_equal(dblock_lock_release(lb), 0);
  }
  if (leased()) {
    /* a renewal that comes too late: expired and taken over meanwhile.
     * Past the loss deadline the client's clock refuses it (and the
     * release) without a word to the server — nothing reaches the proxy,
     * whose replies would be dropped — so the row stays b's. */
    la = tu_acquire(a, name, 0, 1500); /* (1.4 s to answer through the proxy) */
    tu_sleep_ms(1700);
    lb = tu_acquire(b, name, 0, 0);
    atomic_store(&px.mode, PX_DROP_REPLY);
    assert_int_equal(dblock_lock_renew(la), DBLOCK_ELOST);
    assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
    assert_int_equal(atomic_load(&px.dropped), 0);
    assert_int_equal(dblock_lock_renew(lb), 0);
    assert_int_equal(dblock_lock_release(lb), 0);

    /* a release whose reply is lost, and a force-unlock before it asks
     * again: the grant was ended by someone else, not by this release
     * (both leave the row free, only the force-unlock changes its owner
     * and fence) — lost, though the lease has long to run */
    {
      /* (static: a failed assertion leaves c, and its hook, behind) */
      static struct reask_race race;
      race.other = b;
      race.name = name;
      race.drop = 0;
      atomic_store(&race.forced, 0);
      dblock_options o = DBLOCK_OPTIONS_INIT;
      dblock_client *c;
      o.strategy = cur.strategy;
      o.table = cur.table;
      o.on_lost = tu_on_lost;
      o.log = force_on_reask;
      o.log_arg = &race;
      o.log_level = DBLOCK_LOG_INFO;
      o.call_timeout_ms = 1000; /* (the stalled release below is cut after 1 s) */
      /* (the late renewal above was answered without a round trip: its
       * handle was already lost, so the drop is still armed) */
      atomic_store(&px.mode, PX_PASS);
      c = tu_open_opts(url, &o);
      la = tu_acquire(c, name, 0, 30000);
      atomic_store(&px.mode, PX_DROP_REPLY);
      assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
      assert_int_equal(atomic_load(&race.forced), 1);
      /* the hard variant: the release's connection stalls with its socket
       * open (nothing closes it); the call is cut at the call limit, and
       * the force-unlock comes before the second look */
      atomic_store(&race.forced, 0);
      la = tu_acquire(c, name, 0, 30000);
      atomic_store(&px.mode, PX_STALL_ONE);
      assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
      assert_int_equal(atomic_load(&race.forced), 1);
      assert_int_equal(atomic_load(&px.stalls), 1);
      /* the same with the grant released by another process (dblock
       * release --token) — the request lost this time, so the row is
       * still held when the other process frees it: ended by someone
       * else too */
      race.drop = 1;
      atomic_store(&race.forced, 0);
      la = tu_acquire(c, name, 0, 30000);
      atomic_store(&px.mode, PX_DROP_REQUEST);
      assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
      assert_int_equal(atomic_load(&race.forced), 1);
      /* ...while an untouched one is released (the first attempt ran) */
      la = tu_acquire(c, name, 0, 30000);
      atomic_store(&race.forced, 1); /* (the hook does nothing now) */
      atomic_store(&px.mode, PX_DROP_REPLY);
      assert_int_equal(dblock_lock_release(la), 0);
      assert_int_equal(dblock_lock_inspect(&info, b, name), 0);
      assert_int_equal(info.held, 0);
      dblock_client_free(c);
    }
  }
  atomic_store(&px.mode, PX_PASS);
  dblock_client_free(a);
  dblock_client_free(b);
  px_stop(&px);
}

/* ---------------------------------------------------------------- privilege */

/* A role with only SELECT/INSERT/UPDATE/DELETE on the lock table and its
 * migrations table (and, on PostgreSQL, USAGE/UPDATE on the fence
 * sequence; MariaDB: INSERT/SELECT on it for NEXTVAL) can acquire, renew,
 * release and reap. The tables are created by the owner. */
static void test_least_privilege(void **s) {
  const char *app = getenv(is("postgres") ? "DBLOCK_TEST_PG_APP_URL" : "DBLOCK_TEST_MY_APP_URL");
  char sql[1024];
  dblock_client *c;
  dblock_lock *l;
  int64_t deleted = 0, n = 0;
  const char *name = tu_name("lp");
  (void)s;
  assert_non_null(app);
  if (is("postgres"))
    snprintf(sql, sizeof sql,
             "GRANT SELECT, INSERT, UPDATE, DELETE ON %s, %s_migrations TO dblock_app; "
             "GRANT SELECT, INSERT, UPDATE ON %s_alive TO dblock_app; "
             "GRANT USAGE, SELECT, UPDATE ON SEQUENCE %s_fence_seq TO dblock_app; "
             "GRANT SELECT, INSERT, UPDATE, DELETE ON %s_queue TO dblock_app",
             cur.table, cur.table, cur.table, cur.table, cur.table);
  else
    snprintf(sql, sizeof sql,
             "GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO 'dblock_app'@'127.0.0.1'; "
             "GRANT SELECT ON %s_migrations TO 'dblock_app'@'127.0.0.1'; "
             "GRANT SELECT, INSERT, UPDATE ON %s_alive TO 'dblock_app'@'127.0.0.1'; "
             "GRANT SELECT, INSERT ON %s_fence_seq TO 'dblock_app'@'127.0.0.1'",
             cur.table, cur.table, cur.table, cur.table);
  if (is("postgres")) {
    tu_sql(cur.url, sql, NULL); /* the table owner may grant */
  } else {
    /* MariaDB: only an account WITH GRANT OPTION may: the server's root */
    char cmd[1400];
    const char *admin = getenv("DBLOCK_TEST_MY_ADMIN");
    assert_non_null(admin);
    snprintf(cmd, sizeof cmd, "echo \"%s\" | %s", sql, admin);
    if (system(cmd) != 0) fail_msg("grant failed: %s", cmd);
  }
  c = open_on(app, 0);
  l = tu_acquire(c, name, 0, leased() ? 5000 : 0);
  if (dblock_lock_renew(l) != 0) fail_msg("renew as app role: %s", tu_errmsg(c));
  if (dblock_lock_release(l) != 0) fail_msg("release as app role: %s", tu_errmsg(c));
  /* an expired row for the reaper (a 1 s lease: with 100 ms, the acquire
   * had 50 ms to answer before its loss deadline, and a loaded host can
   * overrun that) */
  l = tu_acquire(c, tu_name("lp-expired"), 0, leased() ? 1000 : 0);
  if (leased()) tu_sleep_ms(1200);
  else assert_int_equal(dblock_lock_release(l), 0);
  if (dblock_reap(c, 0, 100, &deleted) != 0) fail_msg("reap as app role: %s", tu_errmsg(c));
  if (leased()) {
    assert_true(deleted >= 1);
    assert_int_equal(dblock_lock_release(l), DBLOCK_ELOST);
  }
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE name LIKE 'lp-expired%%'", cur.table);
  tu_sql(cur.url, sql, &n);
  if (leased()) assert_int_equal(n, 0);
  dblock_client_free(c);
}

/* ---------------------------------------------------------------- fences */

/* Opens a client once the server answers again (up to 30 s). */
static dblock_client *open_when_back(void) {
  int64_t end = tu_now_ms() + 30000;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c = NULL;
  o.strategy = cur.strategy;
  o.table = cur.table;
  o.connect_timeout_ms = 1000;
  while (dblock_client_open(&c, cur.url, &o) != 0) {
    if (tu_now_ms() > end) fail_msg("the server did not come back: %s", tu_errmsg(NULL));
    tu_sleep_ms(100);
  }
  return c;
}

/* Sets up a PostgreSQL crash: the WAL writer slowed to 10 s (so that
 * unflushed commits stay unflushed) and a victim — a backend of our own
 * user (so its query is visible), asleep in a forked child — whose SIGKILL
 * makes the postmaster reinitialize: every session ends and unflushed WAL
 * is lost. Returns the child (to reap); *victim = the backend's pid. Undo
 * with pg_crash_done. */
static pid_t pg_crash_victim(int64_t *victim) {
  pid_t sleeper;
  pg_admin("ALTER SYSTEM SET wal_writer_delay = '10s'");
  pg_admin("SELECT pg_reload_conf()");
  if ((sleeper = fork()) == 0) {
    dbl_conn *c;
    dbl_err e;
    const dbl_driver *d;
    if (!(c = tu_conn(cur.url, &d))) _exit(1);
    d->query(c, "SELECT pg_sleep(60)", NULL, 0, NULL, &e);
    _exit(0);
  }
  *victim = 0;
  for (int i = 0; i < 100 && !*victim; i++) {
    tu_sql(cur.url, "SELECT COALESCE(MAX(pid), 0) FROM pg_stat_activity "
                    "WHERE query = 'SELECT pg_sleep(60)'", victim);
    if (!*victim) tu_sleep_ms(50);
  }
  if (!*victim) fail_msg("no backend to kill");
  return sleeper;
}

static void pg_crash_done(pid_t sleeper) {
  if (sleeper > 0) waitpid(sleeper, NULL, 0);
  pg_admin("ALTER SYSTEM RESET wal_writer_delay");
  pg_admin("SELECT pg_reload_conf()");
}

/* The server crashes right after a grant, before its sequence value was
 * flushed. PostgreSQL: an unrelated backend is SIGKILLed (the OOM killer's
 * way) with restart_after_crash on: the postmaster reinitializes without
 * restarting, so its start time does not change; the WAL writer is slowed
 * to 10 s and a checkpoint runs first, so the grant's nextval is logged
 * afresh and lost with the unflushed WAL (for_update commits nothing while
 * held). MariaDB: mariadbd SIGKILLed and started again. Either way the next
 * grant's fence must be greater than the one before the crash. */
static void test_crash_fence(void **s) {
  const char *name = tu_name("crash");
  dblock_client *a, *b;
  dblock_lock *la, *lb;
  int64_t f1, f2, victim = 0;
  pid_t sleeper = 0;
  (void)s;
  if (is("postgres")) {
    sleeper = pg_crash_victim(&victim);
  }
  a = open_on(cur.url, 1000);
  if (is("postgres")) {
    la = tu_acquire(a, name, 0, 0); /* creates the row (flushed) */
    assert_int_equal(dblock_lock_release(la), 0);
    pg_admin("CHECKPOINT");
  }
  la = tu_acquire(a, name, 0, 0);
  f1 = dblock_lock_fence(la);
  if (is("postgres")) assert_int_equal(kill((pid_t)victim, SIGKILL), 0);
  else restart_server();
  b = open_when_back();
  /* A's handle: for_update lost it with the session; a leased row survived
   * and is released (or, if the call raced the restart, left to expire). */
  {
    int rc = dblock_lock_release(la);
    if (rc != 0 && rc != DBLOCK_ELOST && rc != DBLOCK_ECONN)
      fail_msg("release after the crash: %d (%s)", rc, tu_errmsg(a));
  }
  dblock_client_free(a);
  lb = tu_acquire(b, name, 10000, 0);
  f2 = dblock_lock_fence(lb);
  if (f2 <= f1)
    fail_msg("fence after the crash %lld is not above %lld, handed out before it",
             (long long)f2, (long long)f1);
  assert_int_equal(dblock_lock_release(lb), 0);
  dblock_client_free(b);
  if (is("postgres")) pg_crash_done(sleeper);
}

/* PostgreSQL insert / optimistic: a release commits without waiting for
 * its flush. The server crashes right after one (a backend SIGKILLed, the
 * postmaster reinitializes, unflushed WAL is lost): the release is gone,
 * and the name comes back held by an owner that let it go. Nobody else
 * may take it before its lease ends (the row says held), the old owner
 * may take it again at once — afresh, with a greater fence, since its
 * client knows it holds nothing — and after that release the other
 * client's grant is greater still. */
static void test_crash_after_release(void **s) {
  const char *name = tu_name("crashrel");
  dblock_client *a, *b;
  dblock_lock *la, *lb = NULL;
  int64_t f1, f2, victim, end;
  pid_t sleeper;
  int rc;
  (void)s;
  if (!is("postgres") || !leased()) skip();
  sleeper = pg_crash_victim(&victim);
  a = open_on(cur.url, 20000);
  assert_int_equal(dblock_lock_release(tu_acquire(a, name, 0, 0)), 0); /* creates the row */
  pg_admin("CHECKPOINT");
  la = tu_acquire(a, name, 0, 0);
  f1 = dblock_lock_fence(la);
  assert_int_equal(dblock_lock_release(la), 0);
  assert_int_equal(kill((pid_t)victim, SIGKILL), 0);
  b = open_when_back();
  rc = dblock_lock_acquire(&lb, b, name, 0, 0);
  if (rc != DBLOCK_EBUSY)
    fail_msg("after the crash the lost release should leave the name held: try gave %d", rc);
  for (end = tu_now_ms() + 10000; (rc = dblock_lock_acquire(&la, a, name, 0, 0)) != 0;) {
    if (rc != DBLOCK_ECONN || tu_now_ms() > end)
      fail_msg("the old owner's acquire after the crash: %d (%s)", rc, tu_errmsg(a));
    tu_sleep_ms(100);
  }
  f2 = dblock_lock_fence(la);
  if (f2 <= f1)
    fail_msg("the old owner got fence %lld after the crash, not above its %lld", (long long)f2,
             (long long)f1);
  assert_int_equal(dblock_lock_release(la), 0);
  lb = tu_acquire(b, name, 5000, 0);
  if (dblock_lock_fence(lb) <= f2)
    fail_msg("fence %lld is not above %lld", (long long)dblock_lock_fence(lb), (long long)f2);
  assert_int_equal(dblock_lock_release(lb), 0);
  dblock_client_free(b);
  dblock_client_free(a);
  pg_crash_done(sleeper);
}

/* A release whose answer never comes: the path to the server stalls (no
 * byte passes, every socket stays open, new connections hang too), so the
 * release is cut by its bound (call limit 1 s) and its second look cannot
 * connect: it returns an error. When the path comes back the stalled
 * request may still reach the server late. The same thread then acquires
 * the name again: a fresh grant — a greater fence, one hold — never the
 * old fence passed off as new. */
static void test_reacquire_after_failed_release(void **s) {
  const char *name = tu_name("relstall");
  dblock_options o = DBLOCK_OPTIONS_INIT;
  static proxy px; /* static: a failed test's teardown still stops it */
  char url[512];
  dblock_client *a;
  dblock_lock *la;
  int64_t f1;
  int rc;
  (void)s;
  px_start(&px, server_port());
  px_url(url, sizeof url, &px);
  o.strategy = cur.strategy;
  o.table = cur.table;
  o.lease_ms = 5000;
  o.connect_timeout_ms = 1000;
  o.call_timeout_ms = 1000;
  a = tu_open_opts(url, &o);
  la = tu_acquire(a, name, 0, 0);
  f1 = dblock_lock_fence(la);
  atomic_store(&px.mode, PX_STALL);
  rc = dblock_lock_release(la);
  if (rc != (leased() ? DBLOCK_ECONN : DBLOCK_ELOST))
    fail_msg("release with the network stalled: %d (%s)", rc, tu_errmsg(a));
  atomic_store(&px.mode, PX_PASS);
  la = tu_acquire(a, name, 5000, 0);
  if (dblock_lock_fence(la) <= f1 || dblock_lock_hold_count(la) != 1)
    fail_msg("re-acquire after a failed release: fence %lld (before %lld), hold count %d",
             (long long)dblock_lock_fence(la), (long long)f1, dblock_lock_hold_count(la));
  assert_int_equal(dblock_lock_release(la), 0);
  dblock_client_free(a);
  px_stop(&px);
}

/* A thread that acquires name (waiting up to wait_ms), holds it hold_ms
 * and releases; or, through force_main, force-unlocks it. */
typedef struct racer {
  dblock_client *c;
  const char *name;
  int64_t wait_ms, hold_ms;
  int rc, release_rc;
  int64_t fence;
} racer;

static void *racer_main(void *arg) {
  racer *r = arg;
  dblock_lock *l = NULL;
  r->rc = dblock_lock_acquire(&l, r->c, r->name, r->wait_ms, 0);
  if (r->rc == 0) {
    r->fence = dblock_lock_fence(l);
    tu_sleep_ms(r->hold_ms);
    r->release_rc = dblock_lock_release(l);
  }
  return NULL;
}

/* PostgreSQL, insert: A's granting statement draws its fence, then waits
 * behind another session's uncommitted row for the name; its backend is
 * frozen (SIGSTOP) while that session rolls back and B makes a whole
 * acquire and release with a later (greater) fence; then A's backend goes
 * on. A must not be granted a fence below B's. */
static void test_insert_fence_race(void **s) {
  const char *name = tu_name("race");
  char sql[512];
  dbl_conn *x;
  dbl_err e;
  const dbl_driver *d;
  dblock_client *b = open_on(cur.url, 0);
  dblock_lock *lb;
  racer ra = {.name = name};
  pthread_t th;
  int64_t pid = 0, fb;
  dbl_param p = DBL_STR(name);
  (void)s;
  memset(&e, 0, sizeof e);
  assert_non_null(x = tu_conn(cur.url, &d));
  assert_int_equal(d->begin(x, &e), 0);
  snprintf(sql, sizeof sql,
           "INSERT INTO %s (name, strategy, state, version, owner_token, hold_count, fence, "
           "expires_at) VALUES (?, 'insert', 1, 1, 'x', 1, 1, now() + interval '1 hour')",
           cur.table);
  assert_int_equal(d->query(x, sql, &p, 1, NULL, &e), 0);
  ra.c = open_on(cur.url, 0);
  assert_int_equal(pthread_create(&th, NULL, racer_main, &ra), 0);
  snprintf(sql, sizeof sql,
           "SELECT COALESCE(MAX(pid), 0) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
           "AND query LIKE 'INSERT INTO %%.%s AS l%%'", cur.table);
  for (int i = 0; i < 400 && !pid; i++) {
    tu_sql(cur.url, sql, &pid);
    if (!pid) tu_sleep_ms(2);
  }
  if (!pid) fail_msg("A's statement never waited");
  frozen = (pid_t)pid;
  assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
  assert_true(tu_all_threads_stopped((int)pid)); /* (frozen before the test goes on) */
  assert_int_equal(d->rollback(x, &e), 0);
  d->close(x);
  lb = tu_acquire(b, name, 0, 0);
  fb = dblock_lock_fence(lb);
  assert_int_equal(dblock_lock_release(lb), 0);
  assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
  frozen = 0;
  pthread_join(th, NULL);
  if (ra.rc == 0 && ra.fence <= fb)
    fail_msg("A was granted fence %lld after B's %lld", (long long)ra.fence, (long long)fb);
  if (ra.rc != 0 && ra.rc != DBLOCK_EBUSY) fail_msg("A: rc %d (%s)", ra.rc, tu_errmsg(ra.c));
  dblock_client_free(ra.c);
  dblock_client_free(b);
}

static void *force_main(void *arg) {
  racer *f = arg;
  f->rc = dblock_force_unlock(f->c, f->name, &f->fence);
  return NULL;
}

/* Waits until n sessions wait for a lock in a statement matching like. */
static void await_lock_waiters(const char *like, int64_t n) {
  char sql[512];
  int64_t got = 0;
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
           "AND query LIKE '%s'",
           like);
  for (int i = 0; i < 1000 && got < n; i++) {
    tu_sql(cur.url, sql, &got);
    if (got < n) tu_sleep_ms(5);
  }
  if (got < n) fail_msg("%lld of %lld sessions waiting on '%s'", (long long)got, (long long)n, like);
}

/* PostgreSQL, for_update: force-unlock of a holder H while a waiter W is
 * queued on the row. H's backend is frozen (SIGSTOP), so the force-unlock's
 * kill cannot end it yet and its statement queues behind W; then H's
 * backend goes on and dies, W is granted (drawing its token now) and
 * releases, and the force-unlock's statement runs. The token it reports
 * must be above W's: an UPDATE that drew it before waiting would not draw
 * again, since W's grant locked the row without changing it. */
static void test_force_unlock_behind_waiter(void **s) {
  const char *name = tu_name("forcewait");
  char sql[256];
  dblock_client *h = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0);
  racer w = {.c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0),
             .name = name,
             .wait_ms = 20000,
             .hold_ms = 300};
  racer f = {.c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0), .name = name};
  dblock_lock *lh = tu_acquire(h, name, 0, 0);
  pthread_t tw, tf;
  int64_t pid = 0;
  (void)s;
  snprintf(sql, sizeof sql,
           "SELECT COALESCE(MAX(pid), 0) FROM pg_stat_activity WHERE application_name "
           "LIKE 'dblock %lld %%'",
           (long long)dblock_lock_fence(lh));
  tu_sql(cur.url, sql, &pid);
  if (!pid) fail_msg("the holder's session not found");
  assert_int_equal(pthread_create(&tw, NULL, racer_main, &w), 0);
  await_lock_waiters("WITH f AS MATERIALIZED (SELECT fence FROM%", 1);
  frozen = (pid_t)pid;
  assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
  assert_true(tu_all_threads_stopped((int)pid)); /* (frozen before the test goes on) */
  assert_int_equal(pthread_create(&tf, NULL, force_main, &f), 0);
  await_lock_waiters("%SET state = 0, hold_count = 0%", 1);
  assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
  frozen = 0;
  pthread_join(tw, NULL);
  pthread_join(tf, NULL);
  assert_int_equal(w.rc, 0);
  assert_int_equal(w.release_rc, 0);
  if (f.rc != 0) fail_msg("force-unlock: rc %d (%s)", f.rc, tu_errmsg(f.c));
  if (f.fence <= w.fence)
    fail_msg("force-unlock reported %lld, not above the waiter's %lld", (long long)f.fence,
             (long long)w.fence);
  assert_int_equal(dblock_lock_release(lh), DBLOCK_ELOST);
  dblock_client_free(h);
  dblock_client_free(w.c);
  dblock_client_free(f.c);
}

/* The pid of the newest session waiting for a lock in a statement
 * matching like (0 if none). */
static int64_t newest_lock_waiter(const char *like) {
  char sql[512];
  int64_t pid = 0;
  snprintf(sql, sizeof sql,
           "SELECT COALESCE((SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
           "AND query LIKE '%s' ORDER BY query_start DESC LIMIT 1), 0)",
           like);
  tu_sql(cur.url, sql, &pid);
  return pid;
}

/* PostgreSQL, for_update: after a crash every client's next grant finds
 * the epoch lost, and they bump it side by side. A for_update grant reads
 * the epoch in the snapshot its statement took before it waited for the
 * row, so the epoch must not move again once vouched for: if it did, a
 * waiter that read it before the move, overtaken after the release by a
 * client that read it after (PostgreSQL row locks let a newcomer take a
 * freed row before a woken waiter), is granted a token below that
 * client's. Made to happen in order: two bumpers P and Q queue on the ''
 * row behind the test's own lock, Q's backend frozen; P bumps and vouches;
 * H holds the name and W queues for it; Q goes on (and must not move the
 * epoch again); W's backend is frozen while H releases and Z takes the
 * name and lets it go; then W goes on. W's token must be above Z's, and
 * the two bumpers must have moved the epoch once. (CI saw this as one
 * fence regression in test_contention, whose workers start on the epoch
 * that test_faults' crashes emptied.) */
static void test_epoch_bump_race(void **s) {
  const char *name = tu_name("epochrace");
  char sql[256], bump_like[160], take_like[128];
  static char p_name[128], q_name[128];
  /* (static: a failed assertion leaves their threads running) */
  static racer p, q, w;
  dbl_conn *x;
  dbl_err e;
  const dbl_driver *d;
  dblock_client *h = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0),
                *z = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0);
  dblock_lock *lh, *lz;
  pthread_t tp, tq, tw;
  int64_t e0 = 0, e1 = 0, pid, fz;
  (void)s;
  snprintf(p_name, sizeof p_name, "%s", tu_name("epochrace-p"));
  snprintf(q_name, sizeof q_name, "%s", tu_name("epochrace-q"));
  p = (racer){.c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0),
              .name = p_name,
              .wait_ms = 10000};
  q = (racer){.c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0),
              .name = q_name,
              .wait_ms = 10000};
  w = (racer){.c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0),
              .name = name,
              .wait_ms = 10000};
  /* (the bump's statement that waits for the '' row — EPOCH_BUMP in
   * src/sql/postgres.c, and before the fix its UPDATE — and the for_update
   * grant's, FU_TAKE, on this table) */
  snprintf(bump_like, sizeof bump_like,
           "BEGIN%%; SET LOCAL synchronous_commit = on; %% %%.%s %%WHERE name = ''''%%", cur.table);
  snprintf(take_like, sizeof take_like, "WITH f AS MATERIALIZED (SELECT fence FROM %%.%s WHERE%%",
           cur.table);
  /* the rows exist (created under the current epoch) */
  assert_int_equal(dblock_lock_release(tu_acquire(h, name, 0, 0)), 0);
  assert_int_equal(dblock_lock_release(tu_acquire(h, p_name, 0, 0)), 0);
  assert_int_equal(dblock_lock_release(tu_acquire(h, q_name, 0, 0)), 0);
  snprintf(sql, sizeof sql, "SELECT fence FROM %s WHERE name = ''", cur.table);
  tu_sql(cur.url, sql, &e0);
  tu_lose_epoch(cur.url, cur.table); /* what a crash does */
  memset(&e, 0, sizeof e);
  assert_non_null(x = tu_conn(cur.url, &d));
  held_conn = x;
  held_drv = d;
  snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM %s WHERE name = '' FOR UPDATE", cur.table);
  assert_int_equal(d->script(x, sql, &e), 0);
  assert_int_equal(pthread_create(&tp, NULL, racer_main, &p), 0);
  await_lock_waiters(bump_like, 1);
  assert_int_equal(pthread_create(&tq, NULL, racer_main, &q), 0);
  await_lock_waiters(bump_like, 2);
  if (!(pid = newest_lock_waiter(bump_like))) fail_msg("Q's bump is not waiting");
  frozen = (pid_t)pid;
  assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
  assert_true(tu_all_threads_stopped((int)pid)); /* (frozen before the test goes on) */
  assert_int_equal(d->script(x, "COMMIT", &e), 0);
  held_conn = NULL;
  d->close(x);
  pthread_join(tp, NULL);
  if (p.rc != 0) fail_msg("P: rc %d (%s)", p.rc, tu_errmsg(p.c));
  lh = tu_acquire(h, name, 0, 0);
  assert_int_equal(pthread_create(&tw, NULL, racer_main, &w), 0);
  await_lock_waiters(take_like, 1);
  assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
  frozen = 0;
  pthread_join(tq, NULL);
  if (q.rc != 0) fail_msg("Q: rc %d (%s)", q.rc, tu_errmsg(q.c));
  if (!(pid = newest_lock_waiter(take_like))) fail_msg("W is not waiting");
  frozen = (pid_t)pid;
  assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
  assert_true(tu_all_threads_stopped((int)pid)); /* (frozen before the test goes on) */
  assert_int_equal(dblock_lock_release(lh), 0);
  if (dblock_lock_acquire(&lz, z, name, 2000, 0) != 0)
    fail_msg("Z did not take the name before the frozen W: %s", tu_errmsg(z));
  fz = dblock_lock_fence(lz);
  assert_int_equal(dblock_lock_release(lz), 0);
  assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
  frozen = 0;
  pthread_join(tw, NULL);
  if (w.rc != 0) fail_msg("W: rc %d (%s)", w.rc, tu_errmsg(w.c));
  snprintf(sql, sizeof sql, "SELECT fence FROM %s WHERE name = ''", cur.table);
  tu_sql(cur.url, sql, &e1);
  if (w.fence <= fz)
    fail_msg("W was granted fence %lld (epoch %lld) after Z's %lld (epoch %lld); the two bumpers "
             "moved the epoch from %lld to %lld",
             (long long)w.fence, (long long)(w.fence >> 40), (long long)fz,
             (long long)(fz >> 40), (long long)e0, (long long)e1);
  if (e1 != e0 + 1)
    fail_msg("two clients that found the epoch lost together moved it from %lld to %lld",
             (long long)e0, (long long)e1);
  dblock_client_free(h);
  dblock_client_free(z);
  dblock_client_free(p.c);
  dblock_client_free(q.c);
  dblock_client_free(w.c);
}

/* Runs sql on a connection of the test's own and expects the server to
 * refuse it with SQLSTATE state. */
static void expect_refused(const char *sql, const char *state) {
  const dbl_driver *d;
  dbl_conn *x;
  dbl_err e;
  int rc;
  memset(&e, 0, sizeof e);
  assert_non_null(x = tu_conn(cur.url, &d));
  rc = d->script(x, sql, &e);
  d->close(x);
  if (rc == 0) fail_msg("the server ran '%s'", sql);
  if (strcmp(e.sqlstate, state) != 0)
    fail_msg("'%s' failed with %s (%s), not %s", sql, e.sqlstate, e.msg, state);
}

static void test_epoch_kept(void **s) {
  char sql[512], t_alive[96];
  dblock_client *c = tu_open(cur.url, DBLOCK_STRATEGY_FOR_UPDATE, cur.table, 0);
  dblock_lock *l;
  int64_t epoch = 0, now = 0, durable = 0;
  (void)s;
  snprintf(t_alive, sizeof t_alive, "%s_alive", cur.table);
  tu_lose_epoch(cur.url, cur.table);
  assert_int_equal(dblock_lock_release(tu_acquire(c, tu_name("kept"), 0, 0)), 0);
  snprintf(sql, sizeof sql, "SELECT epoch FROM %s", t_alive);
  tu_sql(cur.url, sql, &epoch);
  snprintf(sql, sizeof sql, "UPDATE %s SET epoch = epoch + 1", t_alive);
  expect_refused(sql, "55000");
  snprintf(sql, sizeof sql, "DELETE FROM %s", t_alive);
  expect_refused(sql, "55000");
  /* an old client's bump (before this fix) once the row is moved, then
   * its vouch: the vouch runs while it changes nothing, and is refused
   * after a second bump moved the durable epoch */
  {
    char bump[160];
    snprintf(bump, sizeof bump, "UPDATE %s SET fence = fence + 1 WHERE name = ''", cur.table);
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, epoch) SELECT 1, fence FROM %s WHERE name = '' "
             "ON CONFLICT (id) DO UPDATE SET epoch = GREATEST(%s.epoch, excluded.epoch)",
             t_alive, cur.table, t_alive);
    tu_sql(cur.url, sql, NULL);
    tu_sql(cur.url, bump, NULL);
    expect_refused(sql, "55000");
  }
  snprintf(sql, sizeof sql, "SELECT epoch FROM %s", t_alive);
  tu_sql(cur.url, sql, &now);
  if (now != epoch) fail_msg("the vouched epoch went from %lld to %lld", (long long)epoch, (long long)now);
  l = tu_acquire(c, tu_name("kept"), 0, 0);
  if (dblock_lock_fence(l) >> 40 != epoch)
    fail_msg("a grant drew epoch %lld, not the vouched %lld", (long long)(dblock_lock_fence(l) >> 40),
             (long long)epoch);
  assert_int_equal(dblock_lock_release(l), 0);
  /* TRUNCATE: the next grant advances the epoch past the durable one */
  tu_lose_epoch(cur.url, cur.table);
  snprintf(sql, sizeof sql, "SELECT fence FROM %s WHERE name = ''", cur.table);
  tu_sql(cur.url, sql, &durable);
  l = tu_acquire(c, tu_name("kept"), 0, 0);
  if (dblock_lock_fence(l) >> 40 != durable + 1)
    fail_msg("after TRUNCATE a grant drew epoch %lld, not %lld",
             (long long)(dblock_lock_fence(l) >> 40), (long long)(durable + 1));
  assert_int_equal(dblock_lock_release(l), 0);
  dblock_client_free(c);
}

/* PostgreSQL behind PgBouncer in transaction pooling mode: the proxy keeps
 * its client connections across a server crash-restart (pg_ctl -m
 * immediate). A client opened before the restart and one opened after it
 * take turns on one name: every fence must be greater than the one before,
 * whichever client draws it. */
static void test_pooler_restart(void **s) {
  const char *url = getenv("DBLOCK_TEST_PGB_URL"), *name = tu_name("pooler");
  dblock_client *a, *b, *c;
  dblock_lock *l = NULL;
  int64_t prev;
  (void)s;
  assert_non_null(url);
  a = open_on(url, 5000);
  l = tu_acquire(a, name, 0, 0);
  prev = dblock_lock_fence(l);
  assert_int_equal(dblock_lock_release(l), 0);
  restart_server();
  b = open_when_back();
  dblock_client_free(b);
  b = open_on(url, 5000);
  for (int i = 0; i < 8; i++) {
    int rc, tries = 0;
    c = i % 2 ? a : b;
    /* (a proxy may answer once with an error for a server connection
     * that died in the restart) */
    while ((rc = dblock_lock_acquire(&l, c, name, 5000, 0)) == DBLOCK_ECONN && tries++ < 3) {
    }
    if (rc != 0) fail_msg("acquire %d through the proxy: %d %s", i, rc, tu_errmsg(c));
    if (dblock_lock_fence(l) <= prev)
      fail_msg("grant %d (%s client) got fence %lld after %lld", i, i % 2 ? "old" : "new",
               (long long)dblock_lock_fence(l), (long long)prev);
    prev = dblock_lock_fence(l);
    assert_int_equal(dblock_lock_release(l), 0);
  }
  dblock_client_free(a);
  dblock_client_free(b);
}

/* SQLite: processes whose clocks differ share one file. One 10 s behind
 * gets a fence above every fence handed out before (a released name and a
 * new one). One 40 s ahead sees a live 30 s lease as over: leases on
 * SQLite are measured by each process's own clock (docs/limits.md),
 * so it takes the name; what must hold is that its fence is greater and
 * the holder's next call says lost. for_update: a file lock, no clock. */
static void test_sqlite_clock_step(void **s) {
  const char *name = tu_name("step"), *fresh = tu_name("step-new");
  char args[512], out[128];
  dblock_client *a = open_on(cur.url, 0);
  dblock_lock *la;
  int64_t f1, f2 = 0;
  FILE *f;
  int st;
  (void)s;
  snprintf(out, sizeof out, "/tmp/dblock-step-%d", (int)getpid());
  la = tu_acquire(a, name, 0, 0);
  f1 = dblock_lock_fence(la);
  assert_int_equal(dblock_lock_release(la), 0);
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args, "run '%s' -- sh -c \"echo \\$DBLOCK_FENCE > %s\"", k ? fresh : name, out);
    assert_int_equal(skewed("-10s", 0, args), 0);
    assert_non_null(f = fopen(out, "r"));
    assert_int_equal(fscanf(f, "%ld", &f2), 1);
    fclose(f);
    if (f2 <= f1)
      fail_msg("a process 10 s behind got fence %lld after %lld", (long long)f2, (long long)f1);
  }
  la = tu_acquire(a, name, 0, 0);
  f1 = dblock_lock_fence(la);
  snprintf(args, sizeof args, "run --wait 0 '%s' -- sh -c \"echo \\$DBLOCK_FENCE > %s\"", name, out);
  st = skewed("+40s", 0, args);
  if (leased()) {
    assert_int_equal(st, 0); /* documented: taken by the clock 40 s ahead */
    assert_non_null(f = fopen(out, "r"));
    assert_int_equal(fscanf(f, "%ld", &f2), 1);
    fclose(f);
    assert_true(f2 > f1);
    assert_int_equal(dblock_lock_renew(la), DBLOCK_ELOST);
    assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
  } else {
    assert_int_equal(st, 3); /* busy */
    assert_int_equal(dblock_lock_release(la), 0);
  }
  unlink(out);
  dblock_client_free(a);
}

/* ------------------------------------------------------------- fork */

/* Waits up to ms for child pid to exit; 1 if it did (*st its status). */
static int exited_within(pid_t pid, int64_t ms, int *st) {
  for (int64_t end = tu_now_ms() + ms; tu_now_ms() < end; tu_sleep_ms(20))
    if (waitpid(pid, st, WNOHANG) == pid) return 1;
  return 0;
}

/* A holder forks (a worker pool, a job that forks helpers) and the child
 * uses, then frees, its copy of the client, as an atexit handler or a
 * pool's cleanup would. The child's acquire and its release of the
 * parent's handle are refused (DBLOCK_EINVAL: no watchdog of the client's
 * runs in the child, and the hold is the parent's); its free returns at
 * once (a join of the parent's threads would wait forever) and ends
 * nothing of the parent's (no Terminate or COM_QUIT on the parent's
 * sessions, no shutdown of their sockets): the lock stays held, and the
 * parent releases it and locks again on its own connections. Child exit
 * status: 2 acquire not refused, 3 release not refused. */
static void test_fork_child_frees_client(void **s) {
  const char *name = tu_name("forkfree");
  dblock_client *a = open_on(cur.url, 0), *b = open_on(cur.url, 0);
  dblock_lock *la = tu_acquire(a, name, 0, 0); /* (the watchdog runs now) */
  int st = 0;
  (void)s;
  if ((child = fork()) == 0) {
    dblock_lock *l = NULL;
    if (dblock_lock_acquire(&l, a, tu_name("forkfree-child"), 0, 0) != DBLOCK_EINVAL) _exit(2);
    if (dblock_lock_release(la) != DBLOCK_EINVAL) _exit(3);
    dblock_client_free(a);
    _exit(0);
  }
  if (!exited_within(child, 5000, &st))
    fail_msg("the child's calls and dblock_client_free did not return within 5 s");
  child = 0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("child: %s", !WIFEXITED(st)             ? "killed"
                          : WEXITSTATUS(st) == 2 ? "its acquire on the parent's client was not refused"
                          : WEXITSTATUS(st) == 3 ? "its release of the parent's hold was not refused"
                                                 : "exit status not 0");
  tu_sleep_ms(200); /* (a goodbye sent on the parent's session ends it by now) */
  assert_int_equal(dblock_lock_is_lost(la), 0);
  assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
  /* (for_update: a ping on the pinned session, which a goodbye ended) */
  if (dblock_lock_renew(la) != 0)
    fail_msg("the parent's renewal after the child's free: %s", tu_errmsg(a));
  if (dblock_lock_release(la) != 0)
    fail_msg("the parent's release after the child's free: %s", tu_errmsg(a));
  la = tu_acquire(a, name, 0, 0);
  assert_int_equal(dblock_lock_release(la), 0);
  dblock_client_free(b);
  dblock_client_free(a);
}

/* A client opened, then the process forks before the client has a
 * thread (a daemon that checks its URL in the foreground, then detaches):
 * the child adopts its copy — acquires, releases and frees it, on
 * connections of its own (the inherited ones are the parent's sessions,
 * /dev/null in the child, and are left alone) — and the parent's client
 * still works on its own connection afterwards. A SQLite client is never
 * adopted (SQLite's lock bookkeeping is per process and was copied at the
 * fork): the child's acquire is refused (DBLOCK_EINVAL) and its free only
 * forgets it. */
static void test_fork_child_adopts_unused_client(void **s) {
  const char *name = tu_name("forkadopt");
  dblock_client *a = open_on(cur.url, 0);
  dblock_lock *la;
  int st = 0;
  (void)s;
  if ((child = fork()) == 0) {
    dblock_lock *l = NULL;
    if (is("sqlite")) {
      if (dblock_lock_acquire(&l, a, name, 2000, 0) != DBLOCK_EINVAL) _exit(4);
    } else {
      if (dblock_lock_acquire(&l, a, name, 2000, 0) != 0) _exit(2);
      if (dblock_lock_release(l) != 0) _exit(3);
    }
    dblock_client_free(a);
    _exit(0);
  }
  if (!exited_within(child, 10000, &st)) fail_msg("the child did not finish within 10 s");
  child = 0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("child: %s", !WIFEXITED(st)             ? "killed"
                          : WEXITSTATUS(st) == 2 ? "acquire failed"
                          : WEXITSTATUS(st) == 3 ? "release failed"
                          : WEXITSTATUS(st) == 4 ? "SQLite client's acquire not refused"
                                                 : "exit status not 0");
  la = tu_acquire(a, name, 2000, 0);
  assert_int_equal(dblock_lock_release(la), 0);
  dblock_client_free(a);
}

/* The hard variant of a dead for_update holder: one that forked a child
 * (which touches nothing of dblock's) and is then SIGKILLed while the
 * child lives on. Had the child kept its copies of the holder's sockets,
 * the server would see no close, and the lock would stay held for as long
 * as the child lives; the fork replaced them (driver.c), so another client
 * gets the lock as soon as the holder is dead. */
static void test_fork_child_outlives_killed_holder(void **s) {
  const char *name = tu_name("forkkill");
  dblock_client *b = open_on(cur.url, 0);
  dblock_lock *lb = NULL;
  int ready[2], rc, st;
  int64_t t0;
  (void)s;
  assert_int_equal(pipe(ready), 0);
  if ((child = fork()) == 0) {
    dblock_options o = DBLOCK_OPTIONS_INIT;
    dblock_client *h = NULL;
    dblock_lock *l = NULL;
    pid_t kid;
    close(ready[0]);
    o.strategy = cur.strategy;
    o.table = cur.table;
    if (dblock_client_open(&h, cur.url, &o) != 0 || dblock_lock_acquire(&l, h, name, 0, 0) != 0)
      _exit(1);
    if ((kid = fork()) == 0) {
      close(ready[1]); /* (the test's read must see EOF if the holder dies) */
      for (;;) pause();
    }
    if (write(ready[1], &kid, sizeof kid) != (ssize_t)sizeof kid) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  {
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    rc = poll(&p, 1, 15000) == 1 ? (int)read(ready[0], &orphan, sizeof orphan) : -1;
  }
  close(ready[0]);
  if (rc != (int)sizeof orphan) fail_msg("the holder did not take the lock");
  assert_int_equal(tu_try(b, name), DBLOCK_EBUSY);
  kill(child, SIGKILL);
  waitpid(child, &st, 0);
  child = 0;
  t0 = tu_now_ms();
  rc = dblock_lock_acquire(&lb, b, name, 5000, 0);
  if (rc != 0)
    fail_msg("no grant within 5 s of the holder's SIGKILL while its child lives (%d %s): the "
             "child keeps the holder's session",
             rc, tu_errmsg(b));
  print_message("granted %lld ms after the holder's SIGKILL\n", (long long)(tu_now_ms() - t0));
  assert_int_equal(dblock_lock_release(lb), 0);
  dblock_client_free(b);
}

/* ---------------------------------------------------------------- main */

/* ---- fenced writes under faults (docs/fenced-writes.md) ---------------- */

#define FW_KIDS 4
/* The writers of test_fenced_writes_under_faults, killed by the teardown
 * when the test fails first. */
static pid_t fw_kids[FW_KIDS];
/* What the writers count, in memory shared with the test. */
typedef struct fw_counts {
  atomic_int accepted, refused, failed;
  atomic_int lost; /* writes that found the value changed since they read it */
} fw_counts;

/* One writer, in a process of its own, until end_ms: acquire the name,
 * write the resource in a transaction of its own connection that checks
 * the fence first (unless DBLOCK_TEST_FENCED_NOCHECK is set: what the
 * check prevents), release; random pauses after the grant and inside the
 * transaction leave the nemesis room to stop it there. */
static void fw_writer(const char *name, int64_t end_ms, fw_counts *n, unsigned seed) {
  dblock_client *c = tu_open(cur.url, cur.strategy, cur.table, 1000);
  tu_app *app = tu_app_open(cur.url, cur.table);
  int check = getenv("DBLOCK_TEST_FENCED_NOCHECK") == NULL;
  char sql[512], code[6];
  while (tu_now_ms() < end_ms) {
    dblock_lock *l = NULL;
    int64_t f, seen;
    if (dblock_lock_acquire(&l, c, name, 3000, 0) != 0) continue;
    f = dblock_lock_fence(l);
    tu_sleep_ms(rand_r(&seed) % 50);
    if (tu_app_exec(app, "BEGIN", NULL, NULL) != 0) {
      atomic_fetch_add(&n->failed, 1);
      dblock_lock_release(l);
      continue;
    }
    snprintf(sql, sizeof sql, "SELECT %s_check('%s', %lld)", cur.table, name, (long long)f);
    if (check && tu_app_exec(app, sql, code, NULL) != 0) {
      atomic_fetch_add(strcmp(code, "DBL01") == 0 ? &n->refused : &n->failed, 1);
      tu_app_exec(app, "ROLLBACK", NULL, NULL);
      dblock_lock_release(l);
      continue;
    }
    /* read, pause (the nemesis may land here, inside the transaction),
     * then write what was read + 1 only if nobody changed it meanwhile:
     * last_fence tells whether this write took */
    snprintf(sql, sizeof sql, "SELECT val FROM %s_res WHERE id = 1", cur.table);
    if (tu_app_try_i64(app, sql, &seen) != 0) goto failed;
    tu_sleep_ms(rand_r(&seed) % 20);
    snprintf(sql, sizeof sql,
             "UPDATE %s_res SET val = val + 1, prev = last_fence, last_fence = %lld "
             "WHERE id = 1 AND val = %lld",
             cur.table, (long long)f, (long long)seen);
    if (tu_app_exec(app, sql, NULL, NULL) == 0) {
      int64_t last = 0;
      snprintf(sql, sizeof sql, "SELECT last_fence FROM %s_res WHERE id = 1", cur.table);
      if (tu_app_try_i64(app, sql, &last) != 0) goto failed;
      if (last != f) atomic_fetch_add(&n->lost, 1); /* (another wrote meanwhile) */
      snprintf(sql, sizeof sql,
               "INSERT INTO %s_hist (fence, prev) SELECT last_fence, prev FROM %s_res WHERE id = 1",
               cur.table, cur.table);
      if (tu_app_exec(app, sql, NULL, NULL) == 0 && tu_app_exec(app, "COMMIT", NULL, NULL) == 0) {
        atomic_fetch_add(&n->accepted, 1);
        dblock_lock_release(l);
        continue;
      }
    }
  failed:
    atomic_fetch_add(&n->failed, 1);
    tu_app_exec(app, "ROLLBACK", NULL, NULL);
    dblock_lock_release(l);
  }
  tu_app_close(app);
  dblock_client_free(c);
}

static pid_t fw_spawn(const char *name, int64_t end_ms, fw_counts *n, unsigned seed) {
  pid_t p = fork();
  assert_true(p >= 0);
  if (p == 0) {
    fw_writer(name, end_ms, n, seed);
    _exit(0);
  }
  return p;
}

/* Fenced writes with nemeses, the hard way: 4 processes loop {acquire
 * (1 s lease, renewed), a write in a transaction of their own connection
 * that checks the fence first, release} on one name for 8 s, while every
 * 150-250 ms the one holding the name (by its pid in the lock row) is
 * SIGSTOPped for 1.5 s, four times in five (past its lease: its name is
 * taken over meanwhile, unless its open transaction holds the row), or
 * SIGKILLed and replaced. Each write reads the value, pauses and writes
 * it + 1 only if unchanged: no checked write may find it changed (a later
 * grant's holder wrote between its read and its write), and the history
 * must show every accepted write's fence above the one before it in
 * commit order (the resource row serializes the writes). With
 * DBLOCK_TEST_FENCED_NOCHECK=1 (no check) both fail. */
static void test_fenced_writes_under_faults(void **s) {
  char name[128], sql[512];
  fw_counts *n;
  tu_app *app;
  int64_t end, bad, rows, stops = 0, kills = 0;
  unsigned seed = (unsigned)getpid();
  (void)s;
  if (!leased()) skip(); /* (for_update's check is refused: test_fenced.c) */
  n = mmap(NULL, sizeof *n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(n != MAP_FAILED);
  memset(n, 0, sizeof *n);
  app = tu_app_open(cur.url, cur.table);
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s_res (id int PRIMARY KEY, val bigint NOT NULL DEFAULT 0, "
           "last_fence bigint NOT NULL, prev bigint NOT NULL)",
           cur.table);
  assert_int_equal(tu_app_exec(app, sql, NULL, NULL), 0);
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s_hist (fence bigint NOT NULL, prev bigint NOT NULL)",
           cur.table);
  assert_int_equal(tu_app_exec(app, sql, NULL, NULL), 0);
  snprintf(sql, sizeof sql, "DELETE FROM %s_res", cur.table);
  assert_int_equal(tu_app_exec(app, sql, NULL, NULL), 0);
  snprintf(sql, sizeof sql, "DELETE FROM %s_hist", cur.table);
  assert_int_equal(tu_app_exec(app, sql, NULL, NULL), 0);
  snprintf(sql, sizeof sql, "INSERT INTO %s_res (id, last_fence, prev) VALUES (1, 0, 0)",
           cur.table);
  assert_int_equal(tu_app_exec(app, sql, NULL, NULL), 0);
  snprintf(name, sizeof name, "%s", tu_name("fenced-nemesis"));
  end = tu_now_ms() + 8000;
  for (int i = 0; i < FW_KIDS; i++) fw_kids[i] = fw_spawn(name, end, n, seed + (unsigned)i);
  while (tu_now_ms() < end - 1600) {
    int k = (int)(rand_r(&seed) % FW_KIDS);
    int64_t holder;
    tu_sleep_ms(150 + rand_r(&seed) % 100);
    /* (the hard variant: the writer that holds the name right now, found
     * by the pid its grant recorded; a plain read on the test's own
     * connection) */
    snprintf(sql, sizeof sql, "SELECT COALESCE(MAX(owner_pid), 0) FROM %s WHERE name = '%s'",
             cur.table, name);
    holder = tu_app_i64(app, sql);
    for (int i = 0; i < FW_KIDS; i++)
      if (fw_kids[i] == (pid_t)holder) k = i;
    if (rand_r(&seed) % 5 < 4) {
      kill(fw_kids[k], SIGSTOP);
      tu_sleep_ms(1500);
      kill(fw_kids[k], SIGCONT);
      stops++;
    } else {
      kill(fw_kids[k], SIGKILL);
      waitpid(fw_kids[k], NULL, 0);
      fw_kids[k] = fw_spawn(name, end, n, seed + 100 + (unsigned)kills);
      kills++;
    }
  }
  for (int i = 0; i < FW_KIDS; i++) {
    waitpid(fw_kids[i], NULL, 0);
    fw_kids[i] = 0;
  }
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s_hist", cur.table);
  rows = tu_app_i64(app, sql);
  snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s_hist WHERE fence <= prev", cur.table);
  bad = tu_app_i64(app, sql);
  print_message("fenced writes %s/%s: %lld stops, %lld kills; %d accepted, %d refused by the "
                "check, %d failed otherwise; %lld writes in the history, %lld out of fence "
                "order, %d saw the value change under them\n",
                cur.backend, dblock_strategy_name(cur.strategy), (long long)stops,
                (long long)kills, atomic_load(&n->accepted), atomic_load(&n->refused),
                atomic_load(&n->failed), (long long)rows, (long long)bad, atomic_load(&n->lost));
  if (bad) fail_msg("%lld of %lld writes committed after a later grant's write", (long long)bad,
                    (long long)rows);
  if (atomic_load(&n->lost))
    fail_msg("%d checked writes found the value changed between their read and their write: "
             "two holders wrote at once",
             atomic_load(&n->lost));
  /* (a writer killed between its commit and its count adds a row) */
  assert_true(rows >= atomic_load(&n->accepted));
  assert_true(atomic_load(&n->accepted) >= 10);
  tu_app_close(app);
  munmap(n, sizeof *n);
}

static int teardown(void **state) {
  (void)state;
  px_stop_all();
  if (frozen > 0) {
    kill(frozen, SIGCONT);
    frozen = 0;
  }
  if (held_conn) {
    held_drv->close(held_conn);
    held_conn = NULL;
  }
  if (orphan > 0) {
    kill(orphan, SIGKILL);
    orphan = 0;
  }
  if (child > 0) {
    kill(child, SIGKILL);
    kill(child, SIGCONT);
    waitpid(child, NULL, 0);
    child = 0;
  }
  for (int i = 0; i < FW_KIDS; i++)
    if (fw_kids[i] > 0) {
      kill(fw_kids[i], SIGKILL);
      kill(fw_kids[i], SIGCONT);
      waitpid(fw_kids[i], NULL, 0);
      fw_kids[i] = 0;
    }
  return 0;
}

int main(void) {
  const struct CMUnitTest network[] = {
      cmocka_unit_test_teardown(test_paused_holder, teardown),   cmocka_unit_test_teardown(test_server_restart, teardown),
      cmocka_unit_test_teardown(test_connection_cut, teardown),
      cmocka_unit_test_teardown(test_ambiguous_outcome, teardown), cmocka_unit_test_teardown(test_least_privilege, teardown),
      cmocka_unit_test_teardown(test_stalled_network, teardown),
      cmocka_unit_test_teardown(test_acquire_cut_at_loss_deadline, teardown),
      cmocka_unit_test_teardown(test_stalled_run, teardown),
      cmocka_unit_test_teardown(test_one_connection_stalled, teardown),
      cmocka_unit_test_teardown(test_crash_fence, teardown),
      cmocka_unit_test_teardown(test_fenced_writes_under_faults, teardown),
      cmocka_unit_test_teardown(test_crash_after_release, teardown),
      cmocka_unit_test_teardown(test_reacquire_after_failed_release, teardown),
      cmocka_unit_test_teardown(test_fork_child_frees_client, teardown),
      cmocka_unit_test_teardown(test_fork_child_adopts_unused_client, teardown),
      /* (last: make check-quick leaves these two out, see below) */
      cmocka_unit_test_teardown(test_clock_skew, teardown),
      cmocka_unit_test_teardown(test_server_idle_limit, teardown),
  };
  size_t nnet = sizeof network / sizeof network[0];
  /* make check-quick (DBLOCK_TEST_QUICK) leaves out the two slowest
   * network tests — they wait out server-side clocks and idle limits, a
   * third of this suite's time — to stay within 6 minutes; make check
   * runs them. */
  if (getenv("DBLOCK_TEST_QUICK")) nnet -= 2;
  const struct CMUnitTest embedded[] = {cmocka_unit_test_teardown(test_paused_holder, teardown),
                                        cmocka_unit_test_teardown(test_fenced_writes_under_faults,
                                                                  teardown),
                                        cmocka_unit_test_teardown(test_sqlite_clock_step, teardown),
                                        cmocka_unit_test_teardown(test_fork_child_frees_client, teardown),
                                        cmocka_unit_test_teardown(test_fork_child_adopts_unused_client,
                                                                  teardown)};
  /* for_update on a server only: a leased lock ends with its lease, and a
   * SQLite holder's file locks die with its process. */
  const struct CMUnitTest session_held[] = {
      cmocka_unit_test_teardown(test_fork_child_outlives_killed_holder, teardown)};
  /* PostgreSQL only: a backend can be frozen at the right moment there,
   * and PgBouncer stands in front of it. */
  const struct CMUnitTest pg_only[] = {cmocka_unit_test_teardown(test_insert_fence_race, teardown),
                                       cmocka_unit_test_teardown(test_force_unlock_behind_waiter,
                                                                 teardown),
                                       cmocka_unit_test_teardown(test_epoch_bump_race, teardown),
                                       cmocka_unit_test_teardown(test_epoch_kept, teardown),
                                       cmocka_unit_test_teardown(test_pooler_restart, teardown)};
  /* MariaDB only: its sql_mode is global to the server (the mysql shard
   * runs its tests one at a time). */
  const struct CMUnitTest my_only[] = {
      cmocka_unit_test_teardown(test_unusual_sql_modes, restore_sql_mode)};
  static const dblock_strategy strategies[] = {
      DBLOCK_STRATEGY_INSERT, DBLOCK_STRATEGY_FOR_UPDATE, DBLOCK_STRATEGY_OPTIMISTIC};
  int n, failed = 0;
  const tu_backend *b = tu_backends(&n);
  const char *only = getenv("DBLOCK_TEST_PAIR"); /* e.g. "postgres/insert" */
  /* DBLOCK_TEST_FILTER=pattern runs only the matching tests (e.g. "*stall*"). */
  if (getenv("DBLOCK_TEST_FILTER")) cmocka_set_test_filter(getenv("DBLOCK_TEST_FILTER"));
  signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < n; i++)
    for (size_t k = 0; k < 3; k++) {
      char group[64];
      int sqlite = strcmp(b[i].name, "sqlite") == 0;
      snprintf(group, sizeof group, "faults/%s/%s", b[i].name,
               dblock_strategy_name(strategies[k]));
      if (only && strcmp(only, group + strlen("faults/")) != 0) continue;
      if (!tu_backend_wanted(b[i].name)) continue;
      cur.backend = b[i].name;
      cur.url = b[i].url;
      cur.strategy = strategies[k];
      cur.table = k == 0 ? "fault_insert" : k == 1 ? "fault_for_update" : "fault_optimistic";
      /* SQLite has no server, network or other clock: only the pause. */
      if (sqlite)
        failed += cmocka_run_group_tests_name(group, embedded, group_setup, NULL);
      else
        failed += _cmocka_run_group_tests(group, network, nnet, group_setup, NULL);
      if (!sqlite && strategies[k] == DBLOCK_STRATEGY_FOR_UPDATE) {
        snprintf(group, sizeof group, "faults/%s/for_update/session", b[i].name);
        failed += cmocka_run_group_tests_name(group, session_held, group_setup, NULL);
      }
      if (strcmp(b[i].name, "postgres") == 0 && strategies[k] == DBLOCK_STRATEGY_INSERT)
        failed += cmocka_run_group_tests_name("faults/postgres/insert/pg-only", pg_only, group_setup,
                                              NULL);
      if (strcmp(b[i].name, "mysql") == 0) {
        snprintf(group, sizeof group, "faults/mysql/%s/sql-mode",
                 dblock_strategy_name(strategies[k]));
        failed += cmocka_run_group_tests_name(group, my_only, group_setup, NULL);
      }
    }
  return failed ? 1 : 0;
}
