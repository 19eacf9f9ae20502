/*
 * board.c — the wake board: waking polling waiters where the database is a
 * file on this host (SQLite), for insert and optimistic.
 *
 * Every process that opens the same database maps one small shared file
 * next to it (the driver names it: board_path), an array of slots. A name
 * hashes to a slot and to one bit of a 32-bit mask. A waiter whose attempt
 * found the name busy sleeps on its slot's counter (a Linux futex, shared
 * between processes through the mapping) until the counter moves; a
 * release bumps the counter and wakes one sleeper whose bit matches — the
 * kernel wakes a futex's sleepers in the order they went to sleep, so the
 * name goes round its waiters in arrival order.
 *
 * No barging: a release that woke somebody notes when, and the name's
 * hash; for HOLD_MS after that, a fresh blocking acquire of that name does
 * not try first but queues behind the sleepers (so a holder that releases
 * and asks again at once goes last). Bounded in time, so a woken waiter
 * that died before trying delays fresh acquirers that long at most.
 *
 * Everything here only decides who tries when: exclusion and fences stay
 * with the row. Every sleep is bounded (the caller's poll window), so a
 * wake-up lost — a woken waiter killed, a hash shared by two names, a
 * holder whose lease ran out without a release, a process that opened the
 * file under another path — costs a poll window, never a lock. A board
 * that cannot be opened (a read-only folder) leaves the waiters polling.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "internal.h"

#define SLOTS 1024
#define HOLD_MS 100

typedef struct board_slot {
  _Atomic uint32_t seq;       /* bumped by every release of a name of the slot */
  uint32_t unused;
  _Atomic int64_t handed_ms;  /* CLOCK_MONOTONIC ms of the last release that
                                 woke a sleeper (0: none) */
  _Atomic uint64_t handed;    /* that release's name hash: other names of
                                 the slot are not held back */
  uint64_t unused2;
} board_slot;

struct dbl_board {
  board_slot *slot; /* SLOTS of them, shared */
};

/* FNV-1a over the table and the name: the slot and the bit. */
static uint64_t board_hash(const dblock_client *cl, const char *name) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char *s = (const unsigned char *)cl->table; *s; s++)
    h = (h ^ *s) * 1099511628211ULL;
  h = (h ^ 0xff) * 1099511628211ULL;
  for (const unsigned char *s = (const unsigned char *)name; *s; s++)
    h = (h ^ *s) * 1099511628211ULL;
  return h;
}

static board_slot *slot_of(const dblock_client *cl, uint64_t h) {
  return &cl->board->slot[h % SLOTS];
}

static uint32_t bit_of(uint64_t h) { return 1u << ((h >> 40) & 31); }

#ifdef __linux__
/* Maps the board file (created, and grown to size, if need be). NULL when
 * it cannot be. */
