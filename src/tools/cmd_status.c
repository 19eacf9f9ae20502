/*
 * cmd_status.c — dblock status: what the database knows about one name.
 */
#include <stdio.h>

#include "dblock_cli.h"
#include "out.h"

/* Prints NAME's row (text or one JSON object); a name with no row is free
 * (exit 0, JSON "row":false). Returns the exit status. */
static int cmd_status(args *a) {
  dblock_client *cl;
  dblock_lock_info i;
  const char *name = NULL;
  char buf[400], t[40];
  int rc;
  if ((rc = cli_need_name(a, &name)) != 0) return rc;
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  rc = dblock_lock_inspect(&i, cl, name);
  if (rc == DBLOCK_ENOTHELD) {
    /* No row: never used, or reaped. The name is free — an answer, not an
     * error (exit 0); "row": false tells it from a free row. */
    dblock_client_free(cl);
    if (a->json) {
      cli_json_open();
      fputs(",\"name\":", stdout);
      cli_json_str(stdout, name);
      puts(",\"row\":false,\"held\":false}");
    } else {
      out_cell(buf, sizeof buf, name);
      printf("name:       %s\nheld:       no (no lock row: never taken, or reaped)\n", buf);
    }
    return CLI_OK;
  }
  if (rc != 0) {
    rc = cli_fail(a, "status", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    out_json_info(&i, 1);
    putchar('\n');
  } else {
    out_cell(buf, sizeof buf, i.name);
    printf("name:       %s\n", buf);
    printf("strategy:   %s\n", i.strategy);
    printf("held:       %s\n", i.held ? "yes" : "no");
    out_holder(buf, sizeof buf, &i);
    printf("holder:     %s\n", buf);
    printf("fence:      %lld\n", (long long)i.fence);
    printf("holds:      %d\n", i.hold_count);
    printf("acquired:   %s\n", cli_iso8601(t, sizeof t, i.acquired_at_us, 6));
    printf("expires:    %s\n", cli_iso8601(t, sizeof t, i.expires_at_us, 6));
  }
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_status_def = {"status", O_JSON, cmd_status, "status NAME",
    "Shows what the database knows about NAME: strategy, held, holder host, pid\n"
    "and thread, fence, hold count, acquired and expiry times (UTC). --json\n"
    "prints one JSON object. A name with no row is free: held no, exit 0\n"
    "(JSON \"row\":false).\n"};
