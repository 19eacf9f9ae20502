/*
 * topology.c — judging what a probe found (driver.h dbl_topology): which
 * settings and topologies can lose a lock that was granted. Shared by the
 * check at dblock_client_open (warnings) and dblock doctor (findings).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

static int is(const char *v, const char *want) { return v && strcmp(v, want) == 0; }

int dbl_topology_risks(const dbl_topology *t, char (*out)[320], int max) {
  const char *sc = dbl_topology_setting(t, "synchronous_commit");
  const char *names = dbl_topology_setting(t, "synchronous_standby_names");
  const char *flush = dbl_topology_setting(t, "innodb_flush_log_at_trx_commit");
  int n = 0;
#define RISK(...)                                \
  do {                                           \
    if (n < max) snprintf(out[n++], 320, __VA_ARGS__); \
  } while (0)
  if (t->standbys > 0 &&
      (t->sync_standbys == 0 || (t->sync_standbys < 0 && (!names || !*names))))
    RISK("this PostgreSQL primary streams to %d standby(s) asynchronously: after a failover "
         "to one, locks granted in the last moments are gone and granted again to others. "
         "Make a standby synchronous (synchronous_standby_names) or do not fail over to them",
         t->standbys);
  else if (t->standbys > 0 && (is(sc, "local") || is(sc, "off")))
    RISK("synchronous_commit = %s: commits do not wait for the synchronous standby, so a "
         "failover can lose granted locks; use on or remote_write for dblock's role", sc);
  if (is(sc, "off") && t->standbys <= 0)
    RISK("synchronous_commit = off: a server crash can lose granted locks (another client "
         "is then granted the same name); use on for dblock's role");
  if (is(dbl_topology_setting(t, "fsync"), "off"))
    RISK("fsync = off: an operating-system crash can lose granted locks and the lock table");
  if (flush && !is(flush, "1") && !t->galera)
    RISK("innodb_flush_log_at_trx_commit = %s: a crash can lose granted locks (another "
         "client is then granted the same name); set it to 1", flush);
  if (t->replica_of && !t->read_only)
    RISK("this server replicates from another but takes writes: locks taken here are not "
         "seen by clients of its source; point dblock at the primary");
#undef RISK
  return n;
}
