/*
 * cmd_migrate.c — dblock migrate: creates or upgrades the lock table;
 * --status lists the migrations, --baseline adopts a schema another tool
 * applied.
 */
#include <stdio.h>

#include "dblock_cli.h"
#include "out.h"

/* Applies the pending migrations, or (--status) lists them as a table or
 * one JSON object ({"version":..,"migrations":[..]}), or (--baseline)
 * records those already there as applied. Returns the exit status. */
static int cmd_migrate(args *a) {
  dblock_client *cl;
  int rc, applied = 0;
  if (a->npos) return cli_usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  if (a->migrate_status) {
    dblock_migration_info *mi;
    size_t n;
    if ((rc = dblock_migrate_status(&mi, &n, cl)) != 0) {
      rc = cli_fail(a, "migrate --status", cl, rc);
      dblock_client_free(cl);
      return rc;
    }
    if (a->json) {
      char t[40];
      cli_json_open();
      fputs(",\"migrations\":[", stdout);
      for (size_t i = 0; i < n; i++) {
        printf("%s{\"version\":%d,\"name\":", i ? "," : "", mi[i].version);
        cli_json_str(stdout, mi[i].name);
        printf(",\"applied\":%s,\"applied_at\":", mi[i].applied ? "true" : "false");
        if (mi[i].applied_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, mi[i].applied_at_us, 6));
        else fputs("null", stdout);
        printf(",\"checksum_ok\":%s}", mi[i].applied ? (mi[i].checksum_ok ? "true" : "false") : "null");
      }
      fputs("]}\n", stdout);
    } else {
      size_t wname = 4;
      char t[40];
      for (size_t i = 0; i < n; i++)
        if (out_width(mi[i].name) > wname) wname = out_width(mi[i].name);
      printf("%-7s  ", "VERSION");
      out_padded("NAME", wname, 0);
      printf("%-7s  %-27s  %s\n", "STATUS", "APPLIED AT", "CHECKSUM");
      for (size_t i = 0; i < n; i++) {
        printf("%-7d  ", mi[i].version);
        out_padded(mi[i].name, wname, 0);
        printf("%-7s  %-27s  %s\n", mi[i].applied ? "applied" : "pending",
               mi[i].applied ? cli_iso8601(t, sizeof t, mi[i].applied_at_us, 6) : "-",
               !mi[i].applied ? "-" : mi[i].checksum_ok ? "ok" : "MISMATCH");
      }
    }
    dblock_migration_info_free(mi, n);
    dblock_client_free(cl);
    return CLI_OK;
  }
  if (a->baseline) {
    if (a->migrate_status) {
      dblock_client_free(cl);
      return cli_usage_error(a, "--baseline and --status do not go together");
    }
    if ((rc = dblock_migrate_baseline(cl, &applied)) != 0) {
      rc = cli_fail(a, "migrate --baseline", cl, rc);
      dblock_client_free(cl);
      return rc;
    }
    if (a->json) {
      cli_json_open();
      printf(",\"recorded\":%d,\"backend\":\"%s\"}\n", applied, dblock_client_backend(cl));
    }
    else
      printf("recorded %d migration%s as applied by another tool (%s); "
             "'dblock migrate' applies the rest\n",
             applied, applied == 1 ? "" : "s", dblock_client_backend(cl));
    dblock_client_free(cl);
    return CLI_OK;
  }
  if ((rc = dblock_migrate(cl, &applied)) != 0) {
    rc = cli_fail(a, "migrate", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  if (a->json) {
    cli_json_open();
    printf(",\"applied\":%d,\"backend\":\"%s\"}\n", applied, dblock_client_backend(cl));
  } else printf("applied %d migration%s (%s)\n", applied, applied == 1 ? "" : "s", dblock_client_backend(cl));
  dblock_client_free(cl);
  return CLI_OK;
}

const command cmd_migrate_def = {"migrate", O_JSON | O_STATUS | O_BASELINE, cmd_migrate,
    "migrate [--status | --baseline]",
    "Creates or upgrades the lock table (applies pending migrations and prints\n"
    "how many). With --status, lists each migration: version, name,\n"
    "applied/pending, when it was applied and whether its checksum matches.\n"
    "With --baseline, adopts a schema another tool (Flyway, golang-migrate)\n"
    "applied from dblock's migrations: records those whose objects are there\n"
    "as applied, runs nothing; a later 'dblock migrate' applies the rest.\n"};
