#include "testutil.h"

#include "drivers/driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const tu_backend *tu_backends(int *count) {
  static tu_backend b[3];
  static char lite[256];
  if (!b[0].name) {
    const char *dir = getenv("DBLOCK_TEST_TMP");
    snprintf(lite, sizeof lite, "sqlite://%s/dblock-test-%d.db", dir ? dir : "/tmp",
             (int)getpid());
    b[0] = (tu_backend){"sqlite", lite};
    b[1] = (tu_backend){"postgres", getenv("DBLOCK_TEST_PG_URL")};
    b[2] = (tu_backend){"mysql", getenv("DBLOCK_TEST_MY_URL")};
    for (int i = 1; i < 3; i++)
      if (!b[i].url) {
        fprintf(stderr, "testutil: %s URL missing: run the tests through "
                        "tests/with-servers.sh (make check)\n", b[i].name);
        exit(1);
      }
  }
  *count = 3;
  return b;
}

int tu_backend_wanted(const char *be) {
  const char *list = getenv("DBLOCK_TEST_BACKEND"), *p;
  size_t len;
  if (!list || !*list) return 1;
  if (!be) be = "none";
  len = strlen(be);
  for (p = list; (p = strstr(p, be)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return 1;
  return 0;
}

size_t tu_shard_tests(struct CMUnitTest *t, size_t n) {
  static const char *const names[] = {"sqlite", "postgres", "mysql"};
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    const char *be = NULL;
    for (size_t k = 0; k < 3 && !be; k++) {
      char tag[16];
      snprintf(tag, sizeof tag, "_%s", names[k]);
      if (strstr(t[i].name, tag)) be = names[k];
    }
    if (tu_backend_wanted(be)) t[kept++] = t[i];
  }
  return kept;
}

const char *tu_errmsg(dblock_client *c) {
  static _Thread_local dblock_error_info ei;
  if (c) dblock_client_last_error(c, &ei);
  else dblock_last_error(&ei);
  return ei.message;
}

dblock_client *tu_open_opts(const char *url, const dblock_options *o) {
  dblock_client *c = NULL;
  int rc = dblock_client_open(&c, url, o);
  if (rc != 0) fail_msg("dblock_client_open(%s): %d %s", url, rc, tu_errmsg(NULL));
  return c;
}

dblock_client *tu_open(const char *url, dblock_strategy s, const char *table,
                       int64_t lease_ms) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  o.strategy = s;
  o.table = table;
  o.lease_ms = lease_ms;
  return tu_open_opts(url, &o);
}

void tu_migrate(dblock_client *c) {
  int rc = dblock_migrate(c, NULL);
  if (rc != 0) fail_msg("dblock_migrate: %d %s", rc, tu_errmsg(c));
}

int64_t tu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tu_sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char *tu_name(const char *prefix) {
  /* A ring, so a test can keep several names at once. */
  static _Thread_local char buf[16][128];
  static _Thread_local int slot;
  static int n;
  char *out = buf[slot++ % 16];
  snprintf(out, sizeof buf[0], "%s-%d-%d-%lld", prefix, (int)getpid(), ++n,
           (long long)tu_now_ms());
  return out;
}

const char *tu_url(const char *backend) {
  int n;
  const tu_backend *b = tu_backends(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(b[i].name, backend) == 0) return b[i].url;
  fail_msg("no backend named %s", backend);
  return NULL;
}

dbl_conn *tu_conn(const char *url, const dbl_driver **drv) {
  dbl_url u;
  char why[256];
  dbl_conn *c = NULL;
  dbl_err e;
  memset(&e, 0, sizeof e);
  if (dbl_url_parse(&u, url, why, sizeof why) != 0) {
    fprintf(stderr, "url: %s\n", why);
    return NULL;
  }
  *drv = dbl_driver_for(&u);
  if ((*drv)->connect(&c, &u, 5000, &e) != 0) fprintf(stderr, "connect: %s\n", e.msg);
  dbl_url_free(&u); /* (a connection keeps what it needs) */
  return c;
}

void tu_sql(const char *url, const char *sql, int64_t *count) {
  dbl_conn *c;
  dbl_err e;
  dbl_res r;
  const dbl_driver *d;
  memset(&e, 0, sizeof e);
  if (!(c = tu_conn(url, &d))) fail_msg("no connection to %s", url);
  if (count) {
    if (d->query(c, sql, NULL, 0, &r, &e) != 0) fail_msg("%s: %s", sql, e.msg);
    *count = dbl_res_i64(&r, 0, 0);
    dbl_res_clear(&r);
  } else if (d->script(c, sql, &e) != 0) {
    fail_msg("%s: %s", sql, e.msg);
  }
  d->close(c);
}

dblock_lock *tu_acquire(dblock_client *c, const char *name, int64_t wait_ms,
                        int64_t lease_ms) {
  dblock_lock *l = NULL;
  int rc = dblock_lock_acquire(&l, c, name, wait_ms, lease_ms);
  if (rc != 0) fail_msg("acquire '%s': %d %s", name, rc, tu_errmsg(c));
  return l;
}

int tu_try(dblock_client *c, const char *name) {
  dblock_lock *l = NULL;
  int rc = dblock_lock_acquire(&l, c, name, 0, 0);
  if (rc == 0) dblock_lock_release(l);
  return rc;
}

atomic_int tu_lost_calls;

void tu_on_lost(const char *name, int64_t fence, int reason, void *arg) {
  (void)name;
  (void)fence;
  (void)reason;
  (void)arg;
  atomic_fetch_add(&tu_lost_calls, 1);
}
