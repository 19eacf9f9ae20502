/*
 * topology.c — judging what a probe found (driver.h dbl_topology): which
 * settings and topologies can lose a lock that was granted. Shared by the
 * check at dblock_client_open (warnings) and dblock doctor (findings).
 */
#include <stdarg.h>
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

static void add(dblock_finding *f, int *n, int max, int sev, const char *topic,
                const char *advice, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(dblock_finding *f, int *n, int max, int sev, const char *topic,
                const char *advice, const char *fmt, ...) {
  va_list ap;
  if (*n >= max) return;
  memset(&f[*n], 0, sizeof f[*n]);
  f[*n].severity = sev;
  snprintf(f[*n].topic, sizeof f[*n].topic, "%s", topic);
  snprintf(f[*n].advice, sizeof f[*n].advice, "%s", advice ? advice : "");
  va_start(ap, fmt);
  vsnprintf(f[*n].text, sizeof f[*n].text, fmt, ap);
  va_end(ap);
  (*n)++;
}

/* A duration setting as PostgreSQL (ms) or MariaDB (s) shows it: nonzero? */
static int set_nonzero(const char *v) { return v && *v && strtod(v, NULL) != 0; }

void dbl_topology_findings(const dbl_topology *t, dblock_finding *f, int *n, int max) {
  char risks[6][320];
  int nrisks = dbl_topology_risks(t, risks, 6), pg = dbl_topology_setting(t, "fsync") != NULL;
  const char *v;
  add(f, n, max, DBLOCK_SEV_INFO, "server", NULL, "%s", t->server);
  /* Topology. */
  if (t->read_only)
    add(f, n, max, DBLOCK_SEV_UNSAFE, "topology",
        "point the URL at the primary, or list every server (host1:port1,host2:port2)",
        "read-only server (a standby or replica): no lock can be taken here");
  else if (t->galera)
    add(f, n, max, t->galera_ready ? DBLOCK_SEV_OK : DBLOCK_SEV_UNSAFE, "topology",
        t->galera_ready ? "use the insert or optimistic strategy (for_update is refused)"
                        : "list the other nodes in the URL",
        "Galera node, cluster of %d, %s", t->cluster_size,
        t->galera_ready ? "synced in the primary component" : "NOT synced / no quorum");
  else if (pg && t->standbys > 0)
    add(f, n, max,
        t->sync_standbys == 0 ? DBLOCK_SEV_UNSAFE : t->sync_standbys < 0 ? DBLOCK_SEV_INFO
                                                                          : DBLOCK_SEV_OK,
        "topology", t->sync_standbys == 0 ? "set synchronous_standby_names" : NULL,
        "primary with %d streaming standby(s), %s synchronous", t->standbys,
        t->sync_standbys < 0 ? "unknown how many (needs pg_read_all_stats)"
        : t->sync_standbys == 0 ? "none"
                                : (t->sync_standbys == t->standbys ? "all" : "some"));
  else if (t->replica_of)
    add(f, n, max, DBLOCK_SEV_UNSAFE, "topology", "point dblock at the primary",
        "this server replicates from another");
  else
    add(f, n, max, DBLOCK_SEV_OK, "topology", NULL,
        pg ? "stand-alone server (no streaming standbys)"
           : "stand-alone server (not a replica, not Galera; replicas of it, if any, are "
             "not visible from here)");
  /* Durability: every way to lose a grant is unsafe. */
  for (int i = 0; i < nrisks; i++)
    add(f, n, max, DBLOCK_SEV_UNSAFE, "durability", NULL, "%s", risks[i]);
  if (!nrisks) {
    if (pg)
      add(f, n, max, DBLOCK_SEV_OK, "durability", NULL, "fsync = %s, synchronous_commit = %s",
          dbl_topology_setting(t, "fsync"), dbl_topology_setting(t, "synchronous_commit"));
    else if ((v = dbl_topology_setting(t, "innodb_flush_log_at_trx_commit")) != NULL)
      add(f, n, max, DBLOCK_SEV_OK, "durability", NULL, "innodb_flush_log_at_trx_commit = %s%s",
          v, t->galera ? " (Galera: committed on every node)" : "");
  }
  /* Settings that can end a lock or a wait early. */
  if (set_nonzero(v = dbl_topology_setting(t, "statement_timeout")) ||
      set_nonzero(v = dbl_topology_setting(t, "max_statement_time")))
    add(f, n, max, DBLOCK_SEV_WARN, "timeouts",
        "unset it for dblock's role/user, or keep blocking acquires shorter",
        "a statement time limit is set (%s): a blocking for_update acquire waiting longer "
        "is cut and reports a timeout", v);
  if (set_nonzero(v = dbl_topology_setting(t, "idle_in_transaction_session_timeout")) ||
      set_nonzero(v = dbl_topology_setting(t, "idle_transaction_timeout")) ||
      set_nonzero(v = dbl_topology_setting(t, "idle_write_transaction_timeout")))
    add(f, n, max, DBLOCK_SEV_INFO, "timeouts", NULL,
        "an idle-in-transaction limit is set (%s): dblock sets its own per session for "
        "for_update locks, so it cannot end one early", v);
  if (set_nonzero(v = dbl_topology_setting(t, "idle_session_timeout")))
    add(f, n, max, DBLOCK_SEV_INFO, "timeouts", NULL,
        "idle_session_timeout = %s: idle pooled connections are closed by the server "
        "(dblock reconnects)", v);
  if ((v = dbl_topology_setting(t, "wait_timeout")) != NULL && strtod(v, NULL) < 60)
    add(f, n, max, DBLOCK_SEV_INFO, "timeouts", NULL,
        "wait_timeout = %s s: dblock raises it per session for for_update locks", v);
}
