/* Take a lock, print its fencing token, release it. Usage: basic_lock [URL] (default $DBLOCK_URL) */
#include <dblock.h>
#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv) {
  dblock_client *c;
  dblock_lock *l;
  dblock_error_info e;
  int rc = dblock_client_open(&c, argc > 1 ? argv[1] : NULL, NULL); /* NULL options: defaults */
  if (rc != 0) {
    dblock_last_error(&e); /* no client yet: this thread's last error */
    fprintf(stderr, "open: %s: %s\n", dblock_strerror(rc), e.message);
    return 1;
  }
  rc = dblock_migrate(c, NULL); /* creates the lock table; a no-op once done */
  /* wait up to 5 s; lease 0 = the client's (30 s), renewed in the background while held */
  if (rc == 0 && (rc = dblock_lock_acquire(&l, c, "nightly-report", 5000, 0)) == 0) {
    printf("holding nightly-report, fence %" PRId64 "\n", dblock_lock_fence(l));
    /* ... the work; pass the fence along with every write it makes (docs/fencing.md) ... */
    rc = dblock_lock_release(l);
  }
  if (rc != 0) {
    dblock_client_last_error(c, &e);
    fprintf(stderr, "%s: %s\n", dblock_strerror(rc), e.message);
  }
  dblock_client_free(c);
  return rc != 0;
}
