/*
 * url.c — DESIGN §2 URL grammar:
 *   scheme://[user[:password]@][host][:port][,host[:port]...][/database][?key=value&...]
 *   sqlite:///absolute/path.db  sqlite://relative/path.db
 * plus, for PostgreSQL, any libpq "key=value ..." connection string.
 */
#include "url.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dblock.h"

static int fail(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a reason and returns DBLOCK_EINVAL, so callers can `return fail()`. */
static int fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  if (why && n) {
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return DBLOCK_EINVAL;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into a new string. Returns NULL on a malformed
 * escape (sets *bad) or out of memory. A decoded NUL byte is refused: no
 * user, password or path may contain one. */
static char *decode(const char *s, size_t n, int *bad) {
  char *out = malloc(n + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      int h, l;
      if (i + 2 >= n) goto bad;
      h = hexval((unsigned char)s[i + 1]);
      l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0 || (h == 0 && l == 0)) goto bad;
      *o++ = (char)(h * 16 + l);
      i += 2;
    } else {
      *o++ = s[i];
    }
  }
  *o = 0;
  return out;
bad:
  free(out);
  *bad = 1;
  return NULL;
}

/* Builds the redacted form: the text with the password part replaced. */
static void redact(dbl_url *u, const char *text, const char *pw_start,
                   size_t pw_len) {
  if (!pw_start) {
    snprintf(u->redacted, sizeof u->redacted, "%s", text);
    return;
  }
  snprintf(u->redacted, sizeof u->redacted, "%.*s***%s",
           (int)(pw_start - text), text, pw_start + pw_len);
}

/* Redacts password=... (quoted or not) in a libpq keyword string. */
static void redact_keywords(dbl_url *u, const char *text) {
  size_t o = 0, cap = sizeof u->redacted - 1;
  const char *p = text;
  while (*p && o < cap) {
    if ((p == text || isspace((unsigned char)p[-1])) &&
        strncmp(p, "password", 8) == 0) {
      const char *q = p + 8;
      while (isspace((unsigned char)*q)) q++;
      if (*q == '=') {
        q++;
        while (isspace((unsigned char)*q)) q++;
        if (*q == '\'') {
          for (q++; *q && *q != '\''; q++)
            if (*q == '\\' && q[1]) q++;
          if (*q) q++;
        } else {
          while (*q && !isspace((unsigned char)*q)) q++;
        }
        o += (size_t)snprintf(u->redacted + o, cap + 1 - o, "password=***");
        p = q;
        continue;
      }
    }
    u->redacted[o++] = *p++;
  }
  u->redacted[o < cap ? o : cap] = 0;
}

static int parse_query(dbl_url *u, const char *q, char *why, size_t n) {
  while (*q) {
    const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
    const char *eq = memchr(q, '=', (size_t)(end - q));
    int bad = 0;
    if (end == q) { q++; continue; }
    if (!eq || eq == q)
      return fail(why, n, "bad URL query parameter near '%.*s' (expected key=value)",
                  (int)(end - q) > 40 ? 40 : (int)(end - q), q);
    if (u->nparams == DBL_URL_MAX_PARAMS)
      return fail(why, n, "too many URL query parameters (at most %d)",
                  DBL_URL_MAX_PARAMS);
    u->keys[u->nparams] = decode(q, (size_t)(eq - q), &bad);
    u->vals[u->nparams] = decode(eq + 1, (size_t)(end - eq - 1), &bad);
    if (!u->keys[u->nparams] || !u->vals[u->nparams]) {
      free(u->keys[u->nparams]);
      free(u->vals[u->nparams]);
      u->keys[u->nparams] = u->vals[u->nparams] = NULL;
      return bad ? fail(why, n, "bad %%-escape in URL query") : DBLOCK_ENOMEM;
    }
    u->nparams++;
    q = amp ? amp + 1 : end;
  }
  return 0;
}

