/*
 * cmd_doctor.c — dblock doctor: whether the database keeps dblock's
 * promises, one finding per line (or JSON).
 */
#include <stdio.h>
#include <stdlib.h>

#include "dblock_cli.h"

/* A finding's severity as printed, indexed by DBLOCK_SEV_*. */
static const char *const SEV_NAMES[] = {"ok", "info", "warn", "UNSAFE"};

/* Exit status: CLI_UNSAFE when any finding is unsafe, else 0. */
static int cmd_doctor(args *a) {
  dblock_client *cl;
  dblock_finding *f;
  size_t n;
  int rc, unsafe = 0;
  if (a->npos) return cli_usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_doctor(&f, &n, cl)) != 0) {
    rc = cli_fail(a, "doctor", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  for (size_t i = 0; i < n; i++) unsafe |= f[i].severity == DBLOCK_SEV_UNSAFE;
  if (a->json) {
    cli_json_open();
    printf(",\"ok\":%s,\"findings\":[", unsafe ? "false" : "true");
    for (size_t i = 0; i < n; i++) {
      printf("%s{\"severity\":", i ? "," : "");
      cli_json_str(stdout, SEV_NAMES[f[i].severity & 3]);
      fputs(",\"topic\":", stdout);
      cli_json_str(stdout, f[i].topic);
      fputs(",\"text\":", stdout);
      cli_json_str(stdout, f[i].text);
      fputs(",\"advice\":", stdout);
      cli_json_str(stdout, f[i].advice);
      putchar('}');
    }
    puts("]}");
  } else {
    for (size_t i = 0; i < n; i++) {
      printf("%-6s %-10s %s\n", SEV_NAMES[f[i].severity & 3], f[i].topic, f[i].text);
      if (f[i].advice[0]) printf("%-17s -> %s\n", "", f[i].advice);
    }
    printf("%s\n", unsafe ? "verdict: UNSAFE — dblock's promises can break here (see above)"
                          : "verdict: ok");
  }
  free(f);
  return unsafe ? CLI_UNSAFE : CLI_OK;
}

const command cmd_doctor_def = {"doctor", O_JSON, cmd_doctor, "doctor",
    "Tells whether the database keeps dblock's promises: server and version,\n"
    "topology (stand-alone, primary with synchronous / asynchronous standbys,\n"
    "replica, Galera node), durability settings, settings that can end a lock\n"
    "or a wait early, the server's clock against this host's, whether the\n"
    "--strategy works there, migration status. One finding per line (ok, info,\n"
    "warn, UNSAFE) with advice; --json prints {\"version\":..,\"ok\":..,\n"
    "\"findings\":[..]}.\n"
    "Exit status 5 if anything is unsafe. Works on a replica.\n"};
