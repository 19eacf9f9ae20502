/*
 * cmd_reap.c — dblock reap: one reaper pass over the expired lock rows.
 */
#include <stdio.h>

#include "dblock_cli.h"

/* Deletes the rows expired more than --grace ago, --batch per statement,
 * and prints how many and how long it took. Returns the exit status. */
static int cmd_reap(args *a) {
  dblock_client *cl;
  int64_t deleted = 0, t0;
  double secs;
  int rc;
  if (a->npos) return cli_usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  t0 = cli_mono_ms();
  rc = dblock_reap(cl, a->grace_ms, a->batch, &deleted);
  secs = (double)(cli_mono_ms() - t0) / 1000.0;
  if (rc != 0) {
    if (a->json) {
      dblock_error_info ei;
      dblock_client_last_error(cl, &ei);
      cli_json_open();
      printf(",\"deleted\":%lld,\"seconds\":%.3f,\"ok\":false,\"error\":", (long long)deleted, secs);
      cli_json_str(stdout, ei.message[0] ? ei.message : dblock_strerror(rc));
      puts("}");
    }
    {
      args quiet = *a; /* the JSON above is the one object on stdout */
      quiet.json = 0;
      rc = cli_fail(&quiet, "reap", cl, rc);
    }
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    cli_json_open();
    printf(",\"deleted\":%lld,\"seconds\":%.3f,\"ok\":true}\n", (long long)deleted, secs);
  }
  else printf("deleted %lld expired lock row%s in %.3f s\n", (long long)deleted,
              deleted == 1 ? "" : "s", secs);
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_reap_def = {"reap", O_JSON | O_GRACE | O_BATCH, cmd_reap,
    "reap [--grace D] [--batch N]",
    "One reaper pass (like dblock-reaper --once): deletes rows whose lease\n"
    "expired more than --grace (default 0) ago, --batch rows (default 1000) per\n"
    "statement, and prints how many it deleted and how long it took.\n"};
