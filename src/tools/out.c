/*
 * out.c — table cells and JSON lock rows for the dblock command (out.h).
 */
#include "out.h"

#include <stdio.h>

#include "cli.h"

size_t out_width(const char *s) {
  size_t w = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p & 0xc0) != 0x80) w++;
  return w;
}

void out_cell(char *out, size_t size, const char *s) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < size; p++) {
    if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(out + n, size - n, "\\x%02x", *p);
    else out[n++] = (char)*p;
  }
  out[n] = 0;
}

void out_padded(const char *s, size_t width, int last) {
  size_t w = out_width(s);
  fputs(s, stdout);
  if (!last)
    for (; w < width + 2; w++) putchar(' ');
}

void out_json_info(const dblock_lock_info *i, int top) {
  char t[40];
  if (top) {
    fputs("{\"version\":", stdout);
    cli_json_str(stdout, DBLOCK_VERSION_STRING);
    fputs(",\"name\":", stdout);
  } else {
    fputs("{\"name\":", stdout);
  }
  cli_json_str(stdout, i->name);
  fputs(",\"row\":true", stdout);
  fputs(",\"strategy\":", stdout);
  cli_json_str(stdout, i->strategy);
  printf(",\"held\":%s,\"owner_host\":", i->held ? "true" : "false");
  cli_json_str(stdout, i->owner_host);
  printf(",\"owner_pid\":%lld,\"owner_thread\":%lld,\"hold_count\":%d,\"fence\":%lld,",
         (long long)i->owner_pid, (long long)i->owner_thread, i->hold_count, (long long)i->fence);
  fputs("\"acquired_at\":", stdout);
  if (i->acquired_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, i->acquired_at_us, 6));
  else fputs("null", stdout);
  fputs(",\"expires_at\":", stdout);
  if (i->expires_at_us) cli_json_str(stdout, cli_iso8601(t, sizeof t, i->expires_at_us, 6));
  else fputs("null", stdout);
  printf(",\"acquired_at_us\":%lld,\"expires_at_us\":%lld}", (long long)i->acquired_at_us,
         (long long)i->expires_at_us);
}

void out_holder(char *out, size_t size, const dblock_lock_info *i) {
  char host[300];
  if (!i->held || (!i->owner_host[0] && !i->owner_pid)) {
    snprintf(out, size, "-");
    return;
  }
  out_cell(host, sizeof host, i->owner_host);
  snprintf(out, size, "%s pid %lld thread %lld", host, (long long)i->owner_pid,
           (long long)i->owner_thread);
}
