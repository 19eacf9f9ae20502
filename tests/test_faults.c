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
 * A holder SIGKILLed mid-section is test_holder_killed in test_conformance.
 *
 * The network faults go through a small TCP proxy in this file rather than
 * socat: it can drop exactly one reply (between request and reply), which
 * a byte pump driven from outside cannot time.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static struct {
  const char *backend, *url;
  dblock_strategy strategy;
  const char *table;
} cur;

/* A forked holder still around when a test fails (it may be stopped and
 * holding a lock): the teardown kills it so the next test starts clean. */
static pid_t child;

static int leased(void) { return cur.strategy != DBLOCK_STRATEGY_FOR_UPDATE; }
static int is(const char *backend) { return strcmp(cur.backend, backend) == 0; }

/* ---------------------------------------------------------------- proxy */

enum { PX_PASS, PX_DROP_REPLY, PX_DROP_REQUEST, PX_CUT };
#define PX_MAX 64

/* A TCP proxy on a free loopback port in front of the server. In PASS it
 * relays bytes. DROP_REPLY: the next connection that sends a request has
 * the server's reply thrown away and both sides closed (the statement ran;
 * the client cannot know). DROP_REQUEST: the next request is thrown away
 * and both sides closed (the statement never ran). CUT: every connection is
 * closed and new ones are refused until PASS again. */
typedef struct proxy {
  int lfd, port, upstream;
  pthread_t th;
  atomic_int mode, stop, dropped;
  int cfd[PX_MAX], sfd[PX_MAX], victim[PX_MAX];
} proxy;

static void px_close_pair(proxy *p, int i) {
  if (p->cfd[i] >= 0) close(p->cfd[i]);
  if (p->sfd[i] >= 0) close(p->sfd[i]);
  p->cfd[i] = p->sfd[i] = -1;
  p->victim[i] = 0;
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
      if (p->cfd[i] >= 0) {
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
  assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &len), 0);
  p->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&p->th, NULL, px_main, p), 0);
}