/* Parses the authority and path of a server URL (after "scheme://"). */
/* Parses one host[:port] item [p, end) of a host list into the next slot
 * of u->hosts / u->ports (port 0: absent). An empty host is allowed when a
 * port follows (":5433", libpq's default host). */
static int parse_host(dbl_url *u, const char *p, const char *end, char *why, size_t n) {
  const char *hend = end, *colon = NULL;
  char *host = NULL;
  int bad = 0;
  long port = 0;
  if (p < end && *p == '[') {
    const char *rb = memchr(p, ']', (size_t)(end - p));
    if (!rb) return fail(why, n, "bad URL '%s': unterminated [IPv6] host", u->redacted);
    if (!(host = decode(p + 1, (size_t)(rb - p - 1), &bad)))
      return bad ? fail(why, n, "bad %%-escape in URL host") : DBLOCK_ENOMEM;
    if (rb + 1 < end) {
      if (rb[1] != ':') {
        free(host);
        return fail(why, n, "bad URL '%s': junk after ]", u->redacted);
      }
      colon = rb + 1;
    }
  } else {
    colon = memchr(p, ':', (size_t)(end - p));
    hend = colon ? colon : end;
    if (hend > p && !(host = decode(p, (size_t)(hend - p), &bad)))
      return bad ? fail(why, n, "bad %%-escape in URL host") : DBLOCK_ENOMEM;
  }
  if (!host && !colon) return fail(why, n, "bad URL '%s': empty host in host list", u->redacted);
  if (colon) {
    const char *q = colon + 1;
    if (q == end) {
      free(host);
      return fail(why, n, "bad URL '%s': empty port", u->redacted);
    }
    for (; q < end && port <= 65535; q++) {
      if (!isdigit((unsigned char)*q)) break;
      port = port * 10 + (*q - '0');
    }
    if (q != end || port < 1 || port > 65535) {
      free(host);
      return fail(why, n, "bad URL '%s': port must be a number 1-65535", u->redacted);
    }
  }
  u->hosts[u->nhosts] = host;
  u->ports[u->nhosts++] = (int)port;
  return 0;
}

static int parse_server(dbl_url *u, const char *text, const char *s, char *why,
                        size_t n) {
  const char *qmark = strchr(s, '?');
  const char *end = qmark ? qmark : s + strlen(s);
  const char *slash = memchr(s, '/', (size_t)(end - s));
  const char *auth_end = slash ? slash : end;
  const char *at = NULL, *pw = NULL, *hp;
  size_t pwlen = 0;
  int bad = 0, rc;

  for (const char *p = s; p < auth_end; p++)
    if (*p == '@') at = p; /* the last '@', so a raw '@' in a password works */
  if (at) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    const char *uend = colon ? colon : at;
    if (uend > s && !(u->user = decode(s, (size_t)(uend - s), &bad)))
      return bad ? fail(why, n, "bad %%-escape in URL user name") : DBLOCK_ENOMEM;
    if (colon) {
      pw = colon + 1;
      pwlen = (size_t)(at - pw);
      if (!(u->password = decode(pw, pwlen, &bad)))
        return bad ? fail(why, n, "bad %%-escape in URL password") : DBLOCK_ENOMEM;
    }
    hp = at + 1;
  } else {
    hp = s;
  }
  redact(u, text, pw, pwlen);

  /* host[:port][,host[:port]...]; a host may be [ipv6]. Several hosts
   * (libpq's multi-host form) are tried in order by the driver. */
  if (hp < auth_end) {
    const char *item = hp;
    for (;;) {
      const char *comma = memchr(item, ',', (size_t)(auth_end - item));
      const char *iend = comma ? comma : auth_end;
      if (u->nhosts == DBL_URL_MAX_HOSTS)
        return fail(why, n, "bad URL '%s': more than %d hosts", u->redacted,
                    DBL_URL_MAX_HOSTS);
      if ((rc = parse_host(u, item, iend, why, n)) != 0) return rc;
      if (!comma) break;
      item = comma + 1;
    }
  }
  u->host = u->nhosts ? u->hosts[0] : NULL;
  u->port = u->nhosts ? u->ports[0] : 0;
  if (slash && slash + 1 < end &&
      !(u->dbname = decode(slash + 1, (size_t)(end - slash - 1), &bad)))
    return bad ? fail(why, n, "bad %%-escape in URL database name") : DBLOCK_ENOMEM;
  if (u->dbname && strchr(u->dbname, '/'))
    return fail(why, n, "bad URL '%s': database name contains '/'", u->redacted);
  if (qmark && (rc = parse_query(u, qmark + 1, why, n)) != 0) return rc;
  return 0;
}

