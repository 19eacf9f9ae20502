/*
 * dblock-reaper — deletes expired lock rows: once (cron, systemd timers) or
 * every DURATION until SIGTERM / SIGINT. Uses only dblock.h and cli.h.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "dblock.h"

static const char *const PROG = "dblock-reaper";

static volatile sig_atomic_t g_stop;

static void on_stop(int sig) { g_stop = sig; }

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", PROG);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (try '%s --help')\n", PROG);
  return CLI_USAGE;
}

static void help(void) {
  printf(
      "Usage: %s (--once | --every DURATION) [OPTIONS]\n"
      "\n"
      "Deletes lock rows whose lease expired more than --grace ago (by the database\n"
      "server's clock), in bounded batches. Never deletes a held or locked row.\n"
      "Safe to run several at once.\n"
      "\n"
      "  --url URL          database URL (default: $DBLOCK_URL)\n"
      "  --once             one pass, then exit (cron, systemd timers)\n"
      "  --every DURATION   a pass every DURATION until SIGTERM / SIGINT\n"
      "  --grace DURATION   only rows expired longer ago than this (default 0)\n"
      "  --batch N          rows deleted per statement (default 1000)\n"
      "  --table NAME       lock table (default dblock_locks)\n"
      "  -q, --quiet        print nothing on success\n"
      "  -v, --verbose      also print the settings and each stop\n"
      "  --json             one JSON object per pass on stdout:\n"
      "                       {\"version\":V,\"deleted\":N,\"seconds\":F,\"ok\":true}\n"
      "                       {\"version\":V,\"deleted\":0,...,\"ok\":false,\"error\":\"...\"}\n"
      "  -h, --help         this help\n"
      "  -V, --version      print the version\n"
      "\n"
      "Durations: 250ms, 30s, 5m, 1h, 1.5 (seconds).\n"
      "\n"
      "Exit status:\n"
      "  0  success (with --every: stopped by SIGTERM / SIGINT)\n"
      "  1  database error: server unreachable, authentication, schema missing\n"
      "     (run 'dblock migrate'), permission; with --every only when the first\n"
      "     connection fails (later failing passes are reported and retried)\n"
      "  2  usage error (bad option, bad URL)\n",
      PROG);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One pass; prints its result. Returns the dblock status. */
static int pass(dblock_client *cl, int64_t grace_ms, int batch, int json, int quiet) {
  int64_t deleted = 0, t0 = mono_ms();
  int rc = dblock_reap(cl, grace_ms, batch, &deleted);
  double secs = (double)(mono_ms() - t0) / 1000.0;
  if (rc == 0) {
    if (json)
      printf("{\"version\":\"%s\",\"deleted\":%lld,\"seconds\":%.3f,\"ok\":true}\n",
             DBLOCK_VERSION_STRING, (long long)deleted, secs);
    else if (!quiet)
      printf("deleted %lld expired lock row%s in %.3f s\n", (long long)deleted,
             deleted == 1 ? "" : "s", secs);
  } else {
    dblock_error_info ei;
    dblock_client_last_error(cl, &ei);
    if (json) {
      printf("{\"version\":\"%s\",\"deleted\":%lld,\"seconds\":%.3f,\"ok\":false,\"error\":",
             DBLOCK_VERSION_STRING, (long long)deleted, secs);
      cli_json_str(stdout, ei.code == rc && ei.message[0] ? ei.message : dblock_strerror(rc));
      puts("}");
    }
    cli_report(PROG, "reap", cl, rc);
  }
  fflush(stdout);
  return rc;
}

