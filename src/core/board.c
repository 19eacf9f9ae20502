/*
 * board.c — the wake board: waking polling waiters where the database is a
 * file on this host (SQLite), for insert and optimistic.
 *
 * Every process that opens the same database maps one small shared file
 * next to it (the driver names it: board_path): an array of 32-bit
 * counters, one per name hash (WORDS of them), and a few hand-off records.
 * A waiter whose attempt found the name busy sleeps on its name's counter
 * (a Linux futex, shared between processes through the mapping) until the
 * counter moves; a release bumps the counter and wakes one sleeper — the
 * kernel wakes a futex's sleepers of equal priority in the order they went
 * to sleep, so the name goes round its waiters in arrival order.
 *
 * No barging: a release that woke somebody notes when (after the
 * wake-up), and the name's hash; for HOLD_MS after that, a blocking
 * acquire of that name that no release woke does not try but queues
 * behind the sleepers (so a holder that releases and asks again at once
 * goes last). Bounded in time, so a
 * woken waiter that died before trying delays the others that long at
 * most. The woken waiter, once granted, marks the record taken (its time,
 * negated): the others then stay behind it for up to a poll window of
 * their own — until its release wakes the next sleeper, or until they
 * would have polled anyway — rather than trying as the 100 ms run out,
 * which could fall just as its release freed the name, ahead of the
 * sleeper that release woke.
 *
 * Everything here only decides who tries when: exclusion and fences stay
 * with the row, and whatever the file holds (another process may write it)
 * can only delay a waiter. Every sleep is bounded (the caller's poll
 * window; the hold by a hand-off record, which is believed only when it is
 * younger than HOLD_MS by this host's clock), so a wake-up lost — a woken
 * waiter killed, a hash shared by two names, a holder whose lease ran out
 * without a release, a process that opened the file under another name —
 * costs a poll window, never a lock. A board that cannot be opened (a
 * read-only folder; a symlink, a file with other links or writable by
 * everyone) or a futex call that fails leaves the waiters polling.
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

#define WORDS 32768 /* counters, by name hash */
#define HANDS 1024  /* hand-off records, by name hash */
#define HOLD_MS 100

typedef struct board_hand {
  _Atomic int64_t at_ms;  /* CLOCK_MONOTONIC ms of the last release of a name
                             of the record that woke a sleeper (0: none), or
                             negated: of that sleeper's grant (taken) */
  _Atomic uint64_t hash;  /* that name's hash: other names are not held back */
} board_hand;

typedef struct board_file {
  _Atomic uint32_t word[WORDS]; /* bumped by every release of a name of the word */
  board_hand hand[HANDS];
} board_file;

_Static_assert(sizeof(board_file) == WORDS * 4 + HANDS * 16, "the board's layout is shared");

struct dbl_board {
  board_file *f;
};

static _Atomic uint32_t *word_of(const dblock_client *cl, uint64_t h) {
  return &cl->board.map->f->word[h % WORDS];
}

static board_hand *hand_of(const dblock_client *cl, uint64_t h) {
  return &cl->board.map->f->hand[(h >> 32) % HANDS];
}

#ifdef __linux__
/* Maps the board file, created (0660, less the umask) and given its blocks
 * if need be. Only a plain file with one name, not writable by everyone:
 * never a symlink planted to make us scribble on another file. NULL when
 * it cannot be. */
