/*
 * stats.c — the client's counters (dblock_client_stats) and their
 * OpenMetrics text.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const int64_t BOUNDS[] = DBLOCK_STATS_WAIT_BOUNDS_MS;

void dbl_count_wait(dblock_client *cl, int64_t ms) {
  size_t i = 0;
  if (ms < 0) ms = 0;
  atomic_fetch_add_explicit(&cl->stats.wait_ms_sum, (unsigned long long)ms, memory_order_relaxed);
  while (i < sizeof BOUNDS / sizeof BOUNDS[0] && ms > BOUNDS[i]) i++;
  atomic_fetch_add_explicit(&cl->stats.wait_ms[i], 1, memory_order_relaxed);
}

int dblock_client_stats(const dblock_client *cl, dblock_stats *out, size_t size) {
  dblock_stats s;
  dblock_client *c = (dblock_client *)cl; /* atomics are read, never changed */
  if (!cl || !out) return DBLOCK_EINVAL;
  memset(&s, 0, sizeof s);
#define GET(f) s.f = atomic_load_explicit(&c->stats.f, memory_order_relaxed)
  GET(grants);
  GET(busy);
  GET(timeouts);
  GET(cancelled);
  GET(failures);
  GET(waited);
  GET(renewals);
  GET(renewal_failures);
  GET(losses);
  GET(connects);
  GET(disconnects);
  GET(wait_ms_sum);
  GET(wakeups);
  GET(notified);
#undef GET
  for (int i = 0; i < DBLOCK_STATS_WAIT_BUCKETS; i++)
    s.wait_ms[i] = atomic_load_explicit(&c->stats.wait_ms[i], memory_order_relaxed);
  memcpy(out, &s, size < sizeof s ? size : sizeof s);
  return 0;
}

/* snprintf into the rest of buf, counting the whole length either way. */
#define EMIT(...)                                                            \
  do {                                                                      \
    int k_ = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, \
                      __VA_ARGS__);                                         \
    if (k_ < 0) return DBLOCK_EINVAL;                                       \
    len += (size_t)k_;                                                      \
  } while (0)

int dblock_stats_openmetrics(char *buf, size_t size, const dblock_stats *s) {
  /* OpenMetrics wants canonical numbers in le: these are BOUNDS, in s. */
  static const char *const LE[DBLOCK_STATS_WAIT_BUCKETS] = {"0.001", "0.01", "0.1", "1.0",
                                                             "10.0", "+Inf"};
  static const struct {
    const char *name, *help;
    size_t off;
  } C[] = {
      {"grants", "Acquires that returned 0.", offsetof(dblock_stats, grants)},
      {"busy", "Acquires that found the lock held (try once).", offsetof(dblock_stats, busy)},
      {"timeouts", "Acquires whose wait ran out.", offsetof(dblock_stats, timeouts)},
      {"cancelled", "Acquires cancelled by dblock_client_cancel.", offsetof(dblock_stats, cancelled)},
      {"failures", "Acquires that failed with an error.", offsetof(dblock_stats, failures)},
      {"waited", "Grants that needed more than one attempt.", offsetof(dblock_stats, waited)},
      {"renewals", "Renewals and session pings confirmed.", offsetof(dblock_stats, renewals)},
      {"renewal_failures", "Renewals with an unknown outcome, retried.",
       offsetof(dblock_stats, renewal_failures)},
      {"losses", "Held locks lost.", offsetof(dblock_stats, losses)},
      {"connects", "Database connections opened.", offsetof(dblock_stats, connects)},
      {"disconnects", "Database connections lost or cut.", offsetof(dblock_stats, disconnects)},
      {"wakeups", "Waiters woken by a release's notification or on the wake board.",
       offsetof(dblock_stats, wakeups)},
      {"notified", "Wake-ups that were notifications received by the client's listener.",
       offsetof(dblock_stats, notified)},
  };
  size_t len = 0;
  uint64_t cum = 0;
  if (!s || (!buf && size)) return DBLOCK_EINVAL;
  for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
    uint64_t v;
    memcpy(&v, (const char *)s + C[i].off, sizeof v);
    EMIT("# TYPE dblock_client_%s counter\n# HELP dblock_client_%s %s\n"
         "dblock_client_%s_total %llu\n",
         C[i].name, C[i].name, C[i].help, C[i].name, (unsigned long long)v);
  }
  EMIT("# TYPE dblock_client_wait_seconds histogram\n"
       "# HELP dblock_client_wait_seconds Time from an acquire call to its grant.\n");
  for (int i = 0; i < DBLOCK_STATS_WAIT_BUCKETS; i++) {
    cum += s->wait_ms[i];
    EMIT("dblock_client_wait_seconds_bucket{le=\"%s\"} %llu\n", LE[i], (unsigned long long)cum);
  }
  EMIT("dblock_client_wait_seconds_count %llu\ndblock_client_wait_seconds_sum %.3f\n# EOF\n",
       (unsigned long long)cum, (double)s->wait_ms_sum / 1000.0);
  return len > (size_t)2147483647 ? DBLOCK_ENOMEM : (int)len;
}
