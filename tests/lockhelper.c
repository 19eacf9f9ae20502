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
 *   lockhelper --freeze TID MAX_MS
 *
 * Stops one thread, TID, of another process (its tracer: ptrace seize and
 * interrupt; the process must allow it, see tu_freeze_thread), writes
 * "frozen" on a line of stdout once it is stopped ("error: ..." if it
 * cannot be), and lets it go again when its stdin ends or after MAX_MS,
 * whichever comes first (so that a test stuck behind the stopped thread
 * is stuck for MAX_MS at most). The other threads of that process run on:
 * the hard variant of a thread the host does not schedule, such as a
 * client's watchdog.
 *
 * Why a program and not a forked test process: the suites are
 * multi-threaded (clients run watchdog threads), and a child of a
 * multi-threaded fork may not start threads under ThreadSanitizer — it
 * dies at its first pthread_create, so a forked holder silently never
 * held anything in the TSan tree. An exec'd process starts afresh.
 */
#include "dblock.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
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

/* --freeze TID MAX_MS: see the header. */
static int freeze(const char *arg, const char *max_arg) {
  int64_t tid, max_ms;
  int st;
  char buf[16];
  struct pollfd in = {.fd = 0, .events = POLLIN};
  if (number(arg, &tid) || tid <= 0 || number(max_arg, &max_ms) || max_ms <= 0 ||
      max_ms > 600000) {
    fprintf(stderr, "usage: lockhelper --freeze TID MAX_MS\n");
    return 2;
  }
  if (ptrace(PTRACE_SEIZE, (pid_t)tid, NULL, NULL) != 0 ||
      ptrace(PTRACE_INTERRUPT, (pid_t)tid, NULL, NULL) != 0 ||
      waitpid((pid_t)tid, &st, __WALL) != (pid_t)tid) {
    printf("error: thread %lld: %s\n", (long long)tid, strerror(errno));
    return 1;
  }
  printf("frozen\n");
  fflush(stdout);
  /* (stdin only ends: wait for that or for MAX_MS, then let go) */
  while (poll(&in, 1, (int)max_ms) > 0 && read(0, buf, sizeof buf) > 0) {
  }
  (void)ptrace(PTRACE_DETACH, (pid_t)tid, NULL, NULL);
  return 0;
}

int main(int argc, char **argv) {
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *c = NULL;
  dblock_lock *l = NULL;
  dblock_error_info ei;
  int64_t lease, wait, fair, backoff;
  if (argc == 4 && strcmp(argv[1], "--freeze") == 0) return freeze(argv[2], argv[3]);
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
