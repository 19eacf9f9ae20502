/*
 * sync.c — the client mutex, checked.
 *
 * One mutex (cl->mu) guards a client's pool, held list, caches, last error
 * and watchdog schedule. Every pthread call on it is checked: a failure is
 * a bug in dblock (a double unlock, a lock taken twice), so it aborts with
 * a message rather than carry on with a broken invariant. In the sanitizer
 * builds (DBL_CHECK_LOCKS) the mutex is also error-checking and remembers
 * its holder, so the functions documented "caller holds mu" assert it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Reports a failed pthread call on the client mutex and aborts. */
static void die(const char *what, int rc) {
  fprintf(stderr, "dblock: internal error: %s: %s\n", what, strerror(rc));
  abort();
}

void dbl_mutex_init(dblock_client *cl) {
  pthread_mutexattr_t a;
  int rc;
  pthread_mutexattr_init(&a);
#ifdef DBL_CHECK_LOCKS
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
#endif
  if ((rc = pthread_mutex_init(&cl->mu, &a)) != 0) die("pthread_mutex_init", rc);
  pthread_mutexattr_destroy(&a);
  atomic_store_explicit(&cl->mu_holder, 0, memory_order_relaxed);
}

void dbl_lock(dblock_client *cl) {
  int rc = pthread_mutex_lock(&cl->mu);
  if (rc != 0) die("pthread_mutex_lock", rc);
  atomic_store_explicit(&cl->mu_holder, dbl_thread_id(), memory_order_relaxed);
}

void dbl_unlock(dblock_client *cl) {
  int rc;
  dbl_assert_held(cl);
  atomic_store_explicit(&cl->mu_holder, 0, memory_order_relaxed);
  if ((rc = pthread_mutex_unlock(&cl->mu)) != 0) die("pthread_mutex_unlock", rc);
}

void dbl_wait(dblock_client *cl, pthread_cond_t *cv) {
  int rc;
  dbl_assert_held(cl);
  atomic_store_explicit(&cl->mu_holder, 0, memory_order_relaxed);
  if ((rc = pthread_cond_wait(cv, &cl->mu)) != 0) die("pthread_cond_wait", rc);
  atomic_store_explicit(&cl->mu_holder, dbl_thread_id(), memory_order_relaxed);
}

void dbl_timedwait(dblock_client *cl, pthread_cond_t *cv, const struct timespec *at) {
  int rc;
  dbl_assert_held(cl);
  atomic_store_explicit(&cl->mu_holder, 0, memory_order_relaxed);
  rc = pthread_cond_timedwait(cv, &cl->mu, at);
  if (rc != 0 && rc != ETIMEDOUT) die("pthread_cond_timedwait", rc);
  atomic_store_explicit(&cl->mu_holder, dbl_thread_id(), memory_order_relaxed);
}

void dbl_signal(pthread_cond_t *cv, int all) {
  int rc = all ? pthread_cond_broadcast(cv) : pthread_cond_signal(cv);
  if (rc != 0) die(all ? "pthread_cond_broadcast" : "pthread_cond_signal", rc);
}

#ifdef DBL_CHECK_LOCKS
void dbl_assert_held(const dblock_client *cl) {
  if (atomic_load_explicit(&cl->mu_holder, memory_order_relaxed) != dbl_thread_id()) {
    fprintf(stderr, "dblock: internal error: the client mutex is not held by this thread\n");
    abort();
  }
}
#endif
