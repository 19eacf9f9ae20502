/*
 * cli.c — helpers shared by the dblock programs.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Largest duration cli_duration accepts, in ms (about 285 years). */
#define DURATION_MAX_MS 9000000000000000LL

/* Reads the run of decimal digits at *p into *value (saturating just
 * above DURATION_MAX_MS) and advances *p past it. Returns how many digits
 * there were. */
static int read_digits(const char **p, int64_t *value) {
  int n = 0;
  *value = 0;
  for (; **p >= '0' && **p <= '9'; (*p)++, n++)
    if (*value <= DURATION_MAX_MS) *value = *value * 10 + (**p - '0');
  return n;
}

int cli_duration(const char *text, int64_t *out_ms) {
  const char *p = text;
  int64_t whole, frac = 0, scale = 1, mult, ms;
  int nfrac = 0;
  if (!text) return -1;
  if (strcmp(text, "forever") == 0) {
    *out_ms = -1;
    return 0;
  }
  if (read_digits(&p, &whole) == 0) return -1;
  if (*p == '.') {
    p++;
    /* Up to 9 fraction digits count (sub-nanosecond precision would not
     * change the rounded ms); more must still be digits. */
    for (; *p >= '0' && *p <= '9'; p++, nfrac++)
      if (nfrac < 9) frac = frac * 10 + (*p - '0'), scale *= 10;
    if (nfrac == 0) return -1;
  }
  if (*p == 0 || strcmp(p, "s") == 0) mult = 1000;
  else if (strcmp(p, "ms") == 0) mult = 1;
  else if (strcmp(p, "m") == 0) mult = 60000;
  else if (strcmp(p, "h") == 0) mult = 3600000;
  else return -1;
  if (whole > DURATION_MAX_MS / mult) return -1;
  /* frac < scale <= 1e9 and mult <= 3.6e6: no overflow. */
  ms = whole * mult + (frac * mult + scale / 2) / scale;
  if (ms > DURATION_MAX_MS) return -1;
  *out_ms = ms;
  return 0;
}

const char *cli_url(const char *flag_value) {
  if (flag_value && *flag_value) return flag_value;
  return getenv("DBLOCK_URL");
}

int cli_exit_code(int code) {
  switch (code) {
  case DBLOCK_OK: return CLI_OK;
  case DBLOCK_EBUSY:
  case DBLOCK_ETIMEOUT: return CLI_BUSY;
  case DBLOCK_ELOST:
  case DBLOCK_ENOTHELD: return CLI_LOST;
  case DBLOCK_EINVAL: return CLI_USAGE;
  case DBLOCK_EMISMATCH: return CLI_USAGE; /* the wrong --strategy for the name */
  default: return CLI_DBERR;
  }
}

int cli_report(const char *prog, const char *what, dblock_client *client, int code) {
  dblock_error_info ei;
  if (client) dblock_client_last_error(client, &ei);
  else dblock_last_error(&ei);
  if (ei.code != code || !ei.message[0])
    snprintf(ei.message, sizeof ei.message, "%s", dblock_strerror(code));
  if (ei.sqlstate[0] || ei.native)
    fprintf(stderr, "%s: %s: %s [%s%s%d]\n", prog, what, ei.message, ei.sqlstate,
            ei.sqlstate[0] ? "/" : "", ei.native);
  else
    fprintf(stderr, "%s: %s: %s\n", prog, what, ei.message);
  return cli_exit_code(code);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n, i;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  for (i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

void cli_json_str(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  if (!s) {
    fputs("null", f);
    return;
  }
  putc('"', f);
  while (*p) {
    int n;
    switch (*p) {
    case '"': fputs("\\\"", f); p++; continue;
    case '\\': fputs("\\\\", f); p++; continue;
    case '\n': fputs("\\n", f); p++; continue;
    case '\r': fputs("\\r", f); p++; continue;
    case '\t': fputs("\\t", f); p++; continue;
    case '\b': fputs("\\b", f); p++; continue;
    case '\f': fputs("\\f", f); p++; continue;
    default: break;
    }
    if (*p < 0x20 || *p == 0x7f) {
      fprintf(f, "\\u%04x", *p);
      p++;
      continue;
    }
    if ((n = utf8_len(p)) == 0) {
      fputs("\\ufffd", f);
      p++;
      continue;
    }
    fwrite(p, 1, (size_t)n, f);
    p += n;
  }
  putc('"', f);
}

char *cli_iso8601(char *buf, size_t size, int64_t us, int digits) {
  struct tm tm;
  time_t sec;
  int64_t frac;
  size_t n;
  if (size == 0) return buf;
  buf[0] = 0;
  if (us == 0) return buf;
  sec = (time_t)(us / 1000000);
  frac = us % 1000000;
  if (frac < 0) {
    frac += 1000000;
    sec--;
  }
  if (!gmtime_r(&sec, &tm)) return buf;
  n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
  if (n == 0) return buf;
  if (digits >= 6) snprintf(buf + n, size - n, ".%06lldZ", (long long)frac);
  else if (digits >= 3) snprintf(buf + n, size - n, ".%03lldZ", (long long)(frac / 1000));
  else snprintf(buf + n, size - n, "Z");
  return buf;
}
