/*
 * worker_cancel.c — a worker that waits for a lock for as long as it takes,
 * and that Ctrl-C (SIGINT) stops cleanly while it waits.
 *
 * dblock_client_cancel() is async-signal-safe (dblock.h), so the signal
 * handler calls it directly: the waiting dblock_lock_acquire() returns
 * DBLOCK_ECANCELED within milliseconds, holding nothing. Once the lock is
 * held, a SIGINT only asks the work to stop early; the lock is then
 * released as usual (a cancel never touches held locks).
 *
 *   worker_cancel [URL [NAME]]    URL default $DBLOCK_URL, NAME default "job"
 *
 * Try it with the lock busy:
 *   dblock acquire job --lease 1m          # someone else holds "job"
 *   worker_cancel                          # waits ... press Ctrl-C
 */
#define _POSIX_C_SOURCE 200809L
#include <dblock.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static dblock_client *client;
static volatile sig_atomic_t stop;

static void on_sigint(int sig) {
  (void)sig;
  stop = 1;
  dblock_client_cancel(client); /* async-signal-safe: cuts the wait */
}

int main(int argc, char **argv) {
  const char *name = argc > 2 ? argv[2] : "job";
  struct sigaction sa;
  dblock_error_info e;
  dblock_lock *l;
  int rc;

  setvbuf(stdout, NULL, _IOLBF, 0); /* (each line out at once, also into a pipe) */
  if ((rc = dblock_client_open(&client, argc > 1 ? argv[1] : NULL, NULL)) != 0) {
    dblock_last_error(&e);
    fprintf(stderr, "open: %s: %s\n", dblock_strerror(rc), e.message);
    return 1;
  }
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; /* (installed once the client exists) */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);

  printf("waiting for '%s' (Ctrl-C stops the wait)\n", name);
  rc = dblock_lock_acquire(&l, client, name, -1 /* forever */, 0);
  if (rc == DBLOCK_ECANCELED) {
    printf("cancelled while waiting: nothing held\n");
    dblock_client_free(client);
    return 130; /* 128 + SIGINT, as a shell reports it */
  }
  if (rc != 0) {
    dblock_client_last_error(client, &e);
    fprintf(stderr, "acquire: %s: %s\n", dblock_strerror(rc), e.message);
    dblock_client_free(client);
    return 1;
  }
  printf("holding '%s', fence %" PRId64 "; working for 3 s\n", name, dblock_lock_fence(l));
  for (int i = 0; i < 30 && !stop; i++) /* the work, in steps that look at the flag */
    nanosleep(&(struct timespec){0, 100000000}, NULL);
  if (stop) printf("interrupted: stopping the work early\n");
  rc = dblock_lock_release(l);
  printf("released: %s\n", rc == 0 ? "ok" : dblock_strerror(rc));
  dblock_client_free(client);
  return rc != 0;
}