static void px_stop(proxy *p) {
  atomic_store(&p->stop, 1);
  pthread_join(p->th, NULL);
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
    o.lease_ms = 1000;
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
  kill(pid, SIGSTOP);
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
  dblock_client *a = open_on(cur.url, 10000), *b = open_on(cur.url, 10000);
  dblock_lock *la, *lb, *lo;
  int64_t max_before = 0;
  hammer hm = {.c = NULL};
  pthread_t th;
  (void)s;
  atomic_store(&tu_lost_calls, 0);
  for (int i = 0; i < 3; i++) { /* a few grants to have fences before */
    dblock_lock *t = tu_acquire(b, tu_name("before"), 0, 0);
    if (dblock_lock_fence(t) > max_before) max_before = dblock_lock_fence(t);
    assert_int_equal(dblock_lock_release(t), 0);
  }
  la = tu_acquire(a, name, 0, 0);
  if (dblock_lock_fence(la) > max_before) max_before = dblock_lock_fence(la);
  hm.c = open_on(cur.url, 10000);
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
    assert_int_equal(atomic_load(&tu_lost_calls), 1);
    assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
    assert_int_equal(tu_try(a, name), DBLOCK_EBUSY); /* not silently re-taken */
  }
  if (dblock_lock_fence(lb) <= max_before)
    fail_msg("fence after restart %lld <= %lld before", (long long)dblock_lock_fence(lb),
             (long long)max_before);
  lo = tu_acquire(a, other, 0, 0); /* A works again, same client */
  assert_true(dblock_lock_fence(lo) > max_before);
  assert_int_equal(dblock_lock_release(lo), 0);
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
  proxy px;
  char url[512];
  dblock_client *a, *b = open_on(cur.url, 0), *c = open_on(cur.url, 0);
  dblock_lock *la, *lb;
  int64_t t0;
  (void)s;
  px_start(&px, server_port());
  px_url(url, sizeof url, &px);
  a = open_on(url, 1200);
  atomic_store(&tu_lost_calls, 0);
  la = tu_acquire(a, name, 0, 0);
  atomic_store(&px.mode, PX_CUT);
  t0 = tu_now_ms();
  assert_true(wait_lost(la, 4000));
  if (leased() && tu_now_ms() - t0 < 800)
    fail_msg("leased holder declared lost after %lld ms, before its lease could end",
             (long long)(tu_now_ms() - t0));
  assert_int_equal(atomic_load(&tu_lost_calls), 1);
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
    int64_t t0 = tu_now_ms();
    dblock_lock *lb;
    int st;
    if (leased()) {
      snprintf(args, sizeof args, "acquire '%s' --lease 1500ms --wait 0", name);
      assert_int_equal(skewed(offsets[k], 0, args), 0);
      tu_sleep_ms(900 - (tu_now_ms() - t0));
      assert_int_equal(tu_try(b, name), DBLOCK_EBUSY); /* not early */
      lb = tu_acquire(b, name, 2000, 0);
      if (tu_now_ms() - t0 > 1500 + 700)
        fail_msg("lease of 1.5 s by a client at %s held %lld ms", offsets[k],
                 (long long)(tu_now_ms() - t0));
    } else {
      snprintf(args, sizeof args, "run '%s' --lease 600ms -- sleep 1.5", name);
      skewed(offsets[k], 1, args);
      tu_sleep_ms(500);
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
    t0 = tu_now_ms();
    lb = tu_acquire(b, name, 0, leased() ? 1500 : 0);
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

/* One renewal or release whose reply (or request) is lost on the way: the
 * library asks again by owner token on a fresh connection and reports the
 * true state. */
static void test_ambiguous_outcome(void **s) {
  proxy px;
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
    /* a renewal that comes too late: expired and taken over meanwhile */
    la = tu_acquire(a, name, 0, 500);
    tu_sleep_ms(700);
    lb = tu_acquire(b, name, 0, 0);
    atomic_store(&px.mode, PX_DROP_REPLY);
    assert_int_equal(dblock_lock_renew(la), DBLOCK_ELOST);
    assert_int_equal(dblock_lock_release(la), DBLOCK_ELOST);
    assert_int_equal(dblock_lock_renew(lb), 0);
    assert_int_equal(dblock_lock_release(lb), 0);
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
             "GRANT USAGE, SELECT, UPDATE ON SEQUENCE %s_fence_seq TO dblock_app",
             cur.table, cur.table, cur.table);
  else
    snprintf(sql, sizeof sql,
             "GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO 'dblock_app'@'127.0.0.1'; "
             "GRANT SELECT ON %s_migrations TO 'dblock_app'@'127.0.0.1'; "
             "GRANT SELECT, INSERT ON %s_fence_seq TO 'dblock_app'@'127.0.0.1'",
             cur.table, cur.table, cur.table);
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
  /* an expired row for the reaper */
  l = tu_acquire(c, tu_name("lp-expired"), 0, leased() ? 100 : 0);
  if (leased()) tu_sleep_ms(200);
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

/* ---------------------------------------------------------------- main */

static int teardown(void **state) {
  (void)state;
  if (child > 0) {
    kill(child, SIGKILL);
    kill(child, SIGCONT);
    waitpid(child, NULL, 0);
    child = 0;
  }
  return 0;
}

static int group_setup(void **state) {
  dblock_client *c = tu_open(cur.url, cur.strategy, cur.table, 0);
  (void)state;
  tu_migrate(c);
  dblock_client_free(c);
  return 0;
}

int main(void) {
  const struct CMUnitTest network[] = {
      cmocka_unit_test_teardown(test_paused_holder, teardown),   cmocka_unit_test_teardown(test_server_restart, teardown),
      cmocka_unit_test_teardown(test_connection_cut, teardown),  cmocka_unit_test_teardown(test_clock_skew, teardown),
      cmocka_unit_test_teardown(test_ambiguous_outcome, teardown), cmocka_unit_test_teardown(test_least_privilege, teardown),
  };
  const struct CMUnitTest embedded[] = {cmocka_unit_test_teardown(test_paused_holder, teardown)};
  static const dblock_strategy strategies[] = {
      DBLOCK_STRATEGY_INSERT, DBLOCK_STRATEGY_FOR_UPDATE, DBLOCK_STRATEGY_OPTIMISTIC};
  int n, failed = 0;
  const tu_backend *b = tu_backends(&n);
  const char *only = getenv("DBLOCK_TEST_PAIR"); /* e.g. "postgres/insert" */
  signal(SIGPIPE, SIG_IGN);
  for (int i = 0; i < n; i++)
    for (size_t k = 0; k < 3; k++) {
      char group[64];
      int sqlite = strcmp(b[i].name, "sqlite") == 0;
      snprintf(group, sizeof group, "faults/%s/%s", b[i].name,
               dblock_strategy_name(strategies[k]));
      if (only && strcmp(only, group + strlen("faults/")) != 0) continue;
      cur.backend = b[i].name;
      cur.url = b[i].url;
      cur.strategy = strategies[k];
      cur.table = k == 0 ? "fault_insert" : k == 1 ? "fault_for_update" : "fault_optimistic";
      /* SQLite has no server, network or other clock: only the pause. */
      if (sqlite)
        failed += cmocka_run_group_tests_name(group, embedded, group_setup, NULL);
      else
        failed += cmocka_run_group_tests_name(group, network, group_setup, NULL);
    }
  return failed ? 1 : 0;
}
