/*
 * cmd_list.c — dblock list: every lock row, as a table or a JSON array.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dblock_cli.h"
#include "out.h"

enum { C_NAME, C_STRAT, C_HELD, C_HOLDER, C_FENCE, C_HOLDS, C_ACQ, C_EXP, NCOL };

/* Formats column c of row i into buf (a table cell). */
static const char *list_cell(char *buf, size_t size, const dblock_lock_info *i, int c) {
  switch (c) {
  case C_NAME: out_cell(buf, size, i->name); break;
  case C_STRAT: snprintf(buf, size, "%s", i->strategy); break;
  case C_HELD: snprintf(buf, size, "%s", i->held ? "yes" : "no"); break;
  case C_HOLDER: out_holder(buf, size, i); break;
  case C_FENCE: snprintf(buf, size, "%lld", (long long)i->fence); break;
  case C_HOLDS: snprintf(buf, size, "%d", i->hold_count); break;
  case C_ACQ: cli_iso8601(buf, size, i->acquired_at_us, 3); break;
  default: cli_iso8601(buf, size, i->expires_at_us, 3); break;
  }
  return buf;
}

/* Prints every lock row: a table whose columns fit the widest cell, or
 * with --json one object, {"version":..,"locks":[row, ...]}. Returns the
 * exit status. */
static int cmd_list(args *a) {
  static const char *const head[NCOL] = {"NAME", "STRATEGY", "HELD", "HOLDER",
                                         "FENCE", "HOLDS", "ACQUIRED", "EXPIRES"};
  dblock_client *cl;
  dblock_lock_info *v;
  size_t n, w[NCOL];
  char buf[1200];
  int rc;
  if (a->npos) return cli_usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_lock_list(&v, &n, cl, 0)) != 0) {
    rc = cli_fail(a, "list", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  if (a->json) {
    cli_json_open();
    fputs(",\"locks\":[", stdout);
    for (size_t i = 0; i < n; i++) {
      if (i) putchar(',');
      out_json_info(&v[i], 0);
    }
    puts("]}");
    free(v);
    return CLI_OK;
  }
  /* Two passes (widths, then rows), so a long list needs no extra memory. */
  for (int c = 0; c < NCOL; c++) w[c] = strlen(head[c]);
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < NCOL; c++) {
      size_t cw = out_width(list_cell(buf, sizeof buf, &v[i], c));
      if (cw > w[c]) w[c] = cw;
    }
  for (int c = 0; c < NCOL; c++) out_padded(head[c], w[c], c == NCOL - 1);
  putchar('\n');
  for (size_t i = 0; i < n; i++) {
    for (int c = 0; c < NCOL; c++)
      out_padded(list_cell(buf, sizeof buf, &v[i], c), w[c], c == NCOL - 1);
    putchar('\n');
  }
  free(v);
  return CLI_OK;
}

const command cmd_list_def = {"list", O_JSON, cmd_list, "list",
    "Lists every lock row as a table, or with --json as one JSON object whose\n"
    "\"locks\" array has a row per lock (as status --json prints it).\n"};