static struct dbl_board *board_map(const char *path) {
  struct dbl_board *b;
  struct stat st;
  void *m;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0660);
  if (fd < 0) return NULL;
  /* (allocated, not sparse: a store into a page that a full disk cannot
   * back would be SIGBUS; never shrunk: two processes growing it at once
   * both allocate the same size) */
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_mode & 0002) ||
      ((size_t)st.st_size < sizeof(board_file) &&
       (errno = posix_fallocate(fd, 0, (off_t)sizeof(board_file))) != 0)) {
    if (!errno) errno = EPERM;
    close(fd);
    return NULL;
  }
  m = mmap(NULL, sizeof(board_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return NULL;
  if (!(b = malloc(sizeof *b))) {
    munmap(m, sizeof(board_file));
    return NULL;
  }
  b->f = m;
  return b;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *at) {
  return syscall(SYS_futex, (uint32_t *)w, op, val, at, NULL, FUTEX_BITSET_MATCH_ANY);
}
#endif

int dbl_board_possible(dblock_client *cl) {
#ifdef __linux__
  char path[PATH_MAX + 32] = "";
  int state;
  if (cl->strat->pins_connection || !cl->drv->board_path) return 0;
  if ((state = atomic_load(&cl->board.state)) != 0) return state > 0;
  /* First use: open it outside the mutex; the first to finish keeps its
   * mapping. */
  errno = 0;
  struct dbl_board *b = cl->drv->board_path(&cl->url, path, sizeof path) == 0 ? board_map(path)
                                                                            : NULL;
  int err = errno, failed = 0;
  dbl_lock(cl);
  if (!atomic_load(&cl->board.state)) {
    cl->board.map = b, b = NULL;
    atomic_store(&cl->board.state, cl->board.map ? 1 : -1); /* (after the pointer) */
    failed = !cl->board.map;
  }
  state = atomic_load(&cl->board.state);
  dbl_unlock(cl);
  if (failed)
    dbl_log(cl, DBLOCK_LOG_INFO, "no wake board for '%s' (%s): waiters poll",
            path[0] ? path : cl->url.redacted, err ? strerror(err) : "not a file on this host");
  if (b) {
    munmap(b->f, sizeof(board_file));
    free(b);
  }
  return state > 0;
#else
  (void)cl;
  return 0;
#endif
}

uint64_t dbl_board_hash(const dblock_client *cl, const char *name) {
  const char *parts[2] = {cl->table, name};
  return dbl_parts_hash(parts, 2);
}

uint32_t dbl_board_seq(const dblock_client *cl, uint64_t h) { return atomic_load(word_of(cl, h)); }

int64_t dbl_board_handed_until(const dblock_client *cl, uint64_t h, int64_t window_ms,
                               int *taken) {
  board_hand *r = hand_of(cl, h);
  int64_t at = atomic_load(&r->at_ms), now = dbl_mono_ms();
  int64_t lim = at < 0 ? window_ms : HOLD_MS;
  *taken = at < 0;
  if (at == INT64_MIN) return 0; /* (no time: its negation overflows) */
  if (at < 0) at = -at;
  /* Believed only if it is recent by this host's clock: a record left from
   * before a reboot, or written by anyone else, holds nobody back for
   * longer. (Two stores, read without a lock: a torn pair only misjudges
   * how long an attempt waits — a hold at most — never a lock.) */
  if (at == 0 || at > now || now - at >= lim || atomic_load(&r->hash) != h) return 0;
  return at + lim;
}

void dbl_board_taken(dblock_client *cl, uint64_t h) {
  board_hand *r = hand_of(cl, h);
  /* (written whatever the record holds: the release that woke this
   * waiter may not have written its own yet, dbl_board_post. A record of
   * another name that shares the slot is overwritten, which only
   * misjudges how long that name's waiters stay behind, never a lock.) */
  atomic_store(&r->hash, h);
  atomic_store(&r->at_ms, -dbl_mono_ms());
}

int dbl_board_wait(dblock_client *cl, uint64_t h, uint32_t seen, int64_t ms) {
#ifdef __linux__
  _Atomic uint32_t *w = word_of(cl, h);
  int64_t end = dbl_mono_ms() + ms;
  int reg = -1, rc = 0, woken = 0;
  /* Registered, so that dblock_client_cancel can wake this sleep (a cancel
   * may come from a signal handler: it can only make a system call). */
  for (int i = 0; i < DBL_CANCEL_SLOTS && reg < 0; i++) {
    uintptr_t none = 0;
    if (atomic_compare_exchange_strong(&cl->board.wait[i], &none, (uintptr_t)w)) reg = i;
  }
  for (;;) {
    int64_t now = dbl_mono_ms(), until = end;
    struct timespec at;
    if (atomic_load(w) != seen) {
      DBL_COUNT(cl, wakeups);
      rc = woken ? 1 : 2;
      break;
    }
    if (now >= end || dbl_cancelled(cl)) break;
    if (reg < 0 && until > now + 20) until = now + 20; /* (unregistered: slices) */
    at.tv_sec = until / 1000;
    at.tv_nsec = (until % 1000) * 1000000;
    /* (the absolute time is CLOCK_MONOTONIC: FUTEX_WAIT_BITSET's default) */
    woken = futex(w, FUTEX_WAIT_BITSET, seen, &at) == 0;
    if (!woken && errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
      rc = -1; /* (no futexes here: seccomp, an emulator) */
      break;
    }
  }
  if (reg >= 0) atomic_store(&cl->board.wait[reg], 0);
  return rc;
#else
  (void)cl, (void)h, (void)seen, (void)ms;
  return -1;
#endif
}

void dbl_board_post(dblock_client *cl, uint64_t h) {
#ifdef __linux__
  _Atomic uint32_t *w = word_of(cl, h);
  board_hand *r = hand_of(cl, h);
  int64_t old = atomic_load(&r->at_ms);
  atomic_fetch_add(w, 1);
  if (futex(w, FUTEX_WAKE, 1, NULL) > 0) {
    /* Written after the wake-up (a record of a release that woke nobody
     * would hold a free name back), but only over the record as it was
     * before it: the sleeper woken may have been granted meanwhile and
     * marked it taken, which stands. */
    atomic_store(&r->hash, h);
    atomic_compare_exchange_strong(&r->at_ms, &old, dbl_mono_ms());
  } else {
    atomic_store(&r->at_ms, 0);
  }
#else
  (void)cl, (void)h;
#endif
}

void dbl_board_cancel(dblock_client *cl) {
#ifdef __linux__
  for (int i = 0; i < DBL_CANCEL_SLOTS; i++) {
    _Atomic uint32_t *w = (_Atomic uint32_t *)atomic_load(&cl->board.wait[i]);
    if (!w) continue;
    /* Moved first, so that a waiter between its look at the flag and its
     * sleep does not sleep (the sleep compares the word); the other
     * sleepers of the word, other processes' too, make one spare try. */
    atomic_fetch_add(w, 1);
    futex(w, FUTEX_WAKE, INT_MAX, NULL);
  }
#else
  (void)cl;
#endif
}

void dbl_board_close(dblock_client *cl) {
  if (cl->board.map) {
    munmap(cl->board.map->f, sizeof(board_file));
    free(cl->board.map);
    cl->board.map = NULL;
  }
}
