/*
 * cancel.c — dblock_client_cancel: ending blocked acquires from another
 * thread or from a signal handler.
 *
 * What a cancel must reach, and how, using only async-signal-safe means
 * (an atomic store, write(2), shutdown(2), a futex wake):
 *   - every waiter: the flag, which the acquire loop reads before each
 *     attempt and after each sleep, and which the sleeps on a condition
 *     variable (the queue's, the pool's) read every 20 ms; and the cancel
 *     pipe, on whose read end a polling sleep waits in poll(2) (it stays
 *     readable until dblock_client_cancel_clear drains it);
 *   - then the client's waiter's own hook (wait.h), one path per waiter:
 *     the server waiter's acquires blocked in the server (for_update's
 *     row-lock wait) have their connection registered in a slot for the
 *     length of that call, and the hook wakes it through the driver's
 *     cancel (the socket shut down; SQLite: a flag its busy handler
 *     reads; such a connection is never reused); the board waiter's hook
 *     wakes its futex sleepers (board.c); queue and poll need none.
 * Slots hold a dbl_pconn pointer; a canceller marks the slot (low bit)
 * while it uses the pointer, and the owner waits for the mark to go before
 * it takes the connection back, so the pointer cannot die under the
 * canceller. The owner never waits on a canceller running on its own
 * thread (a signal handler completes before the owner resumes).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "wait.h"

int dbl_cancel_init(dblock_client *cl) {
  cl->cancel.fd[0] = cl->cancel.fd[1] = -1;
  return pipe2(cl->cancel.fd, O_CLOEXEC | O_NONBLOCK) == 0 ? 0 : DBLOCK_ENOMEM;
}

void dbl_cancel_close(dblock_client *cl) {
  for (int i = 0; i < 2; i++)
    if (cl->cancel.fd[i] >= 0) close(cl->cancel.fd[i]);
}

int dblock_client_cancel(dblock_client *cl) {
  int saved = errno; /* a signal handler must not change errno */
  char b = 1;
  if (!cl) return DBLOCK_EINVAL;
  atomic_store(&cl->cancel.flag, 1);
  /* Full pipe (EAGAIN): it is readable already, which is all we need. */
  if (write(cl->cancel.fd[1], &b, 1) < 0) {
  }
  /* (the waiter is chosen at open, before any acquire, and never changes) */
  if (cl->waiter && cl->waiter->cancel) cl->waiter->cancel(cl);
  errno = saved;
  return 0;
}

void dbl_cancel_server_waits(dblock_client *cl) {
  for (int i = 0; i < DBL_CANCEL_SLOTS; i++) {
    uintptr_t v = atomic_load(&cl->cancel.slot[i]);
    if (!v || (v & 1)) continue;
    if (!atomic_compare_exchange_strong(&cl->cancel.slot[i], &v, v | 1)) continue;
    /* Marked: the owner cannot take pc back until we unmark it. A clear
     * since our store means this slot may belong to a newer acquire (the
     * same address reused): leave it alone. The cut flag is set before the
     * cut, so the owner can never miss that its connection is dead. */
    if (atomic_load(&cl->cancel.flag)) {
      dbl_pconn *pc = (dbl_pconn *)v;
      atomic_store(&pc->cancel_cut, 1);
      cl->drv->cancel(pc->c);
    }
    atomic_store(&cl->cancel.slot[i], v);
  }
}

int dblock_client_cancel_clear(dblock_client *cl) {
  char buf[64];
  if (!cl) return DBLOCK_EINVAL;
  /* (Not meant to race with dblock_client_cancel: if it does, the flag
   * decides — a waiter looks at it before every attempt and between sleep
   * slices — and a byte left in the pipe only shortens sleeps.) */
  atomic_store(&cl->cancel.flag, 0);
  while (read(cl->cancel.fd[0], buf, sizeof buf) > 0) {
  }
  return 0;
}

int dbl_cancelled(dblock_client *cl) { return atomic_load(&cl->cancel.flag); }

int dbl_cancel_watch(dblock_client *cl, dbl_pconn *pc) {
  if (!cl->drv->cancel) return -1;
  for (int i = 0; i < DBL_CANCEL_SLOTS; i++) {
    uintptr_t empty = 0;
    if (atomic_compare_exchange_strong(&cl->cancel.slot[i], &empty, (uintptr_t)pc)) return i;
  }
  return -1;
}

int dbl_cancel_unwatch(dblock_client *cl, int slot, dbl_pconn *pc) {
  uintptr_t v = (uintptr_t)pc;
  if (slot < 0) return 0;
  /* A canceller is using the pointer right now (marked): let it finish. */
  while (!atomic_compare_exchange_weak(&cl->cancel.slot[slot], &v, 0)) {
    v = (uintptr_t)pc;
    sched_yield();
  }
  return atomic_load(&pc->cancel_cut) || dbl_cancelled(cl);
}

void dbl_cancel_sleep(dblock_client *cl, int64_t us) {
  struct pollfd p = {.fd = cl->cancel.fd[0], .events = POLLIN};
  int64_t end = dbl_mono_ms() * 1000 + us; /* (ms resolution is enough here) */
  for (;;) {
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    int n = ppoll(&p, 1, &ts, NULL);
    if (n > 0 && dbl_cancelled(cl)) return;
    if (n == 0) return;
    if (n > 0 || errno != EINTR) {
      /* Readable but not cancelled (a byte left by a cancel that raced a
       * clear, or by a forked parent: the pipe is shared), or poll failed:
       * sleep plainly, in slices that still look at the flag. */
      while (us > 0 && !dbl_cancelled(cl)) {
        struct timespec slice = {0, (us < 5000 ? us : 5000) * 1000};
        nanosleep(&slice, NULL);
        us = end - dbl_mono_ms() * 1000;
      }
      return;
    }
    us = end - dbl_mono_ms() * 1000; /* EINTR: sleep what is left */
    if (us <= 0) return;
  }
}
