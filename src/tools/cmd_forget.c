/*
 * cmd_forget.c — dblock forget: deletes a free name's row, so the name can
 * be used with another strategy.
 */
#include <stdio.h>

#include "dblock_cli.h"

/* Deletes a free name's row (dblock_forget), so another strategy can use
 * the name. Busy (exit 3) when it is held: nothing is deleted. */
static int cmd_forget(args *a) {
  dblock_client *cl;
  const char *name = NULL;
  int rc;
  if ((rc = cli_need_name(a, &name)) != 0) return rc;
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  rc = dblock_forget(cl, name);
  if (rc != 0) {
    rc = cli_fail_lock(a, "forget", cl, rc, name);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    cli_json_open();
    fputs(",\"ok\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    puts(",\"forgotten\":true}");
  } else {
    printf("forgot '%s' (its row is deleted; the next acquire, with any strategy, creates it)\n",
           name);
  }
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_forget_def = {"forget", O_JSON, cmd_forget, "forget NAME",
    "Deletes the row of NAME while nobody holds it, so the name can be used with\n"
    "another strategy (an acquire with the wrong --strategy exits 2 and says\n"
    "so). A held name is left alone and the exit status is 3. Fencing tokens\n"
    "stay increasing.\n"};
