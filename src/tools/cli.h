/*
 * cli.h — what the dblock programs share: exit codes, duration parsing, and
 * error printing. Uses only the public header.
 */
#ifndef DBLOCK_CLI_H
#define DBLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dblock.h"

/* Exit codes of every dblock program (documented in dblock(1), docs/operations.md and --help). */
enum {
  CLI_OK = 0,
  CLI_DBERR = 1,   /* database / connection / schema / permission error */
  CLI_USAGE = 2,   /* bad usage: unknown option, bad argument */
  CLI_BUSY = 3,    /* lock busy (try once) or wait timed out; -E changes it */
  CLI_LOST = 4,    /* the lock was lost while held */
  CLI_ANOMALY = 5, /* dblock-bank: a locked run showed an anomaly */
  CLI_UNSAFE = 5,  /* dblock doctor: an unsafe finding */
};

/* Parses a duration: digits with an optional fraction and an optional
 * unit ms, s, m or h (no unit: seconds), e.g. "250ms", "30s", "1.5m",
 * "2h", "10"; or "forever", which gives -1. Nothing else: no sign, spaces,
 * exponent, hex, "inf" or "nan", no fraction without digits on both sides
 * of the point; at most 9e15 ms. Returns 0 and *out_ms (rounded to the
 * nearest ms), or -1 on anything else (*out_ms untouched). */
int cli_duration(const char *text, int64_t *out_ms);

/* The accepted forms, for a usage error about a bad duration. */
#define CLI_DURATION_FORMS \
  "digits with an optional fraction and unit ms, s, m or h, e.g. 250ms, 30s, 1.5m, 2h; " \
  "no unit: seconds"

/* The URL to use: the --url value, else $DBLOCK_URL, else NULL. */
const char *cli_url(const char *flag_value);

/* Prints "prog: what: <last error message>" to stderr and returns the
 * exit code for code (CLI_BUSY for busy/timeout, CLI_LOST for lost,
 * CLI_USAGE for EINVAL, CLI_DBERR otherwise). */
int cli_report(const char *prog, const char *what, dblock_client *client, int code);

/* Maps a dblock status code to an exit code, as cli_report does. */
int cli_exit_code(int code);

/* Writes s to f as a JSON string literal (with the quotes): escapes '"',
 * '\\' and control characters; bytes that are not valid UTF-8 become
 * U+FFFD, so the output is always valid JSON. NULL writes null. */
void cli_json_str(FILE *f, const char *s);

/* Formats µs since the epoch as ISO-8601 UTC, e.g.
 * "2024-05-01T12:00:00.123456Z" (digits = 6) or "...:00.123Z" (digits = 3)
 * or without fraction (digits = 0). 0 gives "". Returns buf. */
char *cli_iso8601(char *buf, size_t size, int64_t us, int digits);

#endif