int main(int argc, char **argv) {
  enum { L_URL = 1000, L_ONCE, L_EVERY, L_GRACE, L_BATCH, L_TABLE, L_JSON };
  static const struct option longopts[] = {
      {"url", required_argument, NULL, L_URL},
      {"once", no_argument, NULL, L_ONCE},
      {"every", required_argument, NULL, L_EVERY},
      {"grace", required_argument, NULL, L_GRACE},
      {"batch", required_argument, NULL, L_BATCH},
      {"table", required_argument, NULL, L_TABLE},
      {"quiet", no_argument, NULL, 'q'},
      {"verbose", no_argument, NULL, 'v'},
      {"json", no_argument, NULL, L_JSON},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  const char *url_flag = NULL, *url, *table = NULL;
  int once = 0, every_given = 0, quiet = 0, verbose = 0, json = 0, batch = 1000, opt, rc;
  int64_t every_ms = 0, grace_ms = 0;
  dblock_options o = DBLOCK_OPTIONS_INIT;
  dblock_client *cl;
  struct sigaction sa;

  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":qvhV", longopts, NULL)) != -1) {
    const char *optname = argv[optind - 1];
    switch (opt) {
    case L_URL: url_flag = optarg; break;
    case L_ONCE: once = 1; break;
    case L_EVERY:
      every_given = 1;
      if (cli_duration(optarg, &every_ms) != 0 || every_ms <= 0)
        return usage_error("bad duration for --every: '%s' (examples: 500ms, 30s, 5m)", optarg);
      break;
    case L_GRACE:
      if (cli_duration(optarg, &grace_ms) != 0 || grace_ms < 0)
        return usage_error("bad duration for --grace: '%s' (examples: 0, 10s, 5m)", optarg);
      break;
    case L_BATCH: {
      char *end;
      long v;
      errno = 0;
      v = strtol(optarg, &end, 10);
      if (!*optarg || *end || errno || v < 1 || v > 1000000000L)
        return usage_error("bad value for --batch: '%s' (a positive integer)", optarg);
      batch = (int)v;
      break;
    }
    case L_TABLE: table = optarg; break;
    case 'q': quiet = 1; break;
    case 'v': verbose = 1; break;
    case L_JSON: json = 1; break;
    case 'h': help(); return CLI_OK;
    case 'V': printf("%s %s\n", PROG, DBLOCK_VERSION_STRING); return CLI_OK;
    case ':': return usage_error("option '%s' needs a value", optname);
    default:
      if (optopt) return usage_error("unknown option '-%c'", optopt);
      return usage_error("unknown option '%s'", optname);
    }
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  if (once && every_given) return usage_error("give either --once or --every, not both");
  if (!once && !every_given) return usage_error("give --once or --every DURATION");
  if (quiet && verbose) return usage_error("--quiet and --verbose exclude each other");
  if (!(url = cli_url(url_flag)))
    return usage_error("no database URL: give --url or set DBLOCK_URL");

  /* Stop cleanly on SIGTERM / SIGINT: no SA_RESTART, so a sleep ends at
   * once; a pass in progress finishes first. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  o.table = table;
  if ((rc = dblock_client_open(&cl, url, &o)) != 0) {
    if (json) {
      dblock_error_info ei;
      dblock_last_error(&ei);
      printf("{\"version\":\"%s\",\"deleted\":0,\"seconds\":0.000,\"ok\":false,\"error\":",
             DBLOCK_VERSION_STRING);
      cli_json_str(stdout, ei.code == rc && ei.message[0] ? ei.message : dblock_strerror(rc));
      puts("}");
      fflush(stdout);
    }
    return cli_report(PROG, "cannot open the database", NULL, rc);
  }
  if (verbose)
    fprintf(stderr, "%s: %s backend, %s, grace %lld ms, batch %d\n", PROG,
            dblock_client_backend(cl), once ? "one pass" : "periodic", (long long)grace_ms,
            batch);

  if (once) {
    rc = pass(cl, grace_ms, batch, json, quiet);
    dblock_client_free(cl);
    /* A failed pass is a database error (1) whatever its cause, including a
     * lock wait that ran out: the reaper has no "busy" outcome. */
    return rc ? CLI_DBERR : CLI_OK;
  }
  while (!g_stop) {
    int64_t next = mono_ms() + every_ms;
    pass(cl, grace_ms, batch, json, quiet);
    while (!g_stop) {
      int64_t left = next - mono_ms();
      struct timespec ts;
      if (left <= 0) break;
      if (left > 200) left = 200;
      ts.tv_sec = left / 1000;
      ts.tv_nsec = (long)(left % 1000) * 1000000L;
      nanosleep(&ts, NULL);
    }
  }
  if (verbose)
    fprintf(stderr, "%s: stopping on %s\n", PROG, g_stop == SIGTERM ? "SIGTERM" : "SIGINT");
  dblock_client_free(cl);
  return CLI_OK;
}