static struct dbl_board *board_map(const char *path) {
  struct dbl_board *b;
  struct stat st;
  size_t size = SLOTS * sizeof(board_slot);
  void *m;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return NULL;
  /* (never shrunk: two processes growing it at once both write zeros to
   * the same size, and a mapping is only touched within the size) */
  if (fstat(fd, &st) != 0 || ((size_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0)) {
    close(fd);
    return NULL;
  }
  m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  if (!(b = malloc(sizeof *b))) {
    munmap(m, size);
    return NULL;
  }
  b->slot = m;
  return b;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *at,
                  uint32_t bits) {
  return syscall(SYS_futex, (uint32_t *)w, op, val, at, NULL, bits);
}
#endif

int dbl_board_possible(dblock_client *cl) {
#ifdef __linux__
  char path[PATH_MAX + 32] = "";
  int state;
  if (cl->strat->pins_connection || !cl->drv->board_path) return 0;
  dbl_lock(cl);
  state = cl->board_state;
  dbl_unlock(cl);
  if (state) return state > 0;
  /* First use: open it outside the mutex; the first to finish keeps its
   * mapping. */
  struct dbl_board *b = cl->drv->board_path(&cl->url, path, sizeof path) == 0 ? board_map(path)
                                                                            : NULL;
  int err = errno, failed = 0;
  dbl_lock(cl);
  if (!cl->board_state) {
    cl->board = b, b = NULL;
    cl->board_state = cl->board ? 1 : -1;
    failed = !cl->board;
  }
  state = cl->board_state;
  dbl_unlock(cl);
  if (failed)
    dbl_log(cl, DBLOCK_LOG_INFO, "the wake board '%s' cannot be opened (%s): waiters poll", path,
            strerror(err));
  if (b) {
    munmap(b->slot, SLOTS * sizeof(board_slot));
    free(b);
  }
  return state > 0;
#else
  (void)cl;
  return 0;
#endif
}

uint64_t dbl_board_hash(const dblock_client *cl, const char *name) { return board_hash(cl, name); }

uint32_t dbl_board_seq(const dblock_client *cl, uint64_t h) {
  return atomic_load(&slot_of(cl, h)->seq);
}

int64_t dbl_board_handed_until(const dblock_client *cl, uint64_t h) {
  board_slot *s = slot_of(cl, h);
  int64_t at = atomic_load(&s->handed_ms), until = at + HOLD_MS;
  /* (two stores, read without a lock: a torn pair only misjudges one
   * acquire's first try, never a lock) */
  return at && until > dbl_mono_ms() && atomic_load(&s->handed) == h ? until : 0;
}

int dbl_board_wait(dblock_client *cl, uint64_t h, uint32_t seen, int64_t ms) {
#ifdef __linux__
  board_slot *s = slot_of(cl, h);
  int64_t end = dbl_mono_ms() + ms;
  int reg = -1;
  /* Registered, so that dblock_client_cancel can wake this sleep (a cancel
   * may come from a signal handler: it can only make a system call). */
  for (int i = 0; i < DBL_CANCEL_SLOTS && reg < 0; i++) {
    uintptr_t none = 0;
    if (atomic_compare_exchange_strong(&cl->board_wait[i], &none, (uintptr_t)&s->seq)) reg = i;
  }
  for (;;) {
    int64_t now = dbl_mono_ms(), until = end;
    struct timespec at;
    if (atomic_load(&s->seq) != seen) break;
    if (now >= end || dbl_cancelled(cl)) break;
    if (reg < 0 && until > now + 20) until = now + 20; /* (unregistered: slices) */
    at.tv_sec = until / 1000;
    at.tv_nsec = (until % 1000) * 1000000;
    /* (the absolute time is CLOCK_MONOTONIC: FUTEX_WAIT_BITSET's default) */
    futex(&s->seq, FUTEX_WAIT_BITSET, seen, &at, bit_of(h));
  }
  if (reg >= 0) atomic_store(&cl->board_wait[reg], 0);
  if (atomic_load(&s->seq) == seen) return 0;
  DBL_COUNT(cl, wakeups);
  return 1;
#else
  (void)cl, (void)h, (void)seen, (void)ms;
  return 0;
#endif
}

void dbl_board_post(dblock_client *cl, uint64_t h) {
#ifdef __linux__
  board_slot *s = slot_of(cl, h);
  long woke;
  atomic_fetch_add(&s->seq, 1);
  woke = futex(&s->seq, FUTEX_WAKE_BITSET, 1, NULL, bit_of(h));
  atomic_store(&s->handed, h);
  atomic_store(&s->handed_ms, woke > 0 ? dbl_mono_ms() : 0);
#else
  (void)cl, (void)h;
#endif
}

void dbl_board_cancel(dblock_client *cl) {
#ifdef __linux__
  for (int i = 0; i < DBL_CANCEL_SLOTS; i++) {
    uintptr_t w = atomic_load(&cl->board_wait[i]);
    /* Wakes every sleeper of the word, other processes' too: they find the
     * counter unmoved and sleep again. */
    if (w) futex((_Atomic uint32_t *)w, FUTEX_WAKE_BITSET, INT_MAX, NULL, ~0u);
  }
#else
  (void)cl;
#endif
}

void dbl_board_close(dblock_client *cl) {
  if (cl->board) {
    munmap(cl->board->slot, SLOTS * sizeof(board_slot));
    free(cl->board);
    cl->board = NULL;
  }
}
