/*
 * cmd_acquire.c — dblock acquire: takes a lock with a fixed lease that
 * outlives the process, for a shell script's later 'dblock release'.
 */
#include <stdio.h>

#include "dblock_cli.h"

/* Acquires NAME with a lease that is not renewed and prints the fence and
 * the owner token (OWNERTOKEN:THREAD:FENCE, see cmd_release.c) read back
 * from the row; the lock is deliberately left held. Returns the exit
 * status. */
static int cmd_acquire(args *a) {
  dblock_client *cl;
  dblock_lock *l;
  dblock_lock_info info;
  const char *name = NULL;
  int rc;
  int64_t lease = (a->seen & O_LEASE) ? a->lease_ms : 30000;
  if ((rc = cli_need_name(a, &name)) != 0) return rc;
  if (a->strategy == DBLOCK_STRATEGY_FOR_UPDATE)
    return cli_usage_error(a, "the for_update strategy holds a lock only while its session "
                          "lives; use 'dblock run', or the insert or optimistic strategy");
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  if ((rc = cli_acquire_interruptibly(&l, cl, a, name, lease)) != 0) {
    rc = rc == DBLOCK_ECANCELED ? cli_interrupted(a, "acquire", name)
                                : cli_fail_lock(a, "acquire", cl, rc, name);
    dblock_client_free(cl);
    return rc;
  }
  if ((rc = dblock_lock_inspect(&info, cl, name)) != 0 || !info.owner_token[0] ||
      info.fence != dblock_lock_fence(l)) {
    if (rc) rc = cli_fail(a, "acquire: cannot read back the owner", cl, rc);
    else {
      fprintf(stderr, "%s: acquire: the lock row does not show this owner after the grant\n", PROG);
      rc = CLI_LOST;
    }
    dblock_lock_release(l);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    char t[40], tok[80];
    snprintf(tok, sizeof tok, "%s:%lld:%lld", info.owner_token, (long long)info.owner_thread,
             (long long)info.fence);
    cli_json_open();
    fputs(",\"ok\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"fence\":%lld,\"token\":\"%s\",\"expires_at\":", (long long)info.fence, tok);
    cli_json_str(stdout, cli_iso8601(t, sizeof t, dblock_lock_expires_at(l), 6));
    fputs("}\n", stdout);
  } else {
    printf("fence=%lld\ntoken=%s:%lld:%lld\n", (long long)info.fence, info.owner_token,
           (long long)info.owner_thread, (long long)info.fence);
  }
  fflush(stdout);
  cli_kept = l;
  /* Deliberately not released: the lease keeps it until `dblock release`
   * or expiry. dblock_client_free releases nothing. */
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_acquire_def = {"acquire", O_JSON | O_LOCKING, cmd_acquire,
    "acquire NAME [--lease D] [--wait D | -n] [-v] [--fair]",
    "Acquires NAME with an explicit lease (default 30s) that is NOT renewed and\n"
    "outlives this process, so a lock can be held across shell steps. Prints\n"
    "  fence=N      the fencing token\n"
    "  token=T      the owner token for 'dblock release NAME --token T'\n"
    "In a script: lock=$(dblock acquire NAME --lease 5m) || exit; eval \"$lock\"\n"
    "sets $fence and $token (a bare eval \"$(...)\" would go on when busy).\n"
    "--wait defaults to 0 (try once); -n says so too (flock's word). When busy,\n"
    "the message names the holder (host, pid, fence, until when); -v also says\n"
    "so while it waits. Not available with --strategy for_update, whose lock\n"
    "ends with the session.\n"};