static int parse_sqlite(dbl_url *u, const char *text, const char *s, char *why,
                        size_t n) {
  const char *qmark = strchr(s, '?');
  size_t len = qmark ? (size_t)(qmark - s) : strlen(s);
  int bad = 0, rc;
  redact(u, text, NULL, 0);
  if (len == 0)
    return fail(why, n, "bad URL '%s': sqlite URL needs a file path "
                        "(sqlite:///abs/path.db or sqlite://rel.db)", text);
  if (!(u->path = decode(s, len, &bad)))
    return bad ? fail(why, n, "bad %%-escape in sqlite path") : DBLOCK_ENOMEM;
  if (qmark && (rc = parse_query(u, qmark + 1, why, n)) != 0) return rc;
  return 0;
}

int dbl_url_parse(dbl_url *u, const char *text, char *why, size_t n) {
  static const struct { const char *prefix; dbl_backend b; } schemes[] = {
      {"postgres://", DBL_B_PG}, {"postgresql://", DBL_B_PG},
      {"mysql://", DBL_B_MY},    {"mariadb://", DBL_B_MY},
      {"sqlite://", DBL_B_LITE},
  };
  int rc;
  memset(u, 0, sizeof *u);
  if (!text || !*text)
    return fail(why, n, "no database URL given (pass --url or set DBLOCK_URL)");
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    size_t pl = strlen(schemes[i].prefix);
    if (strncmp(text, schemes[i].prefix, pl) != 0) continue;
    u->backend = schemes[i].b;
    rc = u->backend == DBL_B_LITE ? parse_sqlite(u, text, text + pl, why, n)
                                  : parse_server(u, text, text + pl, why, n);
    if (rc) dbl_url_free(u);
    return rc;
  }
  if (!strstr(text, "://") && strchr(text, '=')) {
    /* A libpq keyword string; libpq itself validates the keywords. */
    u->backend = DBL_B_PG;
    redact_keywords(u, text);
    if (!(u->pg_keywords = strdup(text))) return DBLOCK_ENOMEM;
    return 0;
  }
  {
    const char *sep = strstr(text, "://");
    if (sep)
      return fail(why, n,
                  "unsupported URL scheme '%.*s' (use postgres://, mysql://, "
                  "mariadb:// or sqlite://)",
                  (int)(sep - text) > 32 ? 32 : (int)(sep - text), text);
  }
  return fail(why, n, "not a database URL (expected postgres://, mysql://, "
                      "mariadb://, sqlite:// or a libpq key=value string)");
}

void dbl_url_free(dbl_url *u) {
  if (!u) return;
  if (u->password) memset(u->password, 0, strlen(u->password));
  if (u->pg_keywords) memset(u->pg_keywords, 0, strlen(u->pg_keywords));
  free(u->user);
  free(u->password);
  for (int i = 0; i < u->nhosts; i++) free(u->hosts[i]);
  free(u->dbname);
  free(u->path);
  free(u->pg_keywords);
  for (int i = 0; i < u->nparams; i++) {
    free(u->keys[i]);
    free(u->vals[i]);
  }
  memset(u, 0, sizeof *u);
}

const char *dbl_url_param(const dbl_url *u, const char *key) {
  for (int i = 0; i < u->nparams; i++)
    if (strcmp(u->keys[i], key) == 0) return u->vals[i];
  return NULL;
}
