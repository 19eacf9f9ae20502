/*
 * lockhelper — a lock holder in a process of its own, for the tests that
 * kill, stop or outwait one (tests/testutil.c tu_spawn_holder).
 *
 *   lockhelper URL STRATEGY TABLE NAME LEASE_MS WAIT_MS FAIR BACKOFF_MS
 *
 * Opens a client (TABLE "-" = the default table; LEASE_MS 0 = the
 * default; BACKOFF_MS 0 = the default backoff, else both its bounds; FAIR
 * 0 or 1) and writes "open" on a line of stdout; acquires NAME waiting
 * WAIT_MS (-1 = forever), writes the fence as one decimal line and then
 * sleeps until it is killed. A reader that went away costs it nothing
 * (SIGPIPE ignored). Exit 1 when the open or the acquire fails (the reason
 * on stderr), 2 on bad arguments.
 *
 * Why a program and not a forked test process: the suites are
 * multi-threaded (clients run watchdog threads), and a child of a
 * multi-threaded fork may not start threads under ThreadSanitizer — it
 * dies at its first pthread_create, so a forked holder silently never
 * held anything in the TSan tree. An exec'd process starts afresh.
 */
#include "dblock.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses a whole decimal argument into *out; 0 on success. */
static int number(const char *s, int64_t *out) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c = NULL;
  dblock_lock *l = NULL;
  dblock_error_info ei;
  int64_t lease, wait, fair, backoff;
  if (argc != 9 || dblock_strategy_parse(&o.strategy, argv[2]) != 0 ||
      number(argv[5], &lease) || number(argv[6], &wait) || number(argv[7], &fair) ||
      number(argv[8], &backoff)) {
    fprintf(stderr, "usage: lockhelper URL STRATEGY TABLE NAME LEASE_MS WAIT_MS FAIR BACKOFF_MS\n");
    return 2;
  }
  o.table = strcmp(argv[3], "-") ? argv[3] : NULL;
  o.lease_ms = lease;
  o.fair = (int)fair;
  if (backoff) o.backoff_min_ms = o.backoff_max_ms = backoff;
  signal(SIGPIPE, SIG_IGN);
  if (dblock_client_open(&c, argv[1], &o) == 0) {
    printf("open\n");
    fflush(stdout);
  }
  if (!c || dblock_lock_acquire(&l, c, argv[4], wait, 0) != 0) {
    dblock_last_error(&ei); /* (per thread: covers a failed open too) */
    fprintf(stderr, "lockhelper: %s\n", ei.message);
    dblock_client_free(c); /* (so that LeakSanitizer keeps exit 1) */
    return 1;
  }
  printf("%" PRId64 "\n", dblock_lock_fence(l));
  fflush(stdout);
  for (;;) pause();
}
