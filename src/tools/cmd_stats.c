/*
 * cmd_stats.c — dblock stats: the lock table's gauges, as OpenMetrics text
 * or JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dblock_cli.h"

/* What the lock table holds right now, as gauges for monitoring (a cron
 * job writing node_exporter's textfile collector, or --json): rows by
 * strategy and state, the age of the oldest held lock, the highest fence.
 * (A one-shot process has no counters worth showing; an application reads
 * its own with dblock_client_stats / dblock_stats_openmetrics.) */
static int cmd_stats(args *a) {
  static const char *const strat[] = {"insert", "for_update", "optimistic"};
  dblock_client *cl;
  dblock_lock_info *v;
  size_t n, count[3][2] = {{0}};
  int64_t oldest = 0, max_fence = 0, now_us;
  const char *table = a->table ? a->table : "dblock_locks";
  struct timespec ts;
  int rc;
  if (a->npos) return cli_usage_error(a, "unexpected argument '%s'", a->pos[0]);
  if ((rc = cli_open_client(&cl, a)) != 0) return rc;
  if ((rc = dblock_lock_list(&v, &n, cl, 0)) != 0) {
    rc = cli_fail(a, "stats", cl, rc);
    dblock_client_free(cl);
    return rc;
  }
  dblock_client_free(cl);
  clock_gettime(CLOCK_REALTIME, &ts);
  now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  for (size_t i = 0; i < n; i++) {
    int k = strcmp(v[i].strategy, "for_update") == 0 ? 1 : strcmp(v[i].strategy, "optimistic") == 0 ? 2 : 0;
    count[k][v[i].held ? 1 : 0]++;
    if (v[i].held && v[i].acquired_at_us && (!oldest || v[i].acquired_at_us < oldest))
      oldest = v[i].acquired_at_us;
    if (v[i].fence > max_fence) max_fence = v[i].fence;
  }
  free(v);
  /* (server-clock acquisition against this host's clock: as close as the
   * two clocks are; never negative) */
  double age = oldest && now_us > oldest ? (double)(now_us - oldest) / 1e6 : 0.0;
  if (a->json) {
    size_t held = count[0][1] + count[1][1] + count[2][1];
    cli_json_open();
    fputs(",\"table\":", stdout);
    cli_json_str(stdout, table);
    printf(",\"rows\":%zu,\"held\":%zu,\"free\":%zu,\"by_strategy\":{", n, held, n - held);
    for (int k = 0; k < 3; k++)
      printf("%s\"%s\":{\"held\":%zu,\"free\":%zu}", k ? "," : "", strat[k], count[k][1],
             count[k][0]);
    printf("},\"oldest_held_seconds\":%.3f,\"max_fence\":%lld}\n", age, (long long)max_fence);
    return CLI_OK;
  }
  printf("# TYPE dblock_locks gauge\n"
         "# HELP dblock_locks Lock rows by strategy and state (held, or free: released or "
         "expired, kept for its fence).\n");
  for (int k = 0; k < 3; k++)
    for (int held = 1; held >= 0; held--)
      printf("dblock_locks{table=\"%s\",strategy=\"%s\",state=\"%s\"} %zu\n", table, strat[k],
             held ? "held" : "free", count[k][held]);
  printf("# TYPE dblock_locks_oldest_held_seconds gauge\n"
         "# HELP dblock_locks_oldest_held_seconds Age of the longest-held lock (0: none held).\n"
         "dblock_locks_oldest_held_seconds{table=\"%s\"} %.3f\n"
         "# TYPE dblock_locks_max_fence gauge\n"
         "# HELP dblock_locks_max_fence Highest fencing token in the table.\n"
         "dblock_locks_max_fence{table=\"%s\"} %lld\n# EOF\n",
         table, age, table, (long long)max_fence);
  return CLI_OK;
}

const command cmd_stats_def = {"stats", O_JSON, cmd_stats, "stats",
    "Prints what the lock table holds right now as OpenMetrics text (for a\n"
    "monitoring textfile collector): rows by strategy and state (held/free),\n"
    "the age of the oldest held lock, the highest fence. --json prints one\n"
    "object with the same figures.\n"};
