/*
 * cmd_force_unlock.c — dblock force-unlock: frees a name whoever holds it.
 */
#include <stdio.h>

#include "dblock_cli.h"

/* Frees NAME and advances its fence, printing the new one; a name with no
 * row is an error (exit 1). Returns the exit status. */
static int cmd_force_unlock(args *a) {
  dblock_client *cl;
  const char *name = NULL;
  int64_t fence = 0;
  int rc;
  if ((rc = cli_need_name(a, &name)) != 0) return rc;
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  rc = dblock_force_unlock(cl, name, &fence);
  if (rc == DBLOCK_ENOTHELD) {
    fprintf(stderr, "%s: force-unlock: no lock named '%s'\n", PROG, name);
    dblock_client_free(cl);
    return CLI_DBERR;
  }
  if (rc != 0) {
    rc = cli_fail(a, "force-unlock", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    cli_json_open();
    fputs(",\"name\":", stdout);
    cli_json_str(stdout, name);
    printf(",\"fence\":%lld}\n", (long long)fence);
  } else {
    printf("fence=%lld\n", (long long)fence);
  }
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_force_unlock_def = {"force-unlock", O_JSON, cmd_force_unlock, "force-unlock NAME",
    "Frees NAME whoever holds it and advances its fencing token; prints\n"
    "fence=N (the new token). The old holder's handle reports the lock lost.\n"
    "A held for_update lock can only be force-unlocked on PostgreSQL.\n"};
