/*
 * cmd_release.c — dblock release: frees a lock taken by 'dblock acquire',
 * if the token printed then still owns it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dblock_cli.h"

/*
 * The owner token printed by `acquire` is OWNERTOKEN:THREAD:FENCE — the
 * row's owner_token (32 hex digits, random per client), owner_thread and
 * fencing token. `release` frees the lock only if the row still shows all
 * three and at least one hold: a lock that expired and was taken over,
 * force-unlocked or already released no longer matches.
 */

/* Splits a token OWNERTOKEN:THREAD:FENCE into its three parts. Returns 0,
 * or -1 when it is malformed (the owner is not 32 lowercase hex digits,
 * a number is missing or bad, the fence is not positive). */
static int parse_token(const char *t, char owner[33], long long *thread, long long *fence) {
  const char *c1 = strchr(t, ':'), *c2;
  char *end;
  if (!c1 || c1 - t != 32) return -1;
  for (int i = 0; i < 32; i++) {
    char ch = t[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return -1;
  }
  memcpy(owner, t, 32);
  owner[32] = 0;
  if (!(c2 = strchr(c1 + 1, ':'))) return -1;
  errno = 0;
  *thread = strtoll(c1 + 1, &end, 10);
  if (end != c2 || end == c1 + 1 || errno) return -1;
  *fence = strtoll(c2 + 1, &end, 10);
  if (*end || end == c2 + 1 || errno || *fence <= 0) return -1;
  return 0;
}

/* Releases NAME if the row still shows the --token's owner, thread and
 * fence; exit 4 when it does not (expired and taken over, force-unlocked
 * or already released). Returns the exit status. */
static int cmd_release(args *a) {
  dblock_client *cl;
  dblock_lock_info info;
  const char *name = NULL;
  char owner[33];
  long long thread, fence;
  int rc;
  if ((rc = cli_need_name(a, &name)) != 0) return rc;
  if (!a->token)
    return cli_usage_error(a, "missing --token (the token printed by 'dblock acquire')");
  if (parse_token(a->token, owner, &thread, &fence) != 0)
    return cli_usage_error(a, "malformed --token (expected the token=... value printed by "
                              "'dblock acquire')");
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  /* Informational only: say when the lease had already run out. The
   * release itself is one owner-checked statement. */
  if (!a->quiet && dblock_lock_inspect(&info, cl, name) == 0 && !info.held &&
      strcmp(info.owner_token, owner) == 0 && info.fence == fence)
    fprintf(stderr, "%s: release: warning: the lease of '%s' had expired (nobody took it over)\n",
            PROG, name);
  rc = dblock_release_grant(cl, name, owner, (int64_t)thread, (int64_t)fence);
  if (rc == DBLOCK_ENOTHELD) {
    fprintf(stderr, "%s: release: %s\n", PROG, "lock is not held by this token (it expired and "
                    "was reaped or taken over, was force-unlocked, or was already released)");
    if (a->json) {
      cli_json_open();
      puts(",\"ok\":false,\"released\":false,\"error\":\"not held by this token\"}");
    }
    rc = CLI_LOST;
  } else if (rc != 0) {
    rc = cli_fail(a, "release", cl, rc);
  } else if (a->json) {
    cli_json_open();
    fputs(",\"ok\":true,\"released\":true,\"name\":", stdout);
    cli_json_str(stdout, name);
    puts("}");
  }
  dblock_client_free(cl);
  return rc;
}

const command cmd_release_def = {"release", O_JSON | O_TOKEN, cmd_release, "release NAME --token T",
    "Releases a lock taken with 'dblock acquire', if the token still owns it.\n"
    "A lock that expired and was taken over, was force-unlocked or was already\n"
    "released is left alone and the exit status is 4.\n"};
